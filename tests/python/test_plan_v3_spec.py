"""nearprep-fleet-plan/3 recomputed from docs/protocol.md ("Plan v3") alone:
v2's partition streams, runs and tails (tags 5, 6, 9), and v3's run
interleave: D sorted by (q_p descending, p ascending), round r's slot j is
D[pi_r(j)], pi_r the cycle-walked 4-round Feistel network of tag 10 -- all
written here from the text with nothing but nearprep.philox's Philox4x32-10,
and compared with the Python plan (nearprep.fleet_plan) and the C++ plan
(`nearprep fleet-plan --plan-version 3`, when the CLI is built). Also the
properties the text states: pi_r a permutation of [0, m), every sample once,
at most K partitions per aligned slice of L below N_main, v2's tails, and
the refusals and checkpoints."""

import subprocess

import pytest

from nearprep import fleet_plan as fp
from nearprep.philox import key_of, philox4x32
# v1/v2's step 1 (tags 5, 6) and the test helpers, also written from the
# text (v3 changes only step 3): shared with the v2 spec test.
from test_plan_v2_spec import (CLI, draw, fisher_yates, manifest_text,  # noqa: F401
                               needs_cli, starts, stream)

def w3(epoch, tag):
    return ((epoch & 0xFFFFFF) << 8) | tag


def pi(seed, epoch, r, m, j):
    """pi_r(j): the first of E(j), E(E(j)), ... below m; E the Feistel
    network on 2h bits, 4^h >= m, F = out[0] of {Rh, r, i, w3(10)}."""
    if m == 1:
        return 0
    h = 1
    while 4 ** h < m:
        h += 1
    v = j
    while True:
        lh, rh = v >> h, v % 2 ** h
        for i in range(4):
            f = philox4x32((rh, r, i, w3(epoch, 10)), key_of(seed))[0] % 2 ** h
            lh, rh = rh, lh ^ f
        v = lh * 2 ** h + rh
        if v < m:
            return v


def spec_plan_v3(sizes, seed, epoch, b, w, k, ll):
    """[(sample id, partition)] for positions 0..N-1, from the text."""
    c = ll // k
    cc = len(sizes)
    start = [0]
    for n in sizes:
        start.append(start[-1] + n)
    st = [stream(n, p, seed, epoch, b, w) for p, n in enumerate(sizes)]
    q = [n // c for n in sizes]
    d = sorted([p for p in range(cc) if q[p] >= 1], key=lambda p: (-q[p], p))
    out = []
    r = 0
    while any(qp > r for qp in q):  # step 3: round r's m_r slots
        m = sum(1 for qp in q if qp > r)
        for j in range(m):
            p = d[pi(seed, epoch, r, m, j)]
            out += [(start[p] + st[p][r * c + o], p) for o in range(c)]
        r += 1
    tails = fisher_yates(list(range(cc)), lambda i: draw(seed, epoch, i, 0, 0, 9))
    for p in tails:  # step 4 (v2's): whole tails, t_p = 0 skipped
        out += [(start[p] + st[p][u], p) for u in range(c * q[p], sizes[p])]
    return out


CASES = [  # sizes, seed, epoch, B, W, G, K, L
    ([40, 41, 39, 7, 0, 64], 3, 1, 4, 6, 24, 2, 8),
    ([17] * 12, 9, 0, 8, 16, 24, 3, 12),
    ([100, 1, 50, 33], 5, 7, 16, 32, 32, 4, 32),      # m_r = 1 from round 2 on
    ([30, 1, 17, 4, 4, 9], 0xFEEDFACE12345678, (1 << 24) - 1, 3, 5, 16, 1, 16),
    ([9], 11, 2, 2, 4, 8, 2, 4),                          # C = 1
    ([3 + (p * 7) % 5 for p in range(70)], 21, 3, 2, 3, 8, 4, 8),  # m_r = 70, 64 < 70
]


def test_pi_is_a_permutation_and_is_the_python_plans():
    for m in list(range(1, 80)) + [255, 256, 257, 1000]:
        for r in (0, 5):
            got = [pi(17, 4, r, m, j) for j in range(m)]
            assert sorted(got) == list(range(m)), m
            assert fp.run_slot_permutations(17, 4, r, m, range(m)).tolist() == got, m
            assert [fp.run_slot_permutation(17, 4, r, m, j) for j in (0, m - 1)] == \
                [got[0], got[-1]]
    assert [pi(17, 4, 0, 1000, j) for j in range(1000)] != list(range(1000))


@pytest.mark.parametrize("sizes,seed,epoch,b,w,g,k,ll", CASES)
def test_python_plan_is_the_text(sizes, seed, epoch, b, w, g, k, ll):
    want = spec_plan_v3(sizes, seed, epoch, b, w, k, ll)
    params = fp.PlanParams(seed=seed, epoch=epoch, block_samples=b, window=w, global_batch=g,
                           version=3, slice_partitions=k, slice_samples=ll)
    plan = fp.GlobalPlan(starts(sizes), params)
    assert [plan.at(x) for x in range(len(plan))] == want
    assert plan.range(0, len(plan)) == want
    for lo in range(0, len(plan), 5):  # slices starting and ending mid-run
        assert plan.range(lo, min(len(plan), lo + 7)) == want[lo:lo + 7]
    n, c = sum(sizes), ll // k
    assert sorted(s for s, _ in want) == list(range(n))
    n_main = c * sum(x // c for x in sizes)
    for a in range(0, n_main - ll + 1, ll):
        assert len({p for _, p in want[a:a + ll]}) <= k, a
    assert all(want[x][1] == want[x - x % c][1] for x in range(n_main))
    # The tails are v2's, position for position; the runs are not v2's order.
    v2 = fp.GlobalPlan(starts(sizes), fp.PlanParams(
        seed=seed, epoch=epoch, block_samples=b, window=w, global_batch=g, version=2,
        slice_partitions=k, slice_samples=ll))
    assert v2.range(n_main, n) == want[n_main:]
    if len([x for x in sizes if x // c]) > 2:
        assert v2.range(0, n_main) != want[:n_main]


def test_bad_params_are_refused_and_checkpoints_name_v3():
    for kw, msg in ((dict(slice_samples=5, slice_partitions=1), "slice_samples: L = 5"),
                    (dict(slice_samples=8, slice_partitions=3), "slice_partitions: K = 3"),
                    (dict(slice_samples=0), "slice_samples: L = 0"),
                    (dict(version=4), "plan_version: must be 1, 2 or 3, got 4")):
        kw = dict(dict(version=3), **kw)
        with pytest.raises(ValueError, match=msg):
            fp.GlobalPlan([0, 40, 80], fp.PlanParams(global_batch=24, **kw))
    c = fp.Checkpoint("ab" * 32, 1, 8, 16, 24, 3, 2, 5, fp.ALGORITHM_V3, 4, 8)
    d = c.to_dict()
    assert d["algorithm"] == "nearprep-fleet-plan/3" and d["slice_samples"] == 8
    assert fp.Checkpoint.from_dict(d) == c
    assert c.plan_kw() == dict(version=3, slice_partitions=4, slice_samples=8)


def cli_plan(path, seed, epoch, b, w, g, t, tr, k, ll=None):
    cmd = [CLI, "fleet-plan", "--manifest", str(path), "--seed", str(seed), "--epoch",
           str(epoch), "--block", str(b), "--window", str(w), "--global-batch", str(g),
           "--trainers", str(t), "--trainer", str(tr), "--plan-version", "3",
           "--slice-partitions", str(k)] + (["--slice-samples", str(ll)] if ll else [])
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          timeout=60).stdout.split("\n")[:-1]


@needs_cli
@pytest.mark.parametrize("sizes,seed,epoch,b,w,g,k,ll", CASES)
def test_cpp_plan_is_the_text(tmp_path, sizes, seed, epoch, b, w, g, k, ll):
    """C++ == the text (== Python) over every trainer's slices for two
    trainer counts, and the CLI's default L is G / T."""
    (tmp_path / "M").write_bytes(manifest_text(sizes))
    want = spec_plan_v3(sizes, seed, epoch, b, w, k, ll)
    for t in sorted({g // ll, g // ll * 2 if g % (g // ll * 2) == 0 else 1}):
        got = []
        for tr in range(t):
            lines = cli_plan(tmp_path / "M", seed, epoch, b, w, g, t, tr, k, ll)
            assert f"nearprep-fleet-plan/3, K {k}, L {ll}" in lines[0], lines[0]
            got += [tuple(map(int, x.split())) for x in lines[1:]]
        got.sort()
        assert got == [(x, *want[x]) for x in range(len(want))], t
    lines = cli_plan(tmp_path / "M", seed, epoch, b, w, g, g // ll, 0, k)  # L = G / T
    assert f"K {k}, L {ll}" in lines[0]


@needs_cli
def test_cpp_plan_many_partitions_is_the_python_plan(tmp_path):
    """C = 600 partitions of unequal sizes (m_r from 600 down, walks in the
    Feistel permutations), whole epoch: C++ == Python."""
    sizes = [5 + (p * 7919) % 13 for p in range(600)]
    (tmp_path / "M").write_bytes(manifest_text(sizes))
    lines = cli_plan(tmp_path / "M", 5, 9, 4, 8, 64, 1, 0, 4, 16)
    got = [tuple(map(int, x.split()))[1:] for x in lines[1:]]
    plan = fp.GlobalPlan(starts(sizes), fp.PlanParams(
        seed=5, epoch=9, block_samples=4, window=8, global_batch=64, version=3,
        slice_partitions=4, slice_samples=16))
    assert got == plan.range(0, len(plan))
    assert sorted(s for s, _ in got) == list(range(sum(sizes)))


MANIFEST = ("nearprep-manifest 1\nformat tfrecord\npartitions 2\nsamples 24\n"
            "shard 0 12 100 00000000 a\nshard 1 12 100 00000000 b\n").encode()


def test_python_client_selects_v3_and_refuses_other_versions_checkpoints():
    """No node needed: the plan, its checks and the checkpoints."""
    from nearprep.fleet import FleetClient
    m = fp.parse_manifest(MANIFEST)
    with FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=12, trainers=3,
                     plan_version=3, slice_partitions=2, rpc_timeout=0.2) as fc:
        ck = fc.checkpoint(0, 1)
        assert (ck.algorithm, ck.slice_partitions, ck.slice_samples) == (fp.ALGORITHM_V3, 2, 4)
        assert fc._plan(0).params.version == 3 and fc._plan(0).params.run == 2
        v2 = fp.Checkpoint(m.hash, 0, 64, 256, 12, 2, 0, 1, fp.ALGORITHM_V2, 2, 4)
        with pytest.raises(ValueError, match="differs"):
            fc.resume(v2)
    with FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=12, trainers=3,
                     plan_version=2, slice_partitions=2, rpc_timeout=0.2) as fc:
        with pytest.raises(ValueError, match="differs"):
            fc.resume(ck)


def test_torch_dataset_state_names_v3_and_keeps_its_slice():
    pytest.importorskip("torch")
    from nearprep.fleet_torch import FleetIterableDataset
    m = fp.parse_manifest(MANIFEST)
    kw = dict(manifest=m, rank=0, global_batch=8, plan_version=3, slice_partitions=2)
    s = FleetIterableDataset(["127.0.0.1:1"], "ds", world_size=2, **kw).state_dict()
    assert (s["algorithm"], s["slice_samples"]) == ("nearprep-fleet-plan/3", 4)
    four = FleetIterableDataset(["127.0.0.1:1"], "ds", world_size=4, **kw)
    four.load_state_dict(s)  # another world size resumes with the saved L
    assert four.state_dict()["slice_samples"] == 4
    v2 = FleetIterableDataset(["127.0.0.1:1"], "ds", world_size=2,
                              **dict(kw, plan_version=2))
    with pytest.raises(ValueError, match="differs"):
        v2.load_state_dict(s)
    with pytest.raises(ValueError, match="differs"):
        four.load_state_dict(v2.state_dict())
