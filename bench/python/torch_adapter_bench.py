#!/usr/bin/python3
"""Trainer CPU per image through nearprep.torch, by DataLoader worker count,
beside torch's own DataLoader running torchvision's ImageNet train transforms
on the same JPEGs, in the same run (issue 35, item 5).

    PYTHONPATH=client/python:build/python NEARPREP_PROTO_PATH=build/python \\
        /usr/bin/python3 bench/python/torch_adapter_bench.py --build build \\
        [--dataset-root ../shared/datasets/imagenet-sample-200] [--workers 0,1,2,4]

Each configuration runs in its own process (the "trainer"), for --epochs
epochs over the dataset (--copies copies of the sample images, hard links),
batch size --batch-size, float32 224x224 NCHW:

  nearprep   nearprep.torch.IterableDataset (native receive path,
             RandomResizedCrop + flip, ImageNet mean/std: imagenet_train) through
             nearprep.torch.DataLoader(num_workers=W, persistent_workers=True)
  torchvision  torchvision.datasets.ImageFolder with RandomResizedCrop(224),
             RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet), through
             torch.utils.data.DataLoader(batch_size, shuffle=True, num_workers=W,
             persistent_workers=W > 0, pin_memory=False: no GPU here), one torch
             thread per process

Trainer CPU = user + system CPU of the trainer process and its DataLoader
workers (/proc/PID/stat of each; the workers persist between epochs), over
the epochs after the first (steady state), divided by the images received;
"with start" also counts the first epoch (imports, worker start, connection)
and is the trainer's whole process tree (getrusage of the waited-for
children). "first batch" is the wall time from iter(loader) to the first
batch of epoch 0. The daemon (--daemon-workers threads) runs beside it; its
CPU is not the trainer's and is not counted. Ratios are against nearprep
with num_workers=0 in the same run.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import bench_daemon  # noqa: E402

TARGET_MS = 0.45  # issue 35: trainer CPU per float32 224x224 image, recommended W


def _cpu_s(pids):
    return sum(bench_daemon.proc_cpu_s(p) or 0.0 for p in pids)


def trainer(args):
    """One configuration, in this (child) process: prints a JSON line."""
    import torch
    torch.set_num_threads(1)
    w = args.num_workers
    if args.trainer == "nearprep":
        import nearprep.torch as nt
        ds = nt.imagenet_train(args.target, "bench", batch_size=args.batch_size, seed=1,
                               client_options={"native": True})
        loader = nt.DataLoader(ds, num_workers=w, persistent_workers=w > 0)
        inner = lambda: loader._loader  # noqa: E731
    else:
        import torchvision.datasets
        import torchvision.transforms as T
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        ds = torchvision.datasets.ImageFolder(args.root, transform=tf)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=args.batch_size, shuffle=True, num_workers=w,
            persistent_workers=w > 0, pin_memory=False,
            multiprocessing_context="spawn" if w else None)
        inner = lambda: loader  # noqa: E731
    first_batch_s, images, steady_images = None, 0, 0
    steady_cpu0 = None
    for epoch in range(args.epochs):
        if hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        t0 = time.monotonic()
        for k, (x, y) in enumerate(loader):
            assert x.dtype == torch.float32 and tuple(x.shape[1:]) == (3, 224, 224)
            if first_batch_s is None:
                first_batch_s = time.monotonic() - t0
            images += len(y)
            if epoch > 0:
                steady_images += len(y)
        if epoch == 0:
            it = getattr(inner(), "_iterator", None)
            pids = [os.getpid()] + ([p.pid for p in it._workers] if it is not None and w else [])
            steady_cpu0 = _cpu_s(pids)
    steady_cpu = _cpu_s(pids) - steady_cpu0
    print(json.dumps({"images": images, "steady_images": steady_images,
                      "steady_ms": 1e3 * steady_cpu / max(1, steady_images),
                      "first_batch_s": first_batch_s}), flush=True)


def run(args, kind, workers):
    cmd = [sys.executable, os.path.abspath(__file__), "--trainer", kind, "--num-workers",
           str(workers), "--target", args.target, "--root", args.root, "--epochs",
           str(args.epochs), "--batch-size", str(args.batch_size)]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit(f"{kind} num_workers={workers} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["with_start_ms"] = 1e3 * ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) \
        / res["images"]
    res["wall_s"] = wall
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainer", choices=("nearprep", "torchvision"))
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--target")
    ap.add_argument("--root")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dataset-root", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", default="0,1,2,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--daemon-workers", type=int, default=2)
    ap.add_argument("--skip-torchvision", action="store_true")
    args = ap.parse_args()
    if args.trainer:
        return trainer(args)
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        args.root = bench_daemon.replicate_image_folder(args.dataset_root, args.copies,
                                                        os.path.join(tmp, "images"))
        nearprepd = os.path.join(args.build, "server", "daemon", "nearprepd")
        proc, args.target = bench_daemon.start_daemon(nearprepd, tmp, args.root,
                                                      workers=args.daemon_workers)
        try:
            kinds = ["nearprep"] + ([] if args.skip_torchvision else ["torchvision"])
            results = {}
            for rep in range(args.repeats):  # interleaved, so load drifts hit all alike
                for kind in kinds:
                    for w in workers:
                        results.setdefault((kind, w), []).append(run(args, kind, w))
        finally:
            proc.terminate()
            proc.wait()
    base = statistics.median(r["steady_ms"] for r in results[("nearprep", workers[0])])
    print(f"trainer CPU per float32 224x224 image, ms (median of {args.repeats}; "
          f"{args.copies * 200 if 'sample-200' in args.dataset_root else '?'} images x "
          f"{args.epochs} epochs, batch {args.batch_size}; steady: epochs 2..; ratio: steady "
          f"/ nearprep num_workers={workers[0]})")
    print(f"{'pipeline':<12} {'workers':>7} {'steady':>8} {'with start':>10} "
          f"{'first batch s':>13} {'ratio':>6}")
    for (kind, w), rs in results.items():
        steady = statistics.median(r["steady_ms"] for r in rs)
        start = statistics.median(r["with_start_ms"] for r in rs)
        first = statistics.median(r["first_batch_s"] for r in rs)
        print(f"{kind:<12} {w:>7} {steady:>8.3f} {start:>10.3f} {first:>13.2f} "
              f"{steady / base:>6.2f}")
    ok = [w for w in workers if statistics.median(
        r["steady_ms"] for r in results[("nearprep", w)]) <= TARGET_MS]
    print(f"nearprep worker counts within the {TARGET_MS} ms target: {ok or 'none'}")


if __name__ == "__main__":
    main()
