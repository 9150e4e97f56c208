"""What a new user meets when starting nearprepd (issue 20), run the way a
user runs it: the real nearprepd and `nearprep` binaries, datasets written by
`nearprep mkdataset` / `nearprep pack` / `nearprep manifest`.

- One port, one daemon: a second nearprepd on a port in use exits 1 naming
  the port; the first keeps serving.
- A dataset the daemon can read nothing from (JPEGs directly under the root,
  shards without format=) stops it at start with exit 2, naming the dataset,
  the layout expected and what was found, unless allow_empty is set (YAML or
  --dataset ...,allow_empty=true); `nearprep stream` of an empty dataset
  exits non-zero.
- README's steps: `nearprep manifest --root DIR` then serving DIR refuses
  nothing (the MANIFEST file is not a shard); --partitions above the shard
  count says it was capped.
- Per-sample errors are logged at warning level (dataset, id, path,
  reason), the first 10 of a stream one by one, then counted.
- A dataset-name typo is answered NOT_FOUND with the closest served name.
- mkdataset --with-bad-files keeps the classes it was asked for.
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import NEARPREPD, ROOT, Daemon

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)

pytestmark = pytest.mark.skipif(
    not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")


def cli(*args, check=True, timeout=120):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def start_fails(args, timeout=30):
    """Runs nearprepd expecting it to exit by itself: (returncode, stderr)."""
    p = subprocess.run([NEARPREPD, "--listen", "127.0.0.1", "--workers", "1", *args],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-class image folder (3 images each) written by nearprep mkdataset."""
    d = tmp_path_factory.mktemp("tiny") / "ds"
    cli("mkdataset", "--out", str(d), "--classes", "2", "--per-class", "3")
    return str(d)


def datasets(target):
    """{name: nearprep.v1.DatasetInfo} over a plain gRPC ListDatasets."""
    import grpc
    from nearprep import _stubs
    pb2, pb2_grpc = _stubs.load()
    with grpc.insecure_channel(target) as ch:
        resp = pb2_grpc.PreprocessorStub(ch).ListDatasets(pb2.ListDatasetsRequest(), timeout=30)
    return {d.name: d for d in resp.datasets}


# --- item 2: one port, one daemon -------------------------------------------

def test_second_daemon_on_a_port_in_use_exits_1_naming_it(tmp_path, tiny):
    first = Daemon(tmp_path, {"imagenet": tiny}, name="first", workers=1).start()
    try:
        port = first.port
        rc, out = start_fails(["--dataset", f"other={tiny}", "--port", str(port)])
        assert rc == 1, out
        assert f"127.0.0.1:{port}" in out and f"port {port}" in out, out
        assert "listening" not in out, out
        # The first daemon still serves its dataset on that port.
        assert first.proc.poll() is None
        s = cli("stream", "--target", first.target, "--dataset", "imagenet",
                "--batch-size", "2", "--height", "32", "--width", "32")
        assert "streamed 6 images" in s.stdout, s.stdout
    finally:
        first.stop()


# --- item 5: an empty dataset is a configuration error ----------------------

def test_flat_folder_of_jpegs_is_refused_at_start(tmp_path, tiny):
    flat = tmp_path / "flat"
    flat.mkdir()
    for i, f in enumerate(sorted(glob.glob(os.path.join(tiny, "*", "*")))):
        shutil.copy(f, flat / f"img{i}.jpg")
    rc, out = start_fails(["--dataset", f"flat={flat}", "--port", "0"])
    assert rc == 2, out
    assert "dataset 'flat'" in out, out
    assert "6 .jpg files directly under the root" in out, out
    assert "class sub-folders" in out and "list_file=" in out, out
    assert "allow_empty" in out, out


def test_shards_served_without_format_are_refused_naming_the_format(tmp_path, tiny):
    shards = tmp_path / "shards"
    cli("pack", "--source", tiny, "--out", str(shards), "--format", "tfrecord")
    rc, out = start_fails(["--dataset", f"s={shards}", "--port", "0"])
    assert rc == 2, out
    assert "dataset 's'" in out and "format=tfrecord" in out, out
    # With the format it serves.
    d = Daemon(tmp_path, {}, name="fmt", workers=1,
               extra=["--dataset", f"s={shards},format=tfrecord"])
    with open(d.config, "w") as f:
        f.write("listen: 127.0.0.1\nlog_level: warn\n")
    d.start()
    try:
        ds = datasets(d.target)["s"]
        assert (ds.num_samples, ds.num_refused) == (6, 0), ds
    finally:
        d.stop()


def test_allow_empty_serves_an_empty_dataset_and_the_cli_stream_fails(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out = start_fails(["--dataset", f"e={empty}", "--port", "0"])
    assert rc == 2 and "dataset 'e'" in out and "the root is empty" in out, out
    # Flag form.
    d = Daemon(tmp_path, {}, name="flag", workers=1,
               extra=["--dataset", f"e={empty},allow_empty=true"])
    with open(d.config, "w") as f:
        f.write("listen: 127.0.0.1\nlog_level: warn\n")
    d.start()
    try:
        s = cli("stream", "--target", d.target, "--dataset", "e", "--batch-size", "2",
                "--height", "32", "--width", "32", check=False)
        assert s.returncode != 0, s.stdout + s.stderr
        assert "0 images" in s.stderr, s.stderr
    finally:
        d.stop()
    # YAML form.
    y = Daemon(tmp_path, {}, name="yaml", workers=1)
    with open(y.config, "w") as f:
        f.write(f"listen: 127.0.0.1\nlog_level: warn\ndatasets:\n"
                f"  - name: e\n    root: {empty}\n    allow_empty: true\n")
    y.start()
    y.stop()
    assert y.proc.returncode == 0


# --- item 6: README's manifest step, then serving the folder ----------------

def test_readme_manifest_then_serve_refuses_nothing(tmp_path, tiny):
    shards = tmp_path / "shards"
    cli("pack", "--source", tiny, "--out", str(shards), "--format", "tfrecord")
    m = cli("manifest", "--root", str(shards), "--partitions", "256")  # as README
    assert os.path.exists(shards / "MANIFEST")
    n_shards = len([f for f in os.listdir(shards) if not f.startswith("MANIFEST")
                    and not f.endswith(".nearprep-index")])
    assert f"--partitions 256 capped to {n_shards}" in m.stderr, m.stdout + m.stderr
    d = Daemon(tmp_path, {}, name="readme", workers=1,
               extra=["--dataset", f"imagenet={shards},format=tfrecord"])
    with open(d.config, "w") as f:
        f.write("listen: 127.0.0.1\nlog_level: info\n")
    d.start()
    try:
        ds = datasets(d.target)["imagenet"]
        assert (ds.num_samples, ds.num_refused) == (6, 0), ds
    finally:
        d.stop()
    log = open(d.log).read()
    assert "MANIFEST" not in log, log
    assert re.search(r"dataset 'imagenet': 6 samples, \d+ classes, 0 refused", log), log


# --- item 9: per-sample errors are logged, rate-limited ---------------------

def test_per_sample_errors_are_logged_then_counted(tmp_path, tiny):
    ds = tmp_path / "withbad"
    shutil.copytree(tiny, ds)
    for i in range(15):
        (ds / "class_000" / f"broken_{i:02d}.jpg").write_bytes(b"not a jpeg %d" % i)
    d = Daemon(tmp_path, {"withbad": str(ds)}, name="bad", workers=1).start()
    try:
        s = cli("stream", "--target", d.target, "--dataset", "withbad", "--batch-size", "4",
                "--height", "32", "--width", "32")
        assert "skipped samples: 15" in s.stdout, s.stdout
    finally:
        d.stop()
    log = open(d.log).read()
    one_by_one = re.findall(
        r"\[warning\] \[nearprepd\] dataset 'withbad': sample (\d+) "
        r"'class_000/broken_(\d\d)\.jpg' skipped: (\w+): .*\(stream from ", log)
    assert len(one_by_one) == 10, log
    assert all(code == "INVALID_ARGUMENT" or code == "DATA_LOSS" for _, _, code in one_by_one), log
    assert re.search(r"dataset 'withbad': 5 more per-sample errors", log), log


# --- item 14: a typo in the dataset name ------------------------------------

def test_dataset_name_typo_suggests_the_closest_name(tmp_path, tiny):
    d = Daemon(tmp_path, {"imagenet": tiny, "coco": tiny}, name="typo", workers=1).start()
    try:
        s = cli("stream", "--target", d.target, "--dataset", "imagnet", "--batch-size", "2",
                "--height", "32", "--width", "32", check=False)
        assert s.returncode != 0
        assert "NOT_FOUND" in s.stderr, s.stderr
        assert "no dataset 'imagnet'; did you mean 'imagenet'?" in s.stderr, s.stderr
        s = cli("stream", "--target", d.target, "--dataset", "zzzzzzzz", "--batch-size", "2",
                "--height", "32", "--width", "32", check=False)
        assert "NOT_FOUND" in s.stderr and "did you mean" not in s.stderr, s.stderr
    finally:
        d.stop()


def test_mkdataset_bad_files_are_not_a_class(tmp_path):
    out = tmp_path / "mk"
    cli("mkdataset", "--out", str(out), "--classes", "2", "--per-class", "2", "--with-bad-files")
    assert sorted(os.listdir(out)) == ["class_000", "class_001"]
    d = Daemon(tmp_path, {"mk": str(out)}, name="mk", workers=1).start()
    try:
        ds = datasets(d.target)["mk"]
    finally:
        d.stop()
    assert (ds.num_samples, ds.num_classes) == (2 * 2 + 5, 2), ds
    assert list(ds.class_names) == ["class_000", "class_001"]
