"""Record datasets end to end: the 200 sample images served as an image
folder, as TFRecord shards and as tar shards (written by `nearprep pack`,
which keeps the sample-id order) give the same bytes for the same sample ids
and draws, under the global and the block shuffle; damaged shards give
per-sample DATA_LOSS errors naming shard and offset, never a crash or a
stream that ends early; the Python client and its adapters work unchanged.
"""

import glob
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

import nearprep
from nearprep import plan
from conftest import Daemon, NEARPREPD, ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)

pytestmark = pytest.mark.skipif(
    not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")

AUG = dict(flip_probability=0.5, brightness_max_delta=32.0 / 255.0,
           saturation=(0.5, 1.5), include_params=True, crop="random_resized")


def pack(src, out, fmt, shard_size="4MiB"):
    subprocess.run([CLI, "pack", "--source", src, "--out", out, "--format", fmt,
                    "--shard-size", shard_size], check=True, capture_output=True)
    return out


def start(tmp, name, datasets, extra=()):
    """datasets: {name: (format, root)}"""
    d = Daemon(tmp, {}, name=name, workers=2, extra=extra)
    with open(d.config, "w") as f:
        f.write("listen: 127.0.0.1\nlog_level: warn\ndatasets:\n")
        for ds, (fmt, root) in datasets.items():
            f.write(f"  - name: {ds}\n    format: {fmt}\n    root: {root}\n")
    return d.start()


@pytest.fixture(scope="module")
def served(tmp_path_factory, sample_dir):
    tmp = tmp_path_factory.mktemp("records")
    tf = pack(sample_dir, str(tmp / "tf"), "tfrecord")
    tar = pack(sample_dir, str(tmp / "tar"), "tar")
    d = start(tmp, "rec", {"folder": ("image_folder", sample_dir),
                           "tf": ("tfrecord", tf), "tar": ("tar", tar)})
    yield d, tmp
    d.stop()


def epoch(client, dataset, **kw):
    ids, labels, images, params = [], [], [], []
    for b in client.batches(dataset, batch_size=16, seed=77, epoch=3, shuffle=True,
                            height=96, width=96, dtype="uint8", **AUG, **kw):
        ids += [int(i) for i in b.sample_ids]
        labels += [int(x) for x in b.labels]
        images.append(np.array(b.images))
        params += [(p.flipped, p.crop.y, p.crop.x, p.crop.height, p.crop.width) for p in b.params]
        assert not b.errors
    return ids, labels, np.concatenate(images), params


def test_list_datasets_reports_formats_and_shards(served):
    d, _ = served
    c = nearprep.Client(d.target)
    folder, tf, tar = c.dataset("folder"), c.dataset("tf"), c.dataset("tar")
    assert tf.format == "tfrecord" and tar.format == "tar"
    assert folder.num_samples == tf.num_samples == tar.num_samples == 200
    assert tf.num_shards == tar.num_shards == 6
    assert folder.num_shards == 0
    assert tf.total_bytes == tar.total_bytes == folder.total_bytes
    assert tf.block_samples >= 1 and tf.num_refused == 0


@pytest.mark.parametrize("mode", ["global", "block"])
def test_same_bytes_for_same_ids_across_formats(served, mode):
    d, _ = served
    c = nearprep.Client(d.target)
    kw = {} if mode == "global" else dict(shuffle_mode="block", block_samples=9,
                                          open_blocks=3, window=20)
    ref = epoch(c, "folder", **kw)
    assert sorted(ref[0]) == list(range(200))
    for name in ("tf", "tar"):
        got = epoch(c, name, **kw)
        assert got[0] == ref[0], name
        assert got[1] == ref[1], name
        assert got[3] == ref[3], name
        assert np.array_equal(got[2], ref[2]), name
    if mode == "block":
        assert ref[0] == plan.block_shuffled_order(200, 77, 3, 9, 3, 20)
    else:
        assert ref[0] == plan.epoch_order(200, 77, 3, True)


def test_block_shuffle_default_block_comes_from_the_dataset(served):
    d, _ = served
    c = nearprep.Client(d.target)
    b = c.dataset("tf").block_samples
    ids = [int(i) for batch in c.batches("tf", batch_size=50, seed=5, shuffle=True,
                                         shuffle_mode="block", height=8, width=8,
                                         dtype="uint8") for i in batch.sample_ids]
    assert ids == plan.block_shuffled_order(200, 5, 0, b, 8, 256)



@pytest.mark.parametrize("mode", ["global", "block"])
def test_records_give_the_same_bytes_from_the_decoded_cache(served, mode):
    """The same record datasets through a second daemon with the decoded-image
    cache on (issue 32): its first epoch (decoding and admitting) and its
    second (served from the cache: the crops taken from the cached whole
    image) equal the daemon without a cache byte for byte, draws and labels
    included; the cache's hits prove the second epoch came from it."""
    d, tmp = served
    kw = {} if mode == "global" else dict(shuffle_mode="block", block_samples=9,
                                          open_blocks=3, window=20)
    cached = start(tmp, f"rec-cache-{mode}",
                   {"tf": ("tfrecord", str(tmp / "tf")), "tar": ("tar", str(tmp / "tar"))},
                   extra=["--decoded-cache-bytes", "512M",
                          "--decoded-cache-dataset-bytes", "512M"])
    try:
        plain, c = nearprep.Client(d.target), nearprep.Client(cached.target)
        for name in ("tf", "tar"):
            ref = epoch(plain, name, **kw)
            for _ in range(2):
                got = epoch(c, name, **kw)
                assert got[0] == ref[0] and got[1] == ref[1] and got[3] == ref[3], name
                assert np.array_equal(got[2], ref[2]), name
        info = {i.dataset: i for i in c.info().decoded_cache}
        for name in ("tf", "tar"):
            assert info[name].admitted == 200, info[name]
            assert info[name].hits >= 200, info[name]
    finally:
        cached.stop()

def test_index_is_cached_and_revalidated(served, tmp_path):
    _, tmp = served
    idx = sorted(glob.glob(str(tmp / "tf" / "*.nearprep-index")))
    assert len(idx) == 6
    text = open(idx[0]).read()
    assert text.startswith("nearprep-shard-index 3\nformat tfrecord\n")
    # Bound to its shard, with its own checksum last (issue 23 item 6).
    assert "\nshard_check crc32c:" in text
    assert text.split("\n")[-2].startswith("checksum ")


def _crc(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", _crc(n)) + data + struct.pack("<I", _crc(data))


def _varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _ld(field, payload):  # a length-delimited protobuf field
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _example(image=None, label=None, float_label=None):
    """tf.train.Example bytes, encoded here from the schema's field numbers:
    Example.features=1, Features.feature=1 (map entry key=1 value=2),
    Feature.bytes_list=1 / float_list=2 / int64_list=3, List.value=1."""
    entries = b""
    if image is not None:
        feat = _ld(1, _ld(1, image))
        entries += _ld(1, _ld(1, b"image/encoded") + _ld(2, feat))
    if label is not None:
        feat = _ld(3, _ld(1, _varint(label)))  # packed int64
        entries += _ld(1, _ld(1, b"image/class/label") + _ld(2, feat))
    if float_label is not None:
        feat = _ld(2, _ld(1, struct.pack("<f", float_label)))
        entries += _ld(1, _ld(1, b"image/class/label") + _ld(2, feat))
    return _ld(1, entries)


def test_bad_shards_give_per_sample_errors(tmp_path, sample_dir):
    jpegs = sorted(glob.glob(os.path.join(sample_dir, "*", "*.JPEG")))[:6]
    imgs = [open(p, "rb").read() for p in jpegs]
    root = tmp_path / "bad"
    root.mkdir()
    good = _frame(_example(imgs[0], 1))
    bad_crc = bytearray(_frame(_example(imgs[1], 2)))
    bad_crc[40] ^= 0xFF
    no_image = _frame(_example(label=3))
    float_label = _frame(_example(imgs[2], float_label=4.0))
    tail = _frame(_example(imgs[3], 5))
    shard0 = good + bytes(bad_crc) + no_image + float_label + _frame(_example(imgs[4], 6))
    (root / "a-0.tfrecord").write_bytes(shard0)
    (root / "a-1.tfrecord").write_bytes(good + tail[:-30])  # truncated last record
    import gzip
    (root / "a-2.tfrecord").write_bytes(gzip.compress(good))  # refused whole
    d = start(tmp_path, "daemon-bad", {"bad": ("tfrecord", str(root))})
    try:
        c = nearprep.Client(d.target)
        info = c.dataset("bad")
        assert info.num_samples == 6 and info.num_shards == 2
        assert info.num_refused == 2  # the truncated tail and the gzip shard
        ids, errors = [], []
        for b in c.batches("bad", batch_size=4, height=16, width=16, dtype="uint8"):
            ids += [int(i) for i in b.sample_ids]
            errors += list(b.errors)
        assert ids == [0, 4, 5]
        assert sorted(e.sample_id for e in errors) == [1, 2, 3]
        by_id = {e.sample_id: e for e in errors}
        assert all(e.code == "DATA_LOSS" for e in errors)
        assert "a-0.tfrecord offset " in by_id[1].message and "CRC" in by_id[1].message
        assert "has no feature 'image/encoded'" in by_id[2].message
        assert "not an int64_list" in by_id[3].message
        with pytest.raises(nearprep.NearprepError) as e:
            list(c.batches("bad", batch_size=4, height=16, width=16, dtype="uint8",
                           error_policy="fail_stream"))
        assert "DATA_LOSS" in str(e.value) or "a-0.tfrecord" in str(e.value)
        log = open(d.log, errors="replace").read()
        assert "a-1.tfrecord" in log and "compressed" in log
    finally:
        d.stop()


def test_torch_adapter_unchanged_on_records(served):
    torch = pytest.importorskip("torch")
    from nearprep import torch as nt
    d, _ = served
    got = {}
    for name in ("folder", "tar"):
        ds = nt.IterableDataset(d.target, name, batch_size=20, seed=1, shuffle=True,
                                height=32, width=32, dtype="uint8")
        got[name] = [(x.clone(), y.clone()) for x, y in torch.utils.data.DataLoader(ds, batch_size=None)]
    assert len(got["folder"]) == len(got["tar"]) == 10
    for (xa, ya), (xb, yb) in zip(got["folder"], got["tar"]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def _scrape(port):
    import urllib.request
    from test_metrics import parse
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return parse(r.read().decode())[0]


def test_direct_io_refusals_are_exported(served, tmp_path):
    """docs/operations.md: a block read the file system refuses O_DIRECT for
    is counted and read buffered. Both outcomes are exported per dataset and
    together account for every block read."""
    from test_metrics import wait_for_file
    _, tmp = served
    port_file = str(tmp_path / "metrics_port")
    d = start(tmp_path, "direct", {"tf": ("tfrecord", str(tmp / "tf"))},
              extra=["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", port_file])
    try:
        port = wait_for_file(port_file, d.proc)
        c = nearprep.Client(d.target)
        n = sum(len(b) for b in c.batches("tf", batch_size=50, seed=5, shuffle=True,
                                          shuffle_mode="block", block_samples=20,
                                          height=8, width=8, dtype="uint8"))
        assert n == 200
        m = _scrape(port)
        key = lambda **l: ("nearprep_storage_block_reads_total",
                           frozenset(dict(dataset="tf", **l).items()))
        direct, refused = m[key(kind="direct")], m[key(kind="direct_refused")]
        misses = m[("nearprep_block_samples_total",
                    frozenset(dict(dataset="tf", kind="miss").items()))]
        assert misses > 0
        assert direct + refused == misses
    finally:
        d.stop()


def _entries(index_path):
    for line in open(index_path):
        if line.startswith("entries "):
            return int(line.split()[1])
    raise AssertionError(f"no entries line in {index_path}")


def test_shard_replaced_under_a_running_daemon_is_refused_not_mixed(tmp_path, sample_dir):
    """Issue 23 item 7: a shard replaced while the daemon serves it (a new
    file renamed over it, or rewritten in place) with records at the same
    offsets (images of the same sizes) is refused sample by sample with
    DATA_LOSS naming the shard; its new images are never served with the
    old index's labels, and the other shards are served as before."""
    alt = tmp_path / "alt"
    shutil.copytree(sample_dir, alt)
    for p in sorted(glob.glob(str(alt / "*" / "*.JPEG"))):
        data = bytearray(open(p, "rb").read())
        data[-40] ^= 0x01  # entropy-coded data: same size, other pixels
        open(p, "wb").write(bytes(data))
    roots = {}
    for fmt in ("tfrecord", "tar"):
        roots[fmt] = pack(sample_dir, str(tmp_path / fmt), fmt)
        pack(str(alt), str(tmp_path / (fmt + "-alt")), fmt)
    d = start(tmp_path, "replaced", {"tf": ("tfrecord", roots["tfrecord"]),
                                     "tar": ("tar", roots["tar"])})
    try:
        c = nearprep.Client(d.target)
        args = dict(batch_size=50, seed=3, shuffle=True, height=16, width=16, dtype="uint8")
        before = {n: sorted(int(i) for b in c.batches(n, **args) for i in b.sample_ids)
                  for n in ("tf", "tar")}
        assert before == {"tf": list(range(200)), "tar": list(range(200))}
        for name, fmt, how in (("tf", "tfrecord", "rename"), ("tar", "tar", "in place")):
            shard = sorted(glob.glob(os.path.join(roots[fmt], f"*.{fmt}")))[0]
            new = sorted(glob.glob(str(tmp_path / (fmt + "-alt") / f"*.{fmt}")))[0]
            assert os.path.getsize(new) == os.path.getsize(shard)
            assert open(new, "rb").read() != open(shard, "rb").read()
            if how == "rename":
                shutil.copy(new, shard + ".new")
                os.replace(shard + ".new", shard)
            else:
                with open(shard, "r+b") as f:
                    f.write(open(new, "rb").read())
            n0 = _entries(shard + ".nearprep-index")
            served, errors = [], []
            for b in c.batches(name, **args):
                served += [int(i) for i in b.sample_ids]
                errors += list(b.errors)
            assert sorted(e.sample_id for e in errors) == list(range(n0)), name
            assert sorted(served) == list(range(n0, 200)), name
            for e in errors:
                assert e.code == "DATA_LOSS", e
                assert os.path.basename(shard) in e.message, e.message
                assert "replaced or rewritten" in e.message, e.message
    finally:
        d.stop()


def test_forged_index_is_rebuilt_not_served(tmp_path, sample_dir):
    """Issue 23 item 6: a `.nearprep-index` whose shard still has its size and
    mtime is not trusted on its word: a forged label, swapped or dropped
    entries are noticed when the daemon opens the dataset, the index is
    rebuilt from the shard (logged, counted), and every sample is served
    with its own bytes and label."""
    ref = pack(sample_dir, str(tmp_path / "ref"), "tfrecord")
    roots = {}
    for case in ("label", "swap", "drop"):
        roots[case] = pack(sample_dir, str(tmp_path / case), "tfrecord")
        idx = sorted(glob.glob(os.path.join(roots[case], "*.nearprep-index")))[0]
        lines = open(idx).read().split("\n")
        first = next(i for i, l in enumerate(lines) if l.startswith("entries ")) + 1
        if case == "label":
            f = lines[first + 2].split(" ")
            f[-2] = str(int(f[-2]) + 1)  # the label, before the key '-'
            lines[first + 2] = " ".join(f)
        elif case == "swap":
            lines[first + 2], lines[first + 3] = lines[first + 3], lines[first + 2]
        else:
            del lines[first + 2]
            lines[first - 1] = "entries %d" % (int(lines[first - 1].split()[1]) - 1)
        open(idx, "w").write("\n".join(lines))
    port_file = str(tmp_path / "metrics_port")
    d = start(tmp_path, "forged", {"ref": ("tfrecord", ref), **{
        c: ("tfrecord", r) for c, r in roots.items()}},
              extra=["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", port_file])
    try:
        c = nearprep.Client(d.target)
        args = dict(batch_size=50, seed=1, shuffle=True, height=16, width=16, dtype="uint8")

        def served(name):
            out = {}
            for b in c.batches(name, **args):
                assert not b.errors, b.errors
                for k, i in enumerate(b.sample_ids):
                    out[int(i)] = (int(b.labels[k]), b.images[k].tobytes())
            return out
        want = served("ref")
        assert len(want) == 200
        for case in roots:
            assert c.dataset(case).num_samples == 200, case
            assert served(case) == want, case
        from test_metrics import wait_for_file
        m = _scrape(wait_for_file(port_file, d.proc))
        for case in roots:
            assert m[("nearprep_shard_indexes_rebuilt_total",
                      frozenset({("dataset", case)}))] == 1, case
        assert m[("nearprep_shard_indexes_rebuilt_total", frozenset({("dataset", "ref")}))] == 0
        log = open(d.log, errors="replace").read()
        assert "not used" in log and "rebuilding" in log
    finally:
        d.stop()
