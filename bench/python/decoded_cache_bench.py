#!/usr/bin/python3
"""Decode once per node: epoch 1 vs epochs 2..N with the decoded-image cache
off, on (the whole working set fits) and at half the working set.

    PYTHONPATH=client/python:build/python python3 bench/python/decoded_cache_bench.py \\
        --nearprepd build/server/daemon/nearprepd \\
        [--dataset-root ../shared/datasets/imagenet-sample-200] [--copies 3] \\
        [--epochs 4] [--fidelity tf_compat] [--core 0]

For each budget a fresh nearprepd (one worker, pinned to --core) serves an
image folder of --copies hard-linked copies of the dataset; the Python
client streams one epoch at a time (a new seed-1 epoch order each: the
random per-epoch order), float32 224x224 with the TF_COMPAT seed pipeline
(random resized crop, flip, brightness, saturation); --streams S runs S
concurrent streams of seeds 1..S per epoch. Per epoch it prints the
daemon's CPU seconds (/proc), images per server CPU second (images/s per
server core), images per wall second and, with the cache on, the hit rate
of that epoch (nearprep_decoded_cache_lookups_total from the metrics port).
The working set is the sum of height x width x 3 over the images (JPEG
headers read here). Each daemon's peak RSS is printed when it stops.
"""

import argparse
import os
import re
import struct
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import nearprep  # noqa: E402
import bench_daemon  # noqa: E402


def jpeg_size(path):
    """(height, width) from the SOF marker, or None."""
    with open(path, "rb") as f:
        data = f.read()
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        m = data[i + 1]
        if m in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB,
                 0xCD, 0xCE, 0xCF):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return h, w
        if m in (0xD8, 0x01) or 0xD0 <= m <= 0xD7:
            i += 2
            continue
        (n,) = struct.unpack(">H", data[i + 2:i + 4])
        i += 2 + n
    return None


def working_set_bytes(root):
    total, n = 0, 0
    for d, _, names in os.walk(root):
        for name in names:
            hw = jpeg_size(os.path.join(d, name))
            if hw:
                total += hw[0] * hw[1] * 3
                n += 1
    return total, n


def cache_lookups(metrics_target):
    """(hits, misses) summed over datasets."""
    text = urllib.request.urlopen(f"http://{metrics_target}/metrics", timeout=10).read().decode()
    hits = misses = 0.0
    for line in text.splitlines():
        m = re.match(r'nearprep_decoded_cache_lookups_total\{.*kind="(hit|miss)".*\}\s+(\S+)', line)
        if m:
            if m.group(1) == "hit":
                hits += float(m.group(2))
            else:
                misses += float(m.group(2))
    return hits, misses


def run(args, root, budget, label, kw):
    workdir = tempfile.mkdtemp(prefix="nearprep_dcache_")
    mport = os.path.join(workdir, "metrics_port")
    extra = ["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mport]
    if budget:
        extra += ["--decoded-cache-bytes", str(budget)]
    proc, target = bench_daemon.start_daemon(args.nearprepd, workdir, root, workers=1,
                                             core=args.core, tag=label, extra_args=extra)
    rows = []
    try:
        for _ in range(200):
            if os.path.exists(mport) and open(mport).read().strip():
                break
            time.sleep(0.05)
        metrics_target = f"127.0.0.1:{int(open(mport).read().strip())}"
        client = nearprep.Client(target)
        prev = cache_lookups(metrics_target)
        for epoch in range(args.epochs):
            cpu0, t0 = bench_daemon.proc_cpu_s(proc.pid), time.monotonic()
            counts = [0] * args.streams

            def stream(k):
                # Stream k: its own seed (its own order and draws).
                for b in client.batches("bench", seed=1 + k, epoch=epoch, batch_size=64, **kw):
                    counts[k] += b.images.shape[0]

            threads = [threading.Thread(target=stream, args=(k,)) for k in range(args.streams)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            n = sum(counts)
            wall = time.monotonic() - t0
            cpu = bench_daemon.proc_cpu_s(proc.pid) - cpu0
            now = cache_lookups(metrics_target)
            dh, dm = now[0] - prev[0], now[1] - prev[1]
            prev = now
            hit = dh / (dh + dm) if dh + dm else float("nan")
            rows.append((epoch + 1, n, cpu, n / cpu, n / wall, hit))
            print(f"{label:>14} epoch {epoch + 1}: {n} images, server CPU {cpu:.2f} s, "
                  f"{n / cpu:.0f} images/s per server core, {n / wall:.0f} images/s wall, "
                  f"hit rate {hit:.3f}", flush=True)
        print(f"{label:>14} peak RSS {bench_daemon.proc_hwm_mib(proc.pid):.0f} MiB", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nearprepd", required=True)
    ap.add_argument("--dataset-root",
                    default=os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200"))
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--fidelity", default="tf_compat", choices=["tf_compat", "torchvision"])
    ap.add_argument("--streams", type=int, default=1,
                    help="concurrent streams per epoch, seeds 1..S")
    ap.add_argument("--budgets", default="",
                    help="comma-separated budgets in MiB instead of off, 2x and "
                         "half the working set (0: off)")
    args = ap.parse_args()
    root = bench_daemon.replicate_image_folder(
        args.dataset_root, args.copies, tempfile.mkdtemp(prefix="nearprep_dcache_data_"))
    ws, n = working_set_bytes(root)
    print(f"{n} images, working set {ws / 2**20:.0f} MiB decoded", flush=True)
    if args.fidelity == "torchvision":
        kw = {"fidelity": "torchvision", "height": 224, "width": 224, "crop": "random_resized",
              "flip_probability": 0.5, "dtype": "float32", "layout": "NCHW",
              "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    else:
        kw = {"fidelity": "tf_compat", "height": 224, "width": 224, "crop": "random_resized",
              "flip_probability": 0.5, "brightness_max_delta": 32 / 255,
              "saturation": (0.5, 1.5), "dtype": "float32"}
    summary = []
    budgets = ((0, "off"), (2 * ws, "on"), (ws // 2, "half"))
    if args.budgets:
        budgets = tuple((int(b) << 20, f"{b} MiB" if int(b) else "off")
                        for b in args.budgets.split(","))
    for budget, label in budgets:
        rows = run(args, root, budget, label, kw)
        e1 = rows[0][3]
        rest = [r[3] for r in rows[1:]]
        hits = [r[5] for r in rows[1:]]
        summary.append((label, budget, e1, sum(rest) / len(rest), sum(hits) / len(hits)))
    print("\n| cache | budget | epoch 1 images/s per server core | epochs 2..N | ratio | hit rate 2..N |")
    print("|---|---|---|---|---|---|")
    for label, budget, e1, rest, hit in summary:
        print(f"| {label} | {budget / 2**20:.0f} MiB | {e1:.0f} | {rest:.0f} | {rest / e1:.2f}x | "
              f"{hit:.3f} |")


if __name__ == "__main__":
    main()
