"""One vocabulary (issue 20, item 10): every value of every request enum is
spelled the same in the CLI (`nearprep stream/fetch/sheet/load`,
`fleet-read`) and the Python client: the proto's value name in lower case
without the enum's prefix. Each name is walked through both and the two
requests compared (the CLI's --dry-run prints the request it would send).
The older spellings still work in both, and --help says they are
deprecated."""

import json
import os
import subprocess

import pytest
from google.protobuf import json_format

import nearprep
from nearprep import _stubs
from nearprep.request import build_request
from test_cli_stream import CLI

pb2, _ = _stubs.load()

pytestmark = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")

# enum -> (CLI flag, Python keyword, other arguments both need)
ENUMS = {
    "CropMode": ("--crop", "crop", {}),
    "Fidelity": ("--fidelity", "fidelity", {}),
    "DType": ("--dtype", "dtype", {}),
    "Layout": ("--layout", "layout", {}),
    "Compression": ("--compression", "compression", {"dtype": "uint8"}),
    "ShuffleMode": ("--shuffle-mode", "shuffle_mode", {}),
    "ErrorPolicy": ("--error-policy", "error_policy", {}),
}

DEPRECATED = [("--crop", "crop", "rrc", "random_resized"),
              ("--crop", "crop", "resize-center", "resize_center"),
              ("--fidelity", "fidelity", "tf", "tf_compat"),
              ("--compression", "compression", "delta", "delta_zstd"),
              ("--compression", "compression", "gradient", "gradient_zstd"),
              ("--error-policy", "error_policy", "fail", "fail_stream")]

# CLI flag names that follow the Python keywords, and their older names.
FLAG_NAMES = [("--flip-probability", "--flip", "flip_probability", "0.5"),
              ("--brightness-max-delta", "--brightness", "brightness_max_delta", "0.25"),
              ("--resize-shorter-side", "--resize-shorter", "resize_shorter_side", "300"),
              ("--max-batches", "--batches", "max_batches", "7")]


def names(enum_name):
    """What the test expects, derived here from the descriptor: lower-case
    value names without the prefix they all share."""
    values = pb2.DESCRIPTOR.enum_types_by_name[enum_name].values
    prefix = values[0].name
    for v in values[1:]:
        while not v.name.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix[:prefix.rfind("_") + 1]
    return [(v.name[len(prefix):].lower(), v.number) for v in values]


def _drop_empty(d):
    """The request as a dict without empty sub-messages (the Python client
    touches every sub-message; JSON omits fields at their defaults)."""
    if isinstance(d, dict):
        d = {k: _drop_empty(v) for k, v in d.items()}
        return {k: v for k, v in d.items() if v != {}}
    return d


def cli_request(*flags):
    r = subprocess.run([CLI, "stream", "--dataset", "d", "--dry-run", *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (flags, r.stderr)
    return _drop_empty(json.loads(r.stdout))


def py_request(**kw):
    req = build_request(pb2, "d", **kw)
    return _drop_empty(json_format.MessageToDict(req, preserving_proto_field_name=True))


def cli_flags(kw):
    out = []
    for k, v in kw.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_every_enum_value_names_the_same_thing_in_cli_and_python(enum_name):
    flag, keyword, extra = ENUMS[enum_name]
    walked = names(enum_name)
    assert len(walked) >= 2
    for name, number in walked:
        cli = cli_request(*cli_flags(extra), flag, name)
        py = py_request(**extra, **{keyword: name})
        assert cli == py, (enum_name, name, cli, py)
        # ... and the name is the value's: check the number in the message.
        req = json_format.ParseDict(cli, pb2.StreamBatchesRequest())
        field = {"crop": req.transform.crop, "fidelity": req.transform.fidelity,
                 "dtype": req.output.dtype, "layout": req.output.layout,
                 "compression": req.output.compression, "shuffle_mode": req.shuffle_mode,
                 "error_policy": req.error_policy}[keyword]
        assert field == number, (enum_name, name)
        # Upper case and '-' for '_' are the same name.
        assert cli_request(*cli_flags(extra), flag, name.upper().replace("_", "-")) == cli
        assert py_request(**extra, **{keyword: name.upper().replace("_", "-")}) == py


@pytest.mark.parametrize("flag,keyword,old,new", DEPRECATED)
def test_older_spellings_still_name_the_same_value_in_both(flag, keyword, old, new):
    extra = {"dtype": "uint8"} if keyword == "compression" else {}
    want = cli_request(*cli_flags(extra), flag, new)
    assert cli_request(*cli_flags(extra), flag, old) == want
    assert py_request(**extra, **{keyword: old}) == want
    assert py_request(**extra, **{keyword: new}) == want


@pytest.mark.parametrize("new,old,keyword,value", FLAG_NAMES)
def test_cli_flags_are_named_as_the_python_keywords(new, old, keyword, value):
    want = py_request(**{keyword: json.loads(value)})
    assert cli_request(new, value) == want
    assert cli_request(old, value) == want


def test_help_lists_the_names_and_marks_the_old_ones_deprecated():
    r = subprocess.run([CLI, "stream", "--help"], capture_output=True, text=True, timeout=30)
    text = " ".join(r.stdout.split())
    for enum_name in ENUMS:
        assert " | ".join(n for n, _ in names(enum_name)) in text, enum_name
    for _, _, old, new in DEPRECATED:
        if "-" not in old:
            assert f"{old} = {new}" in text, old
    assert "--flip: older spelling, deprecated" in text
    bad = subprocess.run([CLI, "stream", "--dataset", "d", "--crop", "bogus", "--dry-run"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "random_resized" in bad.stderr


def test_fleet_read_takes_the_same_names():
    base = [CLI, "fleet-read", "--targets", "127.0.0.1:1", "--manifest", "/nonexistent/M"]
    for flags in (["--crop", "random_resized"], ["--crop", "rrc"], ["--crop", "resize_center"],
                  ["--flip-probability", "0.5"], ["--flip", "0.5"], ["--dtype", "bfloat16"]):
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        # Past flag parsing (2 = a flag error): it fails on the missing manifest.
        assert r.returncode == 1 and "cannot open" in r.stderr, (flags, r.stderr)
    r = subprocess.run(base + ["--crop", "bogus"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr


def test_batch_index_is_the_name_in_python_and_json():
    from nearprep.batch import parse_batch
    b = pb2.Batch(epoch=2, batch_index=5, labels=[1], sample_ids=[9])
    b.tensor.dtype = pb2.DTYPE_UINT8
    b.tensor.layout = pb2.LAYOUT_NHWC
    b.tensor.shape.extend([1, 1, 1, 3])
    b.tensor.data = b"abc"
    batch = parse_batch(b.SerializeToString(), pb2)
    assert batch.batch_index == batch.index == 5
    assert "batch_index=5" in repr(batch)


# --- Beyond the request (issue 34, item 2): the fleet plan's names and the
# daemon's dataset keys.

def _plan_keywords():
    """The fleet plan's Python keywords, walked from the plan's own fields
    (nearprep.fleet_global_plan.PlanParams) plus the trainer count and index:
    FleetClient's keywords for them, which the CLI's flags must spell."""
    import dataclasses
    import inspect
    from nearprep import fleet_global_plan as fp
    from nearprep.fleet import FleetClient
    fields = [f.name for f in dataclasses.fields(fp.PlanParams)]
    assert {"seed", "block_samples", "window", "global_batch"} <= set(fields), fields
    # PlanParams.version is FleetClient's plan_version (and --plan-version);
    # the epoch is not a constructor keyword (each epoch is iterated).
    words = ["plan_version" if f == "version" else f for f in fields if f != "epoch"]
    words += ["trainers", "rank"]
    sig = inspect.signature(FleetClient.__init__).parameters
    for w in words:
        assert w in sig, (w, "not a FleetClient keyword")
    return words


@pytest.mark.parametrize("command", ["fleet-plan", "fleet-read"])
def test_fleet_flags_are_named_as_the_python_keywords(command):
    text = subprocess.run([CLI, command, "--help"], capture_output=True, text=True,
                          timeout=30).stdout
    for w in _plan_keywords():
        assert "--" + w.replace("_", "-") + " " in text, (command, w)
    # The older spellings are still listed, marked deprecated.
    for old, new in (("--block", "--block-samples"), ("--trainer", "--rank")):
        assert f"older spelling of {new}, deprecated" in " ".join(text.split()), (command, old)


@pytest.fixture(scope="module")
def tiny_manifest(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab_fleet")
    src, shards, manifest = d / "src", d / "shards", str(d / "M")
    for args in (["mkdataset", "--out", str(src), "--classes", "2", "--per-class", "6"],
                 ["pack", "--source", str(src), "--out", str(shards), "--format", "tfrecord"],
                 ["manifest", "--root", str(shards), "--format", "tfrecord", "--partitions",
                  "2", "--out", manifest]):
        subprocess.run([CLI, *args], check=True, capture_output=True, timeout=60)
    return manifest


def test_fleet_old_flag_spellings_plan_the_same_and_warn(tiny_manifest):
    base = [CLI, "fleet-plan", "--manifest", tiny_manifest, "--seed", "3", "--window", "3",
            "--global-batch", "4", "--trainers", "2"]
    new = subprocess.run(base + ["--block-samples", "2", "--rank", "1"],
                         capture_output=True, text=True, timeout=30)
    old = subprocess.run(base + ["--block", "2", "--trainer", "1"],
                         capture_output=True, text=True, timeout=30)
    assert new.returncode == 0 and old.returncode == 0, (new.stderr, old.stderr)
    assert new.stdout == old.stdout and new.stdout.count("\n") > 2
    assert "deprecated" not in new.stderr
    assert "--block is deprecated" in old.stderr and "use --block-samples" in old.stderr
    assert "--trainer is deprecated" in old.stderr and "use --rank" in old.stderr
    # ... and the flags do something: another block size or rank is another plan.
    other = subprocess.run(base + ["--block-samples", "3", "--rank", "0"],
                           capture_output=True, text=True, timeout=30)
    assert other.returncode == 0 and other.stdout != new.stdout


def _daemon_dataset_keys():
    """The daemon's dataset keys, as `nearprepd --help` lists them (the one
    table that both --dataset and a config file's datasets entries read)."""
    from conftest import NEARPREPD
    if not NEARPREPD:
        pytest.skip("nearprepd not built")
    text = " ".join(subprocess.run([NEARPREPD, "--help"], capture_output=True, text=True,
                                   timeout=30).stdout.split())
    at = text.index("Keys (a config file's datasets entry, the same table): ")
    keys = text[at:].split(": ", 1)[1].split(" (list=")[0]
    return [k.strip() for k in keys.split(",")]


def test_dataset_keys_are_the_config_files_and_refused_alike(tmp_path):
    """Every --dataset key is a key of a config file's datasets entry (the
    shipped example names each), and an unknown key is refused by the flag
    and the file with the same list of known keys."""
    from conftest import NEARPREPD, ROOT
    keys = _daemon_dataset_keys()
    assert {"list_file", "format", "allow_empty", "block_cache_bytes"} <= set(keys), keys
    assert "list" not in keys
    example = open(os.path.join(ROOT, "deploy", "nearprepd.example.yaml")).read()
    for k in keys + ["name", "root"]:
        assert f"{k}:" in example, k
    flag = subprocess.run([NEARPREPD, "--dataset", f"d={tmp_path},bogus_key=1", "--port", "0"],
                          capture_output=True, text=True, timeout=30)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"datasets:\n  - name: d\n    root: {tmp_path}\n    bogus_key: 1\n")
    yaml = subprocess.run([NEARPREPD, "--config", str(cfg), "--port", "0"],
                          capture_output=True, text=True, timeout=30)
    assert flag.returncode == 2 and yaml.returncode == 2, (flag.stderr, yaml.stderr)

    def known(err):
        at = err.index("bogus_key: unknown key (known: ")
        return err[at:err.index(")", at)]
    assert known(flag.stderr) == known(yaml.stderr)
    listed = known(flag.stderr).split("(known: ")[1].split(", ")
    assert sorted(listed) == sorted(keys + ["name", "root"])
