"""The fleet simulator (bench/fleet/simulate.py) on a tiny fleet: its
scenarios deliver every position of every sampled trainer batch exactly
once (also with nodes killed, a rack lost and the trainer count changed),
plan v2 keeps a trainer batch on at most K nodes where v1 spreads it, and
the client's pure request helpers it shares with FleetClient behave as
FleetClient needs (one request per node, failover past the dead, hedges
only for what is still missing). Bounded placement with spread routing
evens the node load out where rendezvous with "first" routing does not;
choose() picks what the C++ client's FleetChooseReplica is pinned to."""

import collections
import os
import sys

import numpy as np

from nearprep import fleet_plan as fp
from nearprep.fleet import (group_by_node, hedge_after, hedge_class, missing_by_part,
                            slice_items, split_hedge)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "fleet"))
import simulate  # noqa: E402
from nearprep.fleet import choose  # noqa: E402

TINY = ["--nodes", "32", "--trainers", "32", "--trainers-after", "16", "--local-batch", "32",
        "--sampled", "8", "--partitions-per-node", "2", "--samples-per-partition", "64",
        "--batches", "4", "--rack", "8", "--bg-chunks", "4", "--slow-fraction", "0.1",
        "--kill-fraction", "0.25"]


def test_scenarios_exactly_once_and_v2_bound(capsys):
    rows = simulate.main(TINY + ["--scenario", "base,kill10,slow1,rack,tchange", "--per-node"])
    assert len(rows) == 5 * 2 * 3
    for r in rows:
        assert r["exactly once"] == "yes" and r["missed"] == 0, r
    kills = [r for r in rows if r["scenario"] in ("kill10", "rack")]
    assert all(r["failovers"] > 0 for r in kills), kills  # the kills hit sampled trainers
    for r in rows:
        mean, mx = (float(x) for x in r["nodes/batch"].split(" / "))
        if r["v"] == 2 and r["scenario"] == "base":
            assert mx <= 4, r  # K = 4
        if r["v"] == 1 and r["scenario"] == "base":
            assert mean > 8, r  # 32 positions over 64 partitions: v1 spreads
    slow_on = [r for r in rows if r["scenario"] == "slow1" and r["hedge"] != "off"]
    assert sum(r["hedges"] for r in slow_on) > 0, slow_on
    # The clients' rule (pooled by size class, split hedges) cuts the slow
    # nodes' tail, and the background trainers' hedges take work off them.
    by = {(r["scenario"], r["v"], r["hedge"]): r for r in rows}
    for v in (1, 2):
        off, on = by["slow1", v, "off"], by["slow1", v, "p95 class"]
        assert float(on["p99 ms"]) < float(off["p99 ms"]), (off, on)
        assert float(on["bg hedged %"]) > 0 and float(off["bg hedged %"]) == 0, (off, on)
        assert float(on["slow util"]) < float(off["slow util"]), (off, on)
        assert float(on["hedge smp %"]) > 0, on
    out = capsys.readouterr().out
    assert "## tchange" in out and "| scenario |" in out


def test_positions_without_a_live_replica_wait_for_a_restart():
    """Kill 75% of 32 nodes (partitions whose 2 replicas both die): their
    positions wait, as the client does (on_wait), and come exactly once
    after the nodes restart; without restarts they are missed, never
    substituted."""
    shape = TINY + ["--scenario", "kill10", "--kill-fraction", "0.75", "--replicas", "2",
                    "--hedging", "off", "--versions", "2"]
    rows = simulate.main(shape + ["--restart-s", "0.5"])
    assert len(rows) == 1 and rows[0]["waited"] > 0, rows
    assert rows[0]["exactly once"] == "yes" and rows[0]["missed"] == 0, rows
    assert float(rows[0]["p99 ms"]) >= 500, rows  # the wait is in the tail
    never = simulate.main(shape + ["--restart-s", "0"])
    assert never[0]["missed"] > 0 and never[0]["exactly once"] == "NO", never
    assert never[0]["dups dropped"] == 0, never

def test_request_helpers():
    m_starts = [0, 10, 20, 30, 40]
    plan = fp.GlobalPlan(m_starts, fp.PlanParams(seed=3, global_batch=8, block_samples=2,
                                                  window=4))
    want, parts = slice_items(plan, 1, 1, 2)
    assert sorted(want) == list(range(12, 16))
    assert {p for _, p in want.values()} == set(parts)
    holders = {p: ["a", "b"] if p % 2 else ["b", "c"] for p in range(4)}
    dead = {"b"}

    def assign(part, exclude=None):
        live = [h for h in holders[part] if h not in dead and h != exclude]
        return live[0] if live else None
    by_node, orphans = group_by_node({0: [(5, 50), (1, 10)], 1: [(2, 20)], 2: [(3, 30)]}, assign)
    assert by_node == {"c": [(1, 10), (3, 30), (5, 50)], "a": [(2, 20)]} and orphans == []
    by_node, orphans = group_by_node({1: [(2, 20)]}, assign, "a")
    assert by_node == {} and orphans == [1]
    assert hedge_after([0.3, 0.1, 0.2], 0.5, 0.0, 4) is None
    assert hedge_after([0.3, 0.1, 0.2, 0.4], 0.5, 0.0, 4) == 0.2
    assert hedge_after([0.3, 0.1, 0.2, 0.4], 0.5, 0.25, 4) == 0.25
    wanted = {1: (10, 0), 2: (20, 1), 3: (30, 0)}
    miss = missing_by_part([(1, 10), (2, 20), (3, 30)], lambda pos: pos == 1,
                           lambda sid: sid == 30, wanted)
    assert miss == {1: [(2, 20)]}


def test_bounded_placement_and_spread_routing_balance_the_nodes():
    """At a small shape (every trainer's slices computed: --bg-sample =
    --trainers), bounded placement + spread routing gives a lower node load
    max/mean than rendezvous + first, and stays exactly once."""
    shape = ["--nodes", "64", "--trainers", "64", "--local-batch", "32", "--sampled", "8",
             "--partitions-per-node", "8", "--samples-per-partition", "64", "--batches", "4",
             "--bg-sample", "64", "--bg-chunks", "4", "--scenario", "base", "--hedging", "off"]
    load = {}
    for placement, routing in (("rendezvous", "first"), ("bounded", "spread")):
        rows = simulate.main(shape + ["--placement", placement, "--routing", routing])
        assert len(rows) == 2
        for r in rows:
            assert r["exactly once"] == "yes" and r["hedge"] == "off", r
            assert r["routing"] == routing, r
            load[placement, routing, r["v"]] = float(r["load max/mean"])
    for v in (1, 2):
        assert load["bounded", "spread", v] < load["rendezvous", "first", v] - 0.2, load
    # bounded_placement alone: cap = ceil(1.1 * 100 * 2 / 40) = 6, and
    # 6 * (40 - 2) >= (100 - 1) * 2, so no node holds more than 6 (mean 5).
    picks, cap = simulate.bounded_placement(np.random.default_rng(0).random((100, 40)), 2, 1.1)
    assert cap == 6 and all(len(set(p)) == 2 for p in picks)
    held = collections.Counter(i for p in picks for i in p)
    assert max(held.values()) <= 6 and sum(held.values()) == 200
    free = collections.Counter(i for p in np.random.default_rng(0).random((100, 40)).argsort(1)
                               [:, -2:] for i in p)
    assert max(free.values()) > 6  # pure top-2 of the same scores exceeds it


# choose(partition, holders, g) for holders ALL5 and its first 3 / last 2
# (g None: routing "first"); tests/unit/fleet/fleet_routing_test.cc pins the
# C++ FleetChooseReplica to the same table.
ALL5 = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "node-a", "node-b"]
PICKS = [
    (0, None, 'node-a', '127.0.0.1:7002', 'node-a'),
    (0, 0, 'node-a', '127.0.0.1:7002', 'node-a'),
    (0, 1, '127.0.0.1:7002', '127.0.0.1:7001', 'node-b'),
    (0, 2, '127.0.0.1:7001', '127.0.0.1:7003', 'node-a'),
    (0, 3, 'node-b', '127.0.0.1:7002', 'node-b'),
    (0, 7, '127.0.0.1:7001', '127.0.0.1:7001', 'node-b'),
    (1, None, '127.0.0.1:7003', '127.0.0.1:7003', 'node-a'),
    (1, 0, 'node-a', '127.0.0.1:7001', 'node-b'),
    (1, 1, '127.0.0.1:7001', '127.0.0.1:7002', 'node-a'),
    (1, 2, '127.0.0.1:7002', '127.0.0.1:7003', 'node-b'),
    (1, 3, 'node-b', '127.0.0.1:7001', 'node-a'),
    (1, 7, '127.0.0.1:7002', '127.0.0.1:7002', 'node-a'),
    (5, None, 'node-b', '127.0.0.1:7002', 'node-b'),
    (5, 0, 'node-b', '127.0.0.1:7001', 'node-a'),
    (5, 1, '127.0.0.1:7002', '127.0.0.1:7002', 'node-b'),
    (5, 2, '127.0.0.1:7003', '127.0.0.1:7003', 'node-a'),
    (5, 3, 'node-a', '127.0.0.1:7001', 'node-b'),
    (5, 7, '127.0.0.1:7003', '127.0.0.1:7002', 'node-b'),
    (17, None, 'node-b', '127.0.0.1:7003', 'node-b'),
    (17, 0, 'node-a', '127.0.0.1:7001', 'node-a'),
    (17, 1, '127.0.0.1:7002', '127.0.0.1:7003', 'node-b'),
    (17, 2, '127.0.0.1:7001', '127.0.0.1:7002', 'node-a'),
    (17, 3, 'node-b', '127.0.0.1:7001', 'node-b'),
    (17, 7, '127.0.0.1:7001', '127.0.0.1:7003', 'node-b'),
]


def test_choose_first_and_spread():
    for p, g, all5, first3, last2 in PICKS:
        assert choose(p, ALL5, g) == all5
        assert choose(p, list(reversed(ALL5)), g) == all5
        assert choose(p, ALL5[:3], g) == first3
        assert choose(p, ALL5[3:], g) == last2
    assert choose(3, [], 5) is None
    # Spread visits every holder in turn; index 0 is "first"'s pick.
    for p in range(20):
        seen = [choose(p, ALL5[:3], g) for g in range(6)]
        assert set(seen) == set(ALL5[:3]) and seen[:3] == seen[3:]
        assert choose(p, ALL5[:3], (3 - p % 3) % 3) == choose(p, ALL5[:3])


def test_hedge_class_and_split_hedge():
    """The pooled window's size classes and a hedge's split over all the
    other live replicas (the same case as the C++ FleetSplitHedge test in
    tests/unit/fleet/fleet_hedge_verify_test.cc, answer computed by hand)."""
    assert [hedge_class(n) for n in (0, 1, 2, 3, 4, 63, 64, 127, 128)] == \
        [0, 0, 1, 1, 2, 5, 6, 6, 7]
    holders = {0: ["c", "a", "b"], 1: ["b", "c", "a"], 2: ["a", "c"], 3: ["a"]}
    items = {0: [(6, 60), (1, 10), (4, 40)], 1: [(9, 90), (2, 20)],
             2: [(3, 30), (5, 50), (7, 70)], 3: [(8, 80)]}
    by_node, orphans = split_hedge(items, holders.__getitem__, "a")
    assert by_node == {"b": [(1, 10), (2, 20), (4, 40)],
                       "c": [(3, 30), (5, 50), (6, 60), (7, 70), (9, 90)]}
    assert orphans == [3]
    assert split_hedge({0: [(7, 70)]}, holders.__getitem__, "c") == ({"a": [(7, 70)]}, [])
    assert split_hedge({3: [(1, 10)]}, holders.__getitem__, "a") == ({}, [3])
    # Near-equal: 7 positions over 3 replicas -> 3, 2, 2, contiguous.
    by_node, _ = split_hedge({0: [(p, p) for p in range(7)]}, lambda p: ["x", "y", "z", "w"],
                             "w")
    assert by_node == {"x": [(0, 0), (1, 1), (2, 2)], "y": [(3, 3), (4, 4)],
                       "z": [(5, 5), (6, 6)]}
