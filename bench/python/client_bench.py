#!/usr/bin/python3
"""Python client vs C++ client throughput on the same nearprepd.

    PYTHONPATH=client/python:build/python /usr/bin/python3 bench/python/client_bench.py \
        --build build [--dataset-root ../shared/datasets/imagenet-sample-200]

Starts nearprepd (port 0) on the dataset unless --target is given, then for
each output dtype alternates runs of `nearprep stream` (the C++ client) and
of nearprep.Client.batches() in this process, the same request and epochs
each time, and reports images/s, MB/s and client CPU seconds per GB (the
CPU the client takes from a node that also runs the trainer), plus the
Python/C++ images/s ratio (target: >= 0.9). Median of --repeats runs.
"""

import argparse
import os
import re
import resource
import signal
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


def start_daemon(nearprepd, root, workers, workdir):
    return bench_daemon.start_daemon(nearprepd, workdir, root, workers=workers)


def run_cpp(cli, target, dataset, dtype, batch_size, epochs, height, width):
    cmd = [cli, "stream", "--target", target, "--dataset", dataset,
           "--batch-size", str(batch_size), "--dtype", dtype, "--epochs", str(epochs),
           "--height", str(height), "--width", str(width)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out, _ = proc.communicate()
    status = proc.returncode
    if status != 0:
        sys.exit(f"nearprep stream failed ({status}): {out}")
    m = re.search(r"streamed (\d+) images .* in ([\d.]+) s: ([\d.]+) images/s, ([\d.]+) MB/s", out)
    if not m:
        sys.exit(f"cannot parse nearprep stream output: {out}")
    return dict(images=int(m.group(1)), seconds=float(m.group(2)),
                images_per_s=float(m.group(3)), mb_per_s=float(m.group(4)))


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_python(target, dataset, dtype, batch_size, epochs, height, width):
    client = nearprep.Client(target)
    images = nbytes = 0
    cpu0 = time.process_time()
    start = time.monotonic()
    for epoch in range(epochs):
        for b in client.batches(dataset, batch_size=batch_size, dtype=dtype, epoch=epoch,
                                height=height, width=width):
            images += len(b)
            nbytes += b.images.nbytes
    secs = time.monotonic() - start
    cpu = time.process_time() - cpu0
    client.close()
    return dict(images=images, seconds=secs, images_per_s=images / secs,
                mb_per_s=nbytes / secs / 1e6, cpu_s_per_gb=cpu / (nbytes / 1e9))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nearprepd", help="default: BUILD/server/daemon/nearprepd")
    ap.add_argument("--cli", help="default: BUILD/client/cpp/nearprep")
    ap.add_argument("--dataset-root", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--target", help="use this running daemon instead")
    ap.add_argument("--dataset", default="bench", help="dataset name with --target")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--dtypes", default="uint8,float32")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--height", type=int, default=224)
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()

    cli = args.cli or os.path.join(args.build, "client", "cpp", "nearprep")
    if not os.access(cli, os.X_OK):
        sys.exit(f"C++ client {cli} not built (cmake --build build --target nearprep)")
    proc = None
    tmp = tempfile.TemporaryDirectory()
    if args.target:
        target = args.target
    else:
        nearprepd = args.nearprepd or os.path.join(args.build, "server", "daemon", "nearprepd")
        if not os.access(nearprepd, os.X_OK):
            sys.exit(f"{nearprepd} not built")
        if not os.path.isdir(args.dataset_root):
            sys.exit(f"dataset {args.dataset_root} missing (nearprep mkdataset --out DIR)")
        proc, target = start_daemon(nearprepd, args.dataset_root, args.workers, tmp.name)
        args.dataset = "bench"
    try:
        # Warm the page cache and the daemon.
        run_python(target, args.dataset, "uint8", args.batch_size, 1, args.height, args.width)
        print(f"{'dtype':8} {'client':7} {'images/s':>9} {'MB/s':>8} {'client CPU s/GB':>16}")
        ratios = {}
        for dtype in args.dtypes.split(","):
            py, cpp = [], []
            for rep in range(args.repeats):
                # Alternate which client goes first: other load on the node
                # then biases neither.
                if rep % 2:
                    py.append(run_python(target, args.dataset, dtype, args.batch_size,
                                         args.epochs, args.height, args.width))
                c0 = children_cpu()
                r = run_cpp(cli, target, args.dataset, dtype, args.batch_size, args.epochs,
                            args.height, args.width)
                r["cpu_s_per_gb"] = (children_cpu() - c0) / (r["mb_per_s"] * r["seconds"] / 1e3)
                cpp.append(r)
                if rep % 2 == 0:
                    py.append(run_python(target, args.dataset, dtype, args.batch_size,
                                         args.epochs, args.height, args.width))
            for name, runs in (("C++", cpp), ("Python", py)):
                print(f"{dtype:8} {name:7} "
                      f"{statistics.median(r['images_per_s'] for r in runs):9.1f} "
                      f"{statistics.median(r['mb_per_s'] for r in runs):8.1f} "
                      f"{statistics.median(r['cpu_s_per_gb'] for r in runs):16.3f}")
            ratios[dtype] = (statistics.median(r["images_per_s"] for r in py) /
                             statistics.median(r["images_per_s"] for r in cpp))
        for dtype, ratio in ratios.items():
            verdict = "meets" if ratio >= 0.9 else "below"
            print(f"{dtype}: Python/C++ images/s = {ratio:.2f}x ({verdict} the 0.9x target)")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


if __name__ == "__main__":
    main()
