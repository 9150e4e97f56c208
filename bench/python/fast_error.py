#!/usr/bin/python3
"""How far FAST fidelity is from TF_COMPAT, measured on real images.

    PYTHONPATH=client/python:build/python /usr/bin/python3 bench/python/fast_error.py \
        --build build [--dataset-root ../shared/datasets/imagenet-sample-200]

Starts nearprepd on the dataset (port 0) and streams every image once with
fidelity TF_COMPAT and once with FAST, with the same request otherwise
(float32 NHWC, 224x224, seed 1, sample-id order, so both get the same
per-sample draws), for four transforms: the whole image without colour
augmentation; the whole image with flip 0.5, brightness 32/255 and
saturation [0.5, 1.5] (the benchmark's augmentations); random resized crop
without and with those colour augmentations. For each it prints how many
images are bit-identical, how many values differ, and the mean and max
absolute error in [0, 1] units over all values.
"""

import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, HERE)

import nearprep  # noqa: E402
from client_bench import start_daemon  # noqa: E402

COLOUR = dict(flip_probability=0.5, brightness_max_delta=32 / 255, saturation=(0.5, 1.5))
CASES = (
    ("whole image, no colour augmentation", dict(crop="none")),
    ("whole image, flip + brightness + saturation", dict(crop="none", **COLOUR)),
    ("random resized crop, no colour augmentation", dict(crop="random_resized")),
    ("random resized crop, flip + brightness + saturation",
     dict(crop="random_resized", **COLOUR)),
)


def stream(client, fidelity, size, extra):
    images, ids = [], []
    for b in client.batches("bench", batch_size=50, seed=1, shuffle=False, height=size,
                            width=size, dtype="float32", layout="NHWC",
                            fidelity=fidelity, **extra):
        images.append(b.images)
        ids.append(b.sample_ids)
    return np.concatenate(images), np.concatenate(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dataset-root", default=os.path.normpath(
        os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200")))
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    nearprepd = os.path.join(args.build, "server", "daemon", "nearprepd")
    tmp = tempfile.TemporaryDirectory()
    proc, target = start_daemon(nearprepd, args.dataset_root, 0, tmp.name)
    try:
        c = nearprep.Client(target)
        for name, extra in CASES:
            exact, exact_ids = stream(c, "tf_compat", args.size, extra)
            fast, fast_ids = stream(c, "fast", args.size, extra)
            if not np.array_equal(exact_ids, fast_ids):
                sys.exit(f"{name}: the two streams hold different samples")
            err = np.abs(fast.astype(np.float64) - exact.astype(np.float64))
            n = exact.shape[0]
            same = int(sum(np.array_equal(fast[i].view(np.uint32), exact[i].view(np.uint32))
                           for i in range(n)))
            print(f"{name}: {n} images {args.size}x{args.size}")
            print(f"  bit-identical images {same}/{n}; values that differ "
                  f"{int(np.count_nonzero(err))}/{err.size} "
                  f"({100 * np.count_nonzero(err) / err.size:.2f}%)")
            print(f"  mean |err| {err.mean():.5f} ({err.mean() * 255:.2f}/255), "
                  f"max |err| {err.max():.3f}")
        c.close()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
