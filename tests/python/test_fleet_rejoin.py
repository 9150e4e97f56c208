"""Fleet nodes that are down when a trainer starts, and dead nodes coming
back (both fleet clients): a node that fails its first probe is reported
through on_event ("node HOST:PORT unreachable at start: ..."), every dead
node is probed again every probe_interval in the background, and one that
answers is "live again" and serves its partitions from the next request on,
while the epoch stays every position exactly once with the oracle's bytes.
A probe of a black-holed node (it accepts connections and never answers)
holds up no batch, and ends with close() (Python) or within its deadline
(C++, at exit). The fleet, the oracle and the helpers are
test_fleet_daemons.py's (3 daemons, each partition on 2 of them); the
Python client's tests run on both receive paths (the `transport` fixture).
"""

import hashlib
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose
from conftest import NEARPREPD, metrics_value
from test_fleet_daemons import (BLOCK, C, CLI, G, PLACEMENT, REQ, SEED, WINDOW,  # noqa: F401
                                check_transport, fleet_read_args, oracle_for,
                                parse_fleet_read, revive, tfrecord_fleet)

pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")


def full_fleet_assignment(m, daemons, epoch):
    """{position: node target} of `epoch` with every node live (rendezvous
    hashing over each partition's holders)."""
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=epoch, block_samples=BLOCK, window=WINDOW, global_batch=G))
    holders = {p: [daemons[n].target for n, parts in PLACEMENT.items() if p in parts]
               for p in range(C)}
    return {pos: choose(part, holders[part])
            for pos, (_, part) in zip(range(m.num_samples), plan.range(0, m.num_samples))}


def late_victim(daemons, full, first_batch):
    """The node the full fleet gives the most positions of global batches
    first_batch and later (ports, hence the assignment, vary from run to run)."""
    load = {}
    for pos, t in full.items():
        if pos >= first_batch * G:
            load[t] = load.get(t, 0) + 1
    target = max(load, key=lambda t: (load[t], t))
    return next(d for d in daemons.values() if d.target == target)


def test_node_down_at_start_rejoins_when_it_answers(tfrecord_fleet, transport):
    """A node down when the FleetClient is made is reported through
    on_event ("unreachable at start") and probed again in the background
    every probe_interval. Started again on its port after batch 0 (the
    trainer blocked meanwhile: no batch start drives the probes), it is
    "live again" and serves its partitions in every batch requested after
    that, exactly as rendezvous hashing over the full fleet assigns them
    (FleetBatch.served_by); the batches requested before it came back never
    touch it, and the epoch is every position once with the oracle's sample
    and bytes."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    epoch = 4
    oracle = oracle_for(oracle_d, manifest, m, epoch)
    full = full_fleet_assignment(m, daemons, epoch)
    victim = late_victim(daemons, full, 2)
    victim.kill()
    events = []
    got, served = {}, {}
    with FleetClient([d.target for d in daemons.values()], "ds", manifest=manifest, seed=SEED,
                     block_samples=BLOCK, window=WINDOW, global_batch=G, trainers=1, rank=0,
                     prefetch=2, rpc_timeout=10.0, probe_interval=0.1,
                     on_event=events.append, **REQ) as fc:
        check_transport(fc)
        at_start = [e for e in events if "at start" in e]
        assert len(at_start) == 1, events
        assert at_start[0].startswith(f"node {victim.target} unreachable at start: "), events
        assert victim.target not in fc.live_nodes()
        it = fc.epoch(epoch)
        for fb in it:  # batch 0; batches 0 and 1 were requested without the victim
            break
        batches = [fb]
        victim.start()  # same port
        t0 = time.monotonic()
        while f"node {victim.target} is live again" not in events:
            assert time.monotonic() < t0 + 20, f"the node did not rejoin: {events}"
            time.sleep(0.02)
        # Probes every 0.1 s, each on a fresh connection once one failed:
        # about 0.3 s here (with gRPC's reconnect backoff it took 5 to 15 s).
        assert time.monotonic() - t0 < 4, time.monotonic() - t0
        assert victim.target in fc.live_nodes()
        batches += list(it)  # batches 2, 3, ... are requested from here on
        stats = dict(fc.stats)
    for fb in batches:
        served.update(fb.served_by)
        for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
            assert p not in got
            got[p] = (sid, hashlib.sha256(np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
        for e in fb.errors:
            assert e.position not in got
            got[e.position] = (e.sample_id, f"error:{e.code}")
    assert sorted(got) == list(range(m.num_samples))
    assert [got[p] for p in range(m.num_samples)] == oracle
    assert sorted(served) == list(range(m.num_samples))
    early = [p for p in range(min(2 * G, m.num_samples))]
    assert victim.target not in {served[p] for p in early}
    late = {p: served[p] for p in range(2 * G, m.num_samples)}
    assert late == {p: full[p] for p in late}
    assert victim.target in late.values()
    assert stats["failovers"] == 0, stats


def test_probe_of_a_black_holed_node_stalls_nothing_and_ends_with_close(tfrecord_fleet,
                                                                         transport):
    """A fourth node that refuses connections at start (reported), then
    accepts them and never answers (a black hole: the probe waits for its
    deadline, rpc_timeout = 30 s, or gRPC's 20 s connect timeout). With such
    a probe in flight the trainer reads a whole epoch at full speed (the
    probe is on a thread of its own) from the other nodes, and close()
    returns at once: the probe is cancelled, its thread joined, and no
    event comes after close."""
    _, m, manifest, daemons, _ = tfrecord_fleet
    revive(daemons)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    hole_target = f"127.0.0.1:{hole.getsockname()[1]}"
    held = []
    try:
        events = []
        fc = FleetClient([d.target for d in daemons.values()] + [hole_target], "ds",
                         manifest=manifest, seed=SEED, block_samples=BLOCK, window=WINDOW,
                         global_batch=G, prefetch=2, rpc_timeout=30.0, probe_interval=0.1,
                         on_event=events.append, **REQ)
        check_transport(fc)
        assert any(e.startswith(f"node {hole_target} unreachable at start: ") for e in events)
        hole.listen(16)  # the kernel accepts; nothing ever answers
        hole.settimeout(20)
        held.append(hole.accept()[0])  # a probe's connection: the probe now waits
        time.sleep(0.2)
        assert fc._nodes[hole_target].probing and not fc._nodes[hole_target].alive
        t0 = time.monotonic()
        n = sum(len(fb.positions) + len(fb.errors) for fb in fc.epoch(1))
        took = time.monotonic() - t0
        assert n == m.num_samples
        assert took < 10, took  # not held up by the probe (20 s or more)
        assert fc._nodes[hole_target].probing
        seen = len(events)
        t0 = time.monotonic()
        fc.close()
        assert time.monotonic() - t0 < 3
        assert not any(t.is_alive() for t in fc._probe_pool._threads)
        time.sleep(0.3)
        assert len(events) == seen, events[seen:]
    finally:
        for s in held + [hole]:
            s.close()


def test_cpp_node_down_at_start_rejoins_when_it_answers(tfrecord_fleet):
    """The C++ FleetClient (`nearprep fleet-read`, one trainer, a 400 ms
    step per batch): a node down at start is reported ("unreachable at
    start"); started again on its port once the first batch is out, it is
    "live again" and serves samples (its samples_sent counter; it was
    started after the client was made), and the epoch is every position
    once with the oracle's sample and bytes."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    epoch = 5
    oracle = oracle_for(oracle_d, manifest, m, epoch)
    full = full_fleet_assignment(m, daemons, epoch)
    nb = (m.num_samples + G - 1) // G
    victim = late_victim(daemons, full, nb // 2)
    victim.kill()
    errf = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        fleet_read_args([d.target for d in daemons.values()], manifest, epoch, "--step-ms", "400"),
        stdout=subprocess.PIPE, stderr=errf, text=True)
    lines = []
    try:
        for line in proc.stdout:
            if not lines:  # batch 0 is out
                victim.start()  # same port
            lines.append(line)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errf.seek(0)
        err = errf.read()
        errf.close()
    assert proc.returncode == 0, err
    assert f"event: node {victim.target} unreachable at start: " in err, err
    assert f"event: node {victim.target} is live again" in err, err
    got = parse_fleet_read(lines, epoch)
    assert [got.get(p) for p in range(m.num_samples)] == oracle
    assert metrics_value(victim, "nearprep_samples_sent_total", {"dataset": "ds"}) > 0


def test_cpp_probe_of_a_black_holed_node_stalls_no_batch(tfrecord_fleet):
    """The C++ FleetClient (`nearprep fleet-read`) with a fourth node that
    accepts connections and never answers (a black hole): reported at start
    (its probe's 5 s deadline), then probed in the background, so the
    epoch's batches (a 200 ms step each) come out at the trainer's pace from
    the other nodes (a batch used to wait for a probe of the hole: 5 s
    every probe_interval),
    and the client exits once the probe in flight has ended (its deadline)."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    epoch = 1
    oracle = oracle_for(oracle_d, manifest, m, epoch)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # the kernel accepts; nothing ever answers
    hole_target = f"127.0.0.1:{hole.getsockname()[1]}"
    errf = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        fleet_read_args([d.target for d in daemons.values()] + [hole_target], manifest, epoch,
                        "--step-ms", "200"),
        stdout=subprocess.PIPE, stderr=errf, text=True)
    lines, times = [], []
    try:
        for line in proc.stdout:
            lines.append(line)
            times.append(time.monotonic())
        t_eof = time.monotonic()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        hole.close()
        errf.seek(0)
        err = errf.read()
        errf.close()
    assert proc.returncode == 0, err
    assert f"event: node {hole_target} unreachable at start: " in err, err
    got = parse_fleet_read(lines, epoch)
    assert [got.get(p) for p in range(m.num_samples)] == oracle
    # The batches' own pace: a 200 ms step each (the hole is probed again
    # every 500 ms meanwhile), nothing waiting for a probe.
    steps = 0.2 * ((m.num_samples + G - 1) // G - 1)
    assert times[-1] - times[0] < steps + 2.5, (times[-1] - times[0], steps)
    assert t_eof - times[-1] < 8, t_eof - times[-1]  # the probe's 5 s deadline at most
