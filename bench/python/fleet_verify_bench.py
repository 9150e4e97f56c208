#!/usr/bin/python3
"""The cost of verifying replicas (FleetClient(verify_fraction=...)).

    PYTHONPATH=client/python:build/python:tests/python /usr/bin/python3 \\
        bench/python/fleet_verify_bench.py --build build [--fractions 0,0.1] \\
        [--size 224] [--repeats 3] [--transport grpcio|native]

Generates a small dataset (`nearprep mkdataset`, --classes x --per-class
images), packs it into TFRecord shards, writes a manifest with --partitions
partitions and starts --replicas daemons that all hold every partition (no
relay: the client talks to the daemons). One trainer (T = 1) reads one
epoch per fraction per repeat, fractions interleaved, and the script prints
for each fraction the median over repeats of: epoch seconds, trainer CPU
per image (this process's user + system CPU, all its threads), server CPU
per image (the daemons' user + system CPU from /proc, summed), requests,
positions verified, mismatches, and whether the epoch equals the first
fraction's byte for byte (sha256 of every position's tensor). Daemons and
the trainer share the machine's cores.
"""

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import numpy as np  # noqa: E402
import bench_daemon  # noqa: E402
from nearprep import fleet_plan as fp  # noqa: E402
from nearprep.fleet import FleetClient  # noqa: E402


def epoch(targets, manifest, a, fraction, pids):
    kept = {}
    srv0 = sum(bench_daemon.proc_cpu_s(p) for p in pids)
    cpu0, t0 = time.process_time(), time.perf_counter()
    with FleetClient(targets, "ds", manifest=manifest, seed=3, block_samples=a.block,
                     window=a.window, global_batch=a.global_batch, height=a.size,
                     width=a.size, dtype="uint8", crop="random_resized",
                     native=(a.transport == "native"), verify_fraction=fraction) as fc:
        for fb in fc.epoch(0):
            for i, p in enumerate(fb.positions):
                kept[p] = fb.images[i]
        stats = dict(fc.stats)
    secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    srv = sum(bench_daemon.proc_cpu_s(p) for p in pids) - srv0
    # Hashed after the measurement: the benchmark's work, not the client's.
    got = {p: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
           for p, v in kept.items()}
    return secs, cpu, srv, got, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=128)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--fractions", default="0,0.1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", default="grpcio", choices=("grpcio", "native"))
    a = ap.parse_args()
    fractions = [float(x) for x in a.fractions.split(",")]
    cli = os.path.join(a.build, "client", "cpp", "nearprep")
    nearprepd = os.path.join(a.build, "server", "daemon", "nearprepd")
    procs = []
    with tempfile.TemporaryDirectory(prefix="fleet_verify_bench_") as tmp:
        shards, manifest = bench_daemon.make_fleet_dataset(
            cli, tmp, classes=a.classes, per_class=a.per_class, partitions=a.partitions)
        m = fp.load_manifest(manifest)
        try:
            targets = []
            for i in range(a.replicas):
                p, t = bench_daemon.start_daemon(nearprepd, tmp, shards, name="ds",
                                                 fmt="tfrecord", manifest=manifest,
                                                 workers=1, tag=f"n{i}")
                procs.append(p)
                targets.append(t)
            pids = [p.pid for p in procs]
            res = {f: [] for f in fractions}
            ref = None
            epoch(targets, manifest, a, 0.0, pids)  # warm-up (page cache, channels)
            for _ in range(a.repeats):
                for f in fractions:
                    secs, cpu, srv, got, stats = epoch(targets, manifest, a, f, pids)
                    if ref is None:
                        ref = got
                    res[f].append((secs, cpu, srv, stats,
                                   got == ref and len(got) == m.num_samples))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    n = m.num_samples
    print(f"{n} samples, {a.partitions} partitions on {a.replicas} replicas, "
          f"G={a.global_batch}, {a.size}x{a.size} uint8 random_resized, {a.transport}; "
          f"median of {a.repeats}")
    print(f"{'fraction':>8} {'epoch s':>8} {'trainer ms/img':>14} {'server ms/img':>13} "
          f"{'requests':>8} {'verified':>8} {'mismatch':>8} {'exact':>5}")
    for f, runs in res.items():
        med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
        st = runs[0][3]
        print(f"{f:8g} {med(0):8.3f} {med(1) / n * 1000:14.3f} {med(2) / n * 1000:13.3f} "
              f"{st['requests']:8d} {st['verified']:8d} {st['verify_mismatches']:8d} "
              f"{'yes' if all(r[4] for r in runs) else 'NO':>5}")


if __name__ == "__main__":
    main()
