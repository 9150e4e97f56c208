#!/usr/bin/python3
"""Trainer-side cost per image: client CPU, wire bytes, compression cost.

    PYTHONPATH=client/python:build/python /usr/bin/python3 bench/python/trainer_cpu_bench.py \
        --build build [--before DIR] [--dataset-root ../shared/datasets/imagenet-sample-200]

Starts nearprepd (one worker) pinned to core --server-core with taskset and
runs every client pinned to --client-core, one process per run:

  - the Python client on its grpcio path and on its native path
    (nearprep._native), and the C++ client (`nearprep stream`),
  - for float32, uint8, and uint8 compressed (delta_zstd, gradient_zstd),
  - and, in the same run, the local pipelines a trainer would otherwise run
    on its own CPU: torchvision + PIL (decode, RandomResizedCrop, flip,
    ToTensor, Normalize; one torch thread) and nearprep's in-process
    pipeline (`nearprep bench --threads 1`, TF_COMPAT random resized crop).

Per configuration (median of --repeats runs): trainer CPU per image (user +
system CPU of the client process / images received; the Python clients
measure around the stream loop, the C++ client is its whole process), the
daemon's CPU per image (/proc/PID/stat of nearprepd over the run), wire
bytes per image (the daemon's bytes_sent counter) and their ratio to the
dataset's JPEG bytes per image, and images/s. Then the compression costs on
both sides relative to plain uint8, and the link speed below which
compression is faster end to end.

--before DIR: DIR holds an older build to compare uncompressed throughput
with (DIR/nearprepd, DIR/nearprep, DIR/python/ for the generated stubs and
the native module, DIR/client/python/ for the Python client): the float32
and uint8 runs are repeated against it, interleaved with the new build's.

Every figure is a ratio against a baseline measured in the same run: on a
shared machine absolute times move with the neighbours' load.
"""

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import bench_daemon  # noqa: E402  (beside this script)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

CONFIGS = ["float32:none", "uint8:none", "uint8:delta_zstd", "uint8:gradient_zstd",
           "uint8:gradient_zstd:-200"]
CLIENTS = ("grpcio", "native", "cpp")
CPP_COMPRESSION = {"none": "none", "delta_zstd": "delta",
                   "gradient_zstd": "gradient"}
TARGETS = {("native", "float32", "none"): 0.15, ("native", "uint8", "none"): 0.05}


# ---------------------------------------------------------------------------
# Worker mode: one measured client run in this (pinned) process.

def worker_stream(args):
    import nearprep  # noqa: the PYTHONPATH of this process decides which one
    client = nearprep.Client(args.target, native=(args.client == "native"))
    kw = dict(batch_size=args.batch_size, height=args.size, width=args.size,
              crop="random_resized", flip_probability=0.5, dtype=args.dtype)
    if args.compression != "none":
        kw["compression"] = args.compression
        kw["compression_level"] = args.level
    # Warm the channel (and the native module) outside the measurement.
    warm = 0
    for b in client.batches(args.dataset, max_batches=1, **kw):
        warm += len(b)
    images = 0
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    for epoch in range(args.epochs):
        for b in client.batches(args.dataset, epoch=epoch, shuffle=True, **kw):
            images += len(b)
            b.images[0, 0, 0]  # touch the batch as a trainer would
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    client.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps(dict(images=images, cpu_s=cpu, wall_s=wall, warm_images=warm,
                          transport=client.transport)))


def worker_torchvision(args):
    import torch
    from PIL import Image
    import torchvision.transforms as T
    torch.set_num_threads(1)
    files = dataset_files(args.dataset_root)
    tf = T.Compose([T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(),
                    T.ToTensor(), T.Normalize((0.485, 0.456, 0.406),
                                              (0.229, 0.224, 0.225))])
    for f in files[:8]:  # warm-up
        tf(Image.open(f).convert("RGB"))
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    images = 0
    for _ in range(args.epochs):
        for f in files:
            with open(f, "rb") as fh:
                img = Image.open(fh).convert("RGB")
            tf(img)
            images += 1
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps(dict(images=images, cpu_s=cpu, wall_s=wall)))


# ---------------------------------------------------------------------------
# Driver.

def dataset_files(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.join(d, n) for n in names]
    return sorted(out)


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(nearprepd, root, core, workdir, tag):
    return bench_daemon.start_daemon(nearprepd, workdir, root, workers=1, core=core, tag=tag)


class Build:
    """One build: daemon, C++ CLI, Python client path."""

    def __init__(self, name, nearprepd, cli, pythonpath):
        self.name, self.nearprepd, self.cli, self.pythonpath = name, nearprepd, cli, pythonpath
        self.proc = self.target = None

    def info(self):
        # The driver's own (new) client: GetServerInfo is compatible both ways.
        import nearprep
        if getattr(self, "_client", None) is None:
            self._client = nearprep.Client(self.target, native=False)
        i = self._client.info()
        return dict(sent=i.counters.bytes_sent, batches=i.counters.batches_sent)


def settled_info(build, expect_batches=None):
    deadline = time.monotonic() + 10
    while True:
        i = build.info()
        if expect_batches is None or i["batches"] >= expect_batches or \
                time.monotonic() > deadline:
            return i
        time.sleep(0.05)


def run_client(build, client, dtype, compression, args, level=0):
    """One measured run; returns dict(images, cpu_s, wall_s, server_cpu_s, wire_bytes)."""
    before = settled_info(build)
    s0 = proc_cpu_s(build.proc.pid)
    pin = ["taskset", "-c", str(args.client_core)]
    if client == "cpp":
        # Warm-up batch, then the measured stream (the whole process).
        cmd = [build.cli, "stream", "--target", build.target, "--dataset", "bench",
               "--batch-size", str(args.batch_size), "--dtype", dtype,
               "--height", str(args.size), "--width", str(args.size),
               "--crop", "rrc", "--flip", "0.5", "--epochs", str(args.epochs),
               "--shuffle"]
        if compression != "none":
            cmd += ["--compression", CPP_COMPRESSION[compression],
                    "--compression-level", str(level)]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(pin + cmd, capture_output=True, text=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            sys.exit(f"nearprep stream failed: {out.stdout}{out.stderr}")
        m = re.search(r"streamed (\d+) images .* in ([\d.]+) s:", out.stdout)
        res = dict(images=int(m.group(1)), wall_s=float(m.group(2)),
                   cpu_s=(r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
        batches = -(-res["images"] // args.batch_size)
        res["warm_images"] = 0
    else:
        env = dict(os.environ, PYTHONPATH=build.pythonpath,
                   NEARPREP_NATIVE="1" if client == "native" else "0")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "stream",
               "--target", build.target, "--client", client, "--dtype", dtype,
               "--compression", compression, "--level", str(level),
               "--batch-size", str(args.batch_size),
               "--size", str(args.size), "--epochs", str(args.epochs)]
        out = subprocess.run(pin + cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"{client} run failed: {out.stdout}{out.stderr}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        if res["transport"] != client:
            sys.exit(f"asked for the {client} path, got {res['transport']}")
        batches = -(-res["images"] // args.batch_size) + 1  # + warm-up batch
    after = settled_info(build, before["batches"] + batches)
    # The daemon served the warm-up batch too: per-image server figures
    # divide by every image it sent.
    res["served"] = res["images"] + res["warm_images"]
    res["server_cpu_s"] = proc_cpu_s(build.proc.pid) - s0
    res["wire_bytes"] = after["sent"] - before["sent"]
    return res


def run_local(kind, args, cli):
    pin = ["taskset", "-c", str(args.client_core)]
    if kind == "torchvision":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "torchvision",
               "--dataset-root", args.dataset_root, "--size", str(args.size),
               "--epochs", str(args.epochs)]
        out = subprocess.run(pin + cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"torchvision run failed: {out.stderr}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        return r["cpu_s"] / r["images"] * 1e3, None
    # nearprep bench --threads 1: the TF_COMPAT random-resized-crop row's
    # images/s at one thread (wall on one pinned core: an upper bound of CPU).
    out = subprocess.run(pin + [cli, "bench", "--dataset", args.dataset_root,
                                "--threads", "1", "--batch-size", str(args.batch_size)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"nearprep bench failed: {out.stdout}{out.stderr}")
    rows = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s", line)
        if m and m.group(2) == "1":
            rows[m.group(1).strip()] = float(m.group(3))
    return None, (rows, out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=("stream", "torchvision"))
    ap.add_argument("--target")
    ap.add_argument("--client")
    ap.add_argument("--dtype", default="uint8")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--level", type=int, default=0)
    ap.add_argument("--dataset", default="bench")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before", help="older build to compare throughput with")
    ap.add_argument("--dataset-root", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=1,
                    help="serve K copies of every image (an epoch of K x 200 images in one "
                         "stream): the steady state of a long epoch, where the per-stream "
                         "and per-epoch costs (call set-up, the short last batch) vanish")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="dtype:compression[:level],...")
    args = ap.parse_args()
    if args.worker == "stream":
        return worker_stream(args)
    if args.worker == "torchvision":
        return worker_torchvision(args)

    # The driver's own client (GetServerInfo counters) is the new one.
    sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(args.build, "python")]
    files = dataset_files(args.dataset_root)
    jpeg_per_image = sum(os.path.getsize(f) for f in files) / len(files)
    builds = [Build("new", os.path.join(args.build, "server", "daemon", "nearprepd"),
                    os.path.join(args.build, "client", "cpp", "nearprep"),
                    os.pathsep.join([os.path.join(ROOT, "client", "python"),
                                     os.path.join(args.build, "python")]))]
    if args.before:
        builds.append(Build("before", os.path.join(args.before, "nearprepd"),
                            os.path.join(args.before, "nearprep"),
                            os.pathsep.join([os.path.join(args.before, "client", "python"),
                                             os.path.join(args.before, "python")])))
    # dtype:compression[:level]
    configs = [tuple((c + ":0").split(":")[:3]) if c.count(":") == 1 else tuple(c.split(":"))
               for c in args.configs.split(",")]
    configs = [(d, c, int(l)) for d, c, l in configs]
    clients = args.clients.split(",")
    tmp = tempfile.TemporaryDirectory()
    serve_root = args.dataset_root
    if args.copies > 1:
        serve_root = bench_daemon.replicate_image_folder(
            args.dataset_root, args.copies, os.path.join(tmp.name, "data"))
    for b in builds:
        b.proc, b.target = start_daemon(b.nearprepd, serve_root, args.server_core,
                                        tmp.name, b.name)
    results = {}
    try:
        for b in builds:  # warm the page cache and the daemons
            run_client(b, "cpp", "uint8", "none", argparse.Namespace(**{**vars(args), "epochs": 1}))
        for rep in range(args.repeats):
            order = list(reversed(clients)) if rep % 2 else clients
            for dtype, comp, level in configs:
                for client in order:
                    # Alternate which build goes first: neither gets the
                    # warmer caches or the quieter neighbours every time.
                    for b in (builds if rep % 2 == 0 else builds[::-1]):
                        if b.name != "new" and comp != "none":
                            continue
                        r = run_client(b, client, dtype, comp, args, level)
                        results.setdefault((b.name, client, dtype, comp, level), []).append(r)
        tv_ms = statistics.median(run_local("torchvision", args, None)[0]
                                  for _ in range(max(1, args.repeats - 1)))
        _, (bench_line, bench_out) = run_local("nearprep", args, builds[0].cli)
    finally:
        for b in builds:
            b.proc.send_signal(signal.SIGTERM)
            b.proc.wait()

    def med(key, f):
        return statistics.median(f(r) for r in results[key])

    print(f"dataset: {len(files)} JPEGs x {args.copies} copies, "
          f"{jpeg_per_image / 1e3:.1f} KB per image; "
          f"{args.size}x{args.size}, batch {args.batch_size}, {args.epochs} epochs of "
          f"{len(files) * args.copies} images per run, "
          f"median of {args.repeats}; server: 1 worker on core {args.server_core}, "
          f"clients on core {args.client_core}")
    print(f"{'client':7} {'dtype':8} {'compression':14} {'client ms/img':>13} "
          f"{'server ms/img':>13} {'wire KB/img':>11} {'wire/JPEG':>9} {'images/s':>9}")
    for dtype, comp, level in configs:
        for client in clients:
            key = ("new", client, dtype, comp, level)
            cpu = med(key, lambda r: r["cpu_s"] / r["images"] * 1e3)
            srv = med(key, lambda r: r["server_cpu_s"] / r["served"] * 1e3)
            wire = med(key, lambda r: r["wire_bytes"] / r["served"])
            ips = med(key, lambda r: r["images"] / r["wall_s"])
            name = comp if comp == "none" else f"{comp}/{level or 1}"
            print(f"{client:7} {dtype:8} {name:14} {cpu:13.3f} {srv:13.2f} "
                  f"{wire / 1e3:11.1f} {wire / jpeg_per_image:9.2f} {ips:9.1f}")
    print(f"local torchvision+PIL (RandomResizedCrop, flip, ToTensor, Normalize), "
          f"1 thread: {tv_ms:.2f} ms CPU/img")
    for name, ips in bench_line.items():
        print(f"local in-process, 1 thread (nearprep bench): {name}: {1e3 / ips:.2f} ms/img "
              f"(wall on one pinned core)")

    print("\ntargets (native Python):")
    for (client, dtype, comp), limit in TARGETS.items():
        key = ("new", client, dtype, comp, 0)
        if key in results:
            v = med(key, lambda r: r["cpu_s"] / r["images"] * 1e3)
            print(f"  {dtype:8} {v:.3f} ms/img vs target <= {limit} ms/img: "
                  f"{'met' if v <= limit else 'NOT met'}; "
                  f"{tv_ms / v:.0f}x less than torchvision+PIL")

    print("\ncompression vs plain uint8 (same client, same run):")
    for _, comp, level in configs:
        if comp == "none":
            continue
        for client in clients:
            base = ("new", client, "uint8", "none", 0)
            key = ("new", client, "uint8", comp, level)
            if base not in results or key not in results:
                continue
            d_cli = med(key, lambda r: r["cpu_s"] / r["images"]) - \
                med(base, lambda r: r["cpu_s"] / r["images"])
            s_u = med(base, lambda r: r["server_cpu_s"] / r["served"])
            s_c = med(key, lambda r: r["server_cpu_s"] / r["served"])
            b_u = med(base, lambda r: r["wire_bytes"] / r["served"])
            b_c = med(key, lambda r: r["wire_bytes"] / r["served"])
            # One server core: uncompressed serves min(1/s_u, L/b_u) images/s,
            # compressed min(1/s_c, L/b_c). Compression wins while the link
            # is the limit of the uncompressed stream and the compressed one
            # still fits: L < b_u / s_c (per server core).
            breakeven = b_u / s_c * 8 / 1e9
            print(f"  {comp + '/' + str(level or 1):14} {client:7} bytes x{b_c / b_u:.3f}, "
                  f"server +{(s_c - s_u) * 1e3:.2f} ms/img ({s_c / s_u:.2f}x), "
                  f"client {'+' if d_cli >= 0 else ''}{d_cli * 1e3:.3f} ms/img; "
                  f"faster end to end below {breakeven:.2f} Gbit/s per server core")

    if args.before:
        print("\nuncompressed throughput, this build / before (images/s, same run):")
        for dtype, comp, level in configs:
            if comp != "none":
                continue
            for client in clients:
                kn, ko = ("new", client, dtype, comp, level), ("before", client, dtype, comp, level)
                new = med(kn, lambda r: r["images"] / r["wall_s"])
                old = med(ko, lambda r: r["images"] / r["wall_s"])
                cn = med(kn, lambda r: r["cpu_s"] / r["images"] * 1e3)
                co = med(ko, lambda r: r["cpu_s"] / r["images"] * 1e3)
                print(f"  {client:7} {dtype:8} {new:7.1f} / {old:7.1f} = {new / old:.2f}x; "
                      f"client CPU {cn:.3f} / {co:.3f} ms/img")
    if not bench_line:
        print(bench_out)


if __name__ == "__main__":
    main()
