"""Verifying replicas in the Python FleetClient (issue 37 item 14,
FleetClient(verify_fraction=...)).

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
- Bad verify_fraction values raise ValueError naming the field.
"""

import hashlib
import threading

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose, verify_score
from conftest import NEARPREPD, fleet_daemon
from test_fleet_faults import CLI, make_fleet_dataset
from test_fleet_hedge import transport_or_skip

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


@pytest.mark.parametrize("native", [False, True], ids=["grpcio", "native"])
def test_three_replicas_liar_found_and_outvoted(fleet, native):
    m, manifest, daemons, clean = fleet
    transport_or_skip(native)
    liar = Liar(daemons)
    try:
        # Without verification the liar's pixels reach the trainer.
        plain = read(liar.targets, manifest, native=native, probe_interval=60.0)
        lies_before = liar.lies
        r = read(liar.targets, manifest, native=native, verify_fraction=1.0,
                 probe_interval=60.0)
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


def test_two_replicas_mismatch_is_unresolved(fleet):
    m, manifest, daemons, clean = fleet
    liar = Liar(daemons[:2])
    try:
        r = read(liar.targets, manifest, verify_fraction=1.0, probe_interval=60.0)
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
    # The first answer was kept: the liar's positions differ from clean.
    lied = [p for p, t in r["served_by"].items() if t == liar.target]
    assert lied and any(r["got"][p] != clean[p] for p in lied)
    assert all(r["got"][p] == clean[p] for p in r["got"] if p not in lied)


def test_honest_nodes_verify_without_changing_the_epoch(fleet):
    m, manifest, daemons, clean = fleet
    r = read([d.target for d in daemons], manifest, verify_fraction=0.5)
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
