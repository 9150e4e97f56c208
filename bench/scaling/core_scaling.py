#!/usr/bin/env python3
"""Core scaling: nearprepd against PyTorch's DataLoader + torchvision, by server cores.

    python3 bench/scaling/core_scaling.py --build build \
        [--dataset ../shared/datasets/imagenet-sample-200] [--cores 1,2,4] \
        [--trainer-cores 3] [--seconds 8] [--replicate 10] [--rows all]

For each N in --cores the "server" work is pinned to cores 0..N-1 (taskset /
sched_setaffinity) and the consumer to --trainer-cores; the rows:

- nearprep_tv_f32: nearprepd --workers N, FIDELITY_TORCHVISION train preset
  (RandomResizedCrop 224 + flip 0.5 + Normalize, float32 NCHW), consumed by
  the C++ load client (`nearprep load`, 4 streams) on the trainer cores;
- nearprep_tv_u8: the same preset as uint8 (PILToTensor bytes; the trainer
  normalises on its accelerator), 4x fewer bytes on the wire;
- nearprep_tf_f32: the seed pipeline, FIDELITY_TF_COMPAT (whole image
  bilinear to 224, flip, brightness 32/255, saturation [0.5, 1.5], clip),
  float32 NHWC;
- dataloader_tv_f32: torch.utils.data.DataLoader(num_workers=N,
  persistent_workers=True) over torchvision's ImageFolder with the same
  train preset (RandomResizedCrop(224, antialias=True),
  RandomHorizontalFlip, PILToTensor, ConvertImageDtype, Normalize), workers
  pinned to cores 0..N-1 with torch.set_num_threads(1), the main process on
  the first trainer core.

Batch 64; the shared images are replicated (hard links, else copies) to
--replicate x 200 samples, so an epoch is >= 2,000 samples; each row runs
--seconds of steady state after its first batch (the time to first batch is
reported apart). Reported per row: images/s, images/s per server core,
server CPU ms per image (utime+stime of nearprepd or of the DataLoader
workers), trainer CPU ms per image (the consumer process), peak RSS of the
serving processes (VmHWM; DataLoader: summed over the workers), and the
ratio nearprep / DataLoader at the same N for the torchvision preset.

This is the core-scaling companion of bench/peers (which also has the
TensorFlow and DALI rows); it needs only the project's binaries and a
Python with torch + torchvision, so it can run on a machine with many cores
and no PyPI. One repeat per (row, N), rows interleaved within each N.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_PY = os.path.join(HERE, "..", "python")
sys.path.insert(0, BENCH_PY)
from bench_daemon import (proc_cpu_s, proc_hwm_mib,  # noqa: E402
                          replicate_image_folder, start_daemon)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def cpu_list(cores):
    return ",".join(str(c) for c in cores)


def nearprep_row(args, data, n, row):
    tmp = tempfile.mkdtemp(prefix="np-scale-")
    daemon, target = start_daemon(args.nearprepd, tmp, data, workers=n,
                                  core=cpu_list(range(n)))
    try:
        req = ["--dataset", "bench", "--batch-size", "64", "--shuffle", "--seed", "1",
               "--height", "224", "--width", "224"]
        if row.startswith("nearprep_tv"):
            req += ["--fidelity", "torchvision", "--crop", "random_resized",
                    "--flip-probability", "0.5", "--layout", "nchw"]
            if row.endswith("f32"):
                req += ["--mean", *map(str, MEAN), "--std", *map(str, STD)]
            else:
                req += ["--dtype", "uint8"]
        else:
            req += ["--fidelity", "tf_compat", "--flip-probability", "0.5",
                    "--brightness-max-delta", str(32 / 255), "--saturation", "0.5", "1.5"]
        report = os.path.join(tmp, "report.json")
        # A short warm-up stream (first batch and page cache), then the timed run.
        t0 = time.monotonic()
        subprocess.run(["taskset", "-c", cpu_list(args.trainer_cores), args.nearprep, "load",
                        "--target", target, "--streams", "1", "--max-batches", "1",
                        "--quiet", *req], check=True, stdout=subprocess.DEVNULL)
        ttfb = time.monotonic() - t0
        cpu0 = proc_cpu_s(daemon.pid)
        load = subprocess.Popen(["taskset", "-c", cpu_list(args.trainer_cores), args.nearprep,
                                 "load", "--target", target, "--streams",
                                 str(args.streams), "--duration", str(args.seconds),
                                 "--quiet", "--json", report, *req],
                                stdout=subprocess.DEVNULL)
        # The load client's own CPU: sampled just before it exits.
        load_cpu = 0.0
        while load.poll() is None:
            load_cpu = proc_cpu_s(load.pid) or load_cpu
            time.sleep(0.05)
        if load.returncode != 0:
            raise RuntimeError(f"nearprep load exited {load.returncode}")
        cpu1 = proc_cpu_s(daemon.pid)
        rep = json.load(open(report))
        images = rep["images"]
        return {
            "images_per_s": rep["images_per_s"],
            "ttfb_s": ttfb,
            "server_cpu_ms_per_image": 1000.0 * (cpu1 - cpu0) / max(images, 1),
            "trainer_cpu_ms_per_image": 1000.0 * load_cpu / max(images, 1),
            "wire_bytes_per_image": rep["bytes"] / max(images, 1),
            "peak_rss_mb": proc_hwm_mib(daemon.pid),
            "images": images,
        }
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(tmp, ignore_errors=True)


DL_CHILD = r"""
import json, os, sys, time
import torch, torchvision
import torchvision.transforms as T
data, n, seconds, server, trainer = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \
    [int(c) for c in sys.argv[4].split(",")], int(sys.argv[5])
sys.path.insert(0, sys.argv[6])
from bench_daemon import proc_cpu_s as cpu, proc_hwm_mib as hwm
os.sched_setaffinity(0, {trainer})
torch.set_num_threads(1)
def init(_):
    os.sched_setaffinity(0, set(server))
    torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(),
                T.PILToTensor(), T.ConvertImageDtype(torch.float),
                T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
ds = torchvision.datasets.ImageFolder(data, transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=n,
                                 persistent_workers=True, worker_init_fn=init,
                                 prefetch_factor=2, drop_last=False)
def batches():
    while True:
        for b in dl:
            yield b
t0 = time.monotonic()
it = batches()
next(it)
ttfb = time.monotonic() - t0
pids = [w.pid for w in dl._iterator._workers]
w0 = sum(cpu(p) for p in pids); m0 = time.process_time()
images = 0; t1 = time.monotonic()
while time.monotonic() - t1 < seconds:
    x, y = next(it)
    images += x.shape[0]
el = time.monotonic() - t1
w1 = sum(cpu(p) for p in pids); m1 = time.process_time()
print(json.dumps({"images_per_s": images / el, "ttfb_s": ttfb,
    "server_cpu_ms_per_image": 1000.0 * (w1 - w0) / images,
    "trainer_cpu_ms_per_image": 1000.0 * (m1 - m0) / images,
    "wire_bytes_per_image": None,
    "peak_rss_mb": sum(hwm(p) for p in pids), "images": images}))
sys.stdout.flush()
os._exit(0)
"""


def dataloader_row(args, data, n):
    out = subprocess.run([args.python, "-c", DL_CHILD, data, str(n), str(args.seconds),
                          cpu_list(range(n)), str(args.trainer_cores[0]), BENCH_PY],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nearprepd")
    ap.add_argument("--nearprep")
    ap.add_argument("--python", default=sys.executable,
                    help="Python with torch + torchvision for the DataLoader rows")
    ap.add_argument("--dataset", default=os.path.normpath(os.path.join(
        HERE, "..", "..", "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--cores", default="1,2")
    ap.add_argument("--trainer-cores", default=None,
                    help="cores of the consumer (default: the last core)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--replicate", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds over all (N, row); the table shows each (row, N)'s median")
    ap.add_argument("--rows", default="nearprep_tv_f32,nearprep_tv_u8,nearprep_tf_f32,dataloader_tv_f32")
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()
    args.nearprepd = args.nearprepd or os.path.join(args.build, "server/daemon/nearprepd")
    args.nearprep = args.nearprep or os.path.join(args.build, "client/cpp/nearprep")
    ncpu = os.cpu_count()
    args.trainer_cores = ([int(c) for c in args.trainer_cores.split(",")]
                          if args.trainer_cores else [ncpu - 1])
    cores = [int(c) for c in args.cores.split(",")]
    rows = args.rows.split(",")
    if max(cores) > min(args.trainer_cores):
        sys.exit("core_scaling: server cores 0..N-1 overlap --trainer-cores")

    tmp = tempfile.mkdtemp(prefix="np-scale-data-")
    try:
        data = os.path.join(tmp, "data")
        replicate_image_folder(args.dataset, args.replicate, data)
        samples = sum(len(f) for _, _, f in os.walk(data))
        print(f"machine: {ncpu} cores, load average {os.getloadavg()[0]:.2f}; "
              f"{samples} samples ({args.replicate} x {args.dataset}); batch 64; "
              f"trainer cores {args.trainer_cores}; {args.seconds} s per row", flush=True)
        runs = []
        for rnd in range(args.repeat):
            for n in cores:
                for row in rows:
                    try:
                        r = (dataloader_row(args, data, n) if row.startswith("dataloader")
                             else nearprep_row(args, data, n, row))
                    except Exception as e:  # a row that fails is reported, the rest go on
                        r = {"error": str(e)[:200]}
                    r.update(row=row, cores=n, round=rnd)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
        results = []
        for n in cores:
            for row in rows:
                ok = [r for r in runs if r["row"] == row and r["cores"] == n and "error" not in r]
                if not ok:
                    results.append(next(r for r in runs if r["row"] == row and r["cores"] == n))
                    continue
                ok.sort(key=lambda r: r["images_per_s"])
                med = dict(ok[len(ok) // 2])
                med["rounds"] = len(ok)
                results.append(med)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print("| row | server cores | images/s | per core | first batch s | server CPU ms/img "
          "| trainer CPU ms/img | wire KB/img | peak RSS MB | vs DataLoader |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    dl = {r["cores"]: r for r in results if r["row"].startswith("dataloader") and "error" not in r}
    for r in results:
        if "error" in r:
            print(f"| {r['row']} | {r['cores']} | failed: {r['error']} |||||||")
            continue
        ratio = ""
        if r["row"].startswith("nearprep_tv") and r["cores"] in dl:
            ratio = f"{r['images_per_s'] / dl[r['cores']]['images_per_s']:.2f}x"
        wire = r["wire_bytes_per_image"]
        print(f"| {r['row']} | {r['cores']} | {r['images_per_s']:.0f} | "
              f"{r['images_per_s'] / r['cores']:.0f} | {r['ttfb_s']:.2f} | "
              f"{r['server_cpu_ms_per_image']:.2f} | {r['trainer_cpu_ms_per_image']:.2f} | "
              f"{'' if wire is None else f'{wire / 1024:.0f}'} | {r['peak_rss_mb']:.0f} | {ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median": results, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
