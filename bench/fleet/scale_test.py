#!/usr/bin/env python3
"""Real-process fleet scale check (issue 31, item 5): 32 daemons on
loopback, 16 trainers (8 C++ `nearprep fleet-read`, 8 Python FleetClient
processes), one epoch of plan v2, one node SIGKILLed mid-epoch; every
position exactly once, with the sample id `nearprep fleet-plan` gives it.

    env PYTHONPATH=$PWD/client/python:$PWD/build/python:$PWD/tests/python \\
        NEARPREP_PROTO_PATH=$PWD/build/python \\
        NEARPREPD=$PWD/build/server/daemon/nearprepd \\
        NEARPREP_CLI=$PWD/build/client/cpp/nearprep \\
        /usr/bin/python3 bench/fleet/scale_test.py [--nodes 32] [--trainers 16]

The daemons all serve one synthetic TFRecord dataset (test_fleet_faults'
make_fleet_dataset: 2 classes, packed in 100 KiB shards, a manifest of
--partitions partitions; every node holds every partition, so the client's
rendezvous choice spreads the partitions over the 32 and a dead node's go to
their next-scoring nodes). Trainer k of T: ranks 0..T/2-1 are C++, the
others Python. The node killed is the one serving the most partitions,
once every trainer has printed its first batch. Prints the wall time, the
peak RSS of the daemons and the trainers, the open file descriptors of the
daemons, and exits 1 unless every position of the epoch came exactly once
with the plan's sample id (and the same tensor hash for a sample id read
by both clients is not checkable: each position is read once).
"""

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from nearprep import fleet_plan as fp  # noqa: E402
from nearprep.fleet import choose  # noqa: E402

SEED, BLOCK, WINDOW, K = 5, 4, 16, 4
REQ_CPP = ["--height", "16", "--width", "16", "--crop", "random_resized", "--dtype", "uint8"]

PY_TRAINER = r"""
import hashlib, sys
import numpy as np
from nearprep.fleet import FleetClient
targets, manifest, g, t, k, seed, block, window, kk = sys.argv[1:10]
with FleetClient(targets.split(","), "ds", manifest=manifest, seed=int(seed),
                 block_samples=int(block), window=int(window), global_batch=int(g),
                 trainers=int(t), rank=int(k), rpc_timeout=20.0, probe_interval=0.5,
                 plan_version=2, slice_partitions=int(kk), height=16, width=16,
                 crop="random_resized", dtype="uint8",
                 on_event=lambda m: print("event: " + m, file=sys.stderr, flush=True)) as fc:
    for fb in fc.epoch(0):
        for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
            h = hashlib.sha256(np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest()
            print(0, p, sid, h)
        for e in fb.errors:
            print(0, e.position, e.sample_id, "error:" + e.code)
        sys.stdout.flush()
    print("stats " + " ".join(f"{a} {b}" for a, b in sorted(fc.stats.items())), file=sys.stderr)
"""


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--trainers", type=int, default=16)
    ap.add_argument("--per-class", type=int, default=1024, help="2 classes")
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=1, help="each daemon's --workers")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args(argv)
    import pathlib
    from conftest import NEARPREPD, fleet_daemon
    from test_fleet_faults import CLI, make_fleet_dataset, run
    if not (CLI and NEARPREPD):
        raise SystemExit("set NEARPREPD and NEARPREP_CLI (or build them)")
    t_all = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="np-fleet-scale-"))
    shards, manifest = make_fleet_dataset(tmp, a.per_class, a.partitions)
    m = fp.load_manifest(manifest)
    g, t = a.global_batch, a.trainers
    lslice = g // t
    plan_lines = run("fleet-plan", "--manifest", manifest, "--seed", str(SEED), "--epoch", "0",
                     "--block", str(BLOCK), "--window", str(WINDOW), "--global-batch", str(g),
                     "--plan-version", "2", "--slice-partitions", str(K), "--slice-samples",
                     str(lslice)).split("\n")
    plan = [int(x.split()[1]) for x in plan_lines if x and not x.startswith("#")]
    assert sorted(plan) == list(range(m.num_samples)), "fleet-plan: not a permutation"
    print(f"dataset: {m.num_samples} samples, {m.num_partitions} partitions; G = {g}, T = {t}, "
          f"{(m.num_samples + g - 1) // g} global batches; plan v2 K = {K}, L = {lslice}",
          flush=True)
    daemons = []
    procs = []
    peak = {"daemon_rss_kib": 0, "daemon_fds": 0, "trainer_rss_kib": 0}
    ok = False
    try:
        t0 = time.monotonic()
        for i in range(a.nodes):
            daemons.append(fleet_daemon(tmp, f"n{i:02d}", shards, manifest=manifest,
                                        workers=a.workers).start(timeout=120))
        print(f"{a.nodes} daemons up in {time.monotonic() - t0:.1f} s", flush=True)
        targets = ",".join(d.target for d in daemons)
        # The node serving the most partitions (every node holds all of them).
        load = {}
        for part in range(m.num_partitions):
            n = choose(part, [d.target for d in daemons])
            load[n] = load.get(n, 0) + 1
        victim = next(d for d in daemons if d.target == max(load, key=load.get))
        outs = []
        t1 = time.monotonic()
        for k in range(t):
            out = open(tmp / f"trainer{k}.out", "w")
            err = open(tmp / f"trainer{k}.err", "w")
            if k < t // 2:
                args = [CLI, "fleet-read", "--targets", targets, "--manifest", manifest,
                        "--seed", str(SEED), "--block", str(BLOCK), "--window", str(WINDOW),
                        "--global-batch", str(g), "--trainers", str(t), "--trainer", str(k),
                        "--epoch", "0", "--plan-version", "2", "--slice-partitions", str(K),
                        "--rpc-timeout-ms", "20000", *REQ_CPP]
            else:
                args = [sys.executable, "-c", PY_TRAINER, targets, manifest, str(g), str(t),
                        str(k), str(SEED), str(BLOCK), str(WINDOW), str(K)]
            procs.append(subprocess.Popen(args, stdout=out, stderr=err))
            outs.append((out, err))
        # Kill the victim once every trainer has printed something (mid-epoch).
        deadline = time.monotonic() + a.timeout
        while not all(os.path.getsize(tmp / f"trainer{k}.out") > 0 for k in range(t)):
            if time.monotonic() > deadline:
                raise SystemExit("trainers printed nothing in time")
            if any(p.poll() is not None for p in procs):
                break  # one already ended: kill now anyway
            for d in daemons:
                peak["daemon_fds"] = max(peak["daemon_fds"], fds(d.proc.pid))
            time.sleep(0.05)
        victim.kill()
        killed_at = time.monotonic() - t1
        print(f"killed {victim.target} (serves {load[victim.target]} partitions) after "
              f"{killed_at:.1f} s", flush=True)
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise SystemExit("trainers did not finish in time")
            for d in daemons:
                if d.proc.poll() is None:
                    peak["daemon_fds"] = max(peak["daemon_fds"], fds(d.proc.pid))
                    peak["daemon_rss_kib"] = max(peak["daemon_rss_kib"], rss_kib(d.proc.pid))
            for p in procs:
                if p.poll() is None:
                    peak["trainer_rss_kib"] = max(peak["trainer_rss_kib"], rss_kib(p.pid))
            time.sleep(0.2)
        epoch_s = time.monotonic() - t1
        for d in daemons:
            if d.proc.poll() is None:
                peak["daemon_rss_kib"] = max(peak["daemon_rss_kib"], rss_kib(d.proc.pid))
        failed = [k for k, p in enumerate(procs) if p.returncode != 0]
        got, dups, wrong = {}, [], []
        failovers = 0
        for k in range(t):
            outs[k][0].close()
            outs[k][1].close()
            for line in open(tmp / f"trainer{k}.out"):
                e, pos, sid, h = line.split()
                pos, sid = int(pos), int(sid)
                if pos in got:
                    dups.append(pos)
                got[pos] = (sid, h, k)
                if plan[pos] != sid:
                    wrong.append((pos, sid, plan[pos]))
            err_text = open(tmp / f"trainer{k}.err").read()
            failovers += err_text.count(f"node {victim.target} marked dead")
        missing = [p for p in range(m.num_samples) if p not in got]
        errors = sum(1 for v in got.values() if v[1].startswith("error:"))
        print(f"epoch: {epoch_s:.1f} s; positions {len(got)} of {m.num_samples}, duplicates "
              f"{len(dups)}, missing {len(missing)}, wrong sample {len(wrong)}, decode errors "
              f"{errors}; trainers that saw the victim die: {failovers} of {t}; failed trainers "
              f"{failed}", flush=True)
        print(f"peak: daemon RSS {peak['daemon_rss_kib'] / 1024:.0f} MiB each (max), trainer "
              f"RSS {peak['trainer_rss_kib'] / 1024:.0f} MiB (max), daemon open fds "
              f"{peak['daemon_fds']} (max of one); children's max RSS "
              f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB", flush=True)
        for k in failed:
            print(f"trainer {k} exited {procs[k].returncode}: "
                  f"{open(tmp / f'trainer{k}.err').read()[-1500:]}", file=sys.stderr)
        ok = not (failed or dups or missing or wrong) and failovers >= 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in daemons:
            d.kill()
        if not a.keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'PASS' if ok else 'FAIL'}: total {time.monotonic() - t_all:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
