"""Issue 37 item 11 (tar shards), end to end: the label of a tar sample is
read again from its `.cls` member whenever the daemon serves it. A
`.nearprep-index` whose label was edited and its CRC-32C recomputed, and a
`.cls` rewritten in place with the shard's size and mtime restored (so the
cached index is reused at start), are each refused for that sample with
DATA_LOSS naming the shard (counted in nearprep_shard_changed_reads_total);
every other sample is served. A version 2 tar index (no `.cls` places) is
rebuilt, not used.
"""

import glob
import os
import tarfile

import pytest

import nearprep
from test_records_daemon import CLI, NEARPREPD, pack, start, _scrape
from test_records import crc32c

pytestmark = pytest.mark.skipif(
    not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")


def _reseal(lines):
    """The index lines (without the checksum) as a file with a correct
    checksum: what a forger who knows the format writes."""
    body = "\n".join(lines) + "\n"
    return body + "checksum %08x\n" % crc32c(body.encode())


def _index(root):
    """The first shard's index: (path, lines without the checksum, the
    line number of entry 0)."""
    path = sorted(glob.glob(os.path.join(root, "*.tar.nearprep-index")))[0]
    lines = open(path).read().split("\n")
    while not lines[-1].startswith("checksum "):
        lines.pop()
    lines.pop()
    first = next(i for i, l in enumerate(lines) if l.startswith("entries ")) + 1
    return path, lines, first


def _epoch(client, name):
    served, errors = {}, []
    for b in client.batches(name, batch_size=50, seed=2, shuffle=True, height=16,
                            width=16, dtype="uint8"):
        for k, i in enumerate(b.sample_ids):
            served[int(i)] = int(b.labels[k])
        errors += list(b.errors)
    return served, errors


def test_forged_label_and_rewritten_cls_are_refused_when_read(tmp_path, sample_dir):
    roots = {c: pack(sample_dir, str(tmp_path / c), "tar")
             for c in ("ref", "forged", "rewritten", "v2")}
    path, lines, first = _index(roots["forged"])
    assert lines[0] == "nearprep-shard-index 3"
    k = (int(lines[first - 1].split()[1])) // 2  # a sample in the middle of shard 0
    # The forged label, the checksum recomputed.
    f = lines[first + k].split(" ")
    forged_label = int(f[-2]) + 1
    f[-2] = str(forged_label)  # LABEL, before KEY
    lines[first + k] = " ".join(f)
    open(path, "w").write(_reseal(lines))
    # The .cls of the same sample rewritten in place, size and mtime kept.
    shard = sorted(glob.glob(os.path.join(roots["rewritten"], "*.tar")))[0]
    with tarfile.open(shard) as t:
        cls = [m for m in t.getmembers() if m.name.endswith(".cls")][k]
    st = os.stat(shard)
    with open(shard, "r+b") as fh:
        fh.seek(cls.offset_data)
        old = fh.read(cls.size)
        new = old[:-1] + str((int(old[-1:]) + 1) % 10).encode()
        fh.seek(cls.offset_data)
        fh.write(new)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(shard).st_mtime_ns == st.st_mtime_ns
    # The shard's head and tail (what binds the index to it) are unchanged.
    assert 64 << 10 <= cls.offset_data < os.path.getsize(shard) - (64 << 10)
    # A version 2 index: no .cls places.
    path, lines, first = _index(roots["v2"])
    lines[0] = "nearprep-shard-index 2"
    for i in range(first, len(lines)):
        f = lines[i].split(" ")
        lines[i] = " ".join(f[:4] + f[6:])
    open(path, "w").write(_reseal(lines))

    port_file = str(tmp_path / "metrics_port")
    d = start(tmp_path, "tarlabels", {c: ("tar", r) for c, r in roots.items()},
              extra=["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", port_file])
    try:
        c = nearprep.Client(d.target)
        want, errors = _epoch(c, "ref")
        assert len(want) == 200 and not errors
        for case in ("forged", "rewritten"):
            served, errors = _epoch(c, case)
            assert [e.sample_id for e in errors] == [k], (case, errors)
            e = errors[0]
            assert e.code == "DATA_LOSS", e
            assert os.path.basename(shard) in e.message, e.message
            assert "the index does not hold for this sample" in e.message, e.message
            assert f"index: label {forged_label if case == 'forged' else want[k]};" \
                in e.message, e.message
            assert served == {i: l for i, l in want.items() if i != k}, case
        served, errors = _epoch(c, "v2")
        assert served == want and not errors
        from test_metrics import wait_for_file
        m = _scrape(wait_for_file(port_file, d.proc))
        key = lambda name, ds: (name, frozenset({("dataset", ds)}))
        for case in ("forged", "rewritten"):
            assert m[key("nearprep_shard_changed_reads_total", case)] == 1, case
            assert m[key("nearprep_shard_indexes_rebuilt_total", case)] == 0, case
        assert m[key("nearprep_shard_indexes_rebuilt_total", "v2")] == 1
        assert m[key("nearprep_shard_changed_reads_total", "ref")] == 0
        log = open(d.log, errors="replace").read()
        assert "index version 2 does not say where each sample's .cls member is" in log
    finally:
        d.stop()
