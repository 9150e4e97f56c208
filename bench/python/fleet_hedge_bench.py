#!/usr/bin/python3
"""Hedged requests (FleetClient(hedge=...)) against one slow replica.

    PYTHONPATH=client/python:build/python:tests/python /usr/bin/python3 \\
        bench/python/fleet_hedge_bench.py --build build [--delay-ms 300] [--every 10] \\
        [--hedge 0.9] [--hedge-min 0.02] [--hedge-samples 10] [--repeats 3] [--nodes 2]

Generates a small dataset (`nearprep mkdataset`, --classes x --per-class
images), packs it into TFRecord shards, writes a manifest with --partitions
partitions, and starts --nodes daemons (default 2) that all hold every
partition (--nodes replicas). Each daemon sits behind a relay (tests/python/fake_server.Relay:
passes bytes through); the relay in front of the node serving partition 0
(the victim) holds the first response message of every --every-th call
back by --delay-ms. One trainer (T = 1) reads one epoch, each mode once per
repeat, modes interleaved:
  clean         no delay, hedging off (the floor)
  clean+hedge   no delay, hedging on (its cost when nothing is slow)
  slow          the victim slow, hedging off
  slow+hedge    the victim slow, hedging on
and prints the median epoch time, the requests, hedges and hedge wins
(positions filled by a hedge), and whether the epoch equals the clean one
byte for byte (sha256 of every position's tensor). Daemons, relays and the
trainer share the machine's cores.
"""

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import numpy as np  # noqa: E402
import bench_daemon  # noqa: E402
from fake_server import Relay  # noqa: E402
from nearprep import fleet_plan as fp  # noqa: E402
from nearprep.fleet import FleetClient, choose  # noqa: E402


def epoch(targets, manifest, a, hedge):
    got = {}
    t0 = time.perf_counter()
    kw = (dict(hedge=a.hedge, hedge_min=a.hedge_min, hedge_samples=a.hedge_samples)
          if hedge else {})
    with FleetClient(targets, "ds", manifest=manifest, seed=3, block_samples=a.block,
                     window=a.window, global_batch=a.global_batch, height=a.size,
                     width=a.size, dtype="uint8", crop="random_resized",
                     native=(a.transport == "native"), **kw) as fc:
        for fb in fc.epoch(0):
            for i, p in enumerate(fb.positions):
                got[p] = hashlib.sha256(np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest()
        stats = dict(fc.stats)
    return time.perf_counter() - t0, got, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=300.0)
    ap.add_argument("--every", type=int, default=10, help="delay every N-th victim call")
    ap.add_argument("--hedge", type=float, default=0.9)
    ap.add_argument("--hedge-min", type=float, default=0.02)
    ap.add_argument("--hedge-samples", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", default="grpcio", choices=("grpcio", "native"))
    ap.add_argument("--nodes", type=int, default=2, help="daemons, each holding every partition")
    a = ap.parse_args()
    cli = os.path.join(a.build, "client", "cpp", "nearprep")
    nearprepd = os.path.join(a.build, "server", "daemon", "nearprepd")
    procs, relays = [], []
    with tempfile.TemporaryDirectory(prefix="fleet_hedge_bench_") as tmp:
        shards, manifest = bench_daemon.make_fleet_dataset(
            cli, tmp, classes=a.classes, per_class=a.per_class, partitions=a.partitions)
        m = fp.load_manifest(manifest)
        release = threading.Event()
        slow = {"on": False}
        try:
            for i in range(a.nodes):
                p, t = bench_daemon.start_daemon(nearprepd, tmp, shards, name="ds",
                                                 fmt="tfrecord", manifest=manifest,
                                                 workers=1, tag=f"n{i}")
                procs.append(p)
                relays.append(Relay(t, [], threading.Lock()))
            victim_t = choose(0, [r.target for r in relays])
            victim = next(r for r in relays if r.target == victim_t)

            def rewrite(b, req, call, index):
                if slow["on"] and index == 0 and call % a.every == a.every - 1:
                    release.wait(a.delay_ms / 1000.0)
                return None

            victim.rewrite = rewrite
            targets = [r.target for r in relays]
            modes = [("clean", False, False), ("clean+hedge", False, True),
                     ("slow", True, False), ("slow+hedge", True, True)]
            res = {name: [] for name, _, _ in modes}
            ref = None
            epoch(targets, manifest, a, False)  # warm-up (page cache, channels)
            for _ in range(a.repeats):
                for name, is_slow, hedge in modes:
                    slow["on"] = is_slow
                    victim.calls = 0  # the relay's call counter: the same calls held each time
                    secs, got, stats = epoch(targets, manifest, a, hedge)
                    if ref is None:
                        ref = got
                    res[name].append((secs, stats, got == ref and len(got) == m.num_samples))
        finally:
            release.set()
            for r in relays:
                r.stop()
            for p in procs:
                p.kill()
                p.wait()
    print(f"{m.num_samples} samples, {a.partitions} partitions on {a.nodes} replicas, "
          f"G={a.global_batch}, "
          f"{a.size}x{a.size} uint8, {a.transport}; victim holds every {a.every}th call "
          f"{a.delay_ms:g} ms; hedge={a.hedge} hedge_min={a.hedge_min} "
          f"hedge_samples={a.hedge_samples}; median of {a.repeats}")
    print(f"{'mode':<12} {'epoch s':>8} {'min s':>7} {'max s':>7} {'requests':>8} "
          f"{'hedges':>6} {'wins':>5} {'exact':>5}")
    for name, runs in res.items():
        secs = [r[0] for r in runs]
        mid = runs[secs.index(sorted(secs)[len(secs) // 2])][1]
        print(f"{name:<12} {statistics.median(secs):8.3f} {min(secs):7.3f} {max(secs):7.3f} "
              f"{mid['requests']:8d} {mid['hedges']:6d} {mid['hedge_wins']:5d} "
              f"{'yes' if all(r[2] for r in runs) else 'NO':>5}")


if __name__ == "__main__":
    main()
