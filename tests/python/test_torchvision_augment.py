"""torchvision's augmentations through a real nearprepd (issue 36 parts 2, 3
and 5): ColorJitter, TrivialAugmentWide, RandAugment, AutoAugment(IMAGENET),
RandomErasing and batch-level MixUp / CutMix. Every byte must equal what
Debian's python3-torchvision 0.14 + python3-pil 9.4 compute on the same file
given the parameters the batch reports (Batch.params with include_params,
Batch.mix): the draws are nearprep's (Philox), the arithmetic torchvision's
own functions (F.resized_crop, F.hflip, F.adjust_*, autoaugment._apply_op,
F.erase, and the reference script's MixUp / CutMix formulas run in torch).

Images compared: the 200 real ImageNet JPEGs of ../shared once per case
(8 cases, 1,600 images), plus 15 MixUp / CutMix batches of 48 and a recipe
run of 4 training steps.
"""

import collections
import os

import numpy as np
import pytest

import nearprep
from conftest import sample_files

PIL = pytest.importorskip("PIL")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import autoaugment as AA  # noqa: E402
from torchvision.datasets.folder import default_loader  # noqa: E402

import nearprep.torch as nt  # noqa: E402
from nearprep import _stubs  # noqa: E402

v1 = _stubs.load()[0]

BILINEAR = T.InterpolationMode.BILINEAR
NEAREST = T.InterpolationMode.NEAREST

# The proto's AugmentOp values -> torchvision's op names.
OP_NAMES = {
    "AUGMENT_OP_IDENTITY": "Identity", "AUGMENT_OP_SHEAR_X": "ShearX",
    "AUGMENT_OP_SHEAR_Y": "ShearY", "AUGMENT_OP_TRANSLATE_X": "TranslateX",
    "AUGMENT_OP_TRANSLATE_Y": "TranslateY", "AUGMENT_OP_ROTATE": "Rotate",
    "AUGMENT_OP_BRIGHTNESS": "Brightness", "AUGMENT_OP_COLOR": "Color",
    "AUGMENT_OP_CONTRAST": "Contrast", "AUGMENT_OP_SHARPNESS": "Sharpness",
    "AUGMENT_OP_POSTERIZE": "Posterize", "AUGMENT_OP_SOLARIZE": "Solarize",
    "AUGMENT_OP_AUTO_CONTRAST": "AutoContrast", "AUGMENT_OP_EQUALIZE": "Equalize",
    "AUGMENT_OP_INVERT": "Invert",
}


def _op_name(value):

    return OP_NAMES[v1.AugmentOp.Name(value)]


def oracle(path, kw, p):
    """torchvision's training transform with nearprep's reported draws `p`
    (the nearprep.v1.SampleParams message)."""
    img = default_loader(path)
    c = p.crop
    img = F.resized_crop(img, c.y, c.x, c.height, c.width, [kw["height"], kw["width"]],
                         BILINEAR, antialias=True)
    if p.flipped:
        img = F.hflip(img)
    # ColorJitter: the reported order; disabled factors are skipped (None).
    enabled = [kw.get("jitter_brightness", 0), kw.get("jitter_contrast", 0),
               kw.get("jitter_saturation", 0), kw.get("jitter_hue", 0)]
    factors = [p.jitter_brightness, p.jitter_contrast, p.jitter_saturation, p.jitter_hue]
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    assert len(p.jitter_order) == (4 if any(enabled) else 0)
    for fn in p.jitter_order:
        if enabled[fn]:
            img = fns[fn](img, factors[fn])
    for step in p.augment:
        img = AA._apply_op(img, _op_name(step.op), step.magnitude, interpolation=NEAREST,
                           fill=None)
    x = T.PILToTensor()(img)
    if kw["dtype"] != "uint8":
        x = T.ConvertImageDtype(torch.float)(x)
        if kw.get("mean") is not None:
            x = T.Normalize(kw["mean"], kw["std"])(x)
    if p.HasField("erased"):
        e = p.erased
        value = kw.get("erase_value") or [0.0]
        v = torch.tensor(value, dtype=torch.float32)[:, None, None]
        x = F.erase(x, e.y, e.x, e.height, e.width, v)
    out = x.numpy()
    return out if kw["layout"] == "NCHW" else out.transpose(1, 2, 0)


def stream_and_compare(target, root, files, kw, seed=5, epochs=(0,), batch_size=40):
    client = nearprep.Client(target)
    bad, params = [], []
    for epoch in epochs:
        for b in client.batches("sample", batch_size=batch_size, seed=seed, epoch=epoch,
                                shuffle=True, include_params=True, **kw):
            for k, sid in enumerate(b.sample_ids):
                p = b.header.params[k]
                params.append(p)
                want = np.ascontiguousarray(oracle(os.path.join(root, files[int(sid)]), kw, p))
                got = np.ascontiguousarray(b.images[k])
                assert got.shape == want.shape and got.dtype == want.dtype
                if got.tobytes() != want.tobytes():
                    n = int((got.view(np.uint8) != want.view(np.uint8)).sum())
                    bad.append((files[int(sid)], [(_op_name(s.op), s.magnitude)
                                                  for s in p.augment], n))
    assert not bad, f"{len(bad)} of {len(params)} samples differ: {bad[:4]}"
    return params


def _kw(**extra):
    kw = nt.imagenet_train_kwargs()
    kw.update(extra)
    return kw


def test_color_jitter_200_images(daemon, sample_dir):
    files, _ = sample_files(sample_dir)
    kw = _kw(jitter_brightness=0.4, jitter_contrast=0.4, jitter_saturation=0.4,
             jitter_hue=0.1)
    params = stream_and_compare(daemon.target, sample_dir, files, kw)
    orders = collections.Counter(tuple(p.jitter_order) for p in params)
    assert len(orders) > 12, orders  # 24 permutations, 200 draws
    assert all(0.6 <= p.jitter_brightness < 1.4 and -0.1 <= p.jitter_hue < 0.1
               for p in params)


def test_color_jitter_some_factors_off_uint8(daemon, sample_dir):
    files, _ = sample_files(sample_dir)
    kw = _kw(jitter_contrast=0.8, jitter_hue=0.5, dtype="uint8", mean=None, std=None)
    kw = {k: v for k, v in kw.items() if v is not None}
    params = stream_and_compare(daemon.target, sample_dir, files, kw, seed=9)
    assert all(p.jitter_brightness == 1.0 and p.jitter_saturation == 1.0 for p in params)


@pytest.mark.parametrize("policy,extra,layout", [
    ("trivial_augment_wide", {}, "NCHW"),
    ("rand_augment", {}, "NHWC"),
    ("rand_augment", {"rand_augment_num_ops": 4, "rand_augment_magnitude": 30}, "NCHW"),
    ("imagenet", {}, "NCHW"),
])
def test_auto_augment_200_images(daemon, sample_dir, policy, extra, layout):
    files, _ = sample_files(sample_dir)
    kw = _kw(auto_augment=policy, layout=layout, **extra)
    params = stream_and_compare(daemon.target, sample_dir, files, kw, seed=3)
    ops = collections.Counter(_op_name(s.op) for p in params for s in p.augment)
    if policy == "imagenet":
        # 25 sub-policies of two steps, each applied with its probability.
        assert sum(ops.values()) < 2 * len(params)
        assert {"Equalize", "Posterize", "Rotate", "Solarize"} <= set(ops)
    else:
        n_ops = extra.get("rand_augment_num_ops", 2) if policy == "rand_augment" else 1
        assert sum(ops.values()) == n_ops * len(params)
        assert len(ops) == 14, ops  # every op of the table drawn at least once
    signs = {s.magnitude < 0 for p in params for s in p.augment if s.magnitude != 0}
    assert signs == {True, False}


def test_random_erasing_and_everything_at_once(daemon, sample_dir):
    files, _ = sample_files(sample_dir)
    kw = _kw(erase_probability=1.0, erase_value=[0.5, -1.0, 2.0])
    params = stream_and_compare(daemon.target, sample_dir, files, kw, seed=4)
    erased = [p for p in params if p.HasField("erased")]
    assert len(erased) == len(params)  # 10 attempts at the default scale nearly always fit
    kw = _kw(jitter_brightness=0.3, jitter_saturation=0.3, auto_augment="trivial_augment_wide",
             erase_probability=0.5)
    params = stream_and_compare(daemon.target, sample_dir, files, kw, seed=8)
    rate = sum(p.HasField("erased") for p in params) / len(params)
    assert 0.35 < rate < 0.65, rate


def test_other_fidelities_refuse_torchvision_ops(daemon):
    c = nearprep.Client(daemon.target)
    for extra in ({"jitter_brightness": 0.4}, {"auto_augment": "imagenet"},
                  {"erase_probability": 0.25}):
        with pytest.raises(nearprep.InvalidArgumentError) as e:
            list(c.batches("sample", batch_size=8, max_batches=1, **extra))
        assert e.value.field == "transform.fidelity"
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        list(c.batches("sample", batch_size=8, max_batches=1,
                       **_kw(rand_augment_num_ops=3)))
    assert e.value.field == "transform.rand_augment_num_ops"
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        list(c.batches("sample", batch_size=8, max_batches=1, **_kw(jitter_hue=0.6)))
    assert e.value.field == "transform.jitter_hue"


# --- MixUp / CutMix -----------------------------------------------------------

def _torch_mix(images_nchw, kind, lam, box):
    """torchvision's reference RandomMixup / RandomCutmix on a float32 NCHW
    batch, with the batch's reported lambda (MixUp) or box (CutMix)."""
    batch = torch.from_numpy(images_nchw.copy())
    rolled = batch.roll(1, 0)
    if kind == "mixup":
        rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(rolled)
    else:
        y1, x1, y2, x2 = box
        batch[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
    return batch.numpy()


@pytest.mark.parametrize("alphas", [(0.2, 0.0), (0.0, 1.0), (0.8, 1.0)])
def test_mixup_cutmix_batches(daemon, alphas):
    mixup, cutmix = alphas
    c = nearprep.Client(daemon.target)
    base = _kw()
    plain = list(c.batches("sample", batch_size=48, seed=2, shuffle=True, **base))
    mixed = list(c.batches("sample", batch_size=48, seed=2, shuffle=True,
                           mixup_alpha=mixup, cutmix_alpha=cutmix, **base))
    assert len(plain) == len(mixed) == 5  # 200 = 4 x 48 + 8
    kinds = collections.Counter()

    for a, b in zip(plain, mixed):
        assert np.array_equal(a.sample_ids, b.sample_ids)
        assert np.array_equal(a.labels, b.labels)
        m = b.header.mix
        kind = {v1.BatchMix.KIND_MIXUP: "mixup", v1.BatchMix.KIND_CUTMIX: "cutmix"}[m.kind]
        kinds[kind] += 1
        n = len(a.labels)
        assert list(b.header.mix_labels) == [int(a.labels[(i - 1) % n]) for i in range(n)]
        lam = getattr(m, "lambda")  # a Python keyword
        want = _torch_mix(a.images, kind, lam, (m.y1, m.x1, m.y2, m.x2))
        assert b.images.tobytes() == want.tobytes(), (kind, b.index)
        if kind == "cutmix":
            area = (m.y2 - m.y1) * (m.x2 - m.x1)
            assert lam == pytest.approx(1.0 - area / (224 * 224), abs=1e-6)
        assert 0.0 <= lam <= 1.0
    if mixup and cutmix:
        assert set(kinds) <= {"mixup", "cutmix"}
    else:
        assert set(kinds) == {"mixup" if mixup else "cutmix"}


# --- The recipe: nearprep.torch vs a torchvision DataLoader, training --------

def test_reference_recipe_trains_the_same_through_nearprep_and_a_dataloader(
        daemon, sample_dir):
    """torchvision's classification reference recipe (ta_wide, random_erase
    0.25, mixup 0.2, cutmix 1.0) through nearprep.torch and through a plain
    torch DataLoader over torchvision's ImageFolder-style loader with the
    same draws (nearprep.plan's and nearprep.batch_mix's Python twins of the
    daemon's Philox draws, computed here without the daemon); a tiny model
    trains 4 steps on each: every batch (images and soft targets) and the
    final weights are byte for byte the same."""
    from torch.utils.data import DataLoader, Dataset
    from nearprep import batch_mix, plan

    files, labels = sample_files(sample_dir)
    size, bs, seed, epoch, steps = 64, 16, 21, 1, 4
    recipe = dict(auto_augment="ta_wide", random_erase=0.25, mixup=0.2, cutmix=1.0)
    num_classes = len(set(labels))
    ds = nt.imagenet_train(daemon.target, "sample", batch_size=bs, size=size, seed=seed,
                           epoch=epoch, num_classes=num_classes, **recipe)

    spec = plan.TransformSpec(
        crop=plan.CROP_RANDOM_RESIZED, flip_probability=0.5,
        fidelity=plan.FIDELITY_TORCHVISION, height=size, width=size,
        auto_augment=plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE, erase_probability=0.25)
    mean, std = nt.IMAGENET_MEAN, nt.IMAGENET_STD
    order = plan.epoch_order(len(files), seed, epoch, True)

    class Reference(Dataset):
        """torchvision's transforms with the plan's draws for sample `sid`."""

        def __len__(self):
            return len(order)

        def __getitem__(self, pos):
            sid = order[pos]
            img = default_loader(os.path.join(sample_dir, files[sid]))
            p = plan.draw_sample_params(spec, seed, epoch, sid, img.height, img.width)
            y, x, h, w = p.crop
            img = F.resized_crop(img, y, x, h, w, [size, size], BILINEAR, antialias=True)
            if p.flip:
                img = F.hflip(img)
            for op, magnitude in p.augment:
                img = AA._apply_op(img, plan.AUGMENT_OPS[op], magnitude,
                                   interpolation=NEAREST, fill=None)
            t = T.Normalize(mean, std)(T.ConvertImageDtype(torch.float)(
                T.PILToTensor()(img)))
            if p.erased is not None:
                t = F.erase(t, *p.erased, torch.tensor([0.0])[:, None, None])
            return t, labels[sid]

    def collate(items, index=[0]):
        """The reference's RandomChoice([RandomMixup, RandomCutmix]) with the
        batch's draw, in torch."""
        images = torch.stack([t for t, _ in items])
        target = torch.tensor([l for _, l in items])
        m = batch_mix.draw_batch_mix(0.2, 1.0, seed, epoch, 0, index[0], size, size)
        index[0] += 1
        rolled = images.roll(1, 0)
        if m.kind == batch_mix.KIND_MIXUP:
            images = images.mul(m.lam).add(rolled.mul(1.0 - m.lam))
        else:
            images = images.clone()
            images[:, :, m.y1:m.y2, m.x1:m.x2] = rolled[:, :, m.y1:m.y2, m.x1:m.x2]
        return images, nt.mixed_targets(target, target.roll(1, 0), m.lam, num_classes)

    loader = DataLoader(Reference(), batch_size=bs, collate_fn=collate)

    def train(batches):
        torch.manual_seed(0)
        # (64 - 5) // 4 + 1 = 15: 4 x 15 x 15 features. Every weight is
        # drawn here, before either loader touches torch's generator.
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 5, stride=4), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(900, num_classes))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = []
        for k, (images, target) in enumerate(batches):
            if k == steps:
                break
            seen.append((images.numpy().tobytes(), target.numpy().tobytes()))
            loss = torch.nn.functional.cross_entropy(model(images), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return seen, [p.detach().numpy().tobytes() for p in model.parameters()]

    got_batches, got_weights = train(ds)
    want_batches, want_weights = train(loader)
    assert len(got_batches) == steps
    for k, (g, w) in enumerate(zip(got_batches, want_batches)):
        assert g[0] == w[0], f"batch {k}: images differ"
        assert g[1] == w[1], f"batch {k}: soft targets differ"
    assert got_weights == want_weights
