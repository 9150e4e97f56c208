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
"""

import hashlib
import os
import threading
import time

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose
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
        clean = read([d.target for d in daemons], manifest)
        assert sorted(clean["got"]) == list(range(m.num_samples)), clean
        assert clean["stats"]["hedges"] == 0, clean["stats"]
        yield m, manifest, daemons, clean["got"]
    finally:
        for d in daemons:
            d.kill()


def read(targets, manifest, native=False, **kw):
    """One trainer's epoch: {"got": {position: (sample id, sha256)},
    "stats", "events", "seconds"}."""
    events, got = [], {}
    t0 = time.monotonic()
    with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                     window=WINDOW, global_batch=G, on_event=events.append, native=native,
                     **REQ, **kw) as fc:
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


def read_with(client, targets, manifest, *, hedge=None, hedge_min=0.05, hedge_samples=10,
              rpc_timeout=10.0):
    """read() (client "python-grpcio" / "python-native") or read_cpp()
    ("cpp") with the same hedging options."""
    if client == "cpp":
        flags = ["--rpc-timeout-ms", int(rpc_timeout * 1000)]
        if hedge is not None:
            flags += ["--hedge", hedge, "--hedge-min", hedge_min, "--hedge-samples", hedge_samples]
        r = read_cpp(targets, manifest, *flags)
        assert r["ok"], r
        return r
    native = transport_or_skip(client == "python-native")
    return read(targets, manifest, native=native, hedge=hedge, hedge_min=hedge_min,
                hedge_samples=hedge_samples, rpc_timeout=rpc_timeout)


class SlowVictim:
    """Relays in front of both daemons; the one serving partition 0 holds
    back the first message of its calls SLOW_FROM, SLOW_FROM + SLOW_EVERY,
    ... by `delay` s (released at once by stop())."""

    def __init__(self, daemons, delay):
        from fake_server import Relay
        self.log, self.lock = [], threading.Lock()
        self.relays = [Relay(d.target, self.log, self.lock) for d in daemons]
        victim_t = choose(0, [r.target for r in self.relays])
        self.victim = next(r for r in self.relays if r.target == victim_t)
        self.release = threading.Event()
        self.held = []

        def rewrite(b, req, call, index):
            if index == 0 and call >= SLOW_FROM and (call - SLOW_FROM) % SLOW_EVERY == 0:
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


@pytest.mark.parametrize("client", ["python-grpcio", "cpp"])
def test_no_hedge_when_off(fleet, client):
    """hedge=None (the default; fleet-read without --hedge): the same slow
    victim (held 1.5 s) is waited for, nothing is hedged, the epoch is still
    the clean one."""
    m, manifest, daemons, clean = fleet
    delay = 1.5
    sv = SlowVictim(daemons, delay)
    try:
        r = read_with(client, sv.targets, manifest)
    finally:
        sv.stop()
    assert sv.held, "the victim held nothing back: the scenario did not happen"
    assert r["got"] == clean
    assert r["stats"]["hedges"] == 0 and r["stats"]["hedge_wins"] == 0, r["stats"]
    assert not any(e.startswith("hedge: ") for e in r["events"]), r["events"]
    # The held answer was waited for.
    assert r["seconds"] >= delay, r


@pytest.mark.parametrize("kw, field", [
    (dict(hedge=0.0), "hedge"),
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
