"""Hedged requests in both fleet clients (issue 31 item 2): the Python
FleetClient(hedge=...) and the C++ FleetClient (`nearprep fleet-read
--hedge P --hedge-min S --hedge-samples N`).

Two daemons serve the same TFRecord fleet dataset (every partition on
both), each behind a relay (fake_server.Relay). The relay in front of the
node serving partition 0 (the victim) holds back some of its answers
(its rewrite hook waits before passing a message on). With hedge= set, a
victim request not answered within its latency percentile is also sent to
the other node; the first answer per position wins, the loser is cancelled,
and the epoch is the clean one byte for byte. Without hedge= nothing is
hedged and the epoch waits for the slow answers. Both clients run the same
scenarios against the same relays (the C++ one compares what fleet-read
prints: position, sample id, sha256 of the tensor).

A third daemon (fleet3: every partition on all three) serves the case of a
node slow on EVERY request: the hedge deadline comes from a window pooled
over all nodes per request size class, so that node is hedged after about a
fast request's time (with one window per node, its own slow latencies set
the deadline: the old clients fail this test), and each hedge is split over
both other replicas.
"""

import collections
import hashlib
import os
import re
import threading
import time

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose, hedge_class
from conftest import NEARPREPD, fleet_daemon
from test_fleet_faults import CLI, make_fleet_dataset, parse_fleet_read, run_measured

pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD),
                                reason="nearprep CLI or nearprepd not built")

SEED, BLOCK, WINDOW, G, C = 5, 2, 4, 4, 4
EPOCH = 0
REQ = dict(height=16, width=16, crop="random_resized", flip_probability=0.5, dtype="uint8")
CPP_REQ = ["--height", "16", "--width", "16", "--crop", "random_resized",
           "--flip-probability", "0.5", "--dtype", "uint8"]
# Victim calls held back: from its 8th call on, every 4th (the client has
# its first latencies by then: hedge_samples=4 below).
SLOW_FROM, SLOW_EVERY = 8, 4


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hedge")
    shards, manifest = make_fleet_dataset(tmp, 32, C)
    m = fp.load_manifest(manifest)
    daemons = [fleet_daemon(tmp, f"n{i}", shards, manifest=manifest).start() for i in range(2)]
    try:
        clean = read([d.target for d in daemons], manifest, hedge=0)
        assert sorted(clean["got"]) == list(range(m.num_samples)), clean
        assert clean["stats"]["hedges"] == 0, clean["stats"]
        yield m, manifest, daemons, clean["got"]
    finally:
        for d in daemons:
            d.kill()


def read(targets, manifest, native=False, plan=(BLOCK, WINDOW, G), **kw):
    """One trainer's epoch (plan: block samples, window, global batch):
    {"got": {position: (sample id, sha256)}, "stats", "events", "seconds"}."""
    events, got = [], {}
    t0 = time.monotonic()
    with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=plan[0],
                     window=plan[1], global_batch=plan[2], on_event=events.append,
                     native=native, **REQ, **kw) as fc:
        for fb in fc.epoch(EPOCH):
            for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
                assert p not in got, p
                data = np.ascontiguousarray(fb.images[i]).tobytes()
                got[p] = (sid, hashlib.sha256(data).hexdigest())
            for e in fb.errors:
                assert e.position not in got, e.position
                got[e.position] = (e.sample_id, f"error:{e.code}")
        stats = dict(fc.stats)
    return {"got": got, "stats": stats, "events": events, "seconds": time.monotonic() - t0}


def read_cpp(targets, manifest, *flags, seed=SEED, block=BLOCK, window=WINDOW,
             global_batch=G, epoch=EPOCH, timeout=90):
    """One trainer's epoch through `nearprep fleet-read` (the C++
    FleetClient) with the request REQ / CPP_REQ and extra `flags`: {"ok",
    "got": {position: (sample id, sha256 of the tensor | "error:CODE")},
    "stats" (the final stats line), "events", "seconds", "error" (the last
    stderr line of a failed run), "stderr"}."""
    args = [CLI, "fleet-read", "--targets", ",".join(targets), "--manifest", manifest,
            "--seed", str(seed), "--block-samples", str(block), "--window", str(window),
            "--global-batch", str(global_batch), "--epoch", str(epoch), *CPP_REQ,
            *map(str, flags)]
    t0 = time.monotonic()
    returncode, stdout, stderr, _ = run_measured(args, timeout=timeout)
    return dict(parse_fleet_read(returncode, stdout, stderr), seconds=time.monotonic() - t0)


def read_with(client, targets, manifest, *, hedge=0.95, hedge_min=0.05, hedge_samples=10,
              rpc_timeout=10.0, plan=(BLOCK, WINDOW, G)):
    """read() (client "python-grpcio" / "python-native") or read_cpp()
    ("cpp") with the same hedging options (hedge=0: off) and plan."""
    if client == "cpp":
        flags = ["--rpc-timeout-ms", int(rpc_timeout * 1000)]
        flags += ["--hedge", hedge, "--hedge-min", hedge_min, "--hedge-samples", hedge_samples]
        r = read_cpp(targets, manifest, *flags, block=plan[0], window=plan[1],
                     global_batch=plan[2])
        assert r["ok"], r
        return r
    native = transport_or_skip(client == "python-native")
    return read(targets, manifest, native=native, hedge=hedge, hedge_min=hedge_min,
                hedge_samples=hedge_samples, rpc_timeout=rpc_timeout, plan=plan)


class SlowVictim:
    """Relays in front of the daemons; the one serving partition 0 holds
    back the first message of its calls SLOW_FROM, SLOW_FROM + SLOW_EVERY,
    ... (every=True: of every call) by `delay` s (released at once by
    stop())."""

    def __init__(self, daemons, delay, every=False, pick=None):
        from fake_server import Relay
        self.log, self.lock = [], threading.Lock()
        self.relays = [Relay(d.target, self.log, self.lock) for d in daemons]
        victim_t = (pick or (lambda ts: choose(0, ts)))([r.target for r in self.relays])
        self.victim = next(r for r in self.relays if r.target == victim_t)
        self.release = threading.Event()
        self.held = []

        def rewrite(b, req, call, index):
            if index == 0 and (every or (call >= SLOW_FROM
                                         and (call - SLOW_FROM) % SLOW_EVERY == 0)):
                with self.lock:
                    self.held.append(call)
                self.release.wait(delay)
            return None

        self.victim.rewrite = rewrite

    @property
    def targets(self):
        return [r.target for r in self.relays]

    def stop(self):
        self.release.set()
        for r in self.relays:
            r.stop()


def transport_or_skip(native):
    if native:
        from nearprep import transport as tr
        if tr.load_native() is None:
            if os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
                pytest.fail("nearprep._native was built but does not import")
            pytest.skip("nearprep._native not built")
    return native


CLIENTS = ["python-grpcio", "python-native", "cpp"]


@pytest.mark.parametrize("client", CLIENTS)
def test_hedge_beats_a_slow_replica_exactly_once(fleet, client):
    """The victim holds answers back 20 s (over the whole epoch's clean
    time): with hedging the other node answers those positions, the epoch
    equals the clean one byte for byte and takes far less than one held
    answer."""
    m, manifest, daemons, clean = fleet
    if client == "python-native":
        transport_or_skip(True)
    delay = 20.0
    sv = SlowVictim(daemons, delay)
    try:
        r = read_with(client, sv.targets, manifest, hedge=0.5, hedge_min=0.05,
                      hedge_samples=4, rpc_timeout=30.0)
    finally:
        sv.stop()
    assert sv.held, "the victim held nothing back: the scenario did not happen"
    assert r["got"] == clean
    assert r["stats"]["hedges"] >= 1 and r["stats"]["hedge_wins"] >= 1, r["stats"]
    assert r["stats"]["failovers"] == 0, r["stats"]
    assert len(r["got"]) == m.num_samples and r["stats"].get("samples", m.num_samples) \
        == m.num_samples, r["stats"]
    hedged = [e for e in r["events"] if e.startswith("hedge: ") and sv.victim.target in e]
    assert hedged, r["events"]
    others = [t for t in sv.targets if t != sv.victim.target]
    assert others[0] in hedged[0], hedged[0]
    # Not one held answer waited for (the losers were cancelled).
    assert r["seconds"] < delay, r
    assert not any("marked dead" in e for e in r["events"]), r["events"]


# Three replicas of every partition (R = 3), more partitions than nodes and
# one sample per block, so each node's requests come in several size
# classes shared with the other nodes' (hedge_class).
EVERY_PLAN = (1, 8, 8)  # block samples, window, global batch
EVERY_C = 32


@pytest.fixture(scope="module")
def fleet3(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hedge3")
    shards, manifest = make_fleet_dataset(tmp, 64, EVERY_C)
    m = fp.load_manifest(manifest)
    daemons = [fleet_daemon(tmp, f"n{i}", shards, manifest=manifest).start() for i in range(3)]
    try:
        clean = read([d.target for d in daemons], manifest, plan=EVERY_PLAN, hedge=0)
        assert sorted(clean["got"]) == list(range(m.num_samples)), clean
        yield m, manifest, daemons, clean["got"]
    finally:
        for d in daemons:
            d.kill()


def class_requests(m, targets):
    """The node requests of the EVERY_PLAN epoch on `targets` (every
    partition on each): [(node, hedge_class of its size, size)]."""
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=EPOCH, block_samples=EVERY_PLAN[0], window=EVERY_PLAN[1],
        global_batch=EVERY_PLAN[2]))
    out = []
    for g in range(plan.num_batches):
        lo, hi = plan.slice(g, 0, 1)
        sizes = collections.Counter(choose(part, targets) for _, part in plan.range(lo, hi))
        out += [(t, hedge_class(n), n) for t, n in sizes.items()]
    return out


def minority_requests(reqs, victim):
    """The victim's requests in size classes where it sends under half the
    requests: those a pooled class window (median: hedge=0.5) hedges after
    a fast request's time."""
    share = collections.defaultdict(lambda: [0, 0])
    for t, k, _ in reqs:
        share[k][t == victim] += 1
    return [(k, n) for t, k, n in reqs if t == victim and 2 * share[k][1] < sum(share[k])]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_node_slow_on_every_request_is_hedged_and_split(fleet3, client):
    """The victim holds back EVERY answer 1 s. The hedge deadline is the
    median of the latencies of the request's size class pooled over all
    nodes (mostly the two fast ones), so the victim's requests are hedged
    after about a fast request's time and the hedges win. A per-node window
    (the old rule) holds only the victim's slow latencies and hedges none
    of its requests before its own slow median (>= 1 s). Each hedge is
    split over both other replicas; the epoch is the clean one byte for
    byte."""
    m, manifest, daemons, clean = fleet3
    if client == "python-native":
        transport_or_skip(True)
    delay = 1.0
    state = {}

    def pick(targets):
        # The node whose requests share their size classes with the others
        # most (ports, hence rendezvous choices, differ from run to run).
        reqs = class_requests(m, targets)
        victim = max(sorted(targets), key=lambda t: len(minority_requests(reqs, t)))
        state["minority"] = minority_requests(reqs, victim)
        return victim

    sv = SlowVictim(daemons, delay, every=True, pick=pick)
    others = sorted(t for t in sv.targets if t != sv.victim.target)
    try:
        # hedge_min 0.2 s: the fast nodes' requests are hardly ever hedged
        # (to the victim), so hedges cancelled early do not fill the
        # victim's latencies with short ones.
        r = read_with(client, sv.targets, manifest, hedge=0.5, hedge_min=0.2,
                      hedge_samples=2, rpc_timeout=30.0, plan=EVERY_PLAN)
    finally:
        sv.stop()
    assert len(sv.held) >= 2, "the victim held nothing back: the scenario did not happen"
    assert r["got"] == clean
    assert r["stats"]["failovers"] == 0, r["stats"]
    hedged = [e for e in r["events"] if e.startswith("hedge: node " + sv.victim.target)]
    after_ms = [int(re.search(r" after (\d+) ms", e).group(1)) for e in hedged]
    # Hedged well before the victim's own latency (its old per-node rule:
    # >= 1 s, checked against the old clients, which hedged none sooner):
    # a quarter of its minority-class requests at least (the first of each
    # class wait for hedge_samples latencies, and while the victim's slow
    # latencies are half of a class's window its median is slow; a loaded
    # machine slows the fast ones too: 6 of 16 at load 5).
    expect = len(state["minority"])
    assert expect >= 4, state
    fast = [a for a in after_ms if a < delay * 1000 * 0.75]
    assert len(fast) >= max(2, expect // 4), (after_ms, state, r["stats"])
    assert r["stats"]["hedge_wins"] >= len(fast), r["stats"]
    # Split: a hedge asked both other replicas (one request each).
    assert any(f"asked {others[0]}, {others[1]} too" in e for e in hedged), hedged
    assert r["stats"]["hedges"] > len(hedged), (r["stats"], len(hedged))


@pytest.mark.parametrize("client", ["python-grpcio", "cpp"])
def test_no_hedge_when_off(fleet, client):
    """hedge=0 (fleet-read --hedge 0; hedging is on by default): the same
    slow victim (held 1.5 s) is waited for, nothing is hedged, the epoch is
    still the clean one."""
    m, manifest, daemons, clean = fleet
    delay = 1.5
    sv = SlowVictim(daemons, delay)
    try:
        r = read_with(client, sv.targets, manifest, hedge=0)
    finally:
        sv.stop()
    assert sv.held, "the victim held nothing back: the scenario did not happen"
    assert r["got"] == clean
    assert r["stats"]["hedges"] == 0 and r["stats"]["hedge_wins"] == 0, r["stats"]
    assert not any(e.startswith("hedge: ") for e in r["events"]), r["events"]
    # The held answer was waited for.
    assert r["seconds"] >= delay, r


@pytest.mark.parametrize("kw, field", [
    (dict(hedge=float("nan")), "hedge"),
    (dict(hedge=1.0), "hedge"),
    (dict(hedge=-0.5), "hedge"),
    (dict(hedge="0.9"), "hedge"),
    (dict(hedge=True), "hedge"),
    (dict(hedge=0.9, hedge_min=-1), "hedge_min"),
    (dict(hedge=0.9, hedge_min=float("nan")), "hedge_min"),
    (dict(hedge=0.9, hedge_samples=0), "hedge_samples"),
    (dict(hedge=0.9, hedge_samples=1000), "hedge_samples"),
    (dict(hedge=0.9, hedge_samples=2.5), "hedge_samples"),
])
def test_hedge_arguments_are_checked(fleet, kw, field):
    m, manifest, daemons, clean = fleet
    with pytest.raises(ValueError) as e:
        FleetClient(["127.0.0.1:1"], "ds", manifest=manifest, global_batch=G, **kw)
    assert str(e.value).startswith(field + ":"), str(e.value)


@pytest.mark.parametrize("flags, field", [
    (["--hedge", "nan"], "hedge:"),
    (["--hedge", "1"], "hedge:"),
    (["--hedge", "1.5"], "--hedge"),
    (["--hedge", "0.9", "--hedge-min", "-1"], "--hedge-min"),
    (["--hedge", "0.9", "--hedge-min", "nan"], "--hedge-min"),
    (["--hedge", "0.9", "--hedge-samples", "0"], "--hedge-samples"),
    (["--hedge", "0.9", "--hedge-samples", "65"], "--hedge-samples"),
])
def test_cpp_hedge_flags_are_checked(fleet, flags, field):
    """fleet-read refuses bad hedging flags before any request, naming the
    flag (CLI11's range check) or the FleetClientOptions field."""
    m, manifest, daemons, clean = fleet
    r = read_cpp([d.target for d in daemons], manifest, *flags, timeout=30)
    assert not r["ok"] and not r["got"], r
    assert field in r["stderr"], r["stderr"]


def test_hedging_is_on_by_default():
    """The Python default (the C++ one: fleet_hedge_verify_test)."""
    import inspect
    from nearprep import fleet
    assert fleet.HEDGE_DEFAULT == 0.95
    assert inspect.signature(FleetClient).parameters["hedge"].default == fleet.HEDGE_DEFAULT
    params = inspect.signature(FleetClient).parameters
    assert params["hedge_min"].default == 0.05 and params["hedge_samples"].default == 4
