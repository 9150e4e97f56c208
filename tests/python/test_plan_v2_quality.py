"""Shuffle quality and locality of plan v2 against v1 and a uniform shuffle,
measured (bench/python/fleet_plan_quality.py's statistics, at a small size):
dataset ids sorted by class (the worst case for a partitioned plan), the
class mix of global and trainer batches as a total variation distance from
the dataset's, distinct partitions per trainer batch, samples per request.
What the numbers show (docs/benchmarks.md): v2 bounds the partitions of a
trainer batch by K and leaves the global batch's class mix as v1's; what it
costs is the class mix of each trainer's own batch."""

import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench", "python"))
import fleet_plan_quality as q  # noqa: E402


def test_v2_bounds_nodes_keeps_the_global_mix_and_narrows_the_trainer_mix():
    n, c, g, t, k, classes = 20000, 16, 512, 8, 4, 50
    r = q.compare(n, c, g, t, k, classes)
    v1, v2, uni = r["v1"], r["v2"], r["uniform"]
    local = g // t  # 64: v2 runs of 16
    # Locality: v1 takes one sample of every partition per trainer batch,
    # v2 at most K, in requests of c = L / K samples.
    assert v1["nodes_med"] == min(local, c) and v1["per_req"] == local / min(local, c)
    assert v2["nodes_max"] <= k and v2["per_req"] >= local // k
    # The global batch's class mix: v2's is v1's (within 2%), both further
    # from the dataset's than a uniform shuffle's (partitions hold a few
    # classes each; the block/window stream keeps neighbours together).
    assert abs(v2["tv_global"] - v1["tv_global"]) <= 0.02 * v1["tv_global"]
    assert v1["tv_global"] > uni["tv_global"] and v2["tv_global"] > uni["tv_global"]
    # A trainer's own batch: fewer classes under v2 (its K partitions).
    assert v2["classes_trainer"] < v1["classes_trainer"]
    assert v2["tv_trainer"] > v1["tv_trainer"]
    # The uniform reference: consecutive global batches are uncorrelated.
    assert abs(uni["corr"]) < 0.1


def test_v3_has_v2s_locality_and_global_mix():
    """v3 changes only the order of a round's runs (docs/protocol.md "Plan
    v3"): the same bound on partitions per trainer batch and request size,
    and, with whole rounds per global batch (C * c divides G here), the
    same global batches as sets, so the same global class mix; a trainer's
    own batch is K partitions' runs as in v2, another K."""
    n, c, g, t, k, classes = 20000, 16, 512, 8, 4, 50
    r = q.compare(n, c, g, t, k, classes)
    v1, v2, v3 = r["v1"], r["v2"], r["v3"]
    assert v3["nodes_max"] <= k and v3["per_req"] >= (g // t) // k
    assert abs(v3["tv_global"] - v2["tv_global"]) <= 0.02 * v2["tv_global"]
    assert abs(v3["corr"] - v2["corr"]) <= 0.05
    assert v3["classes_trainer"] < v1["classes_trainer"]
    assert abs(v3["classes_trainer"] - v2["classes_trainer"]) <= 0.25 * v2["classes_trainer"]
