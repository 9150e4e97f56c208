"""The fleet's manifest and global plan in Python (nearprep.fleet_plan):
every position computable alone, every sample exactly once over the trainers'
slices for several (C, G, T), checkpoints independent of T, and equal to the
C++ plan (`nearprep fleet-plan`) and manifest (`nearprep manifest`)."""

import glob
import os
import re
import subprocess

import pytest

from nearprep import fleet_plan as fp
from conftest import ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
needs_cli = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")


def starts(sizes):
    s = [0]
    for n in sizes:
        s.append(s[-1] + n)
    return s


def test_partition_stream_is_a_permutation_and_differs_by_partition():
    p = fp.PlanParams(seed=3, epoch=1, block_samples=5, window=7)
    for n in (1, 9, 50, 101):
        s = fp.partition_stream(n, 2, p)
        assert sorted(s) == list(range(n))
    assert fp.partition_stream(50, 0, p) != fp.partition_stream(50, 1, p)


@pytest.mark.parametrize("sizes,g,ts", [
    ([40, 41, 39], 12, [1, 2, 3, 4, 6, 12]),
    ([17] * 12, 24, [1, 3, 8]),
    (list(range(1, 13)), 10, [1, 2, 5, 10]),
])
def test_slices_cover_every_sample_once(sizes, g, ts):
    plan = fp.GlobalPlan(starts(sizes), fp.PlanParams(seed=9, epoch=1, block_samples=8,
                                                      window=16, global_batch=g))
    n = len(plan)
    for t in ts:
        seen = []
        for b in range(plan.num_batches):
            for k in range(t):
                lo, hi = plan.slice(b, k, t)
                seen += [plan.at(pos)[0] for pos in range(lo, hi)]
        assert sorted(seen) == list(range(n)), t
    with pytest.raises(ValueError, match="divide"):
        plan.slice(0, 0, 5 if g % 5 else 7)


def test_any_position_alone():
    sizes = [30, 1, 17, 4, 4, 9]
    params = fp.PlanParams(seed=77, epoch=4, block_samples=4, window=6, global_batch=8)
    whole = [fp.GlobalPlan(starts(sizes), params).at(i) for i in range(sum(sizes))]
    for pos in (sum(sizes) - 1, 0, 33, 12):
        assert fp.GlobalPlan(starts(sizes), params).at(pos) == whole[pos]


def test_checkpoint_round_trip_and_algorithm_check():
    c = fp.Checkpoint("ab" * 32, 1, 8, 16, 12, 12, 2, 5)
    assert fp.Checkpoint.from_dict(c.to_dict()) == c
    bad = c.to_dict()
    bad["algorithm"] = "other/9"
    with pytest.raises(ValueError, match="algorithm"):
        fp.Checkpoint.from_dict(bad)


def _write_shards(folder, counts):
    """Tiny TFRecord shards (records need not hold images for a manifest:
    each is framed properly, so the listing counts it)."""
    import struct
    os.makedirs(folder, exist_ok=True)
    for i, n in enumerate(counts):
        with open(os.path.join(folder, f"s-{i:03d}.tfrecord"), "wb") as f:
            for r in range(n):
                data = f"record {i} {r}".encode()
                f.write(struct.pack("<Q", len(data)) + _masked(struct.pack("<Q", len(data)))
                        + data + _masked(data))


def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data):
    import struct
    c = _crc32c(data)
    return struct.pack("<I", ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF)


@needs_cli
def test_manifest_and_plan_match_cpp(tmp_path):
    counts = [5, 9, 3, 7, 7, 2, 11, 4, 6, 6, 1, 8, 5, 5]
    _write_shards(str(tmp_path / "shards"), counts)
    out = subprocess.run([CLI, "manifest", "--root", str(tmp_path / "shards"), "--format",
                          "tfrecord", "--partitions", "6", "--out", str(tmp_path / "M")],
                         check=True, capture_output=True, text=True).stdout
    m = fp.load_manifest(str(tmp_path / "M"))
    assert f"hash {m.hash}" in out
    assert m.num_partitions == 6 and m.num_samples == sum(counts)
    assert [s.records for s in m.shards] == counts
    for s in m.shards:  # the whole file's CRC-32C
        with open(tmp_path / "shards" / s.name, "rb") as f:
            data = f.read()
        assert s.crc32c == _crc32c(data) and s.bytes == len(data)
    for seed, epoch, b, w, g, t in [(1, 0, 4, 5, 12, 3), (99, 7, 1, 1, 8, 8), (5, 2, 64, 256, 10, 1)]:
        params = fp.PlanParams(seed=seed, epoch=epoch, block_samples=b, window=w, global_batch=g)
        plan = fp.GlobalPlan.for_manifest(m, params)
        for k in {0, t - 1}:
            cpp = subprocess.run(
                [CLI, "fleet-plan", "--manifest", str(tmp_path / "M"), "--seed", str(seed),
                 "--epoch", str(epoch), "--block", str(b), "--window", str(w),
                 "--global-batch", str(g), "--trainers", str(t), "--trainer", str(k)],
                check=True, capture_output=True, text=True).stdout.split("\n")[:-1]
            assert cpp[0].startswith("# position sample_id partition"), cpp[0]
            cpp = cpp[1:]
            py = []
            for batch in range(plan.num_batches):
                lo, hi = plan.slice(batch, k, t)
                py += [f"{pos} {' '.join(map(str, plan.at(pos)))}" for pos in range(lo, hi)]
            assert cpp == py, (seed, epoch, b, w, g, t, k)
    r = subprocess.run([CLI, "fleet-plan", "--manifest", str(tmp_path / "M"), "--global-batch",
                        "12", "--trainers", "5"], capture_output=True, text=True)
    assert r.returncode == 1 and "divide" in r.stderr


def test_vectorised_draws_equal_the_scalar_philox():
    import numpy as np
    for seed in (0, 1, 0xDEADBEEF12345678, (1 << 64) - 1):
        for epoch, tag, w1, w2 in ((0, 5, 0, 0), (7, 6, 3, 250), ((1 << 24) - 1, 7, 4999, 0)):
            i = np.array([0, 1, 2, 63, 255, 4096, 123456789, (1 << 32) - 1], dtype=np.uint64)
            got = fp._draws(i, w1, w2, seed, epoch, tag).tolist()
            want = [fp._draw(int(x), w1, w2, seed, epoch, tag) for x in i.tolist()]
            assert got == want, (seed, epoch, tag)


def _reference_position(sizes, params, position):
    """The plan by its definition: whole partition streams (scalar draws)
    and a scalar round-order shuffle, walked position by position."""
    c = len(sizes)
    starts_ = starts(sizes)
    r, off = 0, position
    while True:
        active = sum(1 for n in sizes if n > r)
        if off < active:
            break
        off -= active
        r += 1
    order = list(range(c))
    for i in range(c - 1, 0, -1):
        j = fp.round_order_draw(params.seed, params.epoch, r, i) % (i + 1)
        order[i], order[j] = order[j], order[i]
    p = [q for q in order if sizes[q] > r][off]
    return starts_[p] + fp.partition_stream(sizes[p], p, params)[r], p


@pytest.mark.parametrize("sizes,b,w", [
    ([30, 1, 17, 4, 4, 9], 4, 6),      # short last blocks, windows across blocks
    ([64, 65, 63, 1], 8, 16),
    ([50] * 5, 7, 1),                  # window 1: no window shuffle
    ([20, 3], 1, 50),                  # block 1, one window bigger than a partition
])
def test_lazy_vectorised_plan_equals_the_definition(sizes, b, w):
    params = fp.PlanParams(seed=0xABCDEF0123, epoch=5, block_samples=b, window=w,
                           global_batch=4)
    plan = fp.GlobalPlan(starts(sizes), params)
    want = [_reference_position(sizes, params, x) for x in range(sum(sizes))]
    assert [plan.at(x) for x in range(sum(sizes))] == want
    fresh = fp.GlobalPlan(starts(sizes), params)
    assert fresh.range(0, sum(sizes)) == want
    assert fresh.range(5, 17) == want[5:17] and fresh.range(9, 9) == []
    with pytest.raises(IndexError):
        fresh.range(0, sum(sizes) + 1)


def test_batched_round_orders_equal_one_round_at_a_time():
    for c in (1, 2, 12, 257):
        params = fp.PlanParams(seed=0x1234_5678_9ABC, epoch=3)
        for count in (1, 25, 40):  # the per-round and the vectorised shuffle
            got = fp.round_orders(c, 40, count, params).tolist()
            assert got == [fp.round_order(c, r, params) for r in range(40, 40 + count)], c


# --- Positions past the epoch's end, and flags as typed (issues 23 item 9, 26) ---

def _small_manifest(tmp_path, counts=(5, 9, 3, 7), partitions=2):
    _write_shards(str(tmp_path / "shards"), list(counts))
    subprocess.run([CLI, "manifest", "--root", str(tmp_path / "shards"), "--format", "tfrecord",
                    "--partitions", str(partitions), "--out", str(tmp_path / "M")],
                   check=True, capture_output=True)
    return str(tmp_path / "M")


@needs_cli
def test_fleet_read_refuses_positions_past_the_epochs_end(tmp_path):
    """`nearprep fleet-read --epoch 2^24` (and 2^64-1, and a start batch past
    the epoch's last) printed nothing and exited 0: each is refused before
    any node is contacted, naming the flag, its valid range and the value as
    typed. 24 samples, G = 8: 3 global batches."""
    manifest = _small_manifest(tmp_path)
    base = [CLI, "fleet-read", "--targets", "127.0.0.1:1", "--manifest", manifest,
            "--global-batch", "8", "--rpc-timeout-ms", "200"]
    for flags, want in (
            (["--epoch", str(1 << 24)], "--epoch: must be an integer in [0, 16777215]"),
            (["--epoch", str((1 << 64) - 1)], f"got '{(1 << 64) - 1}'"),
            (["--epoch", str(1 << 64)], f"got '{1 << 64}'"),
            (["--epoch", "-1"], "got '-1'"),
            (["--seed", "-1"], "--seed: must be an integer in [0, 18446744073709551615]"),
            (["--seed", str(1 << 64)], f"got '{1 << 64}'"),
            (["--start-batch", "3"], "--start-batch: must be in [0, 3) (epoch 0 has 3 global "
                                     "batches of G = 8), got 3"),
            (["--start-batch", str(10 ** 9)], "got 1000000000"),
            (["--start-batch", "1", "--stop-batch", "4"], "--stop-batch: must be in [2, 3]"),
            (["--start-batch", "2", "--stop-batch", "2"], "--stop-batch: must be in [3, 3]")):
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and want in r.stderr, (flags, r.returncode, r.stderr)
        assert r.stdout == "", flags


@needs_cli
def test_fleet_plan_refuses_seeds_and_epochs_out_of_range_as_typed(tmp_path):
    """--seed 2^64 and --seed -1 were taken and saturated to 2^64-1; an
    over-large --epoch was refused showing the saturated value. Now each is
    refused with the value the user typed; 2^64-1 and 2^24-1 still work, and
    --batch past the epoch's end is refused."""
    manifest = _small_manifest(tmp_path)
    base = [CLI, "fleet-plan", "--manifest", manifest, "--global-batch", "8"]
    for flags, want in ((["--seed", str(1 << 64)], f"--seed: must be an integer in "
                                                   f"[0, {(1 << 64) - 1}], got '{1 << 64}'"),
                        (["--seed", "-1"], "got '-1'"),
                        (["--seed", "1e3"], "got '1e3'"),
                        (["--epoch", "99999999999999999999"], "got '99999999999999999999'"),
                        (["--epoch", str(1 << 24)], "(a fleet plan's epoch is < 2^24), got "
                                                    f"'{1 << 24}'"),
                        (["--batch", "3"], "--batch: must be in [0, 3)")):
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and want in r.stderr, (flags, r.stderr)
        assert "18446744073709551615'" not in r.stderr  # never the saturated value
        assert r.stdout == "", flags
    m = fp.load_manifest(manifest)
    for seed, epoch in (((1 << 64) - 1, (1 << 24) - 1), (0, 0)):
        out = subprocess.run(base + ["--seed", str(seed), "--epoch", str(epoch), "--batch", "2"],
                             check=True, capture_output=True, text=True).stdout.split("\n")[1:-1]
        plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(seed=seed, epoch=epoch,
                                                           global_batch=8))
        assert out == [f"{x} {' '.join(map(str, plan.at(x)))}" for x in range(16, 24)]


def test_checkpoint_past_the_epochs_end_is_refused(tmp_path):
    """A checkpoint with next_batch 10^9 (or an epoch >= 2^24) resumed to
    nothing, silently: FleetClient.resume refuses it naming the field and its
    range, before any node is asked (the target here does not exist)."""
    from nearprep.fleet import FleetClient
    text = ("nearprep-manifest 1\nformat tfrecord\npartitions 2\nsamples 24\n"
            "shard 0 12 100 00000000 a\nshard 1 12 100 00000000 b\n").encode()
    m = fp.parse_manifest(text)
    with FleetClient(["127.0.0.1:1"], "ds", manifest=m, seed=3, block_samples=4, window=8,
                     global_batch=8, rpc_timeout=0.2) as fc:
        good = fc.checkpoint(0, 2)
        assert (good.epoch, good.next_batch) == (0, 2)
        for field, value, want in (("next_batch", 10 ** 9, "next_batch must be in [0, 3) "
                                    "(epoch 0 has 3 global batches of G = 8), got 1000000000"),
                                   ("next_batch", 3, "got 3"), ("next_batch", -1, "got -1"),
                                   ("epoch", 1 << 24, "epoch must be an integer in [0, 2^24)"),
                                   ("epoch", "0", "got '0'")):
            d = good.to_dict()
            d[field] = value
            with pytest.raises(ValueError, match=re.escape(want)):
                fc.resume(d)
        # The end of an epoch is written as the next epoch's batch 0.
        assert (fc.checkpoint(0, 3).epoch, fc.checkpoint(0, 3).next_batch) == (1, 0)

