"""client/python/nearprep/plan.py against the C++ epoch plan, bit for bit.

The pure-Python checks (Philox known answers, ranges) always run; the
comparisons need the C++ dump tool (tests/unit/data: nearprep_plan_dump) in
$NEARPREP_PLAN_DUMP and skip when it is unset.
"""

import importlib.util
import json
import math
import os
import random
import subprocess
import sys

import pytest

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _load_plan():
    # By path: the module needs nothing else of the package.
    path = os.path.join(_ROOT, "client", "python", "nearprep", "plan.py")
    spec = importlib.util.spec_from_file_location("nearprep_plan_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


plan = _load_plan()
DUMP = os.environ.get("NEARPREP_PLAN_DUMP")
needs_dump = pytest.mark.skipif(
    not DUMP or not os.path.exists(DUMP),
    reason="NEARPREP_PLAN_DUMP (the nearprep_plan_dump tool) not set")


# ---------------------------------------------------------------------------
# Pure Python.

def test_philox_known_answer_vectors():
    # Random123 kat_vectors, philox4x32 10 rounds.
    assert plan.philox4x32((0, 0, 0, 0), (0, 0)) == (
        0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)
    assert plan.philox4x32((0xffffffff,) * 4, (0xffffffff,) * 2) == (
        0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)
    assert plan.philox4x32((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
                           (0xa4093822, 0x299f31d0)) == (
        0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)


def test_uniform_float_rule():
    assert plan.uniform_float(0) == 0.0
    assert plan.uniform_float(0x00400000) == 0.5
    assert plan.uniform_float(0xFFFFFFFF) == 1.0 - 2.0 ** -23


def test_plan_math_close_to_libm():
    for x in (1e-9, 0.08, 0.75, 1.0, 4.0 / 3.0, 10.0, 1e300):
        assert plan.plan_log(x) == pytest.approx(math.log(x), rel=1e-15, abs=1e-16)
    for x in (-20.0, -0.3, 0.0, 0.29, 3.0, 700.0):
        assert plan.plan_exp(x) == pytest.approx(math.exp(x), rel=1e-14)
    assert plan.plan_round(2.5) == 3.0
    assert plan.plan_round(0.49999999999999994) == 0.0


def test_order_is_a_permutation_and_shards_partition_it():
    order = plan.epoch_order(1001, 5, 3, True)
    assert sorted(order) == list(range(1001))
    shards = [plan.shard_samples(order, k, 4) for k in range(4)]
    assert sorted(sum(shards, [])) == list(range(1001))
    assert plan.epoch_order(5, 5, 3, False) == [0, 1, 2, 3, 4]


def test_rrc_boxes_inside():
    spec = plan.TransformSpec(crop=plan.CROP_RANDOM_RESIZED)
    for h, w in ((1, 1), (3, 700), (375, 500), (64, 64)):
        for sid in range(200):
            y, x, bh, bw = plan.draw_sample_params(spec, 1, 0, sid, h, w).crop
            assert 0 <= y and 0 <= x and bh >= 1 and bw >= 1
            assert y + bh <= h and x + bw <= w


# ---------------------------------------------------------------------------
# Against the C++ implementation.

def _bits(v):
    return "0x%08x" % plan.float32_bits(v)


def _dump(**kw):
    args = [DUMP]
    philox = kw.pop("philox", [])
    for k, v in kw.items():
        args.append("%s=%s" % (k, v))
    for p in philox:
        args.append("philox=" + ",".join(str(w) for w in p))
    out = subprocess.run(args, check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return json.loads(out)


def test_round_half_even_is_pythons_round():
    for x in [0.0, 0.5, 1.5, 2.5, 2.4999999999999996, 3.5000000000000004,
              7.25, 1e15 + 0.5, 123456.5, 0.49999999999999994]:
        assert plan.plan_round_half_even(x) == float(round(x)), x
    assert plan.plan_round(2.5) == 3.0 and plan.plan_round_half_even(2.5) == 2.0


def test_torchvision_resize_center_matches_torchvision():
    F = pytest.importorskip("torchvision.transforms.functional")
    torch = pytest.importorskip("torch")
    for h, w in _SIZES + [(300, 451), (451, 300), (256, 257), (225, 224)]:
        for shorter, (oh, ow) in [(256, (224, 224)), (300, (1, 299)), (17, (17, 3))]:
            (rh, rw), (y, x, ch, cw) = plan.torchvision_resize_center(h, w, shorter, oh, ow)
            # torchvision's own size rule and centre-crop offsets, on a
            # tensor of the resized size (the pixels do not matter).
            assert F._compute_resized_output_size([h, w], [shorter]) == [rh, rw]
            img = torch.arange(rh * rw, dtype=torch.int64).reshape(1, rh, rw)
            got = F.center_crop(img, [oh, ow])
            assert (ch, cw) == (oh, ow)
            assert torch.equal(got, img[:, y:y + oh, x:x + ow]), (h, w, shorter)


@needs_dump
def test_philox_matches_cpp():
    rng = random.Random(7)
    counters = [[rng.getrandbits(32) for _ in range(6)] for _ in range(64)]
    counters += [[0] * 6, [0xffffffff] * 6]
    got = _dump(n=0, philox=counters)["philox"]
    assert got == [list(plan.philox4x32(c[:4], c[4:])) for c in counters]


@needs_dump
@pytest.mark.parametrize("n,seed,epoch,shuffle,shard,shards", [
    (10, 42, 0, 1, 0, 1),
    (1000, 42, 1, 1, 2, 3),
    (997, (1 << 40) + 7, (1 << 33) + 5, 1, 1, 2),  # high words of seed/epoch
    (50, 3, 0, 0, 0, 1),
    (1, 9, 9, 1, 0, 1),
    (0, 9, 9, 1, 0, 1),
])
def test_order_and_shard_match_cpp(n, seed, epoch, shuffle, shard, shards):
    got = _dump(n=n, seed=seed, epoch=epoch, shuffle=shuffle,
                shard_index=shard, num_shards=shards)
    order = plan.epoch_order(n, seed, epoch, bool(shuffle))
    assert got["order"] == order
    assert got["shard"] == plan.shard_samples(order, shard, shards)


@needs_dump
@pytest.mark.parametrize("n,seed,epoch,b,k,w,shard,shards", [
    (1000, 42, 0, 37, 8, 256, 0, 1),
    (1000, 42, 1, 37, 8, 256, 2, 3),
    (997, (1 << 40) + 7, (1 << 33) + 5, 10, 3, 50, 1, 2),
    (100, 1, 0, 1, 1, 1, 0, 1),       # block permutation of single samples
    (100, 1, 0, 200, 4, 7, 0, 1),     # one block: windows only
    (53, 5, 2, 4, 100, 1, 0, 1),      # more lanes than blocks, no window
    (0, 9, 9, 5, 2, 3, 0, 1),
])
def test_block_shuffle_matches_cpp(n, seed, epoch, b, k, w, shard, shards):
    got = _dump(n=n, seed=seed, epoch=epoch, shuffle=1, shard_index=shard,
                num_shards=shards, block_samples=b, open_blocks=k, window=w)
    order = plan.block_shuffled_order(n, seed, epoch, b, k, w)
    assert sorted(order) == list(range(n))
    assert got["order"] == order
    assert got["shard"] == plan.shard_samples(order, shard, shards)


def test_block_shuffle_reads_blocks_and_mixes_them():
    n, b, k = 4000, 40, 8
    order = plan.block_shuffled_order(n, 3, 0, b, k, window=1)
    # Without a window, the first K*B positions hold exactly K whole blocks,
    # interleaved one sample per lane per round.
    first = order[:k * b]
    blocks = sorted({i // b for i in first})
    assert len(blocks) == k
    assert sorted(first) == sorted(i for blk in blocks for i in range(blk * b, (blk + 1) * b))
    assert [i // b for i in order[:k]] == [i // b for i in order[k:2 * k]]
    # Within a block, records come in file order (one sequential read).
    for blk in blocks:
        seq = [i for i in first if i // b == blk]
        assert seq == sorted(seq)
    # The window shuffle keeps window membership and permutes inside.
    windowed = plan.block_shuffled_order(n, 3, 0, b, k, window=100)
    for s in range(0, n, 100):
        assert sorted(windowed[s:s + 100]) == sorted(order[s:s + 100])
    assert windowed != order
    # Epochs differ; the global shuffle is not the block shuffle.
    assert plan.block_shuffled_order(n, 3, 1, b, k, 100) != windowed
    assert plan.epoch_order(n, 3, 0, True) != windowed


_SIZES = [(375, 500), (500, 375), (1, 1), (1, 1000), (1000, 1), (7, 3),
          (4000, 3000), (17, 4096), (64, 64), (333, 334)]

_SPECS = [
    dict(crop=plan.CROP_RANDOM_RESIZED, flip_probability=0.5,
         brightness_max_delta=0.125, saturation_enabled=True,
         saturation_lower=0.5, saturation_upper=1.5),
    dict(crop=plan.CROP_RANDOM_RESIZED, scale_min=0.5, scale_max=0.5,
         ratio_min=0.1, ratio_max=10.0, flip_probability=0.3,
         brightness_max_delta=0.7),
    dict(crop=plan.CROP_RANDOM_RESIZED, scale_min=1.0, scale_max=1.0,
         ratio_min=1.0, ratio_max=1.0),  # mostly the fallback
    dict(crop=plan.CROP_RANDOM_RESIZED, scale_min=0.25, scale_max=0.9,
         ratio_min=0.3333, ratio_max=0.5),
    dict(crop=plan.CROP_CENTER, center_fraction=0.875, flip_probability=1.0),
    dict(crop=plan.CROP_CENTER, center_fraction=0.3333,
         saturation_enabled=True, saturation_lower=0.0, saturation_upper=3.1),
    dict(crop=plan.CROP_NONE, brightness_max_delta=32.0 / 255.0,
         saturation_enabled=True, saturation_lower=0.5, saturation_upper=1.5),
    # FIDELITY_TORCHVISION rounds the random-resized box half to even.
    dict(crop=plan.CROP_RANDOM_RESIZED, flip_probability=0.5,
         fidelity=plan.FIDELITY_TORCHVISION),
    dict(crop=plan.CROP_RANDOM_RESIZED, scale_min=0.25, scale_max=0.9,
         ratio_min=0.3333, ratio_max=0.5, fidelity=plan.FIDELITY_TORCHVISION),
    dict(crop=plan.CROP_RANDOM_RESIZED, scale_min=1.0, scale_max=1.0,
         ratio_min=1.0, ratio_max=1.0, fidelity=plan.FIDELITY_TORCHVISION),
    # CROP_RESIZE_CENTER: the whole image for TORCHVISION, the source box of
    # the window for the others.
    dict(crop=plan.CROP_RESIZE_CENTER, fidelity=plan.FIDELITY_TORCHVISION,
         flip_probability=0.5),
    dict(crop=plan.CROP_RESIZE_CENTER, resize_shorter=256, height=224,
         width=224),
    dict(crop=plan.CROP_RESIZE_CENTER, fidelity=plan.FIDELITY_FAST,
         resize_shorter=333, height=100, width=300),
    # random_contrast (block 0's word 3) and random_hue (block 11's word 0).
    dict(crop=plan.CROP_RANDOM_RESIZED, flip_probability=0.5,
         brightness_max_delta=0.125, saturation_enabled=True,
         saturation_lower=0.5, saturation_upper=1.5, contrast_enabled=True,
         contrast_lower=0.6, contrast_upper=1.4, hue_max_delta=0.08),
    dict(crop=plan.CROP_NONE, contrast_enabled=True, contrast_lower=0.0,
         contrast_upper=3.3),
    dict(crop=plan.CROP_CENTER, hue_max_delta=0.5),
]


@needs_dump
@pytest.mark.parametrize("spec_kw", _SPECS)
@pytest.mark.parametrize("seed,epoch", [(42, 0), (0xDEADBEEFCAFE, 7)])
def test_params_match_cpp(spec_kw, seed, epoch):
    spec = plan.TransformSpec(**spec_kw)
    # Store float32 values, as the daemon receives them.
    for f in ("center_fraction", "scale_min", "scale_max", "ratio_min",
              "ratio_max", "flip_probability", "brightness_max_delta",
              "saturation_lower", "saturation_upper", "contrast_lower",
              "contrast_upper", "hue_max_delta"):
        setattr(spec, f, plan._f32(getattr(spec, f)))
    count = 250
    got = _dump(n=0, seed=seed, epoch=epoch, params=count, crop=spec.crop,
                center_fraction=_bits(spec.center_fraction),
                fidelity=spec.fidelity, resize_shorter=spec.resize_shorter,
                out_height=spec.height, out_width=spec.width,
                scale_min=_bits(spec.scale_min), scale_max=_bits(spec.scale_max),
                ratio_min=_bits(spec.ratio_min), ratio_max=_bits(spec.ratio_max),
                flip=_bits(spec.flip_probability),
                brightness=_bits(spec.brightness_max_delta),
                sat_lower=_bits(spec.saturation_lower),
                sat_upper=_bits(spec.saturation_upper),
                con_lower=_bits(spec.contrast_lower),
                con_upper=_bits(spec.contrast_upper),
                hue=_bits(spec.hue_max_delta),
                sizes=",".join("%dx%d" % s for s in _SIZES))["params"]
    assert len(got) == count
    if not spec.saturation_enabled:
        assert spec.saturation_lower == 0 and spec.saturation_upper == 0
    for g in got:
        h, w = _SIZES[g["id"] % len(_SIZES)]
        p = plan.draw_sample_params(spec, seed, epoch, g["id"], h, w)
        assert g["flip"] == p.flip, g
        assert g["delta_bits"] == plan.float32_bits(p.brightness_delta), g
        assert g["factor_bits"] == plan.float32_bits(p.saturation_factor), g
        assert g["crop"] == list(p.crop), g
        assert g["source"] == [h, w]
        assert g["contrast_bits"] == plan.float32_bits(p.contrast_factor), g
        assert g["hue_bits"] == plan.float32_bits(p.hue_delta), g


# ---------------------------------------------------------------------------
# FIDELITY_TORCHVISION's augmentations (issue 36): ColorJitter, auto_augment,
# RandomErasing.

def test_fma_f32_rounds_once():
    # a * b + c lies just below the midpoint between c and its float32
    # successor: one rounding keeps c; the double route rounds to the
    # midpoint first and then to even, the successor.
    a, b, c = 1.0 + 2.0 ** -23, 2.0 ** -24 * (1.0 - 2.0 ** -23), 1.0 + 2.0 ** -23
    assert plan._fma_f32(a, b, c) == c
    assert plan._f32(a * b + c) == 1.0 + 2.0 ** -22
    assert plan._fma_f32(-3.0, 2.0, 0.5) == -5.5
    assert plan._fma_f32(2.0 ** -140, 1.0, 0.0) == 2.0 ** -140  # subnormal
    assert plan._fma_f32(1.0, 1.0 + 2.0 ** -24, 0.0) == 1.0  # tie to even
    assert plan._fma_f32(1.0, 1.0 + 3 * 2.0 ** -24, 0.0) == 1.0 + 2.0 ** -22


def _torch_python():
    """A Python with torch and torchvision (this one, else Debian's), or
    None."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if not os.path.exists(exe):
            continue
        r = subprocess.run([exe, "-c", "import torch, torchvision"],
                           capture_output=True, timeout=120)
        if r.returncode == 0:
            return exe
    return None


_TORCH_TABLES = r"""
import json, sys
import numpy as np, torch, torchvision
from torchvision.transforms import autoaugment as aa

def row(name, t, signed):
    t = t.to(torch.float32).reshape(-1) if t.ndim > 0 else t.new_zeros(0, dtype=torch.float32)
    return [name, bool(signed), [int(b) for b in t.numpy().view(np.uint32)]]

sizes = json.loads(sys.argv[1])
out = {"version": torchvision.__version__,
       "ta": [row(k, *v) for k, v in aa.TrivialAugmentWide()._augmentation_space(31).items()],
       "policies": [[list(s) for s in p] for p in
                    aa.AutoAugment()._get_policies(aa.AutoAugmentPolicy.IMAGENET)],
       "ra": {}, "aa": {}}
for h, w in sizes:
    key = "%dx%d" % (h, w)
    out["ra"][key] = [row(k, *v) for k, v in aa.RandAugment()._augmentation_space(31, (h, w)).items()]
    out["aa"][key] = [row(k, *v) for k, v in aa.AutoAugment()._augmentation_space(10, (h, w)).items()]
e = torchvision.transforms.RandomErasing()
out["erase"] = [list(e.scale), list(e.ratio)]
print(json.dumps(out))
"""

_AUG_SIZES = [(224, 224), (160, 96), (96, 160), (331, 331), (1, 1), (1000, 7)]


def _space_rows(policy, h, w):
    return [[plan.AUGMENT_OPS[m.op], m.is_signed,
             [plan.float32_bits(v) for v in m.magnitudes]]
            for m in plan.augment_space(policy, h, w)]


def test_augment_space_and_policies_match_torchvision():
    exe = _torch_python()
    if exe is None:
        pytest.skip("no Python with torch and torchvision")
    # torch.linspace's last bits depend on the CPU kernel torch dispatches
    # to; augment_space.h (and plan.py) follow the AVX2 kernel, which is what
    # the machines we test pick, but an AVX-512 machine would pick another:
    # pin the dispatch so that the comparison does not depend on the host.
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
    r = subprocess.run([exe, "-c", _TORCH_TABLES, json.dumps(_AUG_SIZES)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    tv = json.loads(r.stdout)
    assert tv["version"].startswith("0.14"), tv["version"]
    assert _space_rows(plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE, 224, 224) == tv["ta"]
    # TrivialAugmentWide's table does not depend on the size.
    assert _space_rows(plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE, 1, 7) == tv["ta"]
    for h, w in _AUG_SIZES:
        key = "%dx%d" % (h, w)
        assert _space_rows(plan.AUTO_AUGMENT_RAND_AUGMENT, h, w) == tv["ra"][key], key
        assert _space_rows(plan.AUTO_AUGMENT_IMAGENET, h, w) == tv["aa"][key], key
    ours = [[[plan.AUGMENT_OPS[s.op], s.probability,
              None if s.magnitude_bin < 0 else s.magnitude_bin] for s in p]
            for p in plan.AUTO_AUGMENT_IMAGENET_POLICIES]
    # Probabilities: ours are the float32 of torchvision's doubles.
    theirs = [[[n, plan._f32(p), b] for n, p, b in pol] for pol in tv["policies"]]
    assert ours == theirs
    spec = plan.TransformSpec()
    assert [[spec.erase_scale_min, spec.erase_scale_max],
            [spec.erase_ratio_min, spec.erase_ratio_max]] == tv["erase"]


_TV = plan.FIDELITY_TORCHVISION
_AUG_SPECS = [
    dict(auto_augment=plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE),
    dict(auto_augment=plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE, height=160, width=96),
    dict(auto_augment=plan.AUTO_AUGMENT_RAND_AUGMENT),  # 0, 0: 2 ops, bin 9
    dict(auto_augment=plan.AUTO_AUGMENT_RAND_AUGMENT, rand_augment_num_ops=1,
         rand_augment_magnitude=1, height=160, width=96),
    dict(auto_augment=plan.AUTO_AUGMENT_RAND_AUGMENT, rand_augment_num_ops=16,
         rand_augment_magnitude=30),
    dict(auto_augment=plan.AUTO_AUGMENT_RAND_AUGMENT, rand_augment_num_ops=2,
         rand_augment_magnitude=30, height=160, width=96),
    dict(auto_augment=plan.AUTO_AUGMENT_IMAGENET),
    dict(auto_augment=plan.AUTO_AUGMENT_IMAGENET, height=160, width=96),
    dict(jitter_brightness=0.4, jitter_contrast=0.4, jitter_saturation=0.4,
         jitter_hue=0.1),
    dict(jitter_brightness=0.4, jitter_saturation=0.2),  # some factors 0
    dict(jitter_brightness=1.5, jitter_hue=0.5),  # lower bound clamped to 0
    dict(jitter_hue=0.03125),
    dict(erase_probability=0.5),  # torchvision's scale and ratio
    dict(erase_probability=1.0, erase_scale_min=0.1, erase_scale_max=0.9,
         erase_ratio_min=0.5, erase_ratio_max=2.0, height=160, width=96),
    dict(erase_probability=1.0, erase_scale_min=0.9, erase_scale_max=1.0,
         erase_ratio_min=0.1, erase_ratio_max=10.0),  # attempts often fail
    dict(erase_probability=0.0, auto_augment=plan.AUTO_AUGMENT_IMAGENET),
    # Everything together, after a random-resized crop and a flip.
    dict(crop=plan.CROP_RANDOM_RESIZED, flip_probability=0.5,
         jitter_brightness=0.4, jitter_contrast=0.4, jitter_saturation=0.4,
         auto_augment=plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE,
         erase_probability=0.25),
]
_AUG_FLOATS = {  # TransformSpec field -> plan_dump key
    "jitter_brightness": "jitter_brightness", "jitter_contrast": "jitter_contrast",
    "jitter_saturation": "jitter_saturation", "jitter_hue": "jitter_hue",
    "erase_probability": "erase_p", "erase_scale_min": "erase_scale_min",
    "erase_scale_max": "erase_scale_max", "erase_ratio_min": "erase_ratio_min",
    "erase_ratio_max": "erase_ratio_max", "flip_probability": "flip",
}


def _aug_dump(spec, seed, epoch, first_id, count, fidelity=None):
    kw = dict(n=0, seed=seed, epoch=epoch, params=count, first_id=first_id,
              crop=spec.crop, fidelity=spec.fidelity if fidelity is None else fidelity,
              out_height=spec.height, out_width=spec.width,
              auto_augment=spec.auto_augment,
              rand_ops=spec.rand_augment_num_ops,
              rand_mag=spec.rand_augment_magnitude,
              sizes=",".join("%dx%d" % s for s in _SIZES))
    for field, key in _AUG_FLOATS.items():
        kw[key] = _bits(getattr(spec, field))
    return _dump(**kw)["params"]


def _aug_spec(kw):
    spec = plan.TransformSpec(fidelity=_TV, **kw)
    for field in _AUG_FLOATS:  # float32 values, as the daemon receives them
        setattr(spec, field, plan._f32(getattr(spec, field)))
    return spec


def _check_aug(g, p):
    assert g["jitter_bits"] == [plan.float32_bits(v) for v in p.jitter], g
    assert g["jitter_order"] == list(p.jitter_order), g
    assert g["augment"] == [[op, plan.float32_bits(m)] for op, m in p.augment], g
    assert g["erased"] == (list(p.erased) if p.erased is not None else None), g
    assert g["crop"] == list(p.crop) and g["flip"] == p.flip, g


@needs_dump
@pytest.mark.parametrize("spec_kw", _AUG_SPECS)
@pytest.mark.parametrize("seed,epoch,first_id", [
    (42, 0, 0), (0xDEADBEEFCAFE, 7, 1000), (5, (1 << 33) + 1, (1 << 40) + 3)])
def test_torchvision_augmentations_match_cpp(spec_kw, seed, epoch, first_id):
    spec = _aug_spec(spec_kw)
    count = 200
    got = _aug_dump(spec, seed, epoch, first_id, count)
    assert len(got) == count
    seen_steps = 0
    for g in got:
        h, w = _SIZES[g["id"] % len(_SIZES)]
        p = plan.draw_sample_params(spec, seed, epoch, g["id"], h, w)
        _check_aug(g, p)
        seen_steps += len(p.augment)
    if spec.auto_augment == plan.AUTO_AUGMENT_RAND_AUGMENT:
        assert seen_steps == count * spec.rand_augment_num_ops
    elif spec.auto_augment == plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE:
        assert seen_steps == count


@needs_dump
def test_augmentations_only_for_torchvision_fidelity():
    spec = _aug_spec(_AUG_SPECS[-1])
    for fidelity in (plan.FIDELITY_TF_COMPAT, plan.FIDELITY_FAST):
        spec.fidelity = fidelity
        for g in _aug_dump(spec, 9, 1, 0, 50):
            h, w = _SIZES[g["id"] % len(_SIZES)]
            p = plan.draw_sample_params(spec, 9, 1, g["id"], h, w)
            _check_aug(g, p)
            assert p.jitter == (1.0, 1.0, 1.0, 0.0) and p.jitter_order == ()
            assert p.augment == () and p.erased is None


# Statistical checks of the draws (on the twin, which the tests above tie to
# the daemon bit for bit). Bounds are chi-square / normal quantiles at
# p ~ 1e-4 for a correct draw; a biased or stuck draw fails them by far.
_N = 4000
_CHI2_999 = {13: 34.53, 23: 49.73, 24: 51.18, 30: 59.70}  # p = 0.001


def _chi2(counts, expected):
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected))


def test_trivial_augment_wide_draws_each_op_and_bin_uniformly():
    spec = plan.TransformSpec(fidelity=_TV,
                              auto_augment=plan.AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE)
    space = plan.augment_space(spec.auto_augment, 224, 224)
    assert len(space) == 14
    op_counts = [0] * 14
    bin_counts = [0] * 31
    negated = signed = 0
    for sid in range(_N):
        (op, mag), = plan.draw_sample_params(spec, 11, 2, sid, 375, 500).augment
        op_counts[op] += 1  # AugmentOp values 0..13 are the table's order
        meta = space[op]
        if op == plan.AUGMENT_OPS.index("ShearX"):
            bin_counts[meta.magnitudes.index(abs(mag))] += 1
        if meta.is_signed and mag != 0.0:
            signed += 1
            negated += mag < 0.0
    assert _chi2(op_counts, [_N / 14] * 14) < _CHI2_999[13], op_counts
    shear = sum(bin_counts)
    assert _chi2(bin_counts, [shear / 31] * 31) < _CHI2_999[30], bin_counts
    assert abs(negated - signed / 2) < 4 * math.sqrt(signed / 4)


def test_rand_augment_ops_uniform_and_magnitude_fixed():
    spec = plan.TransformSpec(fidelity=_TV, auto_augment=plan.AUTO_AUGMENT_RAND_AUGMENT,
                              rand_augment_num_ops=2, rand_augment_magnitude=30)
    space = plan.augment_space(spec.auto_augment, 224, 224)
    counts = [0] * 14
    for sid in range(_N // 2):
        steps = plan.draw_sample_params(spec, 4, 0, sid, 100, 100).augment
        assert len(steps) == 2
        for op, mag in steps:
            counts[op] += 1
            meta = space[op]
            assert abs(mag) == (meta.magnitudes[30] if meta.magnitudes else 0.0)
    assert _chi2(counts, [_N / 14] * 14) < _CHI2_999[13], counts


def test_auto_augment_applies_steps_at_the_policys_rate():
    spec = plan.TransformSpec(fidelity=_TV, auto_augment=plan.AUTO_AUGMENT_IMAGENET)
    policies = plan.AUTO_AUGMENT_IMAGENET_POLICIES
    # Each draw applies step k of the drawn sub-policy with its probability:
    # the applied count is a sum of Bernoulli(p), and every sub-policy is
    # drawn about N / 25 times. Which sub-policy was drawn is read back from
    # the Philox word, as the daemon draws it.
    chosen = [0] * 25
    applied = expected = variance = 0.0
    for sid in range(_N):
        w = plan.sample_param_words(7, 3, sid, plan.AUGMENT_BLOCK)
        pol = policies[w[0] % 25]
        chosen[w[0] % 25] += 1
        steps = plan.draw_sample_params(spec, 7, 3, sid, 64, 64).augment
        assert [op for op, _ in steps] == [
            s.op for k, s in enumerate(pol) if plan.uniform_float(w[1 + k]) <= s.probability]
        applied += len(steps)
        for s in pol:
            expected += s.probability
            variance += s.probability * (1.0 - s.probability)
    assert _chi2(chosen, [_N / 25] * 25) < _CHI2_999[24], chosen
    assert abs(applied - expected) < 4 * math.sqrt(variance), (applied, expected)
    # Sub-policy 12 applies its first step (p = 0) never, 13's second
    # (p = 1) always.
    for sid in range(_N):
        w = plan.sample_param_words(7, 3, sid, plan.AUGMENT_BLOCK)
        if w[0] % 25 == 13:
            steps = plan.draw_sample_params(spec, 7, 3, sid, 64, 64).augment
            assert steps[-1][0] == plan.AUGMENT_OPS.index("Equalize")


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_random_erasing_at_rate_p(p):
    spec = plan.TransformSpec(fidelity=_TV, erase_probability=p)
    erased = 0
    for sid in range(_N):
        e = plan.draw_sample_params(spec, 8, 0, sid, 375, 500).erased
        if e is not None:
            erased += 1
            y, x, h, w = e
            assert 0 <= y and 0 <= x and y + h <= 224 and x + w <= 224
            assert 0.02 * 224 * 224 * 0.5 <= h * w <= 0.33 * 224 * 224 * 1.5
    assert abs(erased - p * _N) <= 4 * math.sqrt(_N * p * (1 - p)) + 1e-9, erased


def test_color_jitter_order_is_a_uniform_permutation():
    spec = plan.TransformSpec(fidelity=_TV, jitter_brightness=0.5, jitter_hue=0.25)
    perms = {}
    for sid in range(_N):
        p = plan.draw_sample_params(spec, 1, 1, sid, 10, 10)
        assert sorted(p.jitter_order) == [0, 1, 2, 3]
        perms[p.jitter_order] = perms.get(p.jitter_order, 0) + 1
        b, c, s, h = p.jitter
        assert 0.5 <= b < 1.5 and c == 1.0 and s == 1.0 and -0.25 <= h < 0.25
    assert len(perms) == 24
    assert _chi2(list(perms.values()), [_N / 24] * 24) < _CHI2_999[23], perms
