#!/usr/bin/env python3
"""The TF input pipeline of the SmartSSD analysis, before and after nearprep,
on the same images with the same random draws.

BEFORE: every trainer node reads the JPEGs and burns its own CPU on
decode / resize / augment (tf.data map with num_parallel_calls):

    image = tf.image.decode_jpeg(tf.io.read_file(filename), channels=3)
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = tf.image.resize(image, [size, size])
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_brightness(image, max_delta=32.0 / 255.0)
    image = tf.image.random_saturation(image, lower=0.5, upper=1.5)
    image = tf.clip_by_value(image, 0.0, 1.0)

AFTER: the storage node runs the same ops (TF_COMPAT) and streams finished
batches; the trainer's tf.data pipeline is one call:

    dataset = nearprep.tf.dataset("storage-node:7070", "imagenet", batch_size=100,
                                  shuffle=True, seed=1, height=224, width=224,
                                  flip_probability=0.5,
                                  brightness_max_delta=32.0 / 255.0,
                                  saturation=(0.5, 1.5))

So that the two can be compared byte for byte, the BEFORE pipeline here
takes its draws from nearprep's generator instead of TF's op seeds
(nearprep.plan: the epoch order, and per sample the flip, the brightness
delta and the saturation factor, computed locally from (seed, epoch,
sample id)), and applies them with flip_left_right / adjust_brightness /
adjust_saturation, the ops the random_* ones call. Everything else is the
seed pipeline. It prints the max abs difference over every value (0 is
expected: TF_COMPAT is bit-exact) and the images/s of each pipeline on this
machine.

Run (in a venv with tensorflow-cpu; README, "Using it"):

    build/server/daemon/nearprepd --dataset sample=DIR --port 7070 &
    build/venv/bin/python examples/tf_before_after.py --target localhost:7070 \\
        --dataset sample --data-dir DIR

--data-dir must hold the dataset the daemon serves as --dataset (an image
folder: one sub-folder per class).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "client", "python"))
import numpy as np  # noqa: E402

import nearprep  # noqa: E402
from nearprep import plan  # noqa: E402

AUGMENT = dict(flip_probability=0.5, brightness_max_delta=32.0 / 255.0,
               saturation=(0.5, 1.5))


def image_folder(data_dir):
    """(paths, labels) in nearprep's sample-id order: sorted relative paths;
    the label is the index of the sorted class folder."""
    classes = sorted(d for d in os.listdir(data_dir)
                     if os.path.isdir(os.path.join(data_dir, d)))
    rel = sorted(f"{c}/{f}" for c in classes
                 for f in os.listdir(os.path.join(data_dir, c))
                 if f.lower().endswith((".jpg", ".jpeg")))
    return ([os.path.join(data_dir, r) for r in rel],
            [classes.index(r.split("/")[0]) for r in rel])


def before(tf, data_dir, size, batch_size, seed, epoch):
    """The seed pipeline, with nearprep's order and draws."""
    files, labels = image_folder(data_dir)
    spec = plan.TransformSpec(flip_probability=AUGMENT["flip_probability"],
                              brightness_max_delta=AUGMENT["brightness_max_delta"],
                              saturation_enabled=True,
                              saturation_lower=AUGMENT["saturation"][0],
                              saturation_upper=AUGMENT["saturation"][1])
    order = plan.epoch_order(len(files), seed, epoch, True)
    draws = [plan.draw_sample_params(spec, seed, epoch, i, 0, 0) for i in order]
    columns = ([files[i] for i in order], [labels[i] for i in order],
               [d.flip for d in draws],
               np.array([d.brightness_delta for d in draws], np.float32),
               np.array([d.saturation_factor for d in draws], np.float32))

    def load_function(filename, label, flip, delta, factor):
        image = tf.image.decode_jpeg(tf.io.read_file(filename), channels=3)
        image = tf.image.convert_image_dtype(image, tf.float32)
        return tf.image.resize(image, [size, size]), label, flip, delta, factor

    def train_preprocess(image, label, flip, delta, factor):
        image = tf.cond(flip, lambda: tf.image.flip_left_right(image), lambda: image)
        image = tf.image.adjust_brightness(image, delta)
        image = tf.image.adjust_saturation(image, factor)
        return tf.clip_by_value(image, 0.0, 1.0), label

    ds = tf.data.Dataset.from_tensor_slices(columns)
    ds = ds.map(load_function, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(train_preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE), len(files)


def run(ds):
    """All batches of `ds` as numpy, and the seconds it took."""
    t0 = time.perf_counter()
    out = [(x.numpy(), y.numpy()) for x, y in ds]
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:7070")
    ap.add_argument("--dataset", default="sample")
    ap.add_argument("--data-dir", required=True,
                    help="the image folder the daemon serves as --dataset")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epoch", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import nearprep.tf as nearprep_tf

    info = nearprep.Client(args.target).dataset(args.dataset)
    before_ds, n = before(tf, args.data_dir, args.size, args.batch_size, args.seed,
                          args.epoch)
    if info.num_samples != n:
        sys.exit(f"--data-dir holds {n} images, the daemon's {args.dataset!r} "
                 f"{info.num_samples}: not the same dataset")
    after_ds = nearprep_tf.dataset(args.target, args.dataset, batch_size=args.batch_size,
                                   shuffle=True, seed=args.seed, start_epoch=args.epoch,
                                   height=args.size, width=args.size, **AUGMENT)
    # One untimed batch each (graph tracing, connection set-up).
    next(iter(before_ds.take(1)))
    next(iter(after_ds.take(1)))
    b, tb = run(before_ds)
    a, ta = run(after_ds)
    assert len(a) == len(b), (len(a), len(b))
    diff = 0.0
    for (xa, ya), (xb, yb) in zip(a, b):
        assert np.array_equal(ya, yb), "labels differ: not the same dataset/order"
        diff = max(diff, float(np.abs(xa.astype(np.float64) - xb.astype(np.float64)).max()))
    print(f"images: {n}, {args.size}x{args.size}, batch {args.batch_size}, seed {args.seed}")
    print(f"before (tf.data on this CPU): {n / tb:8.1f} images/s")
    print(f"after  (nearprep.tf.dataset): {n / ta:8.1f} images/s")
    print(f"max abs diff: {diff:g}")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
