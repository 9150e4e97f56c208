#!/usr/bin/python3
"""What uint8 on the wire costs in accuracy, measured on real images.

    PYTHONPATH=client/python:build/python /usr/bin/python3 bench/python/uint8_error.py \
        --build build [--dataset-root ../shared/datasets/imagenet-sample-200]

Starts nearprepd on the dataset (port 0), streams every image once as
float32 and once as uint8 with the same request (224x224, the benchmark
augmentations: flip, brightness 32/255, saturation [0.5, 1.5], clip), and
compares the uint8 batch finished with nearprep.torch.finish_uint8 (x / 255,
then ImageNet mean/std) against the float32 batch (and against the float32
batch normalised the same way). Prints max / mean absolute error, RMSE and
PSNR in [0, 1] units, and the max error after normalisation.
"""

import argparse
import math
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, HERE)

import nearprep  # noqa: E402
from nearprep import torch as nt  # noqa: E402
from client_bench import start_daemon  # noqa: E402

MEAN = np.array((0.485, 0.456, 0.406))
STD = np.array((0.229, 0.224, 0.225))


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
        for name, aug in (("no augmentation", {}),
                          ("flip + brightness + saturation", dict(
                              flip_probability=0.5, brightness_max_delta=32 / 255,
                              saturation=(0.5, 1.5)))):
            req = dict(batch_size=50, seed=1, shuffle=True, height=args.size, width=args.size,
                       layout="NHWC", **aug)
            f32 = np.concatenate([b.images for b in c.batches("bench", dtype="float32", **req)])
            u8 = np.concatenate([b.images for b in c.batches("bench", dtype="uint8", **req)])
            plain = nt.finish_uint8(u8, layout="NHWC").numpy().astype(np.float64)
            err = plain - f32.astype(np.float64)
            rmse = math.sqrt(float(np.mean(err ** 2)))
            norm = nt.finish_uint8(u8, MEAN, STD, layout="NHWC").numpy().astype(np.float64)
            norm_err = norm - (f32.astype(np.float64) - MEAN) / STD
            print(f"{name}: {f32.shape[0]} images {args.size}x{args.size}, "
                  f"{f32.size} values")
            print(f"  [0,1] units: max |err| {np.abs(err).max():.6f} "
                  f"(bound 0.5/255 = {0.5 / 255:.6f}), mean |err| {np.abs(err).mean():.6f}, "
                  f"RMSE {rmse:.6f}, PSNR {20 * math.log10(1 / rmse):.1f} dB")
            print(f"  after ImageNet mean/std: max |err| {np.abs(norm_err).max():.6f}, "
                  f"mean |err| {np.abs(norm_err).mean():.6f}")
        c.close()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
