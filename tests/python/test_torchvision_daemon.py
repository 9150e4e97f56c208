"""FIDELITY_TORCHVISION end to end: a real nearprepd streams the presets of
nearprep.torch, and every byte must equal what Debian's python3-pil 9.4 and
python3-torchvision 0.14 compute on the same file (torchvision's
default_loader, then its transforms) with the crop box and flip the batch
reports in Batch.params.

Images: the 200 of ../shared/datasets/imagenet-sample-200 and a generated
dataset of edge cases (gray, CMYK, 4:4:4, 4:2:2, 4:4:0, progressive,
restart markers, tiny images) streamed with crops that touch the borders,
cover the whole image and upscale.

With NEARPREP_TV_DECODED_CACHE=1 (ctest python_torchvision_daemon_cached)
the daemons run with a decoded-image cache (--decoded-cache-bytes) and each
dataset is streamed once before the comparisons (warming: every image is
decoded once and admitted), so every compared sample is cut from a cached
Pillow-style decode; test_decoded_cache_served_the_comparisons checks that
they were (ServerInfo.decoded_cache: hits, no more misses than images).
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

import nearprep
from conftest import sample_files

PIL = pytest.importorskip("PIL")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.datasets.folder import default_loader  # noqa: E402

import nearprep.torch as nt  # noqa: E402

BILINEAR = T.InterpolationMode.BILINEAR

CACHED = os.environ.get("NEARPREP_TV_DECODED_CACHE") == "1"
CACHE_ARGS = ["--decoded-cache-bytes", "256M"] if CACHED else []


def _warm(target, dataset):
    """With the cache on: one pass over `dataset` (any TORCHVISION request
    decodes in Pillow's style, the cache key), so later streams hit."""
    if not CACHED:
        return
    n = 0
    for b in nearprep.Client(target).batches(dataset, batch_size=64, height=8, width=8,
                                             fidelity="torchvision", dtype="uint8",
                                             layout="NCHW", crop="random_resized"):
        n += b.images.shape[0]
    assert n > 0


def _cache_figures(target, dataset):
    for d in nearprep.Client(target).info().decoded_cache:
        if d.dataset == dataset:
            return d
    return None


@pytest.fixture(scope="module")
def daemon(daemon_factory, sample_dir):
    """The sample dataset as 'sample' (this module's own daemon: with the
    cache when CACHED)."""
    d = daemon_factory({"sample": sample_dir}, "tv_main", extra=CACHE_ARGS).start()
    _warm(d.target, "sample")
    return d


def test_oracle_versions():
    # The arithmetic reproduced is that of these versions.
    assert PIL.__version__.startswith("9.4"), PIL.__version__
    assert torchvision.__version__.startswith("0.14"), torchvision.__version__


def _finish(img, kw):
    """PILToTensor, then for float output ConvertImageDtype and Normalize."""
    x = T.PILToTensor()(img)
    if kw["dtype"] == "uint8":
        out = x
    else:
        x = T.ConvertImageDtype(torch.float)(x)
        if "mean" in kw:
            x = T.Normalize(kw["mean"], kw["std"])(x)
        out = x
    out = out.numpy()
    return out if kw["layout"] == "NCHW" else out.transpose(1, 2, 0)


def oracle(path, kw, params):
    """torchvision's transform for the preset `kw` on `path`, with nearprep's
    reported crop box and flip for the train preset."""
    img = default_loader(path)
    assert (params.source_height, params.source_width) == (img.height, img.width)
    size = [kw["height"], kw["width"]]
    if kw["crop"] == "random_resized":
        c = params.crop
        img = F.resized_crop(img, c.y, c.x, c.height, c.width, size, BILINEAR,
                             antialias=True)
        if params.flipped:
            img = F.hflip(img)
    else:
        # Eval: no random draw; the reported box is the whole image.
        assert (params.crop.y, params.crop.x, params.crop.height,
                params.crop.width) == (0, 0, img.height, img.width)
        assert not params.flipped
        img = T.Resize(kw["resize_shorter_side"], interpolation=BILINEAR)(img)
        img = T.CenterCrop(size)(img)
    return _finish(img, kw)


def stream_and_compare(target, dataset, root, files, kw, epochs=(0,), seed=7,
                       batch_size=25):
    """Streams `epochs` of `dataset` with the preset keywords `kw`; compares
    every sample with the oracle. Returns the params seen."""
    client = nearprep.Client(target)
    seen_params = []
    bad = []
    shuffle = kw["crop"] == "random_resized"
    for epoch in epochs:
        ids = []
        for b in client.batches(dataset, batch_size=batch_size, seed=seed, epoch=epoch,
                                shuffle=shuffle, include_params=True, **kw):
            assert b.dtype == kw["dtype"] and b.layout == kw["layout"]
            for k, sid in enumerate(b.sample_ids):
                sid = int(sid)
                ids.append(sid)
                p = b.params[k]
                seen_params.append((sid, p))
                want = np.ascontiguousarray(oracle(os.path.join(root, files[sid]), kw, p))
                got = np.ascontiguousarray(b.images[k])
                assert got.shape == want.shape and got.dtype == want.dtype
                if got.tobytes() != want.tobytes():
                    n = int((got.view(np.uint8) != want.view(np.uint8)).sum())
                    bad.append((files[sid], _box(p), p.flipped, n))
        assert sorted(ids) == list(range(len(files))), "each sample exactly once"
    assert not bad, f"{len(bad)} samples differ (file, box, flip, bytes): {bad[:5]}"
    return seen_params


def _box(p):
    c = p.crop
    return (c.y, c.x, c.height, c.width)


# --- The 200 real images ------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_train_preset_200_images(daemon, sample_dir, dtype):
    files, _ = sample_files(sample_dir)
    kw = (nt.imagenet_train_kwargs() if dtype == "float32" else
          nt.imagenet_train_kwargs(dtype="uint8", mean=None, std=None))
    params = stream_and_compare(daemon.target, "sample", sample_dir, files, kw)
    # The draws vary: both flips, many box sizes, some not the whole image.
    flips = {p.flipped for _, p in params}
    assert flips == {True, False}
    assert len({(p.crop.height, p.crop.width) for _, p in params}) > 150
    assert all(p.crop.height > 0 and p.crop.width > 0 for _, p in params)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_eval_preset_200_images(daemon, sample_dir, dtype):
    files, _ = sample_files(sample_dir)
    kw = (nt.imagenet_eval_kwargs() if dtype == "float32" else
          nt.imagenet_eval_kwargs(dtype="uint8", mean=None, std=None))
    stream_and_compare(daemon.target, "sample", sample_dir, files, kw)


def test_train_nhwc_odd_size(daemon, sample_dir):
    files, _ = sample_files(sample_dir)
    kw = nt.imagenet_train_kwargs((160, 192), layout="NHWC", scale=(0.25, 0.9),
                                  ratio=(0.5, 2.0), flip_probability=0.3)
    stream_and_compare(daemon.target, "sample", sample_dir, files, kw, seed=11)


def test_eval_preset_other_resize(daemon, sample_dir):
    files, _ = sample_files(sample_dir)
    kw = nt.imagenet_eval_kwargs((201, 223), resize_size=233)
    stream_and_compare(daemon.target, "sample", sample_dir, files, kw)


def test_torch_presets_yield_nchw_float32(daemon, sample_dir):
    files, labels = sample_files(sample_dir)
    ds = nt.imagenet_train(daemon.target, "sample", batch_size=50, seed=3,
                           return_batch=True, include_params=True)
    n = 0
    first = None
    for item in ds:
        images = item["images"]
        assert images.dtype == torch.float32 and tuple(images.shape[1:]) == (3, 224, 224)
        assert images.is_contiguous()
        for k, sid in enumerate(item["sample_ids"].tolist()):
            assert int(item["labels"][k]) == labels[sid]
        if first is None:
            first = item
        n += images.shape[0]
    assert n == 200
    # Same request through the client: the same bytes (a preset is nothing
    # but these keywords).
    b = next(iter(nearprep.Client(daemon.target).batches(
        "sample", batch_size=50, seed=3, shuffle=True, include_params=True,
        **nt.imagenet_train_kwargs())))
    assert np.array_equal(first["sample_ids"].numpy(), b.sample_ids.astype(np.int64))
    assert first["images"].numpy().tobytes() == b.images.tobytes()
    ev = nt.imagenet_eval(daemon.target, "sample", batch_size=64, pin_memory=True)
    shapes = [tuple(x.shape) for x, _ in ev]
    assert shapes == [(64, 3, 224, 224)] * 3 + [(8, 3, 224, 224)]


def test_presets_refuse_what_torchvision_lacks(daemon):
    c = nearprep.Client(daemon.target)
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        list(c.batches("sample", batch_size=8, max_batches=1,
                       brightness_max_delta=0.1, **nt.imagenet_train_kwargs()))
    assert e.value.field == "transform.brightness_max_delta"
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        list(c.batches("sample", batch_size=8, max_batches=1,
                       **nt.imagenet_eval_kwargs(resize_size=200)))
    assert e.value.field == "transform.resize_shorter_side"
    with pytest.raises(nearprep.InvalidArgumentError):
        nt.imagenet_eval_kwargs(dtype="uint8")  # mean/std with uint8


def test_resize_center_for_tf_compat_is_the_reported_box(daemon, sample_dir):
    # Every fidelity accepts CROP_MODE_RESIZE_CENTER: TF_COMPAT resizes the
    # source box of the window (reported) with its own resize, which equals
    # CROP_MODE_CENTER-style cropping of that box; check the box geometry.
    from nearprep import plan
    c = nearprep.Client(daemon.target)
    for b in c.batches("sample", batch_size=100, crop="resize_center",
                       resize_shorter_side=256, include_params=True, max_batches=1):
        for p in b.params:
            want = plan.resize_center_source_box(p.source_height, p.source_width,
                                                 256, 224, 224)
            assert _box(p) == want


# --- Generated edge cases -----------------------------------------------------

def _picture(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                     ((x + y) * 7) % 256], axis=-1).astype(np.int32)
    noise = rng.integers(-40, 40, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def edge_dataset(tmp_path_factory):
    """An image folder of edge-case JPEGs (one class per kind)."""
    root = tmp_path_factory.mktemp("tv_edge")

    def path(kind, name):
        os.makedirs(root / kind, exist_ok=True)
        return str(root / kind / f"{name}.jpg")

    for i, (h, w) in enumerate([(97, 131), (131, 97), (300, 41)]):
        rgb = Image.fromarray(_picture(h, w, i))
        rgb.save(path("s444", f"a{i}"), quality=90, subsampling=0)
        rgb.save(path("s422", f"a{i}"), quality=85, subsampling=1)
        rgb.save(path("s420", f"a{i}"), quality=75, subsampling=2)
        rgb.save(path("progressive", f"a{i}"), quality=85, progressive=True)
        Image.fromarray(_picture(h, w, 10 + i)[:, :, 0]).save(path("gray", f"a{i}"),
                                                               quality=90)
        Image.fromarray(_picture(h, w, 20 + i)).convert("CMYK").save(
            path("cmyk", f"a{i}"), quality=90)  # PIL writes an Adobe marker
    for h, w in ((1, 1), (2, 3), (5, 7), (16, 1), (1, 40), (9, 9)):
        Image.fromarray(_picture(h, w, h * 10 + w)).save(path("tiny", f"t{h}x{w}"),
                                                         quality=95)
    cjpeg = shutil.which("cjpeg")
    if cjpeg:
        ppm = str(root / "src.ppm")
        Image.fromarray(_picture(90, 121, 4)).save(ppm)
        for name, args in {"s440": ["-sample", "1x2"], "s411": ["-sample", "4x1"],
                           "restart": ["-restart", "1"],
                           "cjprog": ["-progressive"]}.items():
            subprocess.run([cjpeg, *args, "-outfile", path("cjpeg", name), ppm],
                           check=True)
        os.remove(ppm)
    return str(root)


@pytest.fixture(scope="module")
def edge_daemon(daemon_factory, edge_dataset):
    d = daemon_factory({"edge": edge_dataset}, "tv_edge", extra=CACHE_ARGS).start()
    _warm(d.target, "edge")
    return d


@pytest.mark.parametrize("size,preset", [
    ((224, 224), dict()),                                          # upscaling crops
    ((17, 40), dict(scale=(0.08, 1.0))),
    ((3, 2), dict(scale=(1.0, 1.0), ratio=(1.0, 1.0))),            # central fallback
    ((31, 29), dict(scale=(0.9, 1.0), ratio=(0.2, 5.0))),          # border-touching
])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_train_edge_cases(edge_daemon, edge_dataset, size, preset, dtype):
    files, _ = sample_files(edge_dataset)
    extra = dict(mean=None, std=None) if dtype == "uint8" else {}
    kw = nt.imagenet_train_kwargs(size, dtype=dtype, **preset, **extra)
    params = stream_and_compare(edge_daemon.target, "edge", edge_dataset, files, kw,
                                epochs=range(4), batch_size=8)
    boxes = [(_box(p), p.source_height, p.source_width) for _, p in params]
    if preset.get("scale", (0.08, 1.0))[0] >= 0.9:
        # The boxes reach the borders: left/top and right/bottom.
        assert any(c[0] == 0 and c[1] == 0 for c, _, _ in boxes)
        assert any(c[0] + c[2] == h and c[1] + c[3] == w for c, h, w in boxes)


@pytest.mark.parametrize("size,resize", [((224, 224), 256), ((8, 5), 9), ((1, 1), 1)])
def test_eval_edge_cases(edge_daemon, edge_dataset, size, resize):
    files, _ = sample_files(edge_dataset)
    for dtype in ("float32", "uint8"):
        extra = dict(mean=None, std=None) if dtype == "uint8" else {}
        kw = nt.imagenet_eval_kwargs(size, resize_size=resize, dtype=dtype, **extra)
        stream_and_compare(edge_daemon.target, "edge", edge_dataset, files, kw,
                           batch_size=8)


# --- The decoded-image cache (NEARPREP_TV_DECODED_CACHE=1) ---------------------

def test_decoded_cache_served_the_comparisons(daemon, edge_daemon, sample_dir,
                                              edge_dataset):
    """Runs last (file order): with the cache on, every image was decoded
    once (the warming pass) and the compared streams were served from the
    cache; without it, ServerInfo lists no cache."""
    for d, name, root in ((daemon, "sample", sample_dir),
                          (edge_daemon, "edge", edge_dataset)):
        files, _ = sample_files(root)
        # Make sure at least one compared stream ran on this daemon.
        stream_and_compare(d.target, name, root, files,
                           nt.imagenet_eval_kwargs((16, 16), resize_size=16, dtype="uint8",
                                                   mean=None, std=None), batch_size=64)
        fig = _cache_figures(d.target, name)
        if not CACHED:
            assert fig is None
            continue
        assert fig is not None
        # Each image decoded at most once per JPEG style (Pillow's for the
        # comparisons; TensorFlow's for the resize_center geometry test),
        # every decode admitted, and the compared streams served by hits.
        assert fig.misses == fig.admitted == fig.entries, (name, fig)
        assert len(files) <= fig.misses <= 2 * len(files), (name, fig)
        assert fig.hits >= len(files), (name, fig)
