#!/usr/bin/env python3
"""Trainer CPU per image through nearprep.tf.dataset, beside tf.data.

    PYTHONPATH=client/python build/venv/bin/python bench/python/tf_adapter_bench.py \\
        --build build [--dataset-root ../shared/datasets/imagenet-sample-200] \\
        [--copies 10] [--epochs 2] [--repeats 3] [--trainer-core 0 --server-cores 1]

Issue 35's target: <= 0.35 ms of trainer CPU per float32 224x224 image
through nearprep.tf.dataset. Starts one nearprepd on the dataset and runs,
each in a fresh process (TensorFlow imported first, as a trainer does),
one after the other, --repeats times interleaved:

  - nearprep-tf-native: nearprep.tf.dataset(...) on its default receive
    path (nearprep._native);
  - nearprep-tf-grpcio: the same with client_options=dict(native=False);
  - nearprep-client-native: the same batches read with nearprep.Client
    (native=True) in a plain loop, TensorFlow imported: the receive cost
    without tf.data, so the adapter's own share is the difference;
  - tfdata: the README's reference pipeline run by tf.data in the trainer
    process on the same JPEGs, as a tf.data user would configure it:
    from_tensor_slices(files).shuffle(reshuffle_each_iteration)
    .map(load, num_parallel_calls=AUTOTUNE, deterministic=False)
    .batch(B).prefetch(AUTOTUNE).

An epoch is --copies copies of the dataset's images (hard links; 2,000
images with the 200-image sample): every new iterator of a tf.data dataset
costs TensorFlow ~20 ms of trainer CPU (graph rewrite and instantiation),
which a 200-image epoch would count as 0.1 ms per image. The same
transform everywhere: decode, resize to 224 x 224, flip,
brightness 32/255, saturation (0.5, 1.5), clip; float32 NHWC, batch --batch.
Trainer CPU per image = user + system CPU of the trainer process (all its
threads: TensorFlow's, the client's) over the iteration loop (one warm-up
pass over the dataset first, outside it) / images; not wall time. The
nearprep rows also give the daemon's CPU per image (/proc of nearprepd over
the loop). Medians of the repeats, then the ratios, in the same run: on a
shared machine absolute figures move with the neighbours' load.
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
import bench_daemon  # noqa: E402  (beside this script)

TARGET_MS = 0.35
AUG = dict(flip_probability=0.5, brightness_max_delta=32.0 / 255.0, saturation=(0.5, 1.5))


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------
# Worker mode: one measured run in this process.

def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # first, as in a trainer

    if args.row == "nearprep-client-native":
        import nearprep
        client = nearprep.Client(args.target, native=True)
        kw = dict(batch_size=args.batch, height=224, width=224, shuffle=True, seed=1,
                  error_policy="fail_stream", **AUG)

        class Epochs:   # each pass: the next epoch, as the adapter
            next_epoch = 0

            def __iter__(self):
                Epochs.next_epoch += 1
                for b in client.batches("bench", epoch=Epochs.next_epoch - 1, **kw):
                    yield b.images, b.labels

        ds = Epochs()
        transport = client.transport
    elif args.row.startswith("nearprep"):
        import nearprep.tf as ntf
        options = dict(native=False) if args.row == "nearprep-tf-grpcio" else {}
        ds = ntf.dataset(args.target, "bench", batch_size=args.batch, height=224, width=224,
                         shuffle=True, seed=1, error_policy="fail_stream",
                         client_options=options, **AUG)
        transport = ds._nearprep_client.transport
    else:
        files, labels = dataset_files(args.dataset_root)

        def load(path, label):
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            image = tf.image.convert_image_dtype(image, tf.float32)
            image = tf.image.resize(image, [224, 224])
            image = tf.image.random_flip_left_right(image)
            image = tf.image.random_brightness(image, max_delta=32.0 / 255.0)
            image = tf.image.random_saturation(image, lower=0.5, upper=1.5)
            image = tf.clip_by_value(image, 0.0, 1.0)
            return image, label

        ds = (tf.data.Dataset.from_tensor_slices((files, labels))
              .shuffle(len(files), seed=1, reshuffle_each_iteration=True)
              .map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
              .batch(args.batch)
              .prefetch(tf.data.AUTOTUNE))
        transport = "in-process"
    for _ in ds:   # warm-up pass: graphs, channel, thread pools
        pass
    images = 0
    c0, t0 = cpu_s(), time.monotonic()
    for _ in range(args.epochs):
        for x, _ in ds:   # each pass: the next epoch
            images += int(x.shape[0])
    c1, t1 = cpu_s(), time.monotonic()
    print("RESULT " + json.dumps({"images": images, "cpu_s": c1 - c0, "wall_s": t1 - t0,
                                  "transport": transport}), flush=True)


def dataset_files(root):
    """(paths, labels) of an image folder: bench/peers/run.py's list_files,
    the one listing the side-by-side benchmark feeds its tf.data rows."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "nearprep_peers_run", os.path.join(ROOT, "bench", "peers", "run.py"))
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    return peers.list_files(root)


# ---------------------------------------------------------------------------
# Driver.

def run_row(row, args, target, daemon_pid):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--row", row,
           "--target", target or "", "--dataset-root", args.dataset_root,
           "--epochs", str(args.epochs), "--batch", str(args.batch)]
    if args.trainer_core is not None:
        cmd = ["taskset", "-c", str(args.trainer_core)] + cmd
    d0 = bench_daemon.proc_cpu_s(daemon_pid) if daemon_pid else None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    d1 = bench_daemon.proc_cpu_s(daemon_pid) if daemon_pid else None
    if p.returncode != 0:
        raise RuntimeError(f"{row}: exit {p.returncode}: {p.stderr[-3000:]}")
    res = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    res["ms_per_image"] = 1000.0 * res["cpu_s"] / res["images"]
    res["images_per_s"] = res["images"] / res["wall_s"]
    if row.startswith("nearprep") and d0 is not None and d1 is not None:
        # The daemon served the warm-up pass too: per image over both.
        res["daemon_ms_per_image"] = 1000.0 * (d1 - d0) / (res["images"] * (args.epochs + 1)
                                                           / args.epochs)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dataset-root", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--epochs", type=int, default=2, help="measured passes per run")
    ap.add_argument("--copies", type=int, default=10,
                    help="epoch = this many copies of the dataset's images (hard links)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rows", default="nearprep-tf-native,nearprep-tf-grpcio,"
                                      "nearprep-client-native,tfdata")
    ap.add_argument("--trainer-core", type=int, default=None,
                    help="pin the trainer processes (taskset)")
    ap.add_argument("--server-cores", default=None, help="pin nearprepd (taskset list)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    rows = args.rows.split(",")
    nearprepd = os.path.join(args.build, "server", "daemon", "nearprepd")
    target, proc = None, None
    tmp = tempfile.mkdtemp(prefix="tf_adapter_bench.")
    if args.copies > 1:
        # A longer epoch: each iteration's fixed cost (TensorFlow rewrites
        # and instantiates the dataset graph for every new iterator, ~20 ms
        # of trainer CPU) is spread as over a real epoch.
        args.dataset_root = bench_daemon.replicate_image_folder(
            args.dataset_root, args.copies, os.path.join(tmp, "dataset"))
    if any(r.startswith("nearprep") for r in rows):
        proc, target = bench_daemon.start_daemon(nearprepd, tmp, args.dataset_root,
                                                 core=args.server_cores)
    results = {r: [] for r in rows}
    try:
        for rep in range(args.repeats):
            for row in rows:
                res = run_row(row, args, target, proc.pid if proc else None)
                results[row].append(res)
                print(f"  repeat {rep + 1} {row:20s} {res['ms_per_image']:.3f} ms/img "
                      f"({res['transport']}, {res['images_per_s']:.0f} img/s)", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    n_images = results[rows[0]][0]["images"]
    print(f"\ntrainer CPU per float32 224x224 image, {args.epochs} passes of "
          f"{n_images // args.epochs} images, batch {args.batch}, median of {args.repeats}:")
    print(f"| row | trainer CPU ms/img | runs | img/s | daemon CPU ms/img |")
    print(f"|---|---|---|---|---|")
    med = {}
    for row in rows:
        ms = [r["ms_per_image"] for r in results[row]]
        med[row] = statistics.median(ms)
        ips = statistics.median(r["images_per_s"] for r in results[row])
        dms = [r["daemon_ms_per_image"] for r in results[row] if "daemon_ms_per_image" in r]
        dcol = f"{statistics.median(dms):.2f}" if dms else "-"
        print(f"| {row} | {med[row]:.3f} | {' / '.join(f'{m:.3f}' for m in ms)} | "
              f"{ips:.0f} | {dcol} |")
    if "nearprep-tf-native" in med:
        base = med["nearprep-tf-native"]
        for row in rows:
            if row != "nearprep-tf-native":
                print(f"{row} / nearprep-tf-native: {med[row] / base:.2f}x")
        verdict = "met" if base <= TARGET_MS else "NOT met"
        print(f"target <= {TARGET_MS} ms/img through nearprep.tf.dataset: {verdict} "
              f"({base:.3f})")


if __name__ == "__main__":
    sys.exit(main())
