#!/usr/bin/env python3
"""Issue 36's colour ops: nearprepd's CPU per image against TensorFlow's own
op on the same image size, measured in the same run.

    PYTHONPATH=client/python:bench/python \\
    build/venv/bin/python bench/python/colour_ops_bench.py --build build \\
        [--dataset ../shared/datasets/imagenet-sample-200] [--repeat 5]

(the venv's python: TensorFlow; its nearprep wheel must carry the proto with
the contrast/hue/gamma fields, which scripts/python_venv.sh rebuilds when the
proto changes; or point NEARPREP_PROTO_PATH at stubs generated for the venv's
protobuf.)

nearprep side: a daemon with one worker streams the dataset (224x224
float32, TF_COMPAT, no flip, clipping on) once per configuration and round;
the figure is the server's transform time per image (Batch timings:
everything after the decode, i.e. resize, the colour ops, clip and the
store), minus the baseline configuration's (no colour op, the fused row
path). The new ops run on the staged path (the whole resized image, then
each op); "staged" is that path with gamma 1 (pow's y == 1 shortcut), i.e.
its own overhead.

TensorFlow side: the same op on a 224x224x3 float32 eager tensor,
intra-op and inter-op threads 1, the op alone (the images are resized once
beforehand), per image; each side's best round is reported, and the
ratio of the two per round (median).
"""

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["NEARPREP_NATIVE"] = "0"  # grpcio beside TensorFlow

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import nearprep  # noqa: E402
from bench_daemon import start_daemon  # noqa: E402

CONFIGS = [
    ("baseline (fused path)", {}),
    ("staged path (gamma 1)", dict(gamma=1.0)),
    ("adjust_contrast", dict(contrast_lower=0.6, contrast_upper=1.4)),
    ("adjust_hue", dict(hue_max_delta=0.1)),
    ("adjust_gamma", dict(gamma=0.8)),
]


def nearprep_us_per_image(target, kw, n):
    client = nearprep.Client(target)
    for _ in client.batches("bench", batch_size=25, seed=1, shuffle=False,
                            height=224, width=224, **kw):
        pass
    snap = client.stats().snapshot()
    client.close()
    return snap["server_transform_us"] / n


def tf_images(files):
    out = []
    for f in files:
        x = tf.io.decode_jpeg(tf.io.read_file(f), channels=3)
        x = tf.image.convert_image_dtype(x, tf.float32)
        out.append(tf.image.resize(x, [224, 224]))
    return out


def tf_us_per_image(name, images):
    ops = {
        "adjust_contrast": lambda x: tf.image.adjust_contrast(x, np.float32(1.2)),
        "adjust_hue": lambda x: tf.image.adjust_hue(x, np.float32(0.05)),
        "adjust_gamma": lambda x: tf.image.adjust_gamma(x, np.float32(0.8)),
    }
    op = ops[name]
    t0 = time.perf_counter()
    for x in images:
        op(x).numpy()
    return (time.perf_counter() - t0) / len(images) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--dataset", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "datasets",
        "imagenet-sample-200"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    root = os.path.abspath(args.dataset)
    files = sorted(glob.glob(os.path.join(root, "*", "*")))
    n = len(files)
    images = tf_images(files)
    nearprepd = os.path.join(args.build, "server", "daemon", "nearprepd")
    with tempfile.TemporaryDirectory() as work:
        proc, target = start_daemon(nearprepd, work, root, workers=1)
        try:
            nearprep_us_per_image(target, {}, n)  # warm up (page cache, pools)
            rounds = []
            for _ in range(args.repeat):
                r = {name: nearprep_us_per_image(target, kw, n) for name, kw in CONFIGS}
                for name in ("adjust_contrast", "adjust_hue", "adjust_gamma"):
                    r["tf " + name] = tf_us_per_image(name, images)
                rounds.append(r)
        finally:
            proc.terminate()
            proc.wait()
    best = {k: min(r[k] for r in rounds) for k in rounds[0]}
    base = best["baseline (fused path)"]
    print(f"{n} images, 224x224 float32, {args.repeat} rounds, one worker / one TF thread")
    print(f"nearprep transform, baseline (resize + clip + store, fused): {base:.0f} us/img")
    print(f"nearprep staged path overhead (gamma 1): "
          f"{best['staged path (gamma 1)'] - base:+.0f} us/img")
    print("| op | nearprep us/img (over baseline) | TensorFlow us/img | TF / nearprep |")
    print("|---|---|---|---|")
    for name in ("adjust_contrast", "adjust_hue", "adjust_gamma"):
        ratios = [r["tf " + name] / max(r[name] - r["baseline (fused path)"], 1e-9)
                  for r in rounds]
        print(f"| {name} | {best[name] - base:.0f} | {best['tf ' + name]:.0f} | "
              f"{statistics.median(ratios):.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
