"""A fleet end to end (issue 14): 3 daemons on loopback ports, each holding 8
of C = 12 partitions of a TFRecord dataset (2 replicas per partition; the
shards come from `nearprep mkdataset --with-bad-files` + `nearprep pack`, so
some records fail to decode), and an oracle: the global plan from the C++
CLI (`nearprep fleet-plan`) and each sample's tensor sha256 (or its error)
from a 4th daemon serving the whole dataset in the ordinary single-node mode.

Scenario: 4 trainers to a checkpoint in epoch 1; 3 trainers from it while
one daemon is SIGKILLed mid-step, on into epoch 2; 6 trainers from the next
checkpoint to the end of epoch 2. Every (epoch, position) is delivered
exactly once, in order, with the oracle's sample and bytes (or its error at
that position), and nothing before a checkpoint is served again. A smaller
case does the same for tar shards with one trainer count change, and one
checks the daemon's refusals. A node cut after its first response message
(relays in front of the daemons count what each node was asked for) leaves
behind what it sent: those ids are never requested again, with the Python
client and with the C++ one (`nearprep fleet-read`). The torch
adapter with 2 DataLoader workers gives the sequence of 0 workers, and
resumes across world sizes and worker counts exactly once. The Python
FleetClient's tests run on both receive paths (grpcio and the native
module: the `transport` fixture), and a relay that goes silent without a
reset checks the request deadline on each. The
network-namespace case (a node that stops
answering without a reset) is in test_fleet_netns.py.
"""

import array
import fcntl
import glob
import hashlib
import os
import pickle
import subprocess
import termios
import threading
import time

import numpy as np
import pytest

import nearprep
from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose
from conftest import NEARPREPD, ROOT, fleet_daemon, metrics_value

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")

C = 12
G = 12
SEED = 4242
BLOCK, WINDOW = 3, 5
REQ = dict(height=24, width=24, dtype="uint8", crop="random_resized", flip_probability=0.5)
# Node -> partitions held: every partition on exactly 2 nodes.
PLACEMENT = {"a": list(range(0, 8)), "b": list(range(4, 12)),
             "c": list(range(0, 4)) + list(range(8, 12))}


def run(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


def start_daemon(tmp, name, fmt, root, manifest=None):
    return fleet_daemon(tmp, name, root, fmt=fmt, manifest=manifest,
                        manifest_check="crc32c" if manifest else None).start()


def build_fleet(tmp, fmt):
    src = str(tmp / "src")
    if not os.path.isdir(src):
        run("mkdataset", "--out", src, "--classes", "3", "--per-class", "40", "--with-bad-files")
    shards = str(tmp / f"shards-{fmt}")
    run("pack", "--source", src, "--out", shards, "--format", fmt, "--shard-size", "160KiB")
    manifest = str(tmp / f"{fmt}.nearprep-manifest")
    run("manifest", "--root", shards, "--format", fmt, "--partitions", str(C), "--out", manifest)
    m = fp.load_manifest(manifest)
    assert m.num_partitions == C, "too few shards for C partitions: lower --shard-size"
    daemons = {}
    for node, parts in PLACEMENT.items():
        root = tmp / f"node-{fmt}-{node}"
        root.mkdir()
        for p in parts:
            for s in m.shards[m.partition_shard[p]:m.partition_shard[p + 1]]:
                os.link(os.path.join(shards, s.name), root / s.name)
        daemons[node] = start_daemon(tmp, f"{fmt}-{node}", fmt, str(root), manifest)
    oracle_d = start_daemon(tmp, f"{fmt}-oracle", fmt, shards)
    return m, manifest, daemons, oracle_d


def oracle_for(oracle_d, manifest_path, m, epoch):
    """[(sample id, sha256 | 'error:CODE')] per global position of `epoch`."""
    by_id = {}
    with nearprep.Client(oracle_d.target, native=False) as c:
        for b in c.batches("ds", batch_size=32, seed=SEED, epoch=epoch, shuffle=False, **REQ):
            for i, sid in enumerate(b.sample_ids.tolist()):
                by_id[sid] = hashlib.sha256(np.ascontiguousarray(b.images[i]).tobytes()).hexdigest()
            for e in b.errors:
                by_id[e.sample_id] = f"error:{e.code}"
    assert len(by_id) == m.num_samples
    lines = run("fleet-plan", "--manifest", manifest_path, "--seed", str(SEED), "--epoch",
                str(epoch), "--block", str(BLOCK), "--window", str(WINDOW),
                "--global-batch", str(G)).split("\n")[:-1]
    plan = [int(line.split()[1]) for line in lines if not line.startswith("#")]
    assert sorted(plan) == list(range(m.num_samples))
    return [(sid, by_id[sid]) for sid in plan]


def check_transport(fc):
    """Under the `transport` fixture ($NEARPREP_NATIVE), the FleetClient
    receives on that path (no silent fallback to grpcio)."""
    want = {"1": "native", "0": "grpcio"}.get(os.environ.get("NEARPREP_NATIVE", ""))
    if want:
        assert fc.transport == want, (fc.transport, want)


class Log:
    """What the trainers received: (epoch, position) -> record."""

    def __init__(self):
        self.lock = threading.Lock()
        self.got = {}
        self.dups = []
        self.order_errors = []

    def add(self, phase, k, fb):
        recs = [(p, sid, hashlib.sha256(np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
                for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids))]
        recs += [(e.position, e.sample_id, f"error:{e.code}") for e in fb.errors]
        recs.sort()
        with self.lock:
            for p, sid, h in recs:
                key = (fb.epoch, p)
                if key in self.got:
                    self.dups.append((key, phase, k))
                self.got[key] = (sid, h, phase, k)


def run_phase(targets, manifest, phase, trainers, ckpt, stop, log, hook=None, rpc_timeout=20.0,
              **kw):
    """Trainers 0..T-1 in threads from checkpoint `ckpt` until (epoch, batch)
    `stop`; returns the checkpoint where they stop and the clients' stats."""
    stats, errors = [], []

    def trainer(k):
        try:
            with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                             window=WINDOW, global_batch=G, trainers=trainers, rank=k,
                             prefetch=2, rpc_timeout=rpc_timeout, probe_interval=0.2, **REQ, **kw) as fc:
                check_transport(fc)
                c = ckpt
                last = None
                while (c.epoch, c.next_batch) < stop:
                    stop_batch = stop[1] if c.epoch == stop[0] else None
                    for fb in fc.resume(c, stop_batch=stop_batch):
                        if last is not None and (fb.epoch, fb.batch) != (last[0], last[1] + 1) \
                                and not (fb.epoch == last[0] + 1 and fb.batch == 0):
                            log.order_errors.append((k, last, (fb.epoch, fb.batch)))
                        pos = [p for p in fb.positions] + [e.position for e in fb.errors]
                        lo, hi = fp.GlobalPlan(fc.manifest.partition_start, fp.PlanParams(
                            seed=SEED, epoch=fb.epoch, block_samples=BLOCK, window=WINDOW,
                            global_batch=G)).slice(fb.batch, k, trainers)
                        if sorted(pos) != list(range(lo, hi)) or fb.positions != sorted(fb.positions):
                            log.order_errors.append((k, "slice", fb.epoch, fb.batch, pos))
                        last = (fb.epoch, fb.batch)
                        log.add(phase, k, fb)
                        if hook:
                            hook(k, fb)
                    c = fc.checkpoint()
                stats.append(dict(fc.stats))
        except Exception as e:  # reported by the main thread
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=trainer, args=(k,)) for k in range(trainers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a trainer hung"
    assert not errors, errors
    return fp.Checkpoint(ckpt.manifest_hash, SEED, BLOCK, WINDOW, G, C, *stop), stats


@pytest.fixture(scope="module")
def tfrecord_fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    m, manifest, daemons, oracle_d = build_fleet(tmp, "tfrecord")
    yield tmp, m, manifest, daemons, oracle_d
    for d in list(daemons.values()) + [oracle_d]:
        d.kill()


def test_daemons_report_placement(tfrecord_fleet):
    _, m, _, daemons, _ = tfrecord_fleet
    for node, d in daemons.items():
        info = nearprep.Client(d.target, native=False).dataset("ds")
        assert info.manifest_hash == m.hash
        assert info.num_partitions == C
        assert list(info.partitions_held) == PLACEMENT[node]
        assert info.num_samples == m.num_samples


def revive(daemons):
    """Restarts (on their ports) the fixture's daemons an earlier test killed."""
    for d in daemons.values():
        if d.proc.poll() is not None:
            d.start()


def epoch_arrays(fc, epoch):
    """{position: (sample id, image bytes | 'error:CODE')} of a one-trainer epoch."""
    check_transport(fc)
    got = {}
    for fb in fc.epoch(epoch):
        for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
            assert p not in got
            got[p] = (sid, np.ascontiguousarray(fb.images[i]).tobytes())
        for e in fb.errors:
            assert e.position not in got
            got[e.position] = (e.sample_id, f"error:{e.code}")
    return got


def check_relay_log(log, num_samples, owed):
    """From the relays' log: no id delivered by any node is requested again,
    every id is delivered, and exactly the ids in `owed` (requested from
    the failed node, not delivered by it) are requested twice."""
    asked, delivered_ids = {}, set()
    for ev in log:
        if ev[0] == "request":
            for i in ev[3]:
                assert i not in delivered_ids, f"id {i} requested again after delivery"
                asked[i] = asked.get(i, 0) + 1
        elif ev[0] == "deliver":
            delivered_ids.update(ev[3])
    assert delivered_ids == set(range(num_samples))
    assert {i for i, n in asked.items() if n > 1} == owed
    assert all(asked[i] == 2 for i in owed)


def victim_relay(relays, m, epoch, oracle):
    """The relay serving the most decodable samples of global batch 0 of
    `epoch` (relay ports, hence the rendezvous assignment, vary from run to
    run); 3 or more, so that with messages of 2 it has more than one to
    send."""
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=epoch, block_samples=BLOCK, window=WINDOW, global_batch=G))
    holders = {p: [relays[n].target for n, parts in PLACEMENT.items() if p in parts]
               for p in range(C)}
    load = {}
    for pos in range(G):
        part = plan.at(pos)[1]
        t = choose(part, holders[part])
        load[t] = load.get(t, 0) + (not oracle[pos][1].startswith("error:"))
    victim_t = max(load, key=lambda t: (load[t], t))
    assert load[victim_t] >= 3, load
    return next(r for r in relays.values() if r.target == victim_t)


@pytest.mark.parametrize("split, silent", [("messages", False), ("requests", False),
                                           ("messages", True)])
def test_partial_answer_of_a_failed_node_is_kept(tfrecord_fleet, split, silent, transport):
    """A node dies after its first response message (relays in front of the
    real daemons pass the bytes through and log every request and message):
    split="messages": one request per node and batch, answered 2 samples per
    message, cut after the first; split="requests": requests of at most 2
    ids, the node dies after answering the first. What the node delivered
    is kept: no delivered id is ever requested again, the ids it still owed
    are requested once more (from a replica), stats["kept_partial"] counts
    the kept samples, and the epoch equals, byte for byte, both a clean run
    on the daemons and the single-node oracle. silent: the node stops
    answering instead (no status, no reset): the request's deadline
    (rpc_timeout) ends it with DEADLINE_EXCEEDED, then the same."""
    from fake_server import Relay
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    epoch = 3
    # hedge=0: the relays count every request (a hedge would be one more).
    kw = dict(seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G, trainers=1,
              rank=0, prefetch=1, rpc_timeout=20.0, probe_interval=60.0, hedge=0, **REQ)
    with FleetClient([d.target for d in daemons.values()], "ds", manifest=manifest, **kw) as fc:
        clean = epoch_arrays(fc, epoch)
    oracle = oracle_for(oracle_d, manifest, m, epoch)

    log, lock = [], threading.Lock()
    relays = {node: Relay(d.target, log, lock, silent=silent) for node, d in daemons.items()}
    try:
        victim = victim_relay(relays, m, epoch, oracle)
        victim.die_after = 1
        split_kw = (dict(response_batch=2) if split == "messages" else
                    dict(max_request_ids=2))
        events = []
        if silent:
            kw["rpc_timeout"] = 1.5
        t0 = time.monotonic()
        with FleetClient([r.target for r in relays.values()], "ds", manifest=manifest,
                         on_event=events.append, **split_kw, **kw) as fc:
            got = epoch_arrays(fc, epoch)
            stats = dict(fc.stats)
        took = time.monotonic() - t0
    finally:
        for r in relays.values():
            r.stop()

    assert victim.dead and any("marked dead" in e for e in events), events
    dead_why = [e for e in events if "marked dead" in e]
    if silent:  # the deadline, not the relay's own give-up after 30 s
        assert len(dead_why) == 1 and "DEADLINE_EXCEEDED" in dead_why[0], events
        assert took < 15, took
    else:
        assert all("UNAVAILABLE" in e for e in dead_why), events
    # The victim delivered one message (its first), then failed: those ids
    # are the kept ones; the rest it was asked for it still owed.
    victim_delivered = [ev[3] for ev in log if ev[0] == "deliver" and ev[1] == victim.target]
    assert len(victim_delivered) == 1, victim_delivered
    kept = len(victim_delivered[0])
    owed = ({i for ev in log if ev[0] == "request" and ev[1] == victim.target for i in ev[3]}
            - set(victim_delivered[0]))
    victim_calls = [ev[0] for ev in log if ev[1] == victim.target]
    if split == "messages":  # one request, cut after its first message
        assert victim_calls == ["request", "deliver", "abort"], victim_calls
    else:  # the first request answered, the second refused
        assert victim_calls == ["request", "deliver", "request", "abort"], victim_calls
    assert kept > 0 and owed, (kept, owed)
    assert stats["kept_partial"] == kept, (stats, kept)
    # Nothing delivered is requested again; what was owed is asked for once more.
    check_relay_log(log, m.num_samples, owed)
    # Byte for byte: the clean run and the oracle.
    assert got == clean
    assert sorted(got) == list(range(m.num_samples))
    for p, (sid, data) in got.items():
        h = data if isinstance(data, str) else hashlib.sha256(data).hexdigest()
        assert (sid, h) == oracle[p], p


def fleet_read_args(targets, manifest, epoch, *extra):
    """The command line of `nearprep fleet-read` as one trainer of `epoch`
    with the fleet's request (`targets`: a list of host:port)."""
    return [CLI, "fleet-read", "--targets", ",".join(targets), "--manifest", manifest,
            "--seed", str(SEED), "--block", str(BLOCK), "--window", str(WINDOW),
            "--global-batch", str(G), "--trainers", "1", "--trainer", "0",
            "--epoch", str(epoch), "--height", "24", "--width", "24",
            "--crop", "random_resized", "--flip", "0.5", "--dtype", "uint8", *extra]


def parse_fleet_read(lines, epoch):
    """fleet-read's output lines ("EPOCH POSITION SAMPLE_ID SHA256|error:CODE")
    as {position: (sample id, sha256 | 'error:CODE')}; each position once,
    all of `epoch`."""
    got = {}
    for line in lines:
        e, pos, sid, h = line.split()
        assert int(e) == epoch and int(pos) not in got, line
        got[int(pos)] = (int(sid), h)
    return got


def fleet_read(targets, manifest, epoch, *extra, timeout=30):
    """`nearprep fleet-read` (the C++ FleetClient) as one trainer of `epoch`
    with the fleet's request: {position: (sample id, sha256 | 'error:CODE')},
    the final stats line as a dict, and the event lines."""
    args = fleet_read_args(targets, manifest, epoch, *extra)
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise AssertionError(f"fleet-read hung; its stderr ends:\n{(err or '')[-1500:]}") from None
    assert p.returncode == 0, p.stderr
    got = parse_fleet_read(p.stdout.splitlines(), epoch)
    words = p.stderr.strip().split("\n")[-1].split()
    stats = {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}
    events = [line for line in p.stderr.splitlines() if line.startswith("event: ")]
    return got, stats, events


@pytest.mark.parametrize("prefetch, silent", [(1, False), (2, False), (1, True)])
def test_cpp_partial_answer_of_a_failed_node_is_kept(tfrecord_fleet, prefetch, silent):
    """The C++ FleetClient (`nearprep fleet-read --response-batch 2`) behind
    logging relays: each node answers its share of a global batch 2 samples
    per message, and the node serving the most samples of batch 0 dies after
    its first message. What it delivered is kept: no delivered id is
    requested again from any node, only the ids it still owed are requested
    once more (from a replica), the client's kept_partial counts the kept
    samples, and the epoch's output (sample id and tensor sha256 per
    position) equals a clean run on the daemons and the single-node oracle.
    prefetch=1: batch by batch, so the victim's calls are exactly one
    request cut after one message; prefetch=2 (the default): its requests
    for batches 0 and 1 may overlap, and the one message may come from
    either. silent: the node stops answering without a reset (its HTTP/2
    layer still answers keepalive pings) and is failed over when its
    request's deadline (--rpc-timeout-ms) passes."""
    from fake_server import Relay
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    epoch = 3
    clean, clean_stats, _ = fleet_read([d.target for d in daemons.values()], manifest, epoch)
    assert clean_stats["failovers"] == 0, clean_stats
    oracle = oracle_for(oracle_d, manifest, m, epoch)

    log, lock = [], threading.Lock()
    relays = {node: Relay(d.target, log, lock, silent=silent) for node, d in daemons.items()}
    try:
        victim = victim_relay(relays, m, epoch, oracle)
        victim.die_after = 1
        t0 = time.monotonic()
        got, stats, events = fleet_read([r.target for r in relays.values()], manifest, epoch,
                                        "--response-batch", "2", "--prefetch", str(prefetch),
                                        "--rpc-timeout-ms", "2000", "--hedge", "0")
        took = time.monotonic() - t0
    finally:
        for r in relays.values():
            r.stop()

    assert victim.dead
    dead = [e for e in events if "marked dead" in e and victim.target in e]
    assert dead, events
    if silent:  # the request deadline, not the relay's own give-up after 30 s
        assert "DEADLINE_EXCEEDED" in dead[0], events
        assert took < 15, took
    victim_calls = [ev[0] for ev in log if ev[1] == victim.target]
    if prefetch == 1:
        # One request, cut after its first message; never asked again (the
        # probes find it dead).
        assert victim_calls == ["request", "deliver", "abort"], victim_calls
    assert victim_calls.count("deliver") == 1, victim_calls
    delivered_by_victim = next(ev[3] for ev in log if ev[0] == "deliver" and ev[1] == victim.target)
    owed = ({i for ev in log if ev[0] == "request" and ev[1] == victim.target for i in ev[3]}
            - set(delivered_by_victim))
    assert delivered_by_victim and owed, (delivered_by_victim, owed)
    assert stats["kept_partial"] == len(delivered_by_victim), stats
    assert stats["failovers"] >= 1, stats
    # Nothing delivered is requested again; what was owed is asked for once more.
    check_relay_log(log, m.num_samples, owed)
    # The same output as the clean run and the oracle.
    assert got == clean
    assert sorted(got) == list(range(m.num_samples))
    assert [got[p] for p in range(m.num_samples)] == oracle


def test_both_receive_paths_give_the_same_batches_and_fallback(tfrecord_fleet, monkeypatch):
    """native=True and native=False give identical FleetBatch objects (same
    types, dtypes, shapes, bytes; images an array the batch owns, not a view
    of a receive buffer); native=None takes the native module when it loads
    ($NEARPREP_NATIVE=0 turns it off) and falls back to grpcio when it does
    not, where native=True is refused."""
    from nearprep import transport as tr
    from nearprep.errors import InvalidArgumentError
    _, m, manifest, daemons, _ = tfrecord_fleet
    revive(daemons)
    targets = [d.target for d in daemons.values()]
    kw = dict(manifest=manifest, seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G,
              trainers=2, rank=1, prefetch=2, **REQ)
    monkeypatch.delenv("NEARPREP_NATIVE", raising=False)
    native_built = tr.load_native() is not None
    if not native_built and os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
        pytest.fail("nearprep._native was built but does not import")
    runs = {}
    for native in ([True, False] if native_built else [False]):
        with FleetClient(targets, "ds", native=native, **kw) as fc:
            assert fc.transport == ("native" if native else "grpcio")
            runs[native] = list(fc.epoch(1))
    if native_built:
        a, b = runs[True], runs[False]
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert (x.epoch, x.batch, x.positions, x.sample_ids, x.errors, x.served_by) == \
                (y.epoch, y.batch, y.positions, y.sample_ids, y.errors, y.served_by)
            for arr_x, arr_y in ((x.images, y.images), (x.labels, y.labels)):
                assert type(arr_x) is type(arr_y) is np.ndarray
                assert (arr_x.dtype, arr_x.shape) == (arr_y.dtype, arr_y.shape)
                assert arr_x.flags.owndata and arr_x.flags.writeable
                assert arr_x.tobytes() == arr_y.tobytes()
        with FleetClient(targets, "ds", **kw) as fc:
            assert fc.transport == "native"
        monkeypatch.setenv("NEARPREP_NATIVE", "0")
        with FleetClient(targets, "ds", **kw) as fc:
            assert fc.transport == "grpcio"
        monkeypatch.delenv("NEARPREP_NATIVE")
    # The module missing: auto falls back, True is refused.
    monkeypatch.setattr(tr, "load_native", lambda: None)
    with FleetClient(targets, "ds", **kw) as fc:
        assert fc.transport == "grpcio"
        fallback = list(fc.epoch(1))
    assert [(x.positions, x.images.tobytes()) for x in fallback] == \
        [(x.positions, x.images.tobytes()) for x in runs[False]]
    with pytest.raises(InvalidArgumentError, match="native"):
        FleetClient(targets, "ds", native=True, **kw)


def test_close_cancels_requests_in_flight(tfrecord_fleet, transport):
    """close() with prefetched requests still waiting on a node that went
    silent (rpc_timeout 60 s): they are cancelled and their threads joined
    at once, so none is left inside a gRPC call (a DataLoader worker that
    exits with one aborted: "terminate called without an active
    exception")."""
    from fake_server import Relay
    _, m, manifest, daemons, _ = tfrecord_fleet
    revive(daemons)
    log, lock = [], threading.Lock()
    relays = {node: Relay(d.target, log, lock, silent=True) for node, d in daemons.items()}
    try:
        fc = FleetClient([r.target for r in relays.values()], "ds", manifest=manifest,
                         seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G,
                         prefetch=3, rpc_timeout=60.0, probe_interval=60.0, hedge=0, **REQ)
        check_transport(fc)
        it = fc.epoch(1)
        next(it)            # batch 0; batches 1 and 2 were requested with it
        time.sleep(0.5)     # ... and have arrived
        for r in relays.values():
            r.dead = True
        next(it)            # requests batch 3 (never answered), yields batch 1
        t_end = time.monotonic() + 5
        while not any(ev[0] == "abort" for ev in log) and time.monotonic() < t_end:
            time.sleep(0.02)
        assert any(ev[0] == "abort" for ev in log), "no request reached a silent relay"
        t0 = time.monotonic()
        fc.close()
        took = time.monotonic() - t0
        assert took < 5, took
        assert not any(t.is_alive() for t in fc._pool._threads)
    finally:
        for r in relays.values():
            r.stop()


def test_daemon_refuses_ids_it_does_not_hold(tfrecord_fleet):
    _, m, _, daemons, _ = tfrecord_fleet
    c = nearprep.Client(daemons["a"].target, native=False)
    pb2 = c.connection().pb2
    outside = m.partition_start[9]  # partition 9: not on node a
    for ids, mh, code, text in [
            ([0, outside], m.hash, "FAILED_PRECONDITION", "sample_ids[1]: sample"),
            ([0, 0], m.hash, "INVALID_ARGUMENT", "sample_ids[1]"),
            ([m.num_samples], m.hash, "INVALID_ARGUMENT", "sample_ids[0]"),
            ([0], "f" * 64, "FAILED_PRECONDITION", "manifest_hash")]:
        req = c.request("ds", batch_size=4, **REQ)
        req.sample_ids.extend(ids)
        req.manifest_hash = mh
        with pytest.raises(nearprep.NearprepError) as ei:
            list(c.batches(request=req))
        assert ei.value.code == code and text in str(ei.value), str(ei.value)
    req = c.request("ds", batch_size=4, shuffle=True, **REQ)
    req.sample_ids.append(0)
    with pytest.raises(nearprep.NearprepError, match="shuffle"):
        list(c.batches(request=req))
    for ids, pbs in [([], 3), ([0], 1 << 21)]:
        req = c.request("ds", batch_size=4, **REQ)
        req.sample_ids.extend(ids)
        req.plan_block_samples = pbs
        with pytest.raises(nearprep.NearprepError) as ei:
            list(c.batches(request=req))
        assert ei.value.code == "INVALID_ARGUMENT", str(ei.value)
        assert "plan_block_samples" in str(ei.value), str(ei.value)


def block_parts(m, p, block):
    """Reads of partition p with plan blocks of `block`: one per (block,
    shard) pair, blocks counted from the partition's first sample."""
    parts, sid = set(), m.partition_start[p]
    for si in range(m.partition_shard[p], m.partition_shard[p + 1]):
        for _ in range(m.shards[si].records):
            parts.add(((sid - m.partition_start[p]) // block, si))
            sid += 1
    return len(parts)


def test_plan_blocks_are_read_once_each(tfrecord_fleet):
    """With plan_block_reads each node reads each plan block of the
    partitions it serves once (one read per block part), without it once
    per sample; the bytes are the same."""
    _, m, _, daemons, _ = tfrecord_fleet
    assert all(d.proc.poll() is None for d in daemons.values())
    targets = {d.target: node for node, d in daemons.items()}
    served = {node: [] for node in daemons}  # partitions each node serves
    for p in range(C):
        holders = [daemons[n].target for n, parts in PLACEMENT.items() if p in parts]
        served[targets[choose(p, holders)]].append(p)
    reads = lambda: {n: metrics_value(d, "nearprep_storage_reads_total", {"dataset": "ds"})
                     for n, d in daemons.items()}
    # Blocks other tests' plans left behind (a node cut mid-answer) stay
    # until they are idle and room is needed; this epoch's are all dropped.
    cached = lambda: [metrics_value(d, "nearprep_block_cache_bytes", {"dataset": "ds"})
                      for d in daemons.values()]
    cached_before = cached()
    got = {}
    for block_reads in (True, False):
        before = reads()
        with FleetClient([d.target for d in daemons.values()], "ds", manifest=m, seed=SEED,
                         block_samples=BLOCK, window=WINDOW, global_batch=G,
                         plan_block_reads=block_reads, **REQ) as fc:
            got[block_reads] = [
                (p, sid, hashlib.sha256(np.ascontiguousarray(img).tobytes()).hexdigest())
                for fb in fc.epoch(7) for p, sid, img in zip(fb.positions, fb.sample_ids, fb.images)]
        after = reads()
        for node, parts in served.items():
            samples = sum(m.partition_start[p + 1] - m.partition_start[p] for p in parts)
            want = sum(block_parts(m, p, BLOCK) for p in parts) if block_reads else samples
            assert after[node] - before[node] == want, (node, block_reads, samples)
            if block_reads:
                assert want < samples * 0.6, (want, samples)
    assert got[True] == got[False]
    assert len(got[True]) > m.num_samples * 0.8  # the rest are decode errors
    assert cached() == cached_before


def test_block_cache_stays_within_its_budget_under_many_trainers(tmp_path):
    """Issue 37 item 12: with block_cache_bytes below one plan block (4M
    against 64 JPEGs of ~100 KB), a block was still read into an empty
    cache: the gauge peaked at 6.1 MiB. 16 trainers (one plan each) against
    one node whose budget is 0.8 blocks: the gauge never exceeds it (main:
    1.7x), and the samples of blocks that do not fit are read alone."""
    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    manifest = str(tmp_path / "m.nearprep-manifest")
    run("mkdataset", "--out", src, "--classes", "4", "--per-class", "50")
    # Shards larger than a block: the plan's blocks are whole.
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord",
        "--shard-size", "8MiB")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", "2",
        "--out", manifest)
    m = fp.load_manifest(manifest)
    total = sum(os.path.getsize(os.path.join(shards, sh.name)) for sh in m.shards)
    block = 16
    budget = int(total / m.num_samples * block * 0.8)
    d = fleet_daemon(tmp_path, "budget", shards, manifest=manifest)
    with open(d.config, "a") as f:
        f.write(f"    block_cache_bytes: {budget}\n")
    d.start()
    try:
        gauge = lambda: metrics_value(d, "nearprep_block_cache_bytes", {"dataset": "ds"})
        peak, stop = [0.0], threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], gauge())
                time.sleep(0.002)

        got = []

        def trainer(seed):
            with FleetClient([d.target], "ds", manifest=m, seed=seed, block_samples=block,
                             window=32, global_batch=8, height=16, width=16, dtype="uint8",
                             native=False) as fc:
                got.append(sum(len(fb.positions) for fb in fc.epoch(0)))

        watcher = threading.Thread(target=watch)
        watcher.start()
        trainers = [threading.Thread(target=trainer, args=(seed,)) for seed in range(16)]
        for t in trainers:
            t.start()
        for t in trainers:
            t.join()
        stop.set()
        watcher.join()
        assert got == [m.num_samples] * 16
        assert 0 < peak[0] <= budget, (peak[0], budget)
        assert metrics_value(d, "nearprep_block_samples_total",
                             {"dataset": "ds", "kind": "bypass"}) > 0
    finally:
        d.kill()


def test_rendezvous_assignment_is_stable():
    nodes = ["n1:1", "n2:1", "n3:1"]
    for p in range(50):
        best = choose(p, nodes)
        # Removing another node never moves a partition.
        for other in nodes:
            if other != best:
                assert choose(p, [n for n in nodes if n != other]) == best


def test_four_then_three_with_a_kill_then_six_trainers(tfrecord_fleet, transport):
    tmp, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    n = m.num_samples
    batches = (n + G - 1) // G
    assert n % G != 0, "want a short last batch"
    oracle = {e: oracle_for(oracle_d, manifest, m, e) for e in (1, 2)}
    assert any(h.startswith("error:") for _, h in oracle[1]), "no bad record in the dataset"
    targets = [d.target for d in daemons.values()]
    log = Log()
    start = fp.Checkpoint(m.hash, SEED, BLOCK, WINDOW, G, C, 1, 0)

    # 1. Four trainers, epoch 1 batches [0, 4).
    ck1, _ = run_phase(targets, manifest, 1, 4, start, (1, 4), log)
    served_1 = set(log.got)

    # 2. Three trainers from the checkpoint into epoch 2; node b is killed
    #    while trainer 0 is at epoch 1 batch 6 (others are mid-step).
    killed = threading.Event()

    def kill_b(k, fb):
        if k == 0 and (fb.epoch, fb.batch) == (1, 6) and not killed.is_set():
            killed.set()
            daemons["b"].kill()

    events = []
    ck2, stats2 = run_phase(targets, manifest, 2, 3, ck1, (2, 3), log, hook=kill_b,
                            on_event=events.append)
    assert killed.is_set()
    assert sum(s["failovers"] for s in stats2) > 0 or any("marked dead" in e for e in events)
    served_2 = set(log.got) - served_1
    assert min(served_2) >= (1, 4 * G), "served something before checkpoint 1 again"

    # 3. Six trainers to the end of epoch 2 (node b stays down).
    run_phase(targets, manifest, 3, 6, ck2, (3, 0), log)
    served_3 = set(log.got) - served_1 - served_2
    assert min(served_3) >= (2, 3 * G), "served something before checkpoint 2 again"

    assert not log.dups, log.dups[:5]
    assert not log.order_errors, log.order_errors[:5]
    expected = {(e, p) for e in (1, 2) for p in range(n)}
    assert set(log.got) == expected
    bad = [(key, log.got[key][:2], oracle[key[0]][key[1]])
           for key in sorted(expected) if log.got[key][:2] != oracle[key[0]][key[1]]]
    assert not bad, bad[:5]
    # The last batch is short, not padded.
    last = [p for (e, p) in expected if e == 2 and p >= (batches - 1) * G]
    assert len(last) == n - (batches - 1) * G < G


def test_tar_fleet_resume_with_other_trainer_count(tmp_path_factory, transport):
    tmp = tmp_path_factory.mktemp("fleet_tar")
    m, manifest, daemons, oracle_d = build_fleet(tmp, "tar")
    try:
        oracle = oracle_for(oracle_d, manifest, m, 0)
        targets = [d.target for d in daemons.values()]
        log = Log()
        start = fp.Checkpoint(m.hash, SEED, BLOCK, WINDOW, G, C, 0, 0)
        ck, _ = run_phase(targets, manifest, 1, 2, start, (0, 5), log)
        run_phase(targets, manifest, 2, 12, ck, (1, 0), log)
        assert not log.dups and not log.order_errors
        assert sorted(log.got) == [(0, p) for p in range(m.num_samples)]
        assert all(log.got[(0, p)][:2] == oracle[p] for p in range(m.num_samples))
    finally:
        for d in list(daemons.values()) + [oracle_d]:
            d.kill()


def test_trainer_count_must_divide_global_batch(tfrecord_fleet):
    _, m, manifest, daemons, _ = tfrecord_fleet
    with pytest.raises(ValueError, match="divide"):
        FleetClient([daemons["a"].target], "ds", manifest=manifest, global_batch=12,
                    trainers=5, rank=0, **REQ)


def test_checksum_mismatch_is_not_served(tmp_path):
    """A replica whose shard differs from the manifest (same size, one byte
    flipped) does not hold that partition (manifest_check: crc32c), so the
    client's assignment never sends it there."""
    src = str(tmp_path / "src")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "20")
    shards = str(tmp_path / "shards")
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord", "--shard-size", "160KiB")
    manifest = str(tmp_path / "m.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", "4", "--out", manifest)
    m = fp.load_manifest(manifest)
    root = tmp_path / "node"
    root.mkdir()
    for s in m.shards:
        data = bytearray(open(os.path.join(shards, s.name), "rb").read())
        if s.partition == 2 and s is m.shards[m.partition_shard[2]]:
            data[len(data) // 2] ^= 0xFF
        (root / s.name).write_bytes(bytes(data))
    d = start_daemon(tmp_path, "crc", "tfrecord", str(root), manifest)
    try:
        info = nearprep.Client(d.target, native=False).dataset("ds")
        assert list(info.partitions_held) == [0, 1, 3]
        assert "CRC-32C" in open(d.log, errors="replace").read()
    finally:
        d.kill()


def test_torch_adapter_rank_and_world_size(tfrecord_fleet, monkeypatch, transport):
    torch = pytest.importorskip("torch")
    from nearprep.fleet_torch import FleetIterableDataset
    _, m, manifest, daemons, _ = tfrecord_fleet
    targets = [d.target for d in daemons.values() if d.proc.poll() is None]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = FleetIterableDataset(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                              window=WINDOW, global_batch=G, **REQ)
    assert (ds.rank, ds.world_size) == (1, 3)
    ds.set_epoch(1)
    plan = fp.GlobalPlan(m.partition_start, fp.PlanParams(seed=SEED, epoch=1, block_samples=BLOCK,
                                                          window=WINDOW, global_batch=G))
    it = iter(ds)
    for g in range(2):
        images, labels = next(it)
        lo, hi = plan.slice(g, 1, 3)
        assert images.shape[0] + len(ds.last_errors) == hi - lo
        assert images.shape[1:] == (24, 24, 3) and labels.dtype == torch.int64
    state = ds.state_dict()
    assert (state["epoch"], state["next_batch"]) == (1, 2)
    ds2 = FleetIterableDataset(targets, "ds", manifest=manifest, rank=0, world_size=4, seed=SEED,
                               block_samples=BLOCK, window=WINDOW, global_batch=G, **REQ)
    ds2.load_state_dict(state)
    images, _ = next(iter(ds2))
    lo, hi = plan.slice(2, 0, 4)
    assert images.shape[0] <= hi - lo


def torch_items(loader, ds, plan, rank, world, stop=None):
    """Iterates `loader` (a FleetDataLoader over `ds`), checking each item
    against ds.state_dict() and the plan: returns [(global batch,
    {position: (label, image bytes | 'error:CODE')})] in the order received."""
    out = []
    it = iter(loader)
    for images, labels in it:
        st = ds.state_dict()
        e, g = st["epoch"], st["next_batch"] - 1
        if g < 0:  # the epoch's last batch was consumed: the next one starts
            e, g = e - 1, plan.num_batches - 1
        lo, hi = plan.slice(g, rank, world)
        bad = {err.position: f"error:{err.code}" for err in ds.last_errors}
        good = [p for p in range(lo, hi) if p not in bad]
        assert len(good) == images.shape[0] == labels.shape[0]
        got = {p: (int(labels[i]), images[i].numpy().tobytes()) for i, p in enumerate(good)}
        got.update({p: (None, h) for p, h in bad.items()})
        out.append((g, got))
        if stop is not None and len(out) == stop:
            break
    del it  # stops the workers
    return out


def test_torch_loader_workers(tfrecord_fleet, monkeypatch, transport):
    """FleetDataLoader with num_workers=2 (spawned workers, each with its own
    FleetClient taking every second global batch) yields exactly the
    sequence of num_workers=0, and state_dict() in the main process names
    the batch after the last one received although the workers ran ahead.
    Resumes are exactly once with the clean run's bytes: fresh workers,
    world 1 -> no workers, world 2; no workers, world 3 -> persistent
    workers, world 1; and persistent workers stopped mid-epoch -> the same
    workers (the start reaches them through shared memory)."""
    torch = pytest.importorskip("torch")
    from nearprep.fleet_torch import FleetDataLoader, FleetIterableDataset
    _, m, manifest, daemons, _ = tfrecord_fleet
    revive(daemons)
    targets = [d.target for d in daemons.values()]
    epoch = 1
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=epoch, block_samples=BLOCK, window=WINDOW, global_batch=G))
    nb = plan.num_batches
    with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                     window=WINDOW, global_batch=G, **REQ) as fc:
        clean = epoch_arrays(fc, epoch)
        labels_of = {p: int(fb.labels[i]) for fb in fc.epoch(epoch)
                     for i, p in enumerate(fb.positions)}
    expect = {p: ((labels_of[p], v[1]) if p in labels_of else (None, v[1]))
              for p, v in clean.items()}

    def dataset(world, rank):
        ds = FleetIterableDataset(targets, "ds", manifest=manifest, rank=rank, world_size=world,
                                  seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G,
                                  prefetch=1, **REQ)
        ds.set_epoch(epoch)
        return ds

    def phase(world, workers, stop, state, got):
        """Every rank of a world from `state` for `stop` batches (None: to
        the end); adds to `got` (no position twice); returns the state."""
        states = set()
        for rank in range(world):
            ds = dataset(world, rank)
            if state is not None:
                ds.load_state_dict(state)
            seq = torch_items(FleetDataLoader(ds, num_workers=workers), ds, plan, rank, world,
                              stop)
            if stop is not None:
                assert len(seq) == stop
            add(got, seq)
            states.add(tuple(sorted(ds.state_dict().items())))
        assert len(states) == 1, states  # every rank stands at the same global batch
        return dict(states.pop())

    def add(got, seq):
        for _, part in seq:
            assert not set(part) & set(got), "a position delivered twice"
            got.update(part)

    ds0 = dataset(1, 0)
    seq0 = torch_items(FleetDataLoader(ds0, num_workers=0), ds0, plan, 0, 1)
    assert [g for g, _ in seq0] == list(range(nb))
    assert {p: v for _, got in seq0 for p, v in got.items()} == expect

    # Fresh workers (the default), stopped after 4 batches although they ran
    # ahead; world 2 without workers goes on from batch 4.
    got = {}
    state = phase(1, 2, 4, None, got)
    assert (state["epoch"], state["next_batch"]) == (epoch, 4)
    state = phase(2, 0, None, state, got)
    assert got == expect
    assert (state["epoch"], state["next_batch"]) == (epoch + 1, 0)

    # Persistent workers: the same sequence as without workers.
    ds = dataset(1, 0)
    loader = FleetDataLoader(ds, num_workers=2, persistent_workers=True)
    assert torch_items(loader, ds, plan, 0, 1) == seq0
    assert (ds.state_dict()["epoch"], ds.state_dict()["next_batch"]) == (epoch + 1, 0)
    pids = [w.pid for w in loader._loader._iterator._workers]
    # World 3 without workers for 3 batches, then these workers go on.
    got = {}
    ds.load_state_dict(phase(3, 0, 3, None, got))
    add(got, torch_items(loader, ds, plan, 0, 1))
    assert got == expect
    # Stopped mid-epoch, resumed by the same workers.
    ds.set_epoch(epoch)
    first = torch_items(loader, ds, plan, 0, 1, stop=5)
    ds.load_state_dict(ds.state_dict())
    assert first + torch_items(loader, ds, plan, 0, 1) == seq0
    # Only the last batch left: the second worker has none.
    last = dict(ds.state_dict(), epoch=epoch, next_batch=nb - 1)
    ds.load_state_dict(last)
    assert torch_items(loader, ds, plan, 0, 1) == seq0[-1:]
    assert [w.pid for w in loader._loader._iterator._workers] == pids  # never restarted
    # The shared start stays behind when the dataset is pickled elsewhere.
    assert pickle.loads(pickle.dumps(ds)).state_dict() == ds.state_dict()
    del loader

    # A plain DataLoader's worker refuses (its main process could not keep
    # state_dict() right); checked in-process with a stand-in worker info.
    monkeypatch.setattr(torch.utils.data, "get_worker_info",
                        lambda: type("Info", (), {"id": 0, "num_workers": 2})())
    with pytest.raises(RuntimeError, match="FleetDataLoader"):
        next(iter(dataset(1, 0)))
    monkeypatch.undo()
    for bad, field in ((dict(batch_size=4), "batch_size"), (dict(num_workers=-1), "num_workers")):
        with pytest.raises(ValueError, match=field):
            FleetDataLoader(dataset(1, 0), **bad)


def test_cpp_fleet_client_matches_oracle(tfrecord_fleet):
    """`nearprep fleet-read` (the C++ FleetClient) over the same fleet: 3
    trainers' slices of epoch 1 cover every position once with the oracle's
    sample ids and tensor bytes (node b may be down by now: its partitions
    then come from their other replicas)."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    oracle = oracle_for(oracle_d, manifest, m, 1)
    targets = ",".join(d.target for d in daemons.values())
    got = {}
    for k in range(3):
        out = run("fleet-read", "--targets", targets, "--manifest", manifest, "--seed", str(SEED),
                  "--block", str(BLOCK), "--window", str(WINDOW), "--global-batch", str(G),
                  "--trainers", "3", "--trainer", str(k), "--epoch", "1", "--height", "24",
                  "--width", "24", "--crop", "random_resized", "--flip", "0.5", "--dtype", "uint8")
        for line in out.split("\n")[:-1]:
            e, p, sid, h = line.split()
            assert (int(e), int(p)) not in got
            got[(int(e), int(p))] = (int(sid), h)
    assert sorted(got) == [(1, p) for p in range(m.num_samples)]
    bad = [p for p in range(m.num_samples) if got[(1, p)] != oracle[p]]
    assert not bad, [(p, got[(1, p)], oracle[p]) for p in bad[:3]]


def test_no_live_replica_waits_and_reports_then_continues(tfrecord_fleet, transport):
    """Both replicas of partitions 8-11 down (b and c): the trainer waits and
    reports through on_wait, never skips or substitutes; when b comes back on
    its port the epoch completes with the oracle's bytes, exactly once."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    oracle = oracle_for(oracle_d, manifest, m, 2)
    for d in daemons.values():
        if d.proc.poll() is None and d is not daemons["a"]:
            d.kill()
    waits = []
    got = {}
    errors = []

    def trainer():
        try:
            with FleetClient([d.target for d in daemons.values()], "ds", manifest=manifest,
                             seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G,
                             trainers=1, rank=0, rpc_timeout=10.0, probe_interval=0.2,
                             on_wait=waits.append, **REQ) as fc:
                check_transport(fc)
                for fb in fc.epoch(2):
                    for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
                        assert p not in got
                        got[p] = (sid, hashlib.sha256(
                            np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
                    for e in fb.errors:
                        assert e.position not in got
                        got[e.position] = (e.sample_id, f"error:{e.code}")
        except Exception as e:
            errors.append(repr(e))

    t = threading.Thread(target=trainer)
    t.start()
    deadline = time.monotonic() + 30
    while not waits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waits, "the client did not report waiting"
    assert "no live replica for partitions" in waits[0]
    assert len(got) < m.num_samples
    daemons["b"].start()  # same port
    t.join(timeout=60)
    assert not t.is_alive() and not errors, errors
    assert sorted(got) == list(range(m.num_samples))
    assert all(got[p] == oracle[p] for p in range(m.num_samples))


def test_checkpoint_of_another_plan_is_refused(tfrecord_fleet):
    _, m, manifest, daemons, _ = tfrecord_fleet
    with FleetClient([daemons["a"].target], "ds", manifest=manifest, seed=SEED,
                     block_samples=BLOCK, window=WINDOW, global_batch=G, **REQ) as fc:
        other = fp.Checkpoint("0" * 64, SEED, BLOCK, WINDOW, G, C, 1, 3)
        with pytest.raises(ValueError, match="checkpoint"):
            next(fc.resume(other))
        c = fc.checkpoint(1, (m.num_samples + G - 1) // G)  # end of epoch 1 -> epoch 2, batch 0
        assert (c.epoch, c.next_batch) == (2, 0)


def test_torch_state_past_the_epochs_end_is_refused(tfrecord_fleet):
    """FleetIterableDataset.load_state_dict of a state with next_batch 10^9
    (issue 23 item 9) used to be taken, and the next iteration yielded
    nothing: refused naming the field and its range."""
    pytest.importorskip("torch")
    from nearprep.fleet_torch import FleetIterableDataset
    _, m, manifest, daemons, _ = tfrecord_fleet
    nb = (m.num_samples + G - 1) // G
    ds = FleetIterableDataset([daemons["a"].target], "ds", manifest=manifest, rank=0,
                              world_size=1, seed=SEED, block_samples=BLOCK, window=WINDOW,
                              global_batch=G, **REQ)
    state = ds.state_dict()
    for value in (10 ** 9, nb):
        with pytest.raises(ValueError, match=f"next_batch must be in \\[0, {nb}\\)"):
            ds.load_state_dict(dict(state, next_batch=value))
    ds.load_state_dict(dict(state, next_batch=nb - 1))
    assert ds.state_dict()["next_batch"] == nb - 1


def routed_samples(daemons, m, epoch, routing, oracle):
    """{target: decodable samples it serves in `epoch`} when one trainer
    reads the whole epoch with `routing`: the clients' choose() (spread: by
    global batch) over every partition's holders, from the plan."""
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=epoch, block_samples=BLOCK, window=WINDOW, global_batch=G))
    holders = {p: [daemons[n].target for n, ps in PLACEMENT.items() if p in ps]
               for p in range(C)}
    out = {d.target: 0 for d in daemons.values()}
    for pos in range(m.num_samples):
        part = plan.at(pos)[1]
        t = choose(part, holders[part], pos // G if routing == "spread" else None)
        out[t] += not oracle[pos][1].startswith("error:")
    return out


def samples_sent(daemons):
    return {d.target: metrics_value(d, "nearprep_samples_sent_total", {"dataset": "ds"})
            for d in daemons.values()}


@pytest.mark.parametrize("client", ["python", "cpp"])
def test_replica_routing_spread_every_node_serves(tfrecord_fleet, client):
    """replica_routing "spread" (Python) / --replica-routing spread (C++):
    one trainer's epoch is byte for byte the oracle's, every node serves,
    and each node's nearprep_samples_sent_total grows by exactly what
    choose() routes to it, under "first" and "spread" alike (so both
    clients pick the Python function's nodes). Hedging off: a hedge would
    send samples to a second node."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    oracle = oracle_for(oracle_d, manifest, m, 1)
    targets = [d.target for d in daemons.values()]
    served = {}
    for routing in ("first", "spread"):
        before = samples_sent(daemons)
        if client == "python":
            with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                             window=WINDOW, global_batch=G, replica_routing=routing,
                             hedge=None, rpc_timeout=20.0, **REQ) as fc:
                got = {p: (sid, v if isinstance(v, str) else hashlib.sha256(v).hexdigest())
                       for p, (sid, v) in epoch_arrays(fc, 1).items()}
                assert fc.stats["failovers"] == 0
        else:
            out = run("fleet-read", "--targets", ",".join(targets), "--manifest", manifest,
                      "--seed", str(SEED), "--block", str(BLOCK), "--window", str(WINDOW),
                      "--global-batch", str(G), "--epoch", "1", "--height", "24",
                      "--width", "24", "--crop", "random_resized", "--flip", "0.5",
                      "--dtype", "uint8", "--replica-routing", routing, "--hedge", "0")
            got = {}
            for line in out.split("\n")[:-1]:
                e, p, sid, h = line.split()
                assert int(p) not in got
                got[int(p)] = (int(sid), h)
        assert sorted(got) == list(range(m.num_samples))
        bad = [p for p in range(m.num_samples) if got[p] != oracle[p]]
        assert not bad, (routing, [(p, got[p], oracle[p]) for p in bad[:3]])
        after = samples_sent(daemons)
        served[routing] = {t: after[t] - before[t] for t in targets}
        assert served[routing] == routed_samples(daemons, m, 1, routing, oracle), routing
    assert all(n > 0 for n in served["spread"].values()), served
    if client == "cpp":
        p = subprocess.run([CLI, "fleet-read", "--targets", ",".join(targets), "--manifest",
                            manifest, "--replica-routing", "round-robin"],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "--replica-routing: must be first or spread" in p.stderr
    else:
        with pytest.raises(ValueError, match="replica_routing: must be one of first, spread"):
            FleetClient(targets, "ds", manifest=manifest, replica_routing="round-robin")


def test_replica_routing_spread_survives_a_kill(tfrecord_fleet):
    """With replica_routing "spread", a node SIGKILLed after the first
    global batch: the rest of the epoch comes from the other replicas,
    every position once with the oracle's bytes."""
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    oracle = oracle_for(oracle_d, manifest, m, 2)
    got = {}
    with FleetClient([d.target for d in daemons.values()], "ds", manifest=manifest, seed=SEED,
                     block_samples=BLOCK, window=WINDOW, global_batch=G,
                     replica_routing="spread", rpc_timeout=20.0, probe_interval=0.2,
                     **REQ) as fc:
        for fb in fc.epoch(2):
            for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
                assert p not in got
                got[p] = (sid, hashlib.sha256(
                    np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
            for e in fb.errors:
                assert e.position not in got
                got[e.position] = (e.sample_id, f"error:{e.code}")
            if fb.batch == 0:
                daemons["a"].kill()
        stats = dict(fc.stats)
    revive(daemons)
    assert sorted(got) == list(range(m.num_samples))
    bad = [p for p in range(m.num_samples) if got[p] != oracle[p]]
    assert not bad, [(p, got[p], oracle[p]) for p in bad[:3]]
    assert stats["failovers"] >= 1, stats


@pytest.mark.parametrize("routing", ["first", "spread"])
def test_cpp_fleet_client_fails_over_mid_read(tmp_path_factory, routing):
    """The C++ FleetClient (`nearprep fleet-read`, one trainer, with
    --replica-routing first and spread) while a node
    is SIGKILLed mid-read: the rest of the epoch comes from the other
    replicas, every position exactly once, in order, with the oracle's sample
    and bytes, and the client reports at least one failover.

    No timing decides whether the reader asks the dead node again: its
    stdout is a pipe of one page that the test leaves unread until the
    victim is dead, so the reader (which flushes each global batch and
    fetches one batch ahead) cannot request the epoch's last global batch
    before then; the victim is a node serving part of that batch."""
    tmp = tmp_path_factory.mktemp("fleet_cpp_kill")
    m, manifest, daemons, oracle_d = build_fleet(tmp, "tfrecord")
    proc = None
    r_fd = w_fd = None
    try:
        oracle = oracle_for(oracle_d, manifest, m, 0)
        plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
            seed=SEED, epoch=0, block_samples=BLOCK, window=WINDOW, global_batch=G))
        last = plan.num_batches - 1
        # The node serving the most samples of the last global batch (ports,
        # hence the rendezvous assignment, vary from run to run).
        load = {}
        for pos in range(last * G, m.num_samples):
            part = plan.at(pos)[1]
            node = choose(part, [daemons[n].target for n, ps in PLACEMENT.items() if part in ps],
                          last if routing == "spread" else None)
            load[node] = load.get(node, 0) + 1
        victim = next(d for d in daemons.values() if d.target == max(load, key=load.get))
        # The reader writes batch g's lines before it asks for batch g + 2
        # (ReadBatch(g + 1) fetches g + 1 and g + 2): it can only ask for the
        # last batch once the lines of batches 0 .. last-2 left the pipe.
        r_fd, w_fd = os.pipe()
        fcntl.fcntl(w_fd, fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
        capacity = fcntl.fcntl(w_fd, fcntl.F_GETPIPE_SZ)
        before_last = sum(len(f"0 {p} {oracle[p][0]} {oracle[p][1]}\n")
                          for p in range((last - 1) * G))
        assert before_last > capacity, (before_last, capacity)
        targets = ",".join(d.target for d in daemons.values())
        proc = subprocess.Popen(
            [CLI, "fleet-read", "--targets", targets, "--manifest", manifest, "--seed", str(SEED),
             "--block", str(BLOCK), "--window", str(WINDOW), "--global-batch", str(G),
             "--trainers", "1", "--trainer", "0", "--epoch", "0", "--height", "24",
             "--width", "24", "--crop", "random_resized", "--flip", "0.5", "--dtype", "uint8",
             "--replica-routing", routing],
            stdout=w_fd, stderr=subprocess.PIPE, text=True)
        os.close(w_fd)
        w_fd = None
        # Mid-read: the first lines are out (unread, still in the pipe).
        deadline = time.monotonic() + 60
        avail = array.array("i", [0])
        while fcntl.ioctl(r_fd, termios.FIONREAD, avail) == 0 and avail[0] == 0:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "fleet-read printed nothing in 60 s"
            time.sleep(0.01)
        victim.kill()
        with os.fdopen(r_fd, "r") as out:
            r_fd = None
            text = out.read()
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 0, err
        got = {}
        for line in text.split("\n")[:-1]:
            e, p, sid, h = line.split()
            assert int(e) == 0
            assert int(p) not in got, f"position {p} delivered twice"
            got[int(p)] = (int(sid), h)
        assert list(got) == list(range(m.num_samples)), "positions out of order or missing"
        bad = [p for p in range(m.num_samples) if got[p] != oracle[p]]
        assert not bad, [(p, got[p], oracle[p]) for p in bad[:3]]
        assert f"node {victim.target} marked dead" in err, err
        stats = err.strip().split("\n")[-1].split()
        failovers = int(stats[stats.index("failovers") + 1])
        assert failovers >= 1, err
    finally:
        for fd in (r_fd, w_fd):
            if fd is not None:
                os.close(fd)
        if proc is not None and proc.poll() is None:
            proc.kill()
        for d in list(daemons.values()) + [oracle_d]:
            d.kill()
