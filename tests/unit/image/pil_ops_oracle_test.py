"""PIL-exact image ops and torchvision's auto-augment tables against the real
libraries (Debian's python3-pil 9.4, python3-torchvision 0.14, torch 1.13,
numpy 1.24): every output byte of nearprep's pil_ops.h / ApplyAugmentOp must
equal what torchvision computes on the same PIL "RGB" image, and the
magnitude / policy tables must equal torchvision's tensors bit for bit.

nearprep's side runs through nearprep_pil_ops_apply ($NEARPREP_PIL_OPS_APPLY,
built from tests/unit/image/pil_ops_apply.cc), one process per batch of jobs;
the oracle's side is torchvision itself (autoaugment._apply_op and
transforms.functional on PIL images).

What is compared (one job = one image through one op, byte for byte):
  * test_real_images_augment_ops: the 200 JPEGs of
    ../shared/datasets/imagenet-sample-200 (or $NEARPREP_SAMPLE_DATASET),
    PIL .convert("RGB") then resized BILINEAR to 224x224, through each of the
    15 _apply_op ops (Identity, ShearX/Y, TranslateX/Y, Rotate, Brightness,
    Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize,
    Invert): 15 x 200 = 3000 jobs, the magnitude of image i taken from the
    three policies' tables in turn (bin i mod num_bins, sign by parity),
    fill (0, 0, 0) or (255, 128, 7); plus 40 images at 160x224 and 40 at
    224x160 (H x W) through the same 15 ops: 1200 jobs.
  * test_real_images_functional_ops: the 200 images at 224x224 through
    F.adjust_hue (200, hue in [-0.5, 0.5]), F.hflip (200), F.rotate with
    angles off the tables (200: 90 / 180 / 270 / 45 / ...), F.affine with
    rotation + translation + scale + shear (200): 800 jobs; plus 25 affine
    jobs whose corners map beyond +-32768 (Geometry.c's double loop), 20 on
    224x224 images and 5 on a 700x1000 noise image.
  * test_edge_cases: sizes 1x1, 1x7, 7x1, 2x2, 2x5, 3x3, 5x3, 4x9, 17x31,
    31x17 (noise, constant, all-0 and all-255, two-value images) through
    every op at both ends of every table with both signs, factors 0, 1,
    2, 5, 100, hue 0, +-1/255, +-0.001, +-0.25, +-0.5, posterize bits 0..8,
    solarize 0, 1, 128.5, 255, 256, rotations +-30, 90, -90, 180, 270, 360,
    45, 0.5, translations beyond the image (+-W, +-500), shears +-0.99,
    F.affine through all three Geometry.c paths: 50 images x 173 = 8,650
    jobs (the count is printed with -s).
  * test_augment_space: AugmentSpace of TrivialAugmentWide(31),
    RandAugment(31) and AutoAugment(10) against _augmentation_space for 13
    image sizes (224x224, 160x224, 224x160, 1x1, ...): op order, signedness,
    every float32 value, with the TorchCpuKernel of this machine's torch
    (AVX2); test_augment_space_default_kernel does the same for
    TorchCpuKernel::kDefault against torch run with
    ATEN_CPU_CAPABILITY=default (the AVX-512 variant is not checked).
  * test_autoaugment_imagenet_policies: the 25 IMAGENET sub-policies
    against AutoAugment(IMAGENET)._get_policies.
Runtime: 16 s on one core of a loaded 2-core machine, 22 s at load 4 (mostly PIL JPEG
decode and resize and the oracle's own ops).
"""

import glob
import json
import os
import subprocess
import tempfile

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import autoaugment as AA  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SAMPLE_DIR = os.environ.get("NEARPREP_SAMPLE_DATASET") or os.path.normpath(
    os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200"))
DRIVER = os.environ.get("NEARPREP_PIL_OPS_APPLY")

pytestmark = pytest.mark.skipif(
    not DRIVER, reason="NEARPREP_PIL_OPS_APPLY is not set (ctest sets it to "
    "the nearprep_pil_ops_apply target)")

AUG_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
           "Brightness", "Color", "Contrast", "Sharpness", "Posterize",
           "Solarize", "AutoContrast", "Equalize", "Invert"]
FILLS = [(0, 0, 0), (255, 128, 7)]


def spaces(height, width):
    """torchvision's own magnitude tables: {policy: {op: (tensor, signed)}}."""
    return {
        "TrivialAugmentWide": AA.TrivialAugmentWide()._augmentation_space(31),
        "RandAugment": AA.RandAugment()._augmentation_space(31, (height, width)),
        "AutoAugment": AA.AutoAugment()._augmentation_space(10, (height, width)),
    }


def table_values(height, width, op):
    """Every (magnitude, signed) value _apply_op can receive for op."""
    out = []
    for space in spaces(height, width).values():
        if op not in space:
            continue
        mags, signed = space[op]
        if mags.ndim == 0:
            out.append((0.0, False))
        else:
            out.extend((float(m), signed) for m in mags.tolist())
    return out


def oracle(img, op, args, fill):
    """torchvision 0.14 on a PIL RGB image: the expected result."""
    fill = list(fill)
    if op in AUG_OPS:
        return AA._apply_op(img, op, args[0], InterpolationMode.NEAREST, fill)
    if op == "brightness":
        return F.adjust_brightness(img, args[0])
    if op == "contrast":
        return F.adjust_contrast(img, args[0])
    if op == "saturation":
        return F.adjust_saturation(img, args[0])
    if op == "sharpness":
        return F.adjust_sharpness(img, args[0])
    if op == "hue":
        return F.adjust_hue(img, args[0])
    if op == "posterize":
        return F.posterize(img, int(args[0]))
    if op == "solarize":
        return F.solarize(img, args[0])
    if op == "autocontrast":
        return F.autocontrast(img)
    if op == "equalize":
        return F.equalize(img)
    if op == "invert":
        return F.invert(img)
    if op == "hflip":
        return F.hflip(img)
    if op == "rotate":
        return F.rotate(img, args[0], interpolation=InterpolationMode.NEAREST, fill=fill)
    if op == "affine":
        angle, tx, ty, scale, shx, shy = args
        return F.affine(img, angle=angle, translate=[int(tx), int(ty)], scale=scale,
                        shear=[shx, shy], interpolation=InterpolationMode.NEAREST,
                        fill=fill)
    raise ValueError(op)


def run_driver(jobs):
    """jobs: [(uint8 HxWx3 array, op, [args], fill)] -> list of arrays."""
    with tempfile.TemporaryDirectory() as tmp:
        in_path = os.path.join(tmp, "in.raw")
        out_path = os.path.join(tmp, "out.raw")
        lines = []
        with open(in_path, "wb") as f:
            for arr, op, args, fill in jobs:
                f.write(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())
                lines.append(" ".join(
                    [str(arr.shape[0]), str(arr.shape[1])] + [str(int(c)) for c in fill] +
                    [op] + [repr(float(a)) for a in args]))
        subprocess.run([DRIVER, "run", in_path, out_path], check=True,
                       input="\n".join(lines) + "\n", text=True)
        data = np.fromfile(out_path, dtype=np.uint8)
    out, pos = [], 0
    for arr, _, _, _ in jobs:
        n = arr.size
        out.append(data[pos:pos + n].reshape(arr.shape))
        pos += n
    assert pos == data.size, "driver wrote more or less than expected"
    return out


def check(jobs):
    got = run_driver(jobs)
    bad = []
    for (arr, op, args, fill), g in zip(jobs, got):
        want = np.asarray(oracle(Image.fromarray(arr, "RGB"), op, args, fill).convert("RGB"))
        if want.shape != g.shape or not np.array_equal(want, g):
            diff = (np.abs(want.astype(int) - g.astype(int)).max()
                    if want.shape == g.shape else "shape")
            bad.append(f"{op}{tuple(args)} fill={fill} on {arr.shape[0]}x{arr.shape[1]}: "
                       f"max diff {diff}")
    assert not bad, f"{len(bad)} of {len(jobs)} jobs differ, e.g.\n" + "\n".join(bad[:20])
    return len(jobs)


_IMAGES = {}


def real_images(height, width, count=None):
    key = (height, width)
    if key not in _IMAGES:
        paths = sorted(glob.glob(os.path.join(SAMPLE_DIR, "*", "*")))
        if not paths:
            pytest.skip(f"no sample images under {SAMPLE_DIR}")
        _IMAGES[key] = [
            np.asarray(Image.open(p).convert("RGB").resize((width, height), Image.BILINEAR))
            for p in paths[:count]]
    return _IMAGES[key]


def magnitude_for(i, op, height, width):
    values = table_values(height, width, op)
    if not values:
        return 0.0
    m, signed = values[(i * 7) % len(values)]
    return -m if signed and i % 2 else m


def augment_jobs(images):
    jobs = []
    h, w = images[0].shape[:2]
    for op in AUG_OPS:
        for i, arr in enumerate(images):
            jobs.append((arr, op, [magnitude_for(i, op, h, w)], FILLS[i % 2]))
    return jobs


def test_real_images_augment_ops():
    n = check(augment_jobs(real_images(224, 224)))
    assert n == 15 * 200
    n = check(augment_jobs(real_images(160, 224, 40)) + augment_jobs(real_images(224, 160, 40)))
    assert n == 15 * 80


def test_real_images_functional_ops():
    images = real_images(224, 224)
    rng = np.random.default_rng(7)
    angles = [90.0, 180.0, 270.0, -90.0, 45.0, -135.0, 12.5, 359.0, 0.0, 720.0]
    jobs = []
    for i, arr in enumerate(images):
        jobs.append((arr, "hue", [float(rng.uniform(-0.5, 0.5))], (0, 0, 0)))
        jobs.append((arr, "hflip", [], (0, 0, 0)))
        jobs.append((arr, "rotate", [angles[i % len(angles)]], FILLS[i % 2]))
        jobs.append((arr, "affine", [float(rng.uniform(-180, 180)), int(rng.integers(-60, 61)),
                                     int(rng.integers(-60, 61)), float(rng.uniform(0.5, 1.5)),
                                     float(rng.uniform(-30, 30)), float(rng.uniform(-30, 30))],
                     FILLS[(i + 1) % 2]))
    assert check(jobs) == 800
    # Geometry.c's double-precision loop (corners beyond +-32768) on real images.
    # The matrix must scale by > 146 for that, so only a few pixels near the
    # centre stay visible on 224x224; a 700x1000 image keeps a few hundred.
    far = [(arr, "affine", [float(5 * i + 1), i - 10, 0, 0.005, 0.0, 0.0], (0, 0, 0))
           for i, arr in enumerate(images[:20])]
    big = np.random.default_rng(3).integers(0, 256, (700, 1000, 3), dtype=np.uint8)
    far += [(big, "affine", [7.0 * i, i, -i, 0.02, 3.0 * i, 0.0], (0, 0, 0)) for i in range(5)]
    got = run_driver(far)
    assert sum(int((g != 0).any(axis=2).sum()) for g in got[20:]) > 500
    assert check(far) == 25


def edge_images():
    rng = np.random.default_rng(1)
    sizes = [(1, 1), (1, 7), (7, 1), (2, 2), (2, 5), (3, 3), (5, 3), (4, 9), (17, 31), (31, 17)]
    out = []
    for h, w in sizes:
        out.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        out.append(np.zeros((h, w, 3), np.uint8))
        out.append(np.full((h, w, 3), 255, np.uint8))
        out.append(np.broadcast_to(np.array([200, 17, 90], np.uint8), (h, w, 3)).copy())
        two = np.where(rng.integers(0, 2, (h, w, 1)) == 1, 250, 3).astype(np.uint8)
        out.append(np.repeat(two, 3, axis=2))
    return out


def edge_jobs():
    jobs = []
    images = edge_images()
    for arr in images:
        h, w = arr.shape[:2]
        for op in AUG_OPS:
            values = table_values(h, w, op)
            ends = {(0.0, False)}
            for space in spaces(h, w).values():
                if op in space and space[op][0].ndim > 0:
                    mags, signed = space[op]
                    for m in (float(mags[0]), float(mags[-1])):
                        ends.add((m, signed))
            for m, signed in sorted(ends) if values else [(0.0, False)]:
                for v in ([m, -m] if signed else [m]):
                    jobs.append((arr, op, [v], FILLS[len(jobs) % 2]))
        for op in ("brightness", "contrast", "saturation", "sharpness"):
            for f in (0.0, 0.01, 0.5, 1.0, 1.99, 2.0, 5.0, 100.0):
                jobs.append((arr, op, [f], (0, 0, 0)))
        for hue in (0.0, 1 / 255, -1 / 255, 0.001, -0.001, 0.25, -0.25, 0.5, -0.5):
            jobs.append((arr, "hue", [hue], (0, 0, 0)))
        for bits in range(9):
            jobs.append((arr, "posterize", [bits], (0, 0, 0)))
        for t in (0.0, 1.0, 128.5, 255.0, 256.0):
            jobs.append((arr, "solarize", [t], (0, 0, 0)))
        for op in ("autocontrast", "equalize", "invert", "hflip"):
            jobs.append((arr, op, [], (0, 0, 0)))
        for a in (30.0, -30.0, 90.0, -90.0, 180.0, 270.0, 360.0, 45.0, 0.5):
            jobs.append((arr, "rotate", [a], (9, 99, 199)))
        for tx, ty in ((w, 0), (-w, 0), (0, h), (0, -h), (500, -500), (w - 1, 1 - h)):
            jobs.append((arr, "affine", [0.0, tx, ty, 1.0, 0.0, 0.0], (9, 99, 199)))
        # Geometry.c's other paths: a pure scale (ImagingScaleAffine) and
        # corners beyond +-32768 (the double-precision loop).
        for args in ([0.0, 0, 0, 0.37, 0.0, 0.0], [0.0, 3, -2, 3.3, 0.0, 0.0],
                     [10.0, 40000, 0, 1.0, 0.0, 0.0], [33.0, -50000, 20000, 1.0, 5.0, 5.0],
                     [-170.0, 0, 32760, 1.0, 0.0, 0.0], [0.0, 0, 0, 1e-3, 0.0, 0.0]):
            jobs.append((arr, "affine", args, (9, 99, 199)))
        for m in (0.99, -0.99, 0.3, -0.3):
            jobs.append((arr, "ShearX", [m], (1, 2, 3)))
            jobs.append((arr, "ShearY", [m], (1, 2, 3)))
        for m in (float(w), -float(w), 500.0, -500.0, 0.9, -0.9):
            jobs.append((arr, "TranslateX", [m], (4, 5, 6)))
            jobs.append((arr, "TranslateY", [m], (4, 5, 6)))
    return jobs


def test_edge_cases():
    n = check(edge_jobs())
    print(f"edge cases: {n} jobs")


def torch_kernel():
    """The ATen CPU kernel this torch runs (AVX2 on the CI machine)."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":")[1].strip().lower()
    return "avx2"


def parse_tables(height, width, kernel="avx2"):
    text = subprocess.run([DRIVER, "tables", str(height), str(width), kernel], check=True,
                          capture_output=True, text=True).stdout
    got_spaces, got_policies = {}, []
    for line in text.splitlines():
        f = line.split()
        if f[0] == "space":
            got_spaces.setdefault(f[1], []).append((f[2], f[3] == "1", [int(x, 16) for x in f[4:]]))
        elif f[0] == "policy":
            got_policies.append(((f[1], float(f[2]), int(f[3])), (f[4], float(f[5]), int(f[6]))))
    return got_spaces, got_policies


def torch_tables(height, width):
    """{policy: [(op, signed, [float32 bit patterns])]} from torchvision."""
    out = {}
    for policy, space in spaces(height, width).items():
        out[policy] = [
            (op, signed, mags.to(torch.float32).reshape(-1).numpy().view(np.uint32).tolist()
             if mags.ndim else [])
            for op, (mags, signed) in space.items()]
    return out


SIZES = [(224, 224), (160, 224), (224, 160), (1, 1), (2, 3), (32, 32), (299, 299),
         (331, 331), (375, 500), (500, 375), (256, 256), (480, 640), (1024, 768)]


@pytest.mark.parametrize("height,width", SIZES)
def test_augment_space(height, width):
    got, _ = parse_tables(height, width, torch_kernel())
    assert got == torch_tables(height, width)


def test_augment_space_default_kernel():
    """torch's tables under ATEN_CPU_CAPABILITY=default (no AVX2, no FMA)
    against TorchCpuKernel::kDefault: the two kernels differ in the last bit
    of some entries, and a client's torch may run either."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "import pil_ops_oracle_test as t\n"
        f"print(json.dumps({{'%d,%d' % hw: t.torch_tables(*hw) for hw in {SIZES!r}}}))\n")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    text = subprocess.run(["/usr/bin/python3", "-c", script], check=True, env=env,
                          capture_output=True, text=True).stdout
    want = json.loads(text.splitlines()[-1])
    for height, width in SIZES:
        got, _ = parse_tables(height, width, "default")
        got = {p: [[op, signed, v] for op, signed, v in ops] for p, ops in got.items()}
        assert got == want[f"{height},{width}"], (height, width)
    # The kernels do differ (else this test would not tell them apart).
    assert parse_tables(224, 224, "default")[0] != parse_tables(224, 224, "avx2")[0]


def test_autoaugment_imagenet_policies():
    _, got = parse_tables(224, 224)
    want = AA.AutoAugment(AA.AutoAugmentPolicy.IMAGENET)._get_policies(
        AA.AutoAugmentPolicy.IMAGENET)
    assert len(got) == len(want) == 25
    for g, w in zip(got, want):
        for (gop, gp, gm), (wop, wp, wm) in zip(g, w):
            assert gop == wop
            assert np.float32(gp) == np.float32(wp)
            assert gm == (-1 if wm is None else wm)
