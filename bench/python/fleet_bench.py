#!/usr/bin/python3
"""Fleet client: a trainer's batches assembled from 3 nodes vs served by 1.

    PYTHONPATH=client/python:build/python /usr/bin/python3 bench/python/fleet_bench.py \
        --build build [--source ../shared/datasets/imagenet-sample-200] [--epochs 2] \
        [--transport grpcio,native]

Packs the source images into TFRecord shards (`nearprep pack`), writes a
manifest with C partitions (`nearprep manifest`), and measures one trainer
(T = 1) reading whole epochs three ways, alternating, the same request each
time (seed, crop, uint8 output):
  single    nearprep.Client.batches() on one daemon holding every shard
            (the ordinary single-node mode: the baseline)
  fleet-1   nearprep.fleet.FleetClient on that same one daemon (manifest)
  fleet-3   FleetClient over 3 daemons each holding a third of the
            partitions (no replicas), so every global batch is assembled
            from 3 nodes
  fleet-3s  (with --sample-reads) fleet-3 with plan_block_reads=False:
            the nodes read every sample alone instead of each plan block
            once (StreamBatchesRequest.plan_block_samples)
each once per receive path in --transport (default grpcio,native:
nearprep.transport; `single:native` is Client(native=True)), all modes
interleaved in every repeat, so the paths are compared in the same run.
With --torch-workers 0,2 it also measures nearprep.fleet_torch's
FleetDataLoader over the 3 daemons with that many DataLoader workers
(`torch-W`: each epoch starts its workers afresh, as a training loop's
`for batch in loader` does by default; `torch-Wp`: persistent_workers=True,
workers started once, at the warm-up). --step-ms busy-waits that long in the trainer
process after every global batch (a stand-in for a training step that
holds the GIL). --replicate K packs K hard-linked copies of the source
images (a larger epoch: worker start-up is paid once per epoch).
--cold drops the page cache before every measured run.
It prints images/s, the daemons' read calls per image (read syscalls of the
daemon processes, /proc/PID/io syscr, summed), and the trainer process's CPU per image (user + system
of this process, i.e. the client's own work: planning, requests,
assembly; DataLoader workers' CPU is not in it), median of --repeats runs,
and the ratios to `single`. All daemons
run on this machine, so on a small box they compete with each other and with
the client for the same cores: the figures say what the client costs, not
how a real fleet scales.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import nearprep  # noqa: E402
import bench_daemon  # noqa: E402
from nearprep import fleet_plan as fp  # noqa: E402
from nearprep.fleet import FleetClient  # noqa: E402


def start_daemon(nearprepd, workdir, name, root, manifest, workers):
    return bench_daemon.start_daemon(nearprepd, workdir, root, name="ds", fmt="tfrecord",
                                     manifest=manifest, workers=workers, tag=name)


def read_calls(procs):
    """Read syscalls the processes made so far (/proc/PID/io syscr)."""
    n = 0
    for p in procs:
        with open(f"/proc/{p.pid}/io") as f:
            n += next(int(line.split()[1]) for line in f if line.startswith("syscr:"))
    return n


def measure(fn):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c0, t0 = time.process_time(), time.perf_counter()
    n = fn()
    return (n, time.perf_counter() - t0, time.process_time() - c0,
            resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--source", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="decode workers per daemon")
    ap.add_argument("--torch-workers", default="",
                    help="comma-separated DataLoader worker counts for torch-W modes")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="busy-wait per global batch in the trainer process")
    ap.add_argument("--replicate", type=int, default=1,
                    help="pack this many hard-linked copies of the source images")
    ap.add_argument("--sample-reads", action="store_true",
                    help="also fleet-3 with plan_block_reads=False (fleet-3s)")
    ap.add_argument("--shard-size", default="512KiB", help="nearprep pack --shard-size")
    ap.add_argument("--block", type=int, default=64, help="plan block B")
    ap.add_argument("--window", type=int, default=256, help="plan window W")
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache before every measured run (root: "
                         "/proc/sys/vm/drop_caches), so reads come from the disk")
    ap.add_argument("--transport", default="grpcio,native",
                    help="comma-separated receive paths: grpcio, native")
    a = ap.parse_args()
    transports = [t for t in a.transport.split(",") if t]
    if not transports or any(t not in ("grpcio", "native") for t in transports):
        ap.error(f"--transport: grpcio and/or native, got {a.transport!r}")
    torch_workers = [int(w) for w in a.torch_workers.split(",") if w != ""]
    if a.replicate < 1:
        ap.error("--replicate: must be >= 1")
    cli = os.path.join(a.build, "client", "cpp", "nearprep")
    nearprepd = os.path.join(a.build, "server", "daemon", "nearprepd")
    req = dict(height=a.size, width=a.size, dtype="uint8", crop="random_resized",
               flip_probability=0.5)
    procs = []
    loaders = {}  # (workers, persistent) -> FleetDataLoader
    with tempfile.TemporaryDirectory(prefix="fleet_bench_") as tmp:
        source = a.source
        if a.replicate > 1:
            source = bench_daemon.replicate_image_folder(a.source, a.replicate,
                                                         os.path.join(tmp, "source"))
        shards = os.path.join(tmp, "shards")
        subprocess.run([cli, "pack", "--source", source, "--out", shards, "--format",
                        "tfrecord", "--shard-size", a.shard_size], check=True,
                       capture_output=True)
        manifest = os.path.join(tmp, "ds.nearprep-manifest")
        subprocess.run([cli, "manifest", "--root", shards, "--format", "tfrecord",
                        "--partitions", str(a.partitions), "--out", manifest],
                       check=True, capture_output=True)
        m = fp.load_manifest(manifest)
        try:
            p, single = start_daemon(nearprepd, tmp, "all", shards, manifest, a.workers)
            procs.append(p)
            thirds = []
            for i in range(3):
                root = os.path.join(tmp, f"node{i}")
                os.makedirs(root)
                for part in range(i, m.num_partitions, 3):
                    for s in m.shards[m.partition_shard[part]:m.partition_shard[part + 1]]:
                        os.link(os.path.join(shards, s.name), os.path.join(root, s.name))
                p, t = start_daemon(nearprepd, tmp, f"n{i}", root, manifest, a.workers)
                procs.append(p)
                thirds.append(t)

            def step():
                if a.step_ms > 0:
                    end = time.perf_counter() + a.step_ms / 1000
                    while time.perf_counter() < end:
                        pass

            def run_single(tr, epoch):
                n = 0
                with nearprep.Client(single, native=tr == "native") as c:
                    for b in c.batches("ds", batch_size=a.global_batch, seed=1, epoch=epoch,
                                       shuffle=True, **req):
                        n += len(b)
                        step()
                return n

            def run_fleet(tr, targets, epoch, block_reads=True):
                n = 0
                with FleetClient(targets, "ds", manifest=m, seed=1, global_batch=a.global_batch,
                                 block_samples=a.block, window=a.window,
                                 plan_block_reads=block_reads, trainers=1, rank=0, prefetch=3,
                                 native=tr == "native", **req) as fc:
                    assert fc.transport == tr
                    for b in fc.epoch(epoch):
                        n += len(b.positions)
                        step()
                return n

            def run_torch(tr, workers, persistent, epoch):
                from nearprep.fleet_torch import FleetDataLoader, FleetIterableDataset
                key = (tr, workers, persistent)
                if key not in loaders or not persistent:
                    ds = FleetIterableDataset(thirds, "ds", manifest=m, rank=0, world_size=1,
                                              seed=1, global_batch=a.global_batch, prefetch=3,
                                              native=tr == "native", **req)
                    loaders[key] = FleetDataLoader(
                        ds, num_workers=workers, persistent_workers=persistent)
                loader = loaders[key]
                loader.set_epoch(epoch)
                n = 0
                for images, _ in loader:
                    n += images.shape[0]
                    step()
                return n

            modes = {}
            for tr in transports:
                modes[f"single:{tr}"] = lambda e, tr=tr: run_single(tr, e)
                modes[f"fleet-1:{tr}"] = lambda e, tr=tr: run_fleet(tr, [single], e)
                modes[f"fleet-3:{tr}"] = lambda e, tr=tr: run_fleet(tr, thirds, e)
                if a.sample_reads:
                    modes[f"fleet-3s:{tr}"] = lambda e, tr=tr: run_fleet(tr, thirds, e,
                                                                         block_reads=False)
                for w in torch_workers:
                    modes[f"torch-{w}:{tr}"] = lambda e, w=w, tr=tr: run_torch(tr, w, False, e)
                    if w > 0:
                        modes[f"torch-{w}p:{tr}"] = lambda e, w=w, tr=tr: run_torch(tr, w, True, e)
            for fn in modes.values():  # warm the page cache and the indexes
                fn(0)
            res = {k: [] for k in modes}
            for r in range(a.repeats):
                for k, fn in modes.items():
                    if a.cold:
                        os.sync()
                        with open("/proc/sys/vm/drop_caches", "w") as f:
                            f.write("3\n")
                    r0 = read_calls(procs)
                    n, wall, cpu, faults = measure(
                        lambda: sum(fn(e) for e in range(1, 1 + a.epochs)))
                    res[k].append((n / wall, cpu / n * 1e6, faults / n,
                                   (read_calls(procs) - r0) / n))
            print(f"{m.num_samples} samples, {m.num_partitions} partitions, {len(m.shards)} shards "
                  f"of {a.shard_size}, "
                  f"G = {a.global_batch}, B = {a.block}, W = {a.window}, "
                  f"{a.size}x{a.size} uint8, {a.workers} worker(s)/daemon, "
                  f"step {a.step_ms:g} ms, {'cold' if a.cold else 'warm'} page cache, "
                  f"median of {a.repeats}, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(f"  ratios to single:{transports[0]}; per run (images/s, us/image) in "
                  f"repeat order")
            base = statistics.median(x[0] for x in res[f"single:{transports[0]}"])
            base_cpu = statistics.median(x[1] for x in res[f"single:{transports[0]}"])
            for k, xs in res.items():
                ips = statistics.median(x[0] for x in xs)
                cpu = statistics.median(x[1] for x in xs)
                faults = statistics.median(x[2] for x in xs)
                reads = statistics.median(x[3] for x in xs)
                runs = " ".join(f"({x[0]:.0f}, {x[1]:.0f})" for x in xs)
                print(f"  {k:16s} {ips:8.1f} images/s ({ips / base:5.2f}x)   "
                      f"daemon reads {reads:5.2f}/image   "
                      f"trainer CPU {cpu:7.1f} us/image ({cpu / base_cpu:5.2f}x)   "
                      f"{faults:6.1f} faults/image   {runs}")
        finally:
            loaders.clear()  # stops persistent workers before their daemons
            for p in procs:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
