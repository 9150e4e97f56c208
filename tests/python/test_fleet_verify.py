"""Verifying replicas in both fleet clients (issue 37 item 14): the Python
FleetClient(verify_fraction=...) and the C++ FleetClient (`nearprep
fleet-read --verify-fraction F`), the same scenarios against the same relays
(the C++ one compares what fleet-read prints: position, sample id, sha256
of the tensor; its events and final stats line).

Three daemons serve the same TFRecord fleet dataset (every partition on
each: 3 replicas), each behind a relay (fake_server.Relay). The relay in
front of the node serving partition 0 (the liar) flips the first tensor
byte of every response message it passes on: a well-formed answer with
wrong pixels, which nothing but a second replica's answer can expose.

- 3 replicas, verify_fraction=1.0: every position is also fetched from a
  second replica; the liar's answers differ, a third replica sides with the
  honest one, the liar is marked dead and the epoch equals the clean one
  byte for byte. Without verification the same liar's bytes reach the
  trainer (the scenario is real).
- 2 replicas: the mismatches are reported and counted as unresolved, the
  first answer kept, nobody marked dead by verification.
- Honest nodes, verify_fraction=0.5: exactly the positions scoring below
  0.5 are verified, no mismatch, the epoch identical to verify_fraction=0.
- Bad verify_fraction values raise ValueError naming the field (fleet-read:
  refused, naming the flag or the field).
"""

import hashlib
import re
import threading

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose, verify_score
from conftest import NEARPREPD, fleet_daemon
from test_fleet_faults import CLI, make_fleet_dataset
from test_fleet_hedge import read_cpp, transport_or_skip

pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD),
                                reason="nearprep CLI or nearprepd not built")

SEED, BLOCK, WINDOW, G, C = 11, 2, 4, 8, 4
EPOCH = 0
REQ = dict(height=16, width=16, crop="random_resized", flip_probability=0.5, dtype="uint8")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    shards, manifest = make_fleet_dataset(tmp, 16, C)
    m = fp.load_manifest(manifest)
    daemons = [fleet_daemon(tmp, f"n{i}", shards, manifest=manifest).start() for i in range(3)]
    try:
        clean = read([d.target for d in daemons], manifest)
        assert sorted(clean["got"]) == list(range(m.num_samples)), clean
        assert clean["stats"]["verified"] == 0, clean["stats"]
        yield m, manifest, daemons, clean["got"]
    finally:
        for d in daemons:
            d.kill()


def read(targets, manifest, native=False, **kw):
    """One trainer's epoch: {"got": {position: (sample id, label, sha256)},
    "stats", "events", "served_by": {position: node}}."""
    events, got, by = [], {}, {}
    kw.setdefault("hedge", 0)  # verification, not hedging: who serves what is fixed
    with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                     window=WINDOW, global_batch=G, on_event=events.append, native=native,
                     **REQ, **kw) as fc:
        for fb in fc.epoch(EPOCH):
            assert not fb.errors, fb.errors
            for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
                assert p not in got, p
                data = np.ascontiguousarray(fb.images[i]).tobytes()
                got[p] = (sid, int(fb.labels[i]), hashlib.sha256(data).hexdigest())
            by.update(fb.served_by)
        stats = dict(fc.stats)
    return {"got": got, "stats": stats, "events": events, "served_by": by}


def read_cpp_verify(targets, manifest, *flags):
    """read_cpp() with this module's plan; got: {position: (sample id, sha256)}."""
    r = read_cpp(targets, manifest, "--hedge", "0", *flags, seed=SEED, block=BLOCK, window=WINDOW,
                 global_batch=G, epoch=EPOCH)
    assert r["ok"], r
    assert not any(h.startswith("error:") for _, h in r["got"].values()), r["got"]
    return r


def without_labels(got):
    """{position: (sample id, sha256)}: what fleet-read prints."""
    return {p: (sid, h) for p, (sid, _, h) in got.items()}


def read_with(client, targets, manifest, verify_fraction=0.0, probe_interval=0.5):
    """read() (client "python-grpcio" / "python-native") or read_cpp_verify()
    ("cpp"), got as fleet-read prints it (no labels)."""
    if client == "cpp":
        r = read_cpp_verify(targets, manifest, "--verify-fraction", verify_fraction,
                            "--probe-interval-ms", int(probe_interval * 1000))
        r["served_by"] = None
        return r
    native = transport_or_skip(client == "python-native")
    r = read(targets, manifest, native=native, verify_fraction=verify_fraction,
             probe_interval=probe_interval)
    r["got"] = without_labels(r["got"])
    return r


class Liar:
    """Relays in front of `daemons`; the one serving partition 0 flips the
    first byte of every response message's tensor (the first sample's
    first pixel)."""

    def __init__(self, daemons):
        from fake_server import Relay
        self.log, self.lock = [], threading.Lock()
        self.relays = [Relay(d.target, self.log, self.lock) for d in daemons]
        self.target = choose(0, [r.target for r in self.relays])
        self.lies = 0

        def rewrite(b, req, call, index):
            if not b.sample_ids:
                return None
            data = bytearray(b.tensor.data)
            data[0] ^= 0xFF
            b.tensor.data = bytes(data)
            with self.lock:
                self.lies += 1
            return b

        next(r for r in self.relays if r.target == self.target).rewrite = rewrite

    @property
    def targets(self):
        return [r.target for r in self.relays]

    def stop(self):
        for r in self.relays:
            r.stop()


CLIENTS = ["python-grpcio", "python-native", "cpp"]


@pytest.mark.parametrize("client", CLIENTS)
def test_three_replicas_liar_found_and_outvoted(fleet, client):
    m, manifest, daemons, clean = fleet
    clean = without_labels(clean)
    if client == "python-native":
        transport_or_skip(True)
    liar = Liar(daemons)
    try:
        # Without verification the liar's pixels reach the trainer.
        plain = read_with(client, liar.targets, manifest, probe_interval=60.0)
        lies_before = liar.lies
        r = read_with(client, liar.targets, manifest, verify_fraction=1.0, probe_interval=60.0)
    finally:
        liar.stop()
    assert lies_before >= 1
    assert plain["got"] != clean, "the liar's rewrite changed nothing"
    assert plain["stats"]["verified"] == 0, plain["stats"]
    assert liar.lies > lies_before
    assert r["got"] == clean
    s = r["stats"]
    assert s["verify_mismatches"] >= 1 and s["verify_unresolved"] == 0, s
    # Every position was compared against a second replica.
    assert s["verified"] == m.num_samples, s
    dead = [e for e in r["events"] if "marked dead" in e]
    assert dead and all(liar.target in e and "verify:" in e for e in dead), r["events"]
    mism = [e for e in r["events"] if e.startswith("verify: ") and "disagree" in e]
    assert len(mism) == s["verify_mismatches"], r["events"]
    assert all(liar.target in e and "minority" in e for e in mism), mism
    assert "tensor bytes differ" in mism[0] and "sample " in mism[0], mism[0]


@pytest.mark.parametrize("client", ["python-grpcio", "cpp"])
def test_two_replicas_mismatch_is_unresolved(fleet, client):
    m, manifest, daemons, clean = fleet
    clean = without_labels(clean)
    liar = Liar(daemons[:2])
    try:
        r = read_with(client, liar.targets, manifest, verify_fraction=1.0, probe_interval=60.0)
    finally:
        liar.stop()
    s = r["stats"]
    assert s["verify_mismatches"] >= 1, s
    assert s["verify_unresolved"] == s["verify_mismatches"], s
    assert not any("marked dead" in e for e in r["events"]), r["events"]
    unresolved = [e for e in r["events"] if "unresolved" in e]
    assert len(unresolved) == s["verify_mismatches"], r["events"]
    honest = [t for t in liar.targets if t != liar.target][0]
    assert all(liar.target in e and honest in e and "no third live replica" in e
               for e in unresolved), unresolved
    # The first answer was kept (the event names whose): where that was the
    # liar's, the position differs from clean; everything else is clean.
    kept = {}
    for e in unresolved:
        pos = int(re.search(r" position (\d+) ", e).group(1))
        kept[pos] = re.search(r"keeping (\S+)'s answer", e).group(1)
    assert set(kept.values()) <= set(liar.targets), kept
    lied = [p for p, t in kept.items() if t == liar.target]
    assert lied and all(r["got"][p] != clean[p] for p in lied), (kept, r["got"])
    assert all(r["got"][p] == clean[p] for p in r["got"] if p not in lied)
    if r["served_by"] is not None:  # the Python client says who served what
        served = [p for p, t in r["served_by"].items() if t == liar.target]
        assert set(lied) <= set(served)
        assert all(r["got"][p] == clean[p] for p in r["got"] if p not in served)


@pytest.mark.parametrize("client", ["python-grpcio", "cpp"])
def test_honest_nodes_verify_without_changing_the_epoch(fleet, client):
    m, manifest, daemons, clean = fleet
    clean = without_labels(clean)
    # The C++ client's FleetVerifyScore picks the positions Python's
    # verify_score does: the counts must agree exactly.
    r = read_with(client, [d.target for d in daemons], manifest, verify_fraction=0.5)
    s = r["stats"]
    expected = sum(verify_score(SEED, EPOCH, p) < 0.5 for p in range(m.num_samples))
    assert 0 < expected < m.num_samples
    assert s["verified"] == expected, s
    assert s["verify_mismatches"] == 0 and s["verify_unresolved"] == 0, s
    assert not any(e.startswith("verify: ") for e in r["events"]), r["events"]
    assert r["got"] == clean


def test_verify_score_is_documented_hash():
    h = hashlib.sha256(b"11/0/5").digest()[:8]
    assert verify_score(11, 0, 5) == int.from_bytes(h, "big") / 2.0 ** 64
    scores = [verify_score(1, 2, p) for p in range(2000)]
    assert all(0.0 <= x < 1.0 for x in scores)
    assert 150 < sum(x < 0.1 for x in scores) < 250


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.1", None, True, float("nan")])
def test_verify_fraction_is_checked(fleet, value):
    m, manifest, daemons, clean = fleet
    with pytest.raises(ValueError) as e:
        FleetClient(["127.0.0.1:1"], "ds", manifest=manifest, global_batch=G,
                    verify_fraction=value)
    assert str(e.value).startswith("verify_fraction:"), str(e.value)


@pytest.mark.parametrize("flags, field", [
    (["--verify-fraction", "1.5"], "--verify-fraction"),
    (["--verify-fraction", "-0.1"], "--verify-fraction"),
    (["--verify-fraction", "nan"], "verify_fraction:"),
])
def test_cpp_verify_fraction_is_checked(fleet, flags, field):
    m, manifest, daemons, clean = fleet
    r = read_cpp([d.target for d in daemons], manifest, *flags, seed=SEED, global_batch=G,
                 timeout=30)
    assert not r["ok"] and not r["got"], r
    assert field in r["stderr"], r["stderr"]
