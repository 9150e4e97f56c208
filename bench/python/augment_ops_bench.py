#!/usr/bin/python3
"""Issue 36's torchvision augmentations: nearprep's C++ op per 224x224 image
against torchvision 0.14 / Pillow 9.4's own call on the same image, one
thread on each side, measured in the same run.

    /usr/bin/python3 bench/python/augment_ops_bench.py \\
        --driver build/tests/unit/image/nearprep_pil_ops_apply \\
        --batch-mix-driver build/tests/unit/pipeline/nearprep_batch_mix_apply \\
        [--dataset ../shared/datasets/imagenet-sample-200] [--rounds 5] [--repeat 5]

(or set NEARPREP_PIL_OPS_APPLY / NEARPREP_BATCH_MIX_APPLY instead of the two
flags; without a batch-mix driver the MixUp / CutMix rows are left out.)

Images: the 200 sample JPEGs, decoded with PIL (.convert("RGB")) and resized
to 224x224 (F.resize, bilinear) once beforehand; both sides get the same
pixels.

Ops, at a representative magnitude:
- the 15 auto-augment ops: TrivialAugmentWide's middle bin (15 of 31, sign
  +) for its 14 ops, Invert (AutoAugment's, no magnitude); nearprep:
  ApplyAugmentOp; torchvision: autoaugment._apply_op(img, name, magnitude,
  NEAREST, fill=None), which is what TrivialAugmentWide / RandAugment /
  AutoAugment call;
- ColorJitter's four ops: F.adjust_brightness / contrast / saturation (1.2)
  and F.adjust_hue (0.05) on the PIL image; nearprep: pil::Adjust*;
- RandomErasing: F.erase on the 3x224x224 float32 tensor (x / 255) with a
  box from RandomErasing.get_params (seed 1, default scale and ratio),
  value 0, inplace=False as RandomErasing calls it by default (a clone of the
  image, then the fill) and inplace=True (the fill alone); nearprep erases
  the stored output tensor in the daemon (no copy): the driver times
  torchvision_preprocess.cc's EraseBox loop on a float32 NCHW tensor;
- MixUp / CutMix on a 64x3x224x224 float32 batch (the first 64 images),
  lambda 0.5 (CutMix: the centred 158x158 box of lambda 0.5): nearprep's
  ApplyBatchMix (nearprep_batch_mix_apply time) against torchvision's
  reference formula (references/classification/transforms.py:
  batch.roll(1, 0), then mul_ / mul_ / add_ or the box copy; the targets
  are left out on both sides), figures divided by 64.

Timing: each side runs each image's op --repeat times (nearprep on a fresh
copy of the input each time, the copy untimed; Pillow returns a new image,
so there is nothing to copy) and takes the median; a round's figure is the
mean of those over the 200 images. torch.set_num_threads(1), gc off while
timing. --rounds rounds, each running nearprep then torchvision op by op so
that both see the same load; reported: each side's median round, the
median of the per-round ratios (torchvision / nearprep: > 1 means nearprep
is faster) and their range. The first round also checks that the PIL ops give the same
bytes on both sides (nearprep_pil_ops_apply run).
"""

import argparse
import gc
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import autoaugment as A
from PIL import Image

NEAREST = T.InterpolationMode.NEAREST
SIZE = 224
BATCH = 64


def load_images(root):
    files = sorted(glob.glob(os.path.join(root, "*", "*")))
    out = []
    for f in files:
        with Image.open(f) as im:
            out.append(F.resize(im.convert("RGB"), [SIZE, SIZE]))
    return out


def pil_ops():
    """(label, nearprep job op + args, torchvision callable) per op."""
    space = A.TrivialAugmentWide()._augmentation_space(31)
    ops = []
    for name, (mags, _signed) in space.items():
        m = float(mags[15].item()) if mags.ndim > 0 else 0.0
        arg = str(int(m)) if name == "Posterize" else repr(m)
        label = f"{name} ({m:.4g})" if mags.ndim > 0 else name
        ops.append((label, f"{name} {arg}",
                    lambda im, n=name, m=m: A._apply_op(im, n, m, NEAREST, None)))
    ops.append(("Invert", "Invert 0.0",
                lambda im: A._apply_op(im, "Invert", 0.0, NEAREST, None)))
    ops += [
        ("ColorJitter adjust_brightness (1.2)", "brightness 1.2",
         lambda im: F.adjust_brightness(im, 1.2)),
        ("ColorJitter adjust_contrast (1.2)", "contrast 1.2",
         lambda im: F.adjust_contrast(im, 1.2)),
        ("ColorJitter adjust_saturation (1.2)", "saturation 1.2",
         lambda im: F.adjust_saturation(im, 1.2)),
        ("ColorJitter adjust_hue (0.05)", "hue 0.05",
         lambda im: F.adjust_hue(im, 0.05)),
    ]
    return ops


def time_python(fn, items, repeat):
    """Mean over items of the median of `repeat` timed calls (seconds)."""
    per_item = []
    gc.disable()
    try:
        for x in items:
            ts = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn(x)
                ts.append(time.perf_counter() - t0)
            per_item.append(statistics.median(ts))
    finally:
        gc.enable()
    return sum(per_item) / len(per_item)


def time_driver(driver, raw, jobs, repeat):
    res = subprocess.run([driver, "time", raw, str(repeat)], input="".join(jobs),
                         capture_output=True, text=True, check=True)
    meds = [float(l.split()[2]) for l in res.stdout.splitlines() if l.startswith("TIME ")]
    if len(meds) != len(jobs):
        sys.exit(f"driver gave {len(meds)} times for {len(jobs)} jobs: {res.stderr}")
    return sum(meds) / len(meds)


def check_equal(driver, raw, jobs, fn, images, work):
    out = os.path.join(work, "out.raw")
    subprocess.run([driver, "run", raw, out], input="".join(jobs),
                   capture_output=True, text=True, check=True)
    got = np.fromfile(out, dtype=np.uint8).reshape(len(images), SIZE, SIZE, 3)
    return all(np.array_equal(got[i], np.asarray(fn(im)))
               for i, im in enumerate(images))


def erase_boxes(tensors):
    torch.manual_seed(1)
    boxes = []
    for t in tensors:
        while True:
            i, j, h, w, v = T.RandomErasing.get_params(
                t, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.0])
            if v is not t:  # get_params' fallback (no box found): draw again
                break
        boxes.append((i, j, h, w, v))
    return boxes


def time_torch_batch(orig, fn, repeat):
    work = torch.empty_like(orig)
    ts = []
    gc.disable()
    try:
        for _ in range(repeat):
            work.copy_(orig)
            t0 = time.perf_counter()
            fn(work)
            ts.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return statistics.median(ts)


def torch_mixup(batch, lam=0.5):
    batch_rolled = batch.roll(1, 0)
    batch_rolled.mul_(1.0 - lam)
    batch.mul_(lam).add_(batch_rolled)


def torch_cutmix(batch, box):
    y1, x1, y2, x2 = box
    batch_rolled = batch.roll(1, 0)
    batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]


def cutmix_box(lam, h, w):
    # torchvision's RandomCutmix box with its centre at the image's centre.
    r = 0.5 * (1.0 - lam) ** 0.5
    rw, rh = int(r * w), int(r * h)
    cx, cy = w // 2, h // 2
    return max(cy - rh, 0), max(cx - rw, 0), min(cy + rh, h), min(cx + rw, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default=os.environ.get("NEARPREP_PIL_OPS_APPLY"))
    ap.add_argument("--batch-mix-driver",
                    default=os.environ.get("NEARPREP_BATCH_MIX_APPLY"))
    ap.add_argument("--dataset", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "datasets",
        "imagenet-sample-200"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch-repeat", type=int, default=5)
    args = ap.parse_args()
    if not args.driver:
        sys.exit("no driver: --driver or NEARPREP_PIL_OPS_APPLY")
    torch.set_num_threads(1)
    images = load_images(os.path.abspath(args.dataset))
    n = len(images)
    tensors = [F.pil_to_tensor(im).float().div_(255.0) for im in images]
    boxes = erase_boxes(tensors)
    ops = pil_ops()
    lam = 0.5
    cbox = cutmix_box(lam, SIZE, SIZE)

    with tempfile.TemporaryDirectory() as work:
        raw = os.path.join(work, "in.raw")
        with open(raw, "wb") as f:
            for im in images:
                f.write(np.asarray(im, dtype=np.uint8).tobytes())
        batch_raw = os.path.join(work, "batch.raw")
        batch = torch.stack(tensors[:BATCH]).contiguous()
        batch.numpy().tofile(batch_raw)

        rows = {}  # label -> list of (nearprep s, torchvision s) per round

        def add(label, a, b):
            rows.setdefault(label, []).append((a, b))

        equal = {}
        for rnd in range(args.rounds):
            for label, job, fn in ops:
                jobs = [f"{SIZE} {SIZE} 0 0 0 {job}\n"] * n
                if rnd == 0:
                    equal[label] = check_equal(args.driver, raw, jobs, fn, images, work)
                a = time_driver(args.driver, raw, jobs, args.repeat)
                b = time_python(fn, images, args.repeat)
                add(label, a, b)
            jobs = [f"{SIZE} {SIZE} 0 0 0 erase {i} {j} {h} {w} 0\n"
                    for i, j, h, w, _ in boxes]
            a = time_driver(args.driver, raw, jobs, args.repeat)
            items = list(zip(tensors, boxes))
            b = time_python(lambda x: F.erase(x[0], *x[1], inplace=False), items, args.repeat)
            add("RandomErasing (F.erase, inplace=False: clone + fill)", a, b)
            # In place on the same tensor: the fill is idempotent.
            b = time_python(lambda x: F.erase(x[0], *x[1], inplace=True), items,
                            args.repeat)
            add("RandomErasing (F.erase, inplace=True: fill only)", a, b)
            if args.batch_mix_driver:
                lam_bits = "0x%08x" % np.float32(lam).view(np.uint32)
                for label, kind, box, fn in [
                        ("MixUp (64x3x224x224 f32, per image)", 1, (0, 0, 0, 0),
                         lambda x: torch_mixup(x, lam)),
                        ("CutMix (64x3x224x224 f32, 158x158 box, per image)", 2, cbox,
                         lambda x: torch_cutmix(x, cbox))]:
                    y1, x1, y2, x2 = box
                    res = subprocess.run(
                        [args.batch_mix_driver, "time", str(kind), lam_bits, str(y1),
                         str(x1), str(y2), str(x2), "0", "1", str(BATCH), str(SIZE),
                         str(SIZE), batch_raw, str(args.batch_repeat)],
                        capture_output=True, text=True, check=True)
                    a = float(res.stdout.split()[1]) / BATCH
                    b = time_torch_batch(batch, fn, args.batch_repeat) / BATCH
                    add(label, a, b)
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)

    print(f"{n} images, 224x224 RGB (uint8 for the PIL ops, float32 for erase and "
          f"the batch ops), {args.rounds} rounds x {args.repeat} repeats, one thread "
          f"each side")
    print()
    print("| op | nearprep us/img | torchvision us/img | torchvision / nearprep "
          "| per-round ratios | equal |")
    print("|---|---|---|---|---|---|")
    for label, rs in rows.items():
        a = statistics.median(r[0] for r in rs) * 1e6
        b = statistics.median(r[1] for r in rs) * 1e6
        # Identity is a no-op on both sides: its ratio would compare the
        # Python call with an empty C++ switch.
        ratio = (float("nan") if label == "Identity"
                 else statistics.median(r[1] / r[0] for r in rs))
        eq = {True: "yes", False: "NO"}.get(equal.get(label), "-")
        rtxt = f"{ratio:.2f}x" if ratio == ratio else "-"
        ratios = [r[1] / r[0] for r in rs]
        span = (f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratio == ratio else "-")
        print(f"| {label} | {a:.1f} | {b:.1f} | {rtxt} | {span} | {eq} |")


if __name__ == "__main__":
    main()
