"""docs/protocol.md's points that an outside re-implementation had to guess
(issue 26, "Spec precision"), each pinned as written there: against the C++
CLI (`nearprep manifest`, `fleet-plan`, `placement`), the Python plan, and,
for saturation, a daemon. Where a point is a formula, the expected values are
computed here from the formula (hashlib, nearprep.philox), not by the code
under test."""

import glob
import hashlib
import os
import subprocess

import numpy as np
import pytest

import nearprep
from nearprep import fleet_plan as fp
from nearprep import plan
from nearprep.fleet import FleetClient, rendezvous_score
from nearprep.philox import draw64, key_of
from conftest import ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
needs_cli = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")


def cli(*args, check=True):
    r = subprocess.run([CLI, *args], capture_output=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"nearprep {' '.join(args)}: {r.stderr.decode(errors='replace')}")
    return r


def write_shards(folder, counts):
    """TFRecord shards s-000.tfrecord, ... of tiny framed records."""
    from test_fleet_plan import _write_shards
    _write_shards(folder, counts)


def manifest_text(shards, fmt="tfrecord"):
    """The canonical text for [(partition, records, name bytes)]."""
    c = max(p for p, _, _ in shards) + 1
    out = (f"nearprep-manifest 1\nformat {fmt}\npartitions {c}\n"
           f"samples {sum(n for _, n, _ in shards)}\n").encode()
    for p, n, name in shards:
        out += f"shard {p} {n} {max(n, 1) * 20} 00000000 ".encode() + name + b"\n"
    return out


def cpp_plan(path, *flags):
    lines = cli("fleet-plan", "--manifest", str(path), *flags).stdout.decode().split("\n")
    return [tuple(map(int, line.split())) for line in lines[1:-1]]


def py_plan(m, **params):
    p = fp.GlobalPlan.for_manifest(m, fp.PlanParams(**params))
    return [(x, *p.at(x)) for x in range(len(p))]


# 1. Partition boundaries --------------------------------------------------------

@needs_cli
@pytest.mark.parametrize("counts,c,want", [
    ([1, 2, 1], 2, [0, 1, 1]),            # |1*2 - 2| == |3*2 - 4|: the earlier boundary
    ([100, 1, 1, 1], 3, [0, 1, 2, 2]),    # nearest would repeat a boundary: kept increasing
    ([2, 2, 2, 2], 3, [0, 1, 1, 2]),
    ([5, 5], 7, [0, 1]),                  # C capped to the shard count
])
def test_partition_boundaries(tmp_path, counts, c, want):
    write_shards(str(tmp_path / "s"), counts)
    cli("manifest", "--root", str(tmp_path / "s"), "--format", "tfrecord", "--partitions",
        str(c), "--out", str(tmp_path / "M"))
    m = fp.load_manifest(str(tmp_path / "M"))
    assert [s.partition for s in m.shards] == want
    # The rule as docs/protocol.md states it, computed here.
    n, cc = sum(counts), min(c, len(counts))
    prefix = np.cumsum([0] + counts).tolist()
    bound = [0]
    for k in range(1, cc):
        lo, hi = bound[-1] + 1, len(counts) - (cc - k)
        bound.append(min(range(lo, hi + 1), key=lambda j: (abs(prefix[j] * cc - k * n), j)))
    assert m.partition_start == [prefix[b] for b in bound] + [n]


# 2. Counter words for values >= 2^32 --------------------------------------------

def test_counter_words_of_large_values():
    seed, epoch, i = 0xFEEDFACE12345678, 7, (3 << 32) | 5
    k = key_of(seed)
    # Single-node plan: a 64-bit index is split lo32 / hi32 over words 0, 1.
    assert plan.permutation_draw(seed, epoch, i) == draw64((5, 3, epoch, 1), k)
    # epoch bits 32..55 are in word 3 (tags 1, 3); bits 56..63 are not used.
    e = (0x00ABCDEF << 32) | 9
    assert plan.permutation_draw(seed, e, 4) == draw64((4, 0, 9, 0xABCDEF << 8 | 1), k)
    assert plan.permutation_draw(seed, e + (1 << 56), 4) == plan.permutation_draw(seed, e, 4)
    # Sample params keep epoch bits 32..47 only: epochs 2^48 apart draw alike.
    assert plan.sample_param_words(seed, e, 11, 1) == plan.sample_param_words(seed, e + (1 << 48),
                                                                              11, 1)
    assert plan.sample_param_words(seed, e, 11, 1) != plan.sample_param_words(seed, e + (1 << 32),
                                                                              11, 1)
    # The block shuffle's window draw: word 2 is the epoch's low 32 bits only.
    assert plan.window_draw(seed, epoch + (1 << 32), 2, 3) == plan.window_draw(seed, epoch, 2, 3)
    assert plan.window_draw(seed, epoch, (1 << 32) | 2, 3) == draw64((3, 2, epoch, 1 << 8 | 4), k)


@needs_cli
def test_fleet_partitions_of_2_32_samples_are_refused(tmp_path):
    """The fleet plan's counter words hold offsets, windows and rounds in 32
    bits: a partition of 2^32 samples is refused (C++ and Python)."""
    (tmp_path / "M").write_bytes(manifest_text([(0, 1 << 32, b"a"), (1, 5, b"b")]))
    r = cli("fleet-plan", "--manifest", str(tmp_path / "M"), "--batch", "0", check=False)
    assert r.returncode == 1 and b"a partition must hold < 2^32 samples" in r.stderr
    m = fp.load_manifest(str(tmp_path / "M"))
    with pytest.raises(ValueError, match="< 2\\^32 samples"):
        fp.GlobalPlan.for_manifest(m, fp.PlanParams())


# 3. B, W, G = 0 -----------------------------------------------------------------

@needs_cli
@pytest.mark.parametrize("flag,field", [("--block", "block_samples"), ("--window", "window"),
                                        ("--global-batch", "global_batch")])
def test_zero_block_window_or_global_batch_is_refused(tmp_path, flag, field):
    (tmp_path / "M").write_bytes(manifest_text([(0, 10, b"a")]))
    r = cli("fleet-plan", "--manifest", str(tmp_path / "M"), flag, "0", check=False)
    assert r.returncode == 1 and b"must be >= 1" in r.stderr, r.stderr
    with pytest.raises(ValueError, match="must be >= 1"):
        fp.GlobalPlan([0, 10], fp.PlanParams(**{field: 0}))


# 4. The shuffled array is the emission order ------------------------------------

@needs_cli
def test_the_shuffled_array_is_the_emission_order(tmp_path):
    """C = 3 partitions of one sample: round 0 emits the partitions in the
    order of the Fisher-Yates array a (position x is partition a[x]), not of
    its inverse. A seed whose permutation is a 3-cycle tells them apart."""
    (tmp_path / "M").write_bytes(manifest_text([(0, 1, b"a"), (1, 1, b"b"), (2, 1, b"c")]))
    m = fp.load_manifest(str(tmp_path / "M"))
    for seed in range(100):
        a = [0, 1, 2]
        for i in (2, 1):  # tag 7, counter {i, round 0, 0, epoch 0 << 8 | 7}
            j = draw64((i, 0, 0, 7), key_of(seed)) % (i + 1)
            a[i], a[j] = a[j], a[i]
        inverse = [a.index(x) for x in range(3)]
        if inverse != a:
            break
    else:
        pytest.fail("no 3-cycle among 100 seeds")
    want = [(x, a[x], a[x]) for x in range(3)]  # sample id == partition here
    assert cpp_plan(tmp_path / "M", "--seed", str(seed)) == want
    assert py_plan(m, seed=seed) == want


# 5. The rendezvous hash ---------------------------------------------------------

@needs_cli
def test_rendezvous_key_is_the_partition_in_decimal_ascii(tmp_path):
    (tmp_path / "M").write_bytes(
        manifest_text([(p, 1, f"s{p:02d}".encode()) for p in range(12)]))
    nodes = ["10.0.0.1:7070", "10.0.0.2:7070", "node-c:7070"]

    def score(node, p):  # sha256(node + "/" + decimal p), first 8 bytes big-endian
        return int.from_bytes(hashlib.sha256(f"{node}/{p}".encode("ascii")).digest()[:8], "big")

    assert rendezvous_score(nodes[0], 10) == score(nodes[0], 10)
    # The values tests/unit/fleet/placement_test.cc pins for fleet::RendezvousScore.
    assert rendezvous_score("10.0.0.1:7070", 5) == 448703302220230949
    assert rendezvous_score("a", 0) == 15558117463293904936
    assert score(nodes[0], 10) != int.from_bytes(
        hashlib.sha256(nodes[0].encode() + b"/\n").digest()[:8], "big")
    cli("placement", "--manifest", str(tmp_path / "M"), "--nodes", ",".join(nodes),
        "--replicas", "1", "--version", "1", "--out", str(tmp_path / "P"))
    held = {}
    for line in (tmp_path / "P").read_text().splitlines():
        if line.startswith("node "):
            _, name, parts = line.split(" ")
            for p in ([] if parts == "-" else parts.split(",")):
                held[int(p)] = name
    assert held == {p: max(nodes, key=lambda n: (score(n, p), n)) for p in range(12)}


# 6. The manifest's bytes --------------------------------------------------------

@needs_cli
def test_manifest_newline_names_and_zero_record_shards(tmp_path):
    good = manifest_text([(0, 0, b"a"), (0, 4, b"caf\xe9"), (1, 0, b"d"), (2, 0, b"e"),
                          (2, 3, b"f\x01")])
    (tmp_path / "M").write_bytes(good)
    # Non-UTF-8 and control bytes in names, zero-record shards, a partition
    # of zero samples: accepted by both parsers, the same plan.
    m = fp.load_manifest(str(tmp_path / "M"))
    assert m.hash == hashlib.sha256(good).hexdigest()
    assert [fp.name_bytes(s.name) for s in m.shards] == [b"a", b"caf\xe9", b"d", b"e", b"f\x01"]
    assert m.partition_start == [0, 4, 4, 7] and fp.serialize_manifest(m) == good
    for g in ("1", "3"):
        assert cpp_plan(tmp_path / "M", "--seed", "5", "--global-batch", g, "--block", "2") == \
            py_plan(m, seed=5, global_batch=int(g), block_samples=2)
    # Exactly one final newline; fields split at single spaces (a name with
    # a space is refused, as `nearprep manifest` refuses to write one).
    for bad in (good[:-1], good + b"\n", good.replace(b"caf\xe9", b"caf \xe9"),
                good.replace(b"shard 0 4", b"shard 0 04")):
        (tmp_path / "B").write_bytes(bad)
        assert cli("fleet-plan", "--manifest", str(tmp_path / "B"), check=False).returncode == 1
        with pytest.raises(fp.ManifestError):
            fp.parse_manifest(bad)


@needs_cli
def test_scan_leaves_out_shards_without_records_and_refuses_names_with_blanks(tmp_path):
    write_shards(str(tmp_path / "s"), [3, 4])
    open(tmp_path / "s" / "s-000b.tfrecord", "wb").close()  # no record
    cli("manifest", "--root", str(tmp_path / "s"), "--format", "tfrecord", "--out",
        str(tmp_path / "M"))
    assert [s.name for s in fp.load_manifest(str(tmp_path / "M")).shards] == \
        ["s-000.tfrecord", "s-001.tfrecord"]
    os.rename(tmp_path / "s" / "s-001.tfrecord", tmp_path / "s" / "s 001.tfrecord")
    r = cli("manifest", "--root", str(tmp_path / "s"), "--format", "tfrecord", "--out",
            str(tmp_path / "M2"), check=False)
    assert r.returncode == 1 and b"has whitespace" in r.stderr


# 7. Disabled saturation skips the op --------------------------------------------

def test_saturation_factor_1_is_not_the_disabled_op(daemon):
    """saturation [0, 0] (disabled) skips the op and serves what no
    saturation field serves; [1, 1] draws factor 1 for every sample and still
    runs the op (an RGB -> HSV -> RGB round trip in float), which changes
    pixels: the two are not the same request."""
    c = nearprep.Client(daemon.target)

    def images(**kw):
        b = next(iter(c.batches("sample", batch_size=24, max_batches=1, height=32, width=32,
                                dtype="float32", **kw)))
        return b.images.copy(), b.params

    plain, _ = images()
    off, _ = images(saturation=(0.0, 0.0))
    one, params = images(saturation=(1.0, 1.0))
    assert np.array_equal(plain, off)
    assert all(p.saturation_factor == 1.0 for p in params)
    differ = sum(not np.array_equal(plain[i], one[i]) for i in range(len(plain)))
    assert differ > 0, "factor 1 changed no image"
    c.close()


# 8. The empty last slice --------------------------------------------------------

def test_an_empty_last_slice_is_yielded():
    """N = 10, G = 8, T = 4: the last global batch is positions [8, 10),
    all trainer 0's; trainers 1-3 get an empty FleetBatch for it (every
    trainer iterates num_batches batches), without asking any node."""
    m = fp.parse_manifest(manifest_text([(0, 10, b"a")]))
    with FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=8, trainers=4, rank=2,
                     rpc_timeout=0.2) as fc:
        got = list(fc.epoch(0, start_batch=1))
        assert len(got) == 1 and got[0].batch == 1 and got[0].positions == []
        assert got[0].sample_ids == [] and len(got[0].images) == 0
        assert fc.stats["requests"] == 0


@needs_cli
def test_an_empty_last_slice_is_read_by_the_cpp_client(tmp_path):
    """The C++ client (`nearprep fleet-read`): the same empty global batch
    is read (prints no line) without a request, and exits 0."""
    (tmp_path / "M").write_bytes(manifest_text([(0, 10, b"a")]))
    r = cli("fleet-read", "--targets", "127.0.0.1:1", "--manifest", str(tmp_path / "M"),
            "--global-batch", "8", "--trainers", "4", "--trainer", "2", "--start-batch", "1",
            "--rpc-timeout-ms", "200")
    assert r.stdout == b"" and b"requests 0 " in r.stderr
