"""FIDELITY_TORCHVISION against the real libraries (Debian's python3-pil 9.4
and python3-torchvision 0.14): every byte of nearprep's tensor must equal
what torchvision's transforms compute on the PIL image of its default
loader, for the ImageNet recipe's train and eval presets.

nearprep's side runs through nearprep_torchvision_apply ($NEARPREP_TORCHVISION_APPLY,
PreprocessJpeg with the crop box and flip given); the oracle's side is
torchvision itself. Images: the 200 of ../shared/datasets/imagenet-sample-200
(or $NEARPREP_SAMPLE_DATASET) and JPEGs generated here with PIL and cjpeg
(gray, CMYK, 4:4:4, 4:2:2, 4:4:0, progressive, restart markers, tiny sizes).
"""

import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.datasets.folder import default_loader  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SAMPLE_DIR = os.environ.get("NEARPREP_SAMPLE_DATASET") or os.path.normpath(
    os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200"))
TOOL = os.environ.get("NEARPREP_TORCHVISION_APPLY")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BILINEAR = T.InterpolationMode.BILINEAR

pytestmark = pytest.mark.skipif(not TOOL or not os.access(TOOL, os.X_OK),
                                reason="NEARPREP_TORCHVISION_APPLY not set (run through ctest)")


def test_oracle_versions():
    # The oracle is pinned: these are the versions whose arithmetic the
    # mode reproduces.
    assert PIL.__version__.startswith("9.4"), PIL.__version__
    assert torchvision.__version__.startswith("0.14"), torchvision.__version__


def sample_paths():
    if not os.path.isdir(SAMPLE_DIR):
        pytest.skip(f"{SAMPLE_DIR} is absent")
    paths = sorted(glob.glob(os.path.join(SAMPLE_DIR, "*", "*.JPEG")) +
                   glob.glob(os.path.join(SAMPLE_DIR, "*", "*.jpg")))
    assert len(paths) == 200
    return paths


def run_tool(tmp_path, jobs, mode, size, dtype="float32", layout="nchw",
             normalize=True, resize=256):
    h, w = size
    out = tmp_path / f"out_{mode}_{dtype}_{layout}.bin"
    args = [TOOL, "--out", str(out), "--mode", mode, "--height", str(h),
            "--width", str(w), "--resize", str(resize), "--dtype", dtype,
            "--layout", layout]
    if normalize:
        args += ["--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD))]
    text = "".join(f"{p} {b[0]} {b[1]} {b[2]} {b[3]} {int(f)}\n" for p, b, f in jobs)
    res = subprocess.run(args, input=text, capture_output=True, text=True, check=True)
    errors = [l for l in res.stdout.splitlines() if l.startswith("ERROR")]
    assert not errors, errors
    np_dtype = {"float32": np.float32, "uint8": np.uint8}[dtype]
    shape = (len(jobs), 3, h, w) if layout == "nchw" else (len(jobs), h, w, 3)
    return np.fromfile(out, dtype=np_dtype).reshape(shape)


def finish(img, dtype, normalize):
    """PILToTensor, then (float) ConvertImageDtype and Normalize."""
    steps = [T.PILToTensor()]
    if dtype == "float32":
        steps.append(T.ConvertImageDtype(torch.float))
        if normalize:
            steps.append(T.Normalize(MEAN, STD))
    return T.Compose(steps)(img).numpy()


def oracle_train(path, box, flip, size, dtype="float32", normalize=True):
    img = default_loader(path)
    top, left, h, w = box
    img = F.resized_crop(img, top, left, h, w, list(size), BILINEAR, antialias=True)
    if flip:
        img = F.hflip(img)
    return finish(img, dtype, normalize)


def oracle_eval(path, size, resize=256, dtype="float32", normalize=True):
    img = default_loader(path)
    img = T.CenterCrop(size)(T.Resize(resize, interpolation=BILINEAR)(img))
    return finish(img, dtype, normalize)


def compare(got, want, what):
    got = np.ascontiguousarray(got)
    want = np.ascontiguousarray(want)
    assert got.shape == want.shape, what
    if got.tobytes() != want.tobytes():
        diff = np.argwhere(got.view(np.uint8) != want.view(np.uint8))
        pytest.fail(f"{what}: {len(diff)} bytes differ, first at {diff[0].tolist()}; "
                    f"got {got.ravel()[:4]} want {want.ravel()[:4]}")


def torchvision_boxes(paths, seed):
    """RandomResizedCrop.get_params of torchvision itself, seeded, plus a
    flip per image."""
    torch.manual_seed(seed)
    jobs = []
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            box = T.RandomResizedCrop.get_params(im, [0.08, 1.0], [3 / 4, 4 / 3])
        jobs.append((p, box, i % 2 == 1))
    return jobs


def test_train_preset_sample_images(tmp_path):
    jobs = torchvision_boxes(sample_paths(), seed=1)
    got = run_tool(tmp_path, jobs, "train", (224, 224))
    for i, (p, box, flip) in enumerate(jobs):
        compare(got[i], oracle_train(p, box, flip, (224, 224)), f"{p} box {box} flip {flip}")


def test_train_uint8_nhwc_sample_images(tmp_path):
    # PILToTensor's bytes: uint8 output without mean/std.
    jobs = torchvision_boxes(sample_paths()[::4], seed=2)
    got = run_tool(tmp_path, jobs, "train", (160, 192), dtype="uint8", layout="nhwc",
                   normalize=False)
    for i, (p, box, flip) in enumerate(jobs):
        want = oracle_train(p, box, flip, (160, 192), dtype="uint8").transpose(1, 2, 0)
        compare(got[i], want, f"{p} box {box}")


def test_eval_preset_sample_images(tmp_path):
    jobs = [(p, (0, 0, 0, 0), False) for p in sample_paths()]
    got = run_tool(tmp_path, jobs, "eval", (224, 224))
    for i, (p, _, _) in enumerate(jobs):
        compare(got[i], oracle_eval(p, (224, 224)), p)


def test_eval_uint8_and_odd_sizes(tmp_path):
    paths = sample_paths()[1::8]
    jobs = [(p, (0, 0, 0, 0), False) for p in paths]
    got = run_tool(tmp_path, jobs, "eval", (201, 223), dtype="uint8", normalize=False,
                   resize=233)
    for i, p in enumerate(paths):
        compare(got[i], oracle_eval(p, (201, 223), resize=233, dtype="uint8"), p)


# --- Generated edge cases ----------------------------------------------------

def _picture(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                     ((x + y) * 7) % 256], axis=-1).astype(np.int32)
    noise = rng.integers(-40, 40, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def edge_images(tmp_path_factory):
    d = tmp_path_factory.mktemp("edge")
    out = {}
    rgb = Image.fromarray(_picture(97, 131, 1))
    for name, kwargs in {"s444": dict(subsampling=0), "s422": dict(subsampling=1),
                         "s420": dict(subsampling=2),
                         "progressive": dict(progressive=True, subsampling=2),
                         "q100": dict(quality=100, subsampling=0)}.items():
        p = str(d / f"{name}.jpg")
        rgb.save(p, quality=kwargs.pop("quality", 85), **kwargs)
        out[name] = p
    gray = Image.fromarray(_picture(83, 64, 2)[:, :, 0])
    out["gray"] = str(d / "gray.jpg")
    gray.save(out["gray"], quality=90)
    cmyk = Image.fromarray(_picture(71, 88, 3)).convert("CMYK")
    out["cmyk"] = str(d / "cmyk.jpg")
    cmyk.save(out["cmyk"], quality=90)  # PIL writes an Adobe marker
    for h, w in ((1, 1), (2, 3), (5, 7), (16, 1)):
        p = str(d / f"tiny_{h}x{w}.jpg")
        Image.fromarray(_picture(h, w, h * 10 + w)).save(p, quality=95)
        out[f"tiny_{h}x{w}"] = p
    cjpeg = shutil.which("cjpeg")
    if cjpeg:
        ppm = str(d / "src.ppm")
        Image.fromarray(_picture(90, 121, 4)).save(ppm)
        for name, args in {"cj440": ["-sample", "1x2"], "cj411": ["-sample", "4x1"],
                           "cjrestart": ["-restart", "1"],
                           "cjprogressive": ["-progressive"]}.items():
            p = str(d / f"{name}.jpg")
            subprocess.run([cjpeg, *args, "-outfile", p, ppm], check=True)
            out[name] = p
    return out


def _edge_boxes(h, w):
    """Boxes touching every border, the whole image, single pixels and
    boxes smaller than the output (upscaling)."""
    boxes = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1),
             (0, w - max(w // 2, 1), max(h // 3, 1), max(w // 2, 1)),
             (h - max(h // 2, 1), 0, max(h // 2, 1), w)]
    if h > 4 and w > 4:
        boxes.append((1, 2, h - 3, w - 4))
    return boxes


@pytest.mark.parametrize("size", [(224, 224), (17, 40), (3, 2)])
def test_train_edge_cases(tmp_path, edge_images, size):
    jobs = []
    for name, p in sorted(edge_images.items()):
        with Image.open(p) as im:
            w, h = im.size
        for k, box in enumerate(_edge_boxes(h, w)):
            jobs.append((p, box, k % 2 == 0))
    for dtype in ("float32", "uint8"):
        got = run_tool(tmp_path, jobs, "train", size, dtype=dtype,
                       normalize=dtype == "float32")
        for i, (p, box, flip) in enumerate(jobs):
            compare(got[i], oracle_train(p, box, flip, size, dtype=dtype),
                    f"{os.path.basename(p)} box {box} flip {flip} {dtype}")


@pytest.mark.parametrize("size,resize", [((224, 224), 256), ((8, 5), 9), ((1, 1), 1)])
def test_eval_edge_cases(tmp_path, edge_images, size, resize):
    paths = sorted(edge_images.values())
    jobs = [(p, (0, 0, 0, 0), False) for p in paths]
    got = run_tool(tmp_path, jobs, "eval", size, resize=resize)
    for i, p in enumerate(paths):
        compare(got[i], oracle_eval(p, size, resize=resize), os.path.basename(p))
