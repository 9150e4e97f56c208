"""nearprep-fleet-plan/2 recomputed from docs/protocol.md ("Plan v2") alone:
the partition streams (v1's step 1), runs of c = L / K, the run interleave
(v1's round orders, tag 7), the tails in the tag-9 order, written here from
the text with nothing but nearprep.philox's Philox4x32-10, and compared with
the Python plan (nearprep.fleet_plan) and the C++ plan (`nearprep
fleet-plan --plan-version 2`, when the CLI is built). Also the properties
the text states: every sample once, at most K partitions per aligned slice of
L below N_main, c = 1 is v1, and the refusals."""

import glob
import os
import subprocess

import pytest

from nearprep import fleet_plan as fp
from nearprep.philox import draw64, key_of
from conftest import ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
needs_cli = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")


def draw(seed, epoch, w0, w1, w2, tag):
    return draw64((w0, w1, w2, ((epoch & 0xFFFFFF) << 8) | tag), key_of(seed))


def fisher_yates(a, d):
    """for i = len-1 down to 1: swap(a[i], a[draw(i) % (i+1)])"""
    for i in range(len(a) - 1, 0, -1):
        j = d(i) % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a


def stream(n, p, seed, epoch, b, w):
    """Step 1: blocks of B permuted (tag 5, {i, p, 0}); S; windows of W
    permuted (tag 6, {i, w, p})."""
    nb = (n + b - 1) // b
    perm = fisher_yates(list(range(nb)), lambda i: draw(seed, epoch, i, p, 0, 5))
    s = [o for blk in perm for o in range(blk * b, min(n, (blk + 1) * b))]
    for start in range(0, n, w):
        win = start // w
        s[start:start + w] = fisher_yates(s[start:start + w],
                                          lambda i: draw(seed, epoch, i, win, p, 6))
    return s


def spec_plan_v2(sizes, seed, epoch, b, w, k, ll):
    """[(sample id, partition)] for positions 0..N-1, from the text."""
    c = ll // k
    cc = len(sizes)
    start = [0]
    for n in sizes:
        start.append(start[-1] + n)
    st = [stream(n, p, seed, epoch, b, w) for p, n in enumerate(sizes)]
    q = [n // c for n in sizes]
    out = []
    r = 0
    while any(qp > r for qp in q):  # step 3: round r emits run r of each q_p > r
        order = fisher_yates(list(range(cc)), lambda i: draw(seed, epoch, i, r, 0, 7))
        for p in order:
            if q[p] > r:
                out += [(start[p] + st[p][r * c + o], p) for o in range(c)]
        r += 1
    tails = fisher_yates(list(range(cc)), lambda i: draw(seed, epoch, i, 0, 0, 9))
    for p in tails:  # step 4: whole tails, t_p = 0 skipped
        out += [(start[p] + st[p][u], p) for u in range(c * q[p], sizes[p])]
    return out


CASES = [  # sizes, seed, epoch, B, W, G, K, L
    ([40, 41, 39, 7, 0, 64], 3, 1, 4, 6, 24, 2, 8),
    ([17] * 12, 9, 0, 8, 16, 24, 3, 12),
    ([100, 1, 50, 33], 5, 7, 16, 32, 32, 4, 32),
    ([30, 1, 17, 4, 4, 9], 0xFEEDFACE12345678, (1 << 24) - 1, 3, 5, 16, 1, 16),
]


def starts(sizes):
    s = [0]
    for n in sizes:
        s.append(s[-1] + n)
    return s


@pytest.mark.parametrize("sizes,seed,epoch,b,w,g,k,ll", CASES)
def test_python_plan_is_the_text(sizes, seed, epoch, b, w, g, k, ll):
    want = spec_plan_v2(sizes, seed, epoch, b, w, k, ll)
    params = fp.PlanParams(seed=seed, epoch=epoch, block_samples=b, window=w, global_batch=g,
                           version=2, slice_partitions=k, slice_samples=ll)
    plan = fp.GlobalPlan(starts(sizes), params)
    assert [plan.at(x) for x in range(len(plan))] == want
    assert plan.range(0, len(plan)) == want
    # Every sample once; at most K partitions per aligned slice of L before
    # the tails (N_main = c * sum q_p), runs of c from one partition.
    n, c = sum(sizes), ll // k
    assert sorted(s for s, _ in want) == list(range(n))
    n_main = c * sum(x // c for x in sizes)
    for a in range(0, n_main - ll + 1, ll):
        assert len({p for _, p in want[a:a + ll]}) <= k, a
    if c > 1:  # a run is c positions of one partition; v1 is not (c = 1)
        assert all(want[x][1] == want[x - x % c][1] for x in range(n_main))


def test_run_of_one_is_v1():
    sizes = [30, 1, 17, 4, 0, 9]
    v1 = fp.GlobalPlan(starts(sizes), fp.PlanParams(seed=4, epoch=2, block_samples=3, window=5,
                                                     global_batch=12))
    want = [v1.at(x) for x in range(len(v1))]
    assert spec_plan_v2(sizes, 4, 2, 3, 5, 6, 6) == want       # K = L: c = 1
    assert spec_plan_v2(sizes, 4, 2, 3, 5, 3, 6) != want       # c = 2: another order


def test_bad_slices_are_refused():
    for kw, msg in ((dict(slice_samples=5, slice_partitions=1), "slice_samples: L = 5"),
                    (dict(slice_samples=8, slice_partitions=3), "slice_partitions: K = 3"),
                    (dict(slice_samples=0), "slice_samples: L = 0"),
                    (dict(version=4), "plan_version: must be 1, 2 or 3, got 4")):
        kw = dict(dict(version=2), **kw)
        with pytest.raises(ValueError, match=msg):
            fp.GlobalPlan([0, 40, 80], fp.PlanParams(global_batch=24, **kw))


def test_checkpoint_names_the_version():
    c = fp.Checkpoint("ab" * 32, 1, 8, 16, 24, 3, 2, 5, fp.ALGORITHM_V2, 4, 8)
    d = c.to_dict()
    assert d["algorithm"] == "nearprep-fleet-plan/2" and d["slice_samples"] == 8
    assert fp.Checkpoint.from_dict(d) == c and c.plan_kw()["slice_partitions"] == 4
    v1 = fp.Checkpoint("ab" * 32, 1, 8, 16, 24, 3, 2, 5).to_dict()
    assert "slice_samples" not in v1 and fp.Checkpoint.from_dict(v1).plan_version == 1


def manifest_text(sizes):
    out = (f"nearprep-manifest 1\nformat tfrecord\npartitions {len(sizes)}\n"
           f"samples {sum(sizes)}\n")
    for p, n in enumerate(sizes):
        out += f"shard {p} {n} {max(n, 1) * 20} 00000000 s{p:03d}\n"
    return out.encode()


@needs_cli
@pytest.mark.parametrize("sizes,seed,epoch,b,w,g,k,ll", CASES)
def test_cpp_plan_is_the_text(tmp_path, sizes, seed, epoch, b, w, g, k, ll):
    """C++ == the text (== Python) over every trainer's slices for two
    trainer counts (G / L and twice that, or 1), the CLI's default L is G / T,
    and a K not dividing L is refused."""
    (tmp_path / "M").write_bytes(manifest_text(sizes))
    want = spec_plan_v2(sizes, seed, epoch, b, w, k, ll)
    for t in sorted({g // ll, g // ll * 2 if g % (g // ll * 2) == 0 else 1}):
        got = []
        for tr in range(t):
            r = subprocess.run(
                [CLI, "fleet-plan", "--manifest", str(tmp_path / "M"), "--seed", str(seed),
                 "--epoch", str(epoch), "--block", str(b), "--window", str(w),
                 "--global-batch", str(g), "--trainers", str(t), "--trainer", str(tr),
                 "--plan-version", "2", "--slice-partitions", str(k), "--slice-samples",
                 str(ll)], check=True, capture_output=True, text=True, timeout=60)
            lines = r.stdout.split("\n")[:-1]
            assert "nearprep-fleet-plan/2" in lines[0], lines[0]
            got += [tuple(map(int, x.split())) for x in lines[1:]]
        got.sort()
        assert [(pos, sid, p) for pos, sid, p in got] == \
            [(x, *want[x]) for x in range(len(want))], t
    # No --slice-samples: L = G / T.
    t = g // ll
    r = subprocess.run([CLI, "fleet-plan", "--manifest", str(tmp_path / "M"), "--seed", str(seed),
                        "--epoch", str(epoch), "--block", str(b), "--window", str(w),
                        "--global-batch", str(g), "--trainers", str(t), "--plan-version", "2",
                        "--slice-partitions", str(k)],
                       check=True, capture_output=True, text=True, timeout=60)
    assert f"K {k}, L {ll}" in r.stdout.split("\n")[0]
    r = subprocess.run([CLI, "fleet-plan", "--manifest", str(tmp_path / "M"), "--global-batch",
                        "24", "--plan-version", "2", "--slice-samples", "8",
                        "--slice-partitions", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "slice_partitions: K = 3 must be >= 1 and divide" in r.stderr


MANIFEST = ("nearprep-manifest 1\nformat tfrecord\npartitions 2\nsamples 24\n"
            "shard 0 12 100 00000000 a\nshard 1 12 100 00000000 b\n").encode()


def test_python_client_selects_v2_and_keeps_it_in_checkpoints():
    """No node needed: the plan, its checks and the checkpoints."""
    from nearprep.fleet import FleetClient
    m = fp.parse_manifest(MANIFEST)
    with FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=12, trainers=3,
                     plan_version=2, slice_partitions=2, rpc_timeout=0.2) as fc:
        ck = fc.checkpoint(0, 1)
        assert (ck.algorithm, ck.slice_partitions, ck.slice_samples) == (fp.ALGORITHM_V2, 2, 4)
        assert fc._plan(0).params.run == 2
        v1 = fp.Checkpoint(m.hash, 0, 64, 256, 12, 2, 0, 1)
        with pytest.raises(ValueError, match="differs"):
            fc.resume(v1)
    with pytest.raises(ValueError, match="slice_partitions: K = 3"):
        FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=8, trainers=2,
                    plan_version=2, slice_partitions=3)
    with pytest.raises(ValueError, match="plan_version: must be 1, 2 or 3"):
        FleetClient(["127.0.0.1:1"], "ds", manifest=m, global_batch=8, plan_version=7)


def test_torch_dataset_state_names_v2_and_keeps_its_slice():
    pytest.importorskip("torch")
    from nearprep.fleet_torch import FleetIterableDataset
    m = fp.parse_manifest(MANIFEST)
    kw = dict(manifest=m, rank=0, global_batch=8, plan_version=2, slice_partitions=2)
    s = FleetIterableDataset(["127.0.0.1:1"], "ds", world_size=2, **kw).state_dict()
    assert (s["algorithm"], s["slice_samples"]) == ("nearprep-fleet-plan/2", 4)
    four = FleetIterableDataset(["127.0.0.1:1"], "ds", world_size=4, **kw)
    four.load_state_dict(s)  # another world size resumes with the saved L
    assert four.state_dict()["slice_samples"] == 4
    v1 = FleetIterableDataset(["127.0.0.1:1"], "ds", manifest=m, rank=0, world_size=4,
                              global_batch=8)
    with pytest.raises(ValueError, match="differs"):
        v1.load_state_dict(s)
