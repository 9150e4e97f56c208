"""Per-sample digests (issue 37 item 14): `nearprep manifest --digests`
records one SHA-256 per sample of its image bytes, and a daemon serving the
manifest checks every sample it reads against it. The case no other check
can see: a tar shard rewritten in place, one image member replaced by
another valid JPEG padded to the same length, the file's size and mtime
restored (same inode). The daemon serving the plain manifest serves the new
pixels; the one serving the manifest with digests refuses that sample
(DATA_LOSS naming the shard, counted in nearprep_sample_digests_total) and
serves every other sample as before.
"""

import glob
import hashlib
import os
import subprocess
import tarfile

import numpy as np
import pytest

from nearprep.fleet import FleetClient
from nearprep import fleet_plan as fp
from conftest import NEARPREPD, ROOT, fleet_daemon, metrics_value

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")

REQ = dict(height=16, width=16, dtype="uint8")


def run(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


def image_members(shards):
    """[(shard path, member)] of every image member, in sample id order
    (shards by name, then archive order)."""
    out = []
    for path in sorted(glob.glob(os.path.join(shards, "*.tar"))):
        with tarfile.open(path) as t:
            for m in t.getmembers():
                if m.isfile() and m.name.rsplit(".", 1)[-1].lower() in ("jpg", "jpeg"):
                    out.append((path, m))
    return out


def read_epoch(target, manifest):
    """{sample id: ("ok", sha256 of the output pixels) or (code, message)}."""
    got = {}
    with FleetClient([target], "ds", manifest=manifest, seed=5, block_samples=2, window=4,
                     global_batch=8, native=False, **REQ) as fc:
        for fb in fc.epoch(0):
            for i, sid in enumerate(fb.sample_ids):
                got[sid] = ("ok", hashlib.sha256(np.ascontiguousarray(fb.images[i]).tobytes())
                            .hexdigest())
            for e in fb.errors:
                got[e.sample_id] = (e.code, e.message)
    return got


def test_digest_file_holds_each_samples_sha256(tmp_path):
    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "6")
    run("pack", "--source", src, "--out", shards, "--format", "tar", "--shard-size", "60KiB")
    out = str(tmp_path / "m.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tar", "--partitions", "2", "--out", out,
        "--digests")
    m = fp.load_manifest(out)
    assert m.digests_file == "m.nearprep-manifest.digests"
    data = open(out + ".digests", "rb").read()
    # The manifest binds the digest file by its SHA-256.
    assert hashlib.sha256(data).hexdigest() == m.digests_sha256
    header = f"nearprep-digests 1 sha256 {m.num_samples}\n".encode()
    assert data.startswith(header)
    body = data[len(header):]
    members = image_members(shards)
    assert len(members) == m.num_samples == 12 and len(body) == 32 * 12
    # Independently: Python's tarfile and hashlib over the image members.
    for i, (path, mem) in enumerate(members):
        with tarfile.open(path) as t:
            want = hashlib.sha256(t.extractfile(mem).read()).digest()
        assert body[32 * i:32 * i + 32] == want, i
    # Without --digests the manifest has no digests line: another hash.
    plain = str(tmp_path / "p.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tar", "--partitions", "2", "--out", plain)
    assert fp.load_manifest(plain).digests_sha256 == ""
    assert fp.load_manifest(plain).hash != m.hash


def test_digest_file_not_the_manifests_is_refused_at_start(tmp_path):
    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "4")
    run("pack", "--source", src, "--out", shards, "--format", "tar", "--shard-size", "60KiB")
    out = str(tmp_path / "m.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tar", "--out", out, "--digests")
    data = bytearray(open(out + ".digests", "rb").read())
    data[-1] ^= 1
    open(out + ".digests", "wb").write(bytes(data))
    d = fleet_daemon(tmp_path, "bad", shards, fmt="tar", manifest=out)
    with pytest.raises(RuntimeError) as e:
        d.start()
    d.kill()
    assert "nearprepd exited" in str(e.value), e.value
    assert "digest file" in str(e.value) and "SHA-256 differs" in str(e.value), e.value


def test_tar_shard_rewritten_in_place_is_caught_only_with_digests(tmp_path):
    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "8")
    run("pack", "--source", src, "--out", shards, "--format", "tar", "--shard-size", "60KiB")
    with_digests = str(tmp_path / "d.nearprep-manifest")
    plain = str(tmp_path / "p.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tar", "--partitions", "2",
        "--out", with_digests, "--digests")
    run("manifest", "--root", shards, "--format", "tar", "--partitions", "2", "--out", plain)
    daemons = [fleet_daemon(tmp_path, "dig", shards, fmt="tar", manifest=with_digests).start(),
               fleet_daemon(tmp_path, "plain", shards, fmt="tar", manifest=plain).start()]
    try:
        before = [read_epoch(daemons[0].target, with_digests),
                  read_epoch(daemons[1].target, plain)]
        assert before[0] == before[1]
        assert all(v[0] == "ok" for v in before[0].values()) and len(before[0]) == 16
        # The victim: the largest image member; its stand-in: the smallest
        # other image, a valid JPEG, zero-padded to the victim's length.
        members = image_members(shards)
        victim = max(range(len(members)), key=lambda i: members[i][1].size)
        other = min(range(len(members)), key=lambda i: members[i][1].size)
        assert members[other][1].size < members[victim][1].size
        with tarfile.open(members[other][0]) as t:
            stand_in = t.extractfile(members[other][1]).read()
        path, mem = members[victim]
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(mem.offset_data)
            f.write(stand_in + bytes(mem.size - len(stand_in)))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        st2 = os.stat(path)
        assert (st2.st_ino, st2.st_size, st2.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)

        after_plain = read_epoch(daemons[1].target, plain)
        # Without digests nothing can tell: the new pixels are served.
        assert after_plain[victim][0] == "ok"
        assert after_plain[victim] != before[1][victim]
        assert after_plain[victim] == before[1][other]

        after = read_epoch(daemons[0].target, with_digests)
        code, message = after[victim]
        assert code == "DATA_LOSS", after[victim]
        assert os.path.basename(path) in message and "not the manifest's" in message, message
        for sid, v in before[0].items():
            if sid != victim:
                assert after[sid] == v, sid
        assert metrics_value(daemons[0], "nearprep_sample_digests_total",
                             {"dataset": "ds", "kind": "mismatch"}) >= 1
        assert metrics_value(daemons[0], "nearprep_sample_digests_total",
                             {"dataset": "ds", "kind": "ok"}) >= 31
    finally:
        for d in daemons:
            d.kill()
