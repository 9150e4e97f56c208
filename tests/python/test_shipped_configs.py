"""Every daemon configuration the project ships or documents starts a real
nearprepd (issue 20, items 7 and 8), so docs and parser cannot drift:

- deploy/nearprepd.example.yaml, with its commented-out keys and dataset
  entries uncommented (they are what users uncomment),
- the ConfigMap's nearprepd.yaml in deploy/k8s/*.yaml,
- every ```yaml block of docs/*.md: a whole config, or a dataset entry's
  keys (completed into one dataset entry).

Paths are replaced by temporary folders holding a tiny dataset of the
entry's format (written by `nearprep mkdataset`, `pack`, `manifest`,
`placement`), TLS files by a generated certificate, addresses by loopback
and port 0; every key and value else is kept. The daemon must start (write
its port file).

And each shipped config's largest batch (max_batch_size of float32
224x224x3, the bound the daemon refuses requests by: one batch must fit
per_stream_memory, the prefetch depth then lowered to at least 1) fits its
per-stream memory.
"""

import copy
import glob
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import yaml

from conftest import NEARPREPD, ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)

EXAMPLE = os.path.join(ROOT, "deploy", "nearprepd.example.yaml")
# A commented-out YAML line: "# key: value" or "# - key: value" (snake-case
# key; prose has capitals, no colon after its first word, or a second ": ").
COMMENTED = re.compile(r"^(\s*)# ((?:\s*- |\s*)[a-z_]+:(?: .*)?)$")

# The daemon's defaults (server/service/request_validation.h ServiceLimits).
DEFAULT_MAX_BATCH = 256
DEFAULT_PER_STREAM_MEMORY = 1 << 30
FLOAT32_224_SAMPLE = 224 * 224 * 3 * 4


def uncomment(text):
    out = []
    for line in text.splitlines():
        m = COMMENTED.match(line)
        value = m.group(2).split(":", 1)[1] if m else ""
        value = re.sub(r"\s+#.*$", "", value)
        out.append(m.group(1) + m.group(2) if m and ": " not in value else line)
    return "\n".join(out) + "\n"


def k8s_configs():
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "**", "*.yaml"), recursive=True)):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                    for key, text in doc.get("data", {}).items():
                        if key.startswith("nearprepd") and key.endswith((".yaml", ".yml")):
                            yield f"{os.path.relpath(path, ROOT)}:{key}", text


def doc_blocks():
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        lines = open(path).read().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)```yaml\s*$", lines[i])
            if not m:
                i += 1
                continue
            indent, start, body = len(m.group(1)), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            yield f"{os.path.relpath(path, ROOT)}:{start}", "\n".join(body) + "\n"
            i += 1


def shipped():
    """(label, YAML text) of every daemon config shipped or documented."""
    out = [("deploy/nearprepd.example.yaml (uncommented)", uncomment(open(EXAMPLE).read()))]
    out += list(k8s_configs())
    out += list(doc_blocks())
    return out


def test_the_sources_are_found():
    labels = [label for label, _ in shipped()]
    assert any(label.startswith("deploy/k8s/") for label in labels), labels
    assert sum(label.startswith("docs/") for label in labels) >= 3, labels
    example = yaml.safe_load(shipped()[0][1])
    # The commented-out parts were uncommented: TLS, the fpga test knob and
    # all five dataset entries, one with block_cache_bytes.
    assert "tls" in example and "fpga_inject_error_run" in example["backend"]
    assert len(example["datasets"]) == 5
    assert any("block_cache_bytes" in d for d in example["datasets"])


# --- item 8: the largest batch fits the per-stream memory -------------------

def _bytes(v):
    m = re.fullmatch(r"(\d+)([KMGT]?)(?:I?B)?", str(v).upper())
    assert m, v
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


@pytest.mark.parametrize("label,text", shipped(), ids=[label for label, _ in shipped()])
def test_largest_batch_fits_the_per_stream_memory(label, text):
    doc = yaml.safe_load(text)
    limits = (doc or {}).get("limits", {}) if isinstance(doc, dict) else {}
    max_batch = int(limits.get("max_batch_size", DEFAULT_MAX_BATCH))
    memory = _bytes(limits.get("per_stream_memory", DEFAULT_PER_STREAM_MEMORY))
    assert max_batch * FLOAT32_224_SAMPLE <= memory, (
        f"{label}: max_batch_size {max_batch} of float32 224x224x3 is "
        f"{max_batch * FLOAT32_224_SAMPLE} bytes, over per_stream_memory {memory}: "
        f"batches above {memory // FLOAT32_224_SAMPLE} would be refused")


def test_the_batch_bound_check_can_fail():
    bad = "limits:\n  max_batch_size: 512\n  per_stream_memory: 256M\n"
    with pytest.raises(AssertionError, match="above 445"):
        test_largest_batch_fits_the_per_stream_memory("k8s before issue 20", bad)


# --- item 7: every config starts the real daemon ----------------------------

need_binaries = pytest.mark.skipif(not (CLI and NEARPREPD),
                                   reason="nearprep CLI or nearprepd not built")


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Tiny datasets of every format, a manifest and a placement, TLS files."""
    t = tmp_path_factory.mktemp("shipped")
    d = {"tmp": t}
    images = t / "images"
    cli("mkdataset", "--out", str(images), "--classes", "2", "--per-class", "2",
        "--seed", "3")
    d["image_folder"] = str(images)
    lst = t / "list"
    shutil.copytree(images, lst)
    (lst / "train.txt").write_text("class_000/img_00000.jpg 0\nclass_001/img_00000.jpg 1\n")
    d["file_list"] = str(lst)
    for fmt in ("tfrecord", "tar"):
        out = t / f"shards-{fmt}"
        cli("pack", "--source", str(images), "--out", str(out), "--format", fmt,
            "--prefix", "train")
        d[fmt] = str(out)
    # A fleet node holding every shard of its manifest, named in a placement.
    d["manifest"] = str(t / "ds.nearprep-manifest")
    cli("manifest", "--root", d["tfrecord"], "--out", d["manifest"])
    d["nodes"] = {}
    d["index_cache"] = str(t / "index-cache")
    os.makedirs(d["index_cache"])
    key, cert = t / "tls.key", t / "tls.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    d["tls"] = {"cert": str(cert), "key": str(key), "client_ca": str(cert)}
    d["tokens"] = t / "tokens.sha256"
    d["tokens"].write_text("ci " + "ab" * 32 + "\n")
    return d


def placement_for(data, node):
    """A placement of data's manifest that names `node` (written once)."""
    if node not in data["nodes"]:
        path = str(data["tmp"] / f"p{len(data['nodes'])}.nearprep-placement")
        cli("placement", "--manifest", data["manifest"], "--nodes", node,
            "--replicas", "1", "--version", "1", "--out", path)
        data["nodes"][node] = path
    return data["nodes"][node]


DATASET_KEYS = {"name", "format", "root", "manifest", "placement", "node",
                "manifest_check", "shard_pattern", "list_file", "index_cache"}


def materialize(text, data):
    """The config with its paths replaced by `data`'s and loopback
    addresses; a dataset entry's keys alone become one dataset entry.
    Returns (config dict, extra flags)."""
    doc = yaml.safe_load(text) or {}
    assert isinstance(doc, dict), text
    if "datasets" not in doc and set(doc) & {"root", "manifest", "placement", "format"}:
        assert set(doc) <= DATASET_KEYS | {"block_cache_bytes", "allow_empty", "label_offset"}, doc
        doc = {"datasets": [dict({"name": "doc", "format": "tfrecord", "root": "x"}, **doc)]}
    doc = copy.deepcopy(doc)
    flags = []
    doc["listen"] = "127.0.0.1"
    doc["port"] = 0
    doc.pop("port_file", None)
    doc["log_level"] = "warn"
    if "metrics" in doc:
        doc["metrics"]["listen"] = "127.0.0.1:0"
        doc["metrics"].pop("port_file", None)
    if "tls" in doc:
        doc["tls"] = {k: data["tls"][k] for k in doc["tls"]}
    authz = doc.get("authorization") or {}
    if "token_file" in authz:
        authz["token_file"] = str(data["tokens"])
    if "audit_log" in authz:
        authz["audit_log"] = str(data["tmp"] / "audit.jsonl")
    for ds in doc.get("datasets", []):
        fmt = ds.get("format", "image_folder")
        ds["root"] = data[fmt]
        if fmt == "file_list" and os.path.isabs(ds.get("list_file", "")):
            ds["list_file"] = os.path.join(data["file_list"], "train.txt")
        if "index_cache" in ds:
            ds["index_cache"] = data["index_cache"]
        if "manifest" in ds:
            ds["manifest"] = data["manifest"]
        if "placement" in ds:
            ds["placement"] = placement_for(data, str(ds["node"]))
    if not doc.get("datasets"):
        flags += ["--dataset", f"tiny={data['image_folder']}"]
    return doc, flags


def start_daemon(config, flags, tmp):
    path = tmp / "nearprepd.yaml"
    path.write_text(yaml.safe_dump(config))
    port_file = tmp / "port"
    proc = subprocess.Popen([NEARPREPD, "--config", str(path), "--port-file", str(port_file),
                             "--workers", "1", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode, proc.stdout.read()
            if port_file.exists() and port_file.read_text().strip():
                return 0, ""
            time.sleep(0.02)
        return None, "did not write its port file in 30 s"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


@need_binaries
@pytest.mark.parametrize("label,text", shipped(), ids=[label for label, _ in shipped()])
def test_config_starts_the_daemon(label, text, data, tmp_path):
    config, flags = materialize(text, data)
    rc, out = start_daemon(config, flags, tmp_path)
    assert rc == 0, f"{label}: nearprepd refused it ({rc}):\n{out}\nconfig:\n{yaml.safe_dump(config)}"


@need_binaries
def test_a_misspelled_key_is_caught(data, tmp_path):
    text = uncomment(open(EXAMPLE).read()).replace("block_cache_bytes:", "block_cache_byte:")
    config, flags = materialize(text, data)
    rc, out = start_daemon(config, flags, tmp_path)
    assert rc == 2 and "block_cache_byte: unknown key" in out, out
