"""The nearprep epoch plan in pure Python, bit for bit equal to the daemon's.

Recomputes, without numpy and without a server, what a StreamBatches request
serves: the epoch order (Philox4x32-10 driven Fisher-Yates), a shard's
samples, and each sample's random parameters (flip, brightness delta,
saturation factor, crop box). docs/protocol.md is the normative description;
server/data/epoch_plan.cc and server/data/plan_math.cc are the C++ twins.

FIDELITY_TORCHVISION's augmentations (ColorJitter, auto_augment,
RandomErasing; server/spec/augment_space.h for torchvision 0.14's op tables)
are twinned too: augment_space, AUTO_AUGMENT_IMAGENET_POLICIES and
draw_torchvision_augmentations.

float32 arithmetic: every float32 operation is done on Python floats
(IEEE doubles) and rounded to float32 right after (_f32). For +, -, * of
float32 operands this equals the float32 operation exactly (a double holds
the exact product of two float32 values, and double rounding is innocuous
for these operations since 53 >= 2*24 + 2). A fused multiply-add (the
op tables' linspace) is not such an operation: _fma_f32 rounds the exact
rational result once. RandomErasing uses the plan's portable PlanLog /
PlanExp (plan_log, plan_exp), as the random resized crop does.

Thread-safety: pure functions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
from fractions import Fraction
from typing import List, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "CROP_NONE", "CROP_CENTER", "CROP_RANDOM_RESIZED", "CROP_RESIZE_CENTER",
    "FIDELITY_TF_COMPAT", "FIDELITY_FAST", "FIDELITY_TORCHVISION",
    "K_TAG_PERMUTATION", "K_TAG_SAMPLE_PARAMS", "RANDOM_RESIZED_CROP_ATTEMPTS",
    "COLOR_BLOCK",
    "TransformSpec", "SampleParams",
    "philox4x32", "uniform_float", "plan_log", "plan_exp", "plan_round",
    "plan_round_half_even", "torchvision_resize_center",
    "resize_center_source_box",
    "permutation_draw", "sample_param_words", "epoch_order", "shard_samples",
    "K_TAG_BLOCK_PERMUTATION", "K_TAG_WINDOW_SHUFFLE", "block_permutation_draw",
    "window_draw", "block_shuffled_order", "plan_shuffle", "word3", "MAX_AUGMENT_STEPS",
    "center_crop_box", "random_resized_crop_box", "draw_sample_params",
    "batches", "shard_size", "shard_batches", "float32_bits",
    "AUTO_AUGMENT_NONE", "AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE",
    "AUTO_AUGMENT_RAND_AUGMENT", "AUTO_AUGMENT_IMAGENET", "AUGMENT_OPS",
    "AUGMENT_BINS", "AUTO_AUGMENT_BINS", "JITTER_BLOCK", "JITTER_ORDER_BLOCK",
    "AUGMENT_BLOCK", "ERASE_BLOCK", "ERASE_ATTEMPT_BLOCK", "ERASE_ATTEMPTS",
    "AugmentOpMeta", "AutoAugmentStep", "augment_space",
    "AUTO_AUGMENT_IMAGENET_POLICIES", "draw_torchvision_augmentations",
]

_FROM_PHILOX = ("philox4x32", "plan_shuffle", "word3", "K_TAG_PERMUTATION",
                "K_TAG_SAMPLE_PARAMS", "K_TAG_BLOCK_PERMUTATION", "K_TAG_WINDOW_SHUFFLE")
try:
    from .philox import M32 as _M32, key_of as _key
    from .philox import (philox4x32, plan_shuffle, word3, K_TAG_PERMUTATION,
                         K_TAG_SAMPLE_PARAMS, K_TAG_BLOCK_PERMUTATION, K_TAG_WINDOW_SHUFFLE)
except ImportError:
    # Run as a script (python3 client/python/nearprep/plan.py) or loaded by
    # path without the package: philox.py beside this file is all it needs.
    def _load_philox():
        import importlib.util
        import os
        import sys
        name = "nearprep_philox_beside_plan"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(os.path.dirname(os.path.abspath(__file__)), "philox.py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[name] = mod
        return sys.modules[name]

    _philox = _load_philox()
    _M32, _key = _philox.M32, _philox.key_of
    globals().update({name: getattr(_philox, name) for name in _FROM_PHILOX})

# The counter tags are nearprep.philox's (K_TAG_*: one place for the client).
RANDOM_RESIZED_CROP_ATTEMPTS = 10
# The parameter block after the crop attempts: word 0 is random_hue's draw.
COLOR_BLOCK = 11

CROP_NONE = 0
CROP_CENTER = 1
CROP_RANDOM_RESIZED = 2
CROP_RESIZE_CENTER = 3

FIDELITY_TF_COMPAT = 0
FIDELITY_FAST = 1
FIDELITY_TORCHVISION = 2

# FIDELITY_TORCHVISION's blocks (server/data/epoch_plan.h): ColorJitter's
# factors (words 0-3: brightness, contrast, saturation, hue) and its order
# (words 0-2: Fisher-Yates steps 3, 2, 1 of randperm(4)); one auto-augment
# block per op (RandAugment's op k: AUGMENT_BLOCK + k, k < 16); the
# RandomErasing block (word 0: whether to erase) and its attempts.
JITTER_BLOCK = 12
JITTER_ORDER_BLOCK = 13
AUGMENT_BLOCK = 14  # .. 29
ERASE_BLOCK = 30
ERASE_ATTEMPT_BLOCK = 31  # .. 40
ERASE_ATTEMPTS = 10
MAX_AUGMENT_STEPS = 16

# Transform.auto_augment (the proto's AutoAugment values).
AUTO_AUGMENT_NONE = 0
AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE = 1
AUTO_AUGMENT_RAND_AUGMENT = 2
AUTO_AUGMENT_IMAGENET = 3

# The proto's AugmentOp values index this tuple of torchvision's op names.
AUGMENT_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY",
               "Rotate", "Brightness", "Color", "Contrast", "Sharpness",
               "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert")
(_IDENTITY, _SHEAR_X, _SHEAR_Y, _TRANSLATE_X, _TRANSLATE_Y, _ROTATE,
 _BRIGHTNESS, _COLOR, _CONTRAST, _SHARPNESS, _POSTERIZE, _SOLARIZE,
 _AUTO_CONTRAST, _EQUALIZE, _INVERT) = range(len(AUGMENT_OPS))

# TrivialAugmentWide's and RandAugment's num_magnitude_bins; AutoAugment's.
AUGMENT_BINS = 31
AUTO_AUGMENT_BINS = 10


def _f32(x: float) -> float:
    """Rounds a double to the nearest float32 (ties to even)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _f32_of_rational(q: Fraction) -> float:
    """The float32 nearest to the exact rational q (ties to even), rounded
    once (a float() first would round twice). Finite, normal or subnormal
    results only (the op tables' values)."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    # e: 2**e <= q < 2**(e+1).
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if q < Fraction(2) ** e:
        e -= 1
    e = max(e, -126)  # subnormals share the smallest normal's quantum
    shift = 23 - e  # the float32 quantum at q is 2**-shift
    n = round(q * Fraction(2) ** shift)  # Fraction rounds half to even
    return sign * math.ldexp(float(n), -shift)  # exact: n <= 2**24


def _fma_f32(a: float, b: float, c: float) -> float:
    """C's fmaf(a, b, c) for float32 a, b, c: a * b + c rounded once. In
    doubles a * b is exact but the sum can round twice (a 48-bit product
    plus c may need more than 53 bits), so it is done in rationals."""
    return _f32_of_rational(Fraction(a) * Fraction(b) + Fraction(c))


# --------------------------------------------------------------------------
# The uniform float rule (Philox4x32-10 itself: nearprep.philox).

def uniform_float(x: int) -> float:
    """float32 in [0, 1) from the low 23 bits of x (TensorFlow's rule)."""
    bits = 0x3F800000 | (int(x) & 0x7FFFFF)
    return struct.unpack("<f", struct.pack("<I", bits))[0] - 1.0  # exact


# --------------------------------------------------------------------------
# Portable double math (plan_math.cc): fixed IEEE operation sequences.

_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.4426950408889634
_SQRT_HALF = 0.7071067811865476
_LOG_TERMS = 12
_EXP_TERMS = 20


def plan_log(x: float) -> float:
    if not (x > 0.0) or not math.isfinite(x):
        return math.nan
    m, e = math.frexp(x)
    if m < _SQRT_HALF:
        m = m * 2.0
        e = e - 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = 1.0 / float(2 * (_LOG_TERMS - 1) + 1)
    for k in range(_LOG_TERMS - 2, -1, -1):
        p = p * s2 + 1.0 / float(2 * k + 1)
    log_m = 2.0 * s * p
    ed = float(e)
    return ed * _LN2_HI + (ed * _LN2_LO + log_m)


def plan_exp(x: float) -> float:
    if math.isnan(x):
        return x
    if x > 710.0:
        return math.inf
    if x < -746.0:
        return 0.0
    k = float(math.floor(x * _INV_LN2 + 0.5))
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = 1.0
    for i in range(_EXP_TERMS, 0, -1):
        p = 1.0 + p * r / float(i)
    try:
        return math.ldexp(p, int(k))
    except OverflowError:
        return math.inf


def plan_round(x: float) -> float:
    """Round half away from zero, for x >= 0 (NaN stays NaN)."""
    if math.isnan(x) or math.isinf(x):
        return x
    f = float(math.floor(x))
    return f + 1.0 if x - f >= 0.5 else f


def plan_round_half_even(x: float) -> float:
    """Round half to even, for x >= 0 (Python's round(), which torchvision
    uses; NaN stays NaN). Written out rather than round(x), so that it reads
    as the C++ twin does and returns a float for inf too."""
    if math.isnan(x) or math.isinf(x):
        return x
    f = float(math.floor(x))
    d = x - f  # exact
    if d != 0.5:
        return f + 1.0 if d > 0.5 else f
    return f if math.fmod(f, 2.0) == 0.0 else f + 1.0


# --------------------------------------------------------------------------
# The plan.

def permutation_draw(seed: int, epoch: int, i: int) -> int:
    w3 = word3(K_TAG_PERMUTATION, epoch >> 32)
    out = philox4x32((i & _M32, (i >> 32) & _M32, epoch & _M32, w3), _key(seed))
    return out[0] | (out[1] << 32)


def sample_param_words(seed: int, epoch: int, sample_id: int,
                       block: int) -> Tuple[int, int, int, int]:
    w3 = word3(K_TAG_SAMPLE_PARAMS, (((epoch >> 32) & 0xFFFF) << 8) | (block & 0xFF))
    return philox4x32((sample_id & _M32, (sample_id >> 32) & _M32,
                       epoch & _M32, w3), _key(seed))


def epoch_order(num_samples: int, seed: int, epoch: int,
                shuffle: bool) -> List[int]:
    order = list(range(num_samples))
    if not shuffle:
        return order
    return plan_shuffle(order, lambda i: permutation_draw(seed, epoch, i))


def block_permutation_draw(seed: int, epoch: int, i: int) -> int:
    w3 = word3(K_TAG_BLOCK_PERMUTATION, epoch >> 32)
    out = philox4x32((i & _M32, (i >> 32) & _M32, epoch & _M32, w3), _key(seed))
    return out[0] | (out[1] << 32)


def window_draw(seed: int, epoch: int, window: int, i: int) -> int:
    w3 = word3(K_TAG_WINDOW_SHUFFLE, window >> 32)
    out = philox4x32((i & _M32, window & _M32, epoch & _M32, w3), _key(seed))
    return out[0] | (out[1] << 32)


def block_shuffled_order(num_samples: int, seed: int, epoch: int,
                         block_samples: int, open_blocks: int = 8,
                         window: int = 256) -> List[int]:
    """The block shuffle (docs/protocol.md): a Philox permutation of blocks
    of block_samples consecutive ids, interleaved over open_blocks lanes,
    then shuffled within aligned windows of `window` positions."""
    b, k, w = max(block_samples, 1), max(open_blocks, 1), max(window, 1)
    n = num_samples
    nb = (n + b - 1) // b
    perm = plan_shuffle(list(range(nb)), lambda i: block_permutation_draw(seed, epoch, i))
    lanes = []  # [next id, end]
    opened = 0
    while len(lanes) < k and opened < nb:
        blk = perm[opened]
        opened += 1
        lanes.append([blk * b, min(n, (blk + 1) * b)])
    order: List[int] = []
    while lanes:
        lane = 0
        while lane < len(lanes):
            order.append(lanes[lane][0])
            lanes[lane][0] += 1
            if lanes[lane][0] == lanes[lane][1]:
                if opened < nb:
                    blk = perm[opened]
                    opened += 1
                    lanes[lane] = [blk * b, min(n, (blk + 1) * b)]
                else:
                    del lanes[lane]
                    continue
            lane += 1
    for start in range(0, n, w):
        win = start // w
        plan_shuffle(order, lambda i: window_draw(seed, epoch, win, i), start, min(w, n - start))
    return order


def shard_samples(order: Sequence[int], shard_index: int,
                  num_shards: int) -> List[int]:
    if num_shards == 0:
        num_shards = 1
    if shard_index >= num_shards:
        return []
    return list(order[shard_index::num_shards])


def shard_size(num_samples: int, shard_index: int, num_shards: int) -> int:
    """Positions in shard `shard_index` of `num_shards` of an epoch of
    num_samples (the daemon's ShardSize: num_shards 0 is 1, shard_index >=
    num_shards an empty shard): len(shard_samples(order, ...))."""
    num_shards = num_shards or 1
    if shard_index >= num_shards:
        return 0
    return len(range(shard_index, num_samples, num_shards))


def shard_batches(size: int, batch_size: int, drop_remainder: bool = False) -> int:
    """Batches of a shard of `size` samples when no sample fails:
    len(batches(shard, batch_size, drop_remainder))."""
    return size // batch_size if drop_remainder else -(-size // batch_size)


def batches(shard: Sequence[int], batch_size: int,
            drop_remainder: bool = False) -> List[List[int]]:
    """Consecutive groups of a shard when no sample fails (SKIP policy
    shifts later batches past failed samples; see docs/protocol.md)."""
    out = [list(shard[i:i + batch_size]) for i in range(0, len(shard), batch_size)]
    if drop_remainder and out and len(out[-1]) < batch_size:
        out.pop()
    return out


@dataclasses.dataclass
class TransformSpec:
    """The augmentation fields of a Transform, defaults resolved. Float
    fields hold float32 values (they are rounded with _f32 when used)."""
    crop: int = CROP_NONE
    center_fraction: float = 0.875
    scale_min: float = 0.08
    scale_max: float = 1.0
    ratio_min: float = 3.0 / 4.0
    ratio_max: float = 4.0 / 3.0
    flip_probability: float = 0.0
    brightness_max_delta: float = 0.0
    saturation_enabled: bool = False
    saturation_lower: float = 0.0
    saturation_upper: float = 0.0
    contrast_enabled: bool = False
    contrast_lower: float = 0.0
    contrast_upper: float = 0.0
    hue_max_delta: float = 0.0
    fidelity: int = FIDELITY_TF_COMPAT
    resize_shorter: int = 256  # CROP_RESIZE_CENTER: the shorter side's size
    height: int = 224  # output size (CROP_RESIZE_CENTER, the op tables
    width: int = 224   # and RandomErasing read it)
    # FIDELITY_TORCHVISION's ColorJitter: factor ranges [max(0, 1 - v),
    # 1 + v) (hue: [-v, v)); 0 disables one.
    jitter_brightness: float = 0.0
    jitter_contrast: float = 0.0
    jitter_saturation: float = 0.0
    jitter_hue: float = 0.0
    auto_augment: int = AUTO_AUGMENT_NONE
    # RandAugment, resolved as the daemon does: a request's 0 is 2 ops and
    # magnitude bin 9.
    rand_augment_num_ops: int = 2
    rand_augment_magnitude: int = 9
    # RandomErasing: probability 0 disables; scale and ratio resolved (a
    # request's 0, 0 is torchvision's (0.02, 0.33) and (0.3, 3.3)).
    erase_probability: float = 0.0
    erase_scale_min: float = 0.02
    erase_scale_max: float = 0.33
    erase_ratio_min: float = 0.3
    erase_ratio_max: float = 3.3


@dataclasses.dataclass
class SampleParams:
    flip: bool = False
    brightness_delta: float = 0.0
    saturation_factor: float = 1.0
    contrast_factor: float = 1.0
    hue_delta: float = 0.0
    crop: Tuple[int, int, int, int] = (0, 0, 0, 0)  # y, x, height, width
    source_height: int = 0
    source_width: int = 0
    # ColorJitter (FIDELITY_TORCHVISION): brightness, contrast, saturation
    # factors and hue delta (1, 1, 1, 0 when disabled), and the order it
    # applies them in (0 brightness .. 3 hue; empty when ColorJitter is off).
    jitter: Tuple[float, float, float, float] = (1.0, 1.0, 1.0, 0.0)
    jitter_order: Tuple[int, ...] = ()
    # The auto-augment steps in order: (AugmentOp value, magnitude as
    # torchvision's _apply_op receives it; AUGMENT_OPS names the op).
    augment: Tuple[Tuple[int, float], ...] = ()
    # RandomErasing's box (y, x, height, width) in output pixels, or None.
    erased: Optional[Tuple[int, int, int, int]] = None


def center_crop_box(height: int, width: int,
                    fraction: float) -> Tuple[int, int, int, int]:
    if height <= 0 or width <= 0:
        return (0, 0, 0, 0)
    f = _f32(fraction)
    if not (0.0 < f < 1.0):
        return (0, 0, height, width)

    def side(n: int) -> Tuple[int, int]:
        nd = float(n)
        s = int((nd - nd * f) / 2.0)
        length = n - 2 * s
        if length < 1:
            length, s = 1, (n - 1) // 2
        return s, length

    y, h = side(height)
    x, w = side(width)
    return (y, x, h, w)


def _half_rounded_even(d: int) -> int:
    """int(round(d / 2.0)) for an integer d >= 0."""
    k = d // 2
    if d % 2 == 0:
        return k
    return k if k % 2 == 0 else k + 1


def torchvision_resize_center(height: int, width: int, shorter: int,
                              out_h: int, out_w: int):
    """torchvision 0.14's Resize(shorter) size of an height x width image
    and CenterCrop((out_h, out_w))'s window in it: ((resized_h, resized_w),
    (y, x, out_h, out_w))."""
    portrait = width <= height
    short_side, long_side = (width, height) if portrait else (height, width)
    # int(size * long / short), as torchvision computes it.
    new_long = int(shorter * long_side / short_side)
    rh, rw = (new_long, shorter) if portrait else (shorter, new_long)
    return (rh, rw), (_half_rounded_even(rh - out_h), _half_rounded_even(rw - out_w),
                      out_h, out_w)


def resize_center_source_box(height: int, width: int, shorter: int, out_h: int,
                             out_w: int) -> Tuple[int, int, int, int]:
    """The box of the decoded image that TF_COMPAT and FAST resample to the
    output for CROP_RESIZE_CENTER: each side out * decoded / resized rounded
    half up, clamped to [1, side], centred (offsets floored)."""
    (rh, rw), _ = torchvision_resize_center(height, width, shorter, out_h, out_w)

    def side(n, out, resized):
        v = (2 * out * n + resized) // (2 * resized)
        return min(max(v, 1), n)

    bh, bw = side(height, out_h, rh), side(width, out_w, rw)
    return ((height - bh) // 2, (width - bw) // 2, bh, bw)


def random_resized_crop_box(spec: TransformSpec, seed: int, epoch: int,
                            sample_id: int, height: int,
                            width: int) -> Tuple[int, int, int, int]:
    if height <= 0 or width <= 0:
        return (0, 0, 0, 0)
    hd, wd = float(height), float(width)
    area = hd * wd
    s_lo, s_hi = _f32(spec.scale_min), _f32(spec.scale_max)
    r_lo, r_hi = _f32(spec.ratio_min), _f32(spec.ratio_max)
    log_lo, log_hi = plan_log(r_lo), plan_log(r_hi)
    # torchvision rounds with Python's round() (halves to even).
    rnd = plan_round_half_even if spec.fidelity == FIDELITY_TORCHVISION else plan_round
    for attempt in range(1, RANDOM_RESIZED_CROP_ATTEMPTS + 1):
        w = sample_param_words(seed, epoch, sample_id, attempt)
        u_scale = uniform_float(w[0])
        u_ratio = uniform_float(w[1])
        target_area = area * (s_lo + u_scale * (s_hi - s_lo))
        aspect = plan_exp(log_lo + u_ratio * (log_hi - log_lo))
        cw = rnd(_sqrt(target_area * aspect))
        ch = rnd(_sqrt(target_area / aspect))
        if 0.0 < cw <= wd and 0.0 < ch <= hd:
            bw, bh = int(cw), int(ch)
            y = w[2] % (height - bh + 1)
            x = w[3] % (width - bw + 1)
            return (y, x, bh, bw)
    in_ratio = wd / hd
    cw, ch = wd, hd
    if in_ratio < r_lo:
        ch = rnd(wd / r_lo)
    elif in_ratio > r_hi:
        cw = rnd(hd * r_hi)
    if not ch >= 1.0:
        ch = 1.0
    if not cw >= 1.0:
        cw = 1.0
    ch = min(ch, hd)
    cw = min(cw, wd)
    bh, bw = int(ch), int(cw)
    return ((height - bh) // 2, (width - bw) // 2, bh, bw)


def _sqrt(x: float) -> float:
    if math.isnan(x) or x < 0.0:
        return math.nan
    return math.sqrt(x)  # correctly rounded, inf stays inf


# --------------------------------------------------------------------------
# FIDELITY_TORCHVISION's augmentations (server/spec/augment_space.h,
# DrawTorchvisionAugmentations in server/data/epoch_plan.cc).

class AugmentOpMeta(NamedTuple):
    op: int  # AugmentOp value (AUGMENT_OPS[op] is torchvision's name)
    is_signed: bool
    magnitudes: Tuple[float, ...]  # float32 values; empty: magnitude 0.0


class AutoAugmentStep(NamedTuple):
    op: int
    probability: float  # float32
    magnitude_bin: int  # -1: none


def _linspace(start: float, end: float, n: int) -> Tuple[float, ...]:
    """torch.linspace(start, end, n) in float32 as torch 1.13's AVX2 CPU
    kernel computes it (see augment_space.h): the scalar formula is a fused
    multiply-add; the 8-lane vectors add k * step unfused."""
    start, end = _f32(start), _f32(end)
    if n == 1:
        return (start,)
    step = _f32(_f32(end - start) / float(n - 1))  # float32 - and /
    half = n // 2

    def scalar(i: int) -> float:
        if i < half:
            return _fma_f32(step, float(i), start)
        return _fma_f32(-step, float(n - 1 - i), end)

    v = [0.0] * n
    i = 0
    while i + 16 <= n:
        for c in (i, i + 8):
            base = scalar(c)
            for k in range(8):
                v[c + k] = _f32(base + _f32(float(k) * step))
        i += 16
    while i < n:
        v[i] = scalar(i)
        i += 1
    return tuple(v)


def _posterize(k: int, n: int, d: float) -> Tuple[float, ...]:
    """k - round_half_even(i / divisor) for i < n, divisor the float32 of the
    Python double (n - 1) / d; the division in float32."""
    divisor = _f32(float(n - 1) / d)
    return tuple(float(k - int(plan_round_half_even(_f32(float(i) / divisor))))
                 for i in range(n))


@functools.lru_cache(maxsize=64)
def augment_space(policy: int, height: int, width: int) -> Tuple[AugmentOpMeta, ...]:
    """The op space of `policy` (AUTO_AUGMENT_*) in torchvision's order, for
    an output of height x width: server/spec/augment_space.h's AugmentSpace."""
    s: List[AugmentOpMeta] = []

    def add(op, is_signed, m=()):
        s.append(AugmentOpMeta(op, is_signed, tuple(m)))

    if policy == AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE:
        n = AUGMENT_BINS
        add(_IDENTITY, False)
        add(_SHEAR_X, True, _linspace(0.0, 0.99, n))
        add(_SHEAR_Y, True, _linspace(0.0, 0.99, n))
        add(_TRANSLATE_X, True, _linspace(0.0, 32.0, n))
        add(_TRANSLATE_Y, True, _linspace(0.0, 32.0, n))
        add(_ROTATE, True, _linspace(0.0, 135.0, n))
        for op in (_BRIGHTNESS, _COLOR, _CONTRAST, _SHARPNESS):
            add(op, True, _linspace(0.0, 0.99, n))
        add(_POSTERIZE, False, _posterize(8, n, 6.0))
        add(_SOLARIZE, False, _linspace(255.0, 0.0, n))
        add(_AUTO_CONTRAST, False)
        add(_EQUALIZE, False)
    elif policy in (AUTO_AUGMENT_RAND_AUGMENT, AUTO_AUGMENT_IMAGENET):
        rand = policy == AUTO_AUGMENT_RAND_AUGMENT
        n = AUGMENT_BINS if rand else AUTO_AUGMENT_BINS
        # Python doubles, rounded to float32 once (torch's Scalar to float).
        tx = _f32(150.0 / 331.0 * width)
        ty = _f32(150.0 / 331.0 * height)
        if rand:
            add(_IDENTITY, False)
        add(_SHEAR_X, True, _linspace(0.0, 0.3, n))
        add(_SHEAR_Y, True, _linspace(0.0, 0.3, n))
        add(_TRANSLATE_X, True, _linspace(0.0, tx, n))
        add(_TRANSLATE_Y, True, _linspace(0.0, ty, n))
        add(_ROTATE, True, _linspace(0.0, 30.0, n))
        for op in (_BRIGHTNESS, _COLOR, _CONTRAST, _SHARPNESS):
            add(op, True, _linspace(0.0, 0.9, n))
        add(_POSTERIZE, False, _posterize(8, n, 4.0))
        add(_SOLARIZE, False, _linspace(255.0, 0.0, n))
        add(_AUTO_CONTRAST, False)
        add(_EQUALIZE, False)
        if not rand:
            add(_INVERT, False)
    return tuple(s)


def _policy(*steps):
    return tuple(AutoAugmentStep(op, _f32(p), b) for op, p, b in steps)


# AutoAugment(IMAGENET)'s 25 sub-policies, two (op, probability, magnitude
# bin or -1) each, in torchvision's order.
AUTO_AUGMENT_IMAGENET_POLICIES = (
    _policy((_POSTERIZE, 0.4, 8), (_ROTATE, 0.6, 9)),
    _policy((_SOLARIZE, 0.6, 5), (_AUTO_CONTRAST, 0.6, -1)),
    _policy((_EQUALIZE, 0.8, -1), (_EQUALIZE, 0.6, -1)),
    _policy((_POSTERIZE, 0.6, 7), (_POSTERIZE, 0.6, 6)),
    _policy((_EQUALIZE, 0.4, -1), (_SOLARIZE, 0.2, 4)),
    _policy((_EQUALIZE, 0.4, -1), (_ROTATE, 0.8, 8)),
    _policy((_SOLARIZE, 0.6, 3), (_EQUALIZE, 0.6, -1)),
    _policy((_POSTERIZE, 0.8, 5), (_EQUALIZE, 1.0, -1)),
    _policy((_ROTATE, 0.2, 3), (_SOLARIZE, 0.6, 8)),
    _policy((_EQUALIZE, 0.6, -1), (_POSTERIZE, 0.4, 6)),
    _policy((_ROTATE, 0.8, 8), (_COLOR, 0.4, 0)),
    _policy((_ROTATE, 0.4, 9), (_EQUALIZE, 0.6, -1)),
    _policy((_EQUALIZE, 0.0, -1), (_EQUALIZE, 0.8, -1)),
    _policy((_INVERT, 0.6, -1), (_EQUALIZE, 1.0, -1)),
    _policy((_COLOR, 0.6, 4), (_CONTRAST, 1.0, 8)),
    _policy((_ROTATE, 0.8, 8), (_COLOR, 1.0, 2)),
    _policy((_COLOR, 0.8, 8), (_SOLARIZE, 0.8, 7)),
    _policy((_SHARPNESS, 0.4, 7), (_INVERT, 0.6, -1)),
    _policy((_SHEAR_X, 0.6, 5), (_EQUALIZE, 1.0, -1)),
    _policy((_COLOR, 0.4, 0), (_EQUALIZE, 0.6, -1)),
    _policy((_EQUALIZE, 0.4, -1), (_SOLARIZE, 0.2, 4)),
    _policy((_SOLARIZE, 0.6, 5), (_AUTO_CONTRAST, 0.6, -1)),
    _policy((_INVERT, 0.6, -1), (_EQUALIZE, 1.0, -1)),
    _policy((_COLOR, 0.6, 4), (_CONTRAST, 1.0, 8)),
    _policy((_EQUALIZE, 0.8, -1), (_EQUALIZE, 0.6, -1)),
)


def draw_torchvision_augmentations(spec: TransformSpec, seed: int, epoch: int,
                                   sample_id: int, p: SampleParams) -> None:
    """ColorJitter's, auto_augment's and RandomErasing's draws into p (the
    C++ DrawTorchvisionAugmentations; draw_sample_params calls it for
    FIDELITY_TORCHVISION)."""
    def words(block):
        return sample_param_words(seed, epoch, sample_id, block)

    jitter = [_f32(spec.jitter_brightness), _f32(spec.jitter_contrast),
              _f32(spec.jitter_saturation), _f32(spec.jitter_hue)]
    if any(v != 0.0 for v in jitter):
        # factor = lo + u * (hi - lo) in float32; order = randperm(4).
        w = words(JITTER_BLOCK)
        factors = list(p.jitter)
        for k in range(4):
            v = jitter[k]
            if v == 0.0:
                continue
            lo = -v if k == 3 else max(0.0, _f32(1.0 - v))
            hi = v if k == 3 else _f32(1.0 + v)
            factors[k] = _f32(lo + _f32(uniform_float(w[k]) * _f32(hi - lo)))
        p.jitter = tuple(factors)
        o = words(JITTER_ORDER_BLOCK)
        # PlanShuffle: step i draws word 3 - i.
        p.jitter_order = tuple(plan_shuffle([0, 1, 2, 3], lambda i: o[3 - i]))

    if spec.auto_augment != AUTO_AUGMENT_NONE:
        space = augment_space(spec.auto_augment, spec.height, spec.width)
        steps = []
        if spec.auto_augment == AUTO_AUGMENT_IMAGENET:
            # Word 0 the sub-policy; words 1, 2 each step's probability draw
            # (applied when u <= p); word 3 bit k step k's sign (0: negated,
            # as torchvision's signs[i] == 0).
            w = words(AUGMENT_BLOCK)
            for k, step in enumerate(AUTO_AUGMENT_IMAGENET_POLICIES[w[0] % 25]):
                if not uniform_float(w[1 + k]) <= step.probability:
                    continue
                meta = None
                for m in space:
                    if m.op == step.op:
                        meta = m
                magnitude = 0.0
                if step.magnitude_bin >= 0 and meta is not None and meta.magnitudes:
                    magnitude = meta.magnitudes[step.magnitude_bin]
                if meta is not None and meta.is_signed and (w[3] >> k) & 1 == 0:
                    magnitude = -magnitude
                steps.append((step.op, magnitude))
        else:
            # One block per op: word 0 the op, word 1 TrivialAugmentWide's
            # bin (RandAugment's is the request's), word 2 bit 0 the sign
            # (1: negated).
            ta = spec.auto_augment == AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE
            ops = 1 if ta else spec.rand_augment_num_ops
            for k in range(min(ops, MAX_AUGMENT_STEPS)):
                w = words(AUGMENT_BLOCK + k)
                meta = space[w[0] % len(space)]
                magnitude = 0.0
                if meta.magnitudes:
                    b = (w[1] % len(meta.magnitudes) if ta
                         else spec.rand_augment_magnitude)
                    magnitude = meta.magnitudes[b]
                if meta.is_signed and w[2] & 1:
                    magnitude = -magnitude
                steps.append((meta.op, magnitude))
        p.augment = tuple(steps)

    erase_p = _f32(spec.erase_probability)
    if erase_p > 0.0 and uniform_float(words(ERASE_BLOCK)[0]) < erase_p:
        # Attempt a: scale u (word 0), log-ratio u (word 1), the row (word 2)
        # and column (word 3) offsets; the area and the box sides in doubles.
        height, width = spec.height, spec.width
        area = float(height) * float(width)
        s_lo, s_hi = float(_f32(spec.erase_scale_min)), float(_f32(spec.erase_scale_max))
        log_lo = plan_log(float(_f32(spec.erase_ratio_min)))
        log_hi = plan_log(float(_f32(spec.erase_ratio_max)))
        for a in range(ERASE_ATTEMPTS):
            w = words(ERASE_ATTEMPT_BLOCK + a)
            # Doubles, as the random resized crop (portable log / exp).
            erase_area = area * (s_lo + uniform_float(w[0]) * (s_hi - s_lo))
            aspect = plan_exp(log_lo + uniform_float(w[1]) * (log_hi - log_lo))
            hd = plan_round_half_even(_sqrt(erase_area * aspect))
            wd = plan_round_half_even(_sqrt(erase_area / aspect))
            if not (hd < height and wd < width):
                continue
            h, wi = int(hd), int(wd)
            p.erased = (w[2] % (height - h + 1), w[3] % (width - wi + 1), h, wi)
            break


def draw_sample_params(spec: TransformSpec, seed: int, epoch: int,
                       sample_id: int, height: int, width: int) -> SampleParams:
    p = SampleParams(source_height=height, source_width=width)
    w = sample_param_words(seed, epoch, sample_id, 0)
    flip_p = _f32(spec.flip_probability)
    if flip_p > 0.0:
        p.flip = uniform_float(w[0]) < flip_p
    m = _f32(spec.brightness_max_delta)
    if m > 0.0:
        rng = _f32(m + m)
        p.brightness_delta = _f32(_f32(uniform_float(w[1]) * rng) - m)
    if spec.saturation_enabled:
        lower = _f32(spec.saturation_lower)
        rng = _f32(_f32(spec.saturation_upper) - lower)
        p.saturation_factor = _f32(_f32(uniform_float(w[2]) * rng) + lower)
    if spec.contrast_enabled:
        lower = _f32(spec.contrast_lower)
        rng = _f32(_f32(spec.contrast_upper) - lower)
        p.contrast_factor = _f32(_f32(uniform_float(w[3]) * rng) + lower)
    m = _f32(spec.hue_max_delta)
    if m > 0.0:
        c = sample_param_words(seed, epoch, sample_id, COLOR_BLOCK)
        rng = _f32(m + m)
        p.hue_delta = _f32(_f32(uniform_float(c[0]) * rng) - m)
    if spec.fidelity == FIDELITY_TORCHVISION:
        draw_torchvision_augmentations(spec, seed, epoch, sample_id, p)
    if spec.crop == CROP_CENTER:
        p.crop = center_crop_box(height, width, spec.center_fraction)
    elif spec.crop == CROP_RANDOM_RESIZED:
        p.crop = random_resized_crop_box(spec, seed, epoch, sample_id, height,
                                         width)
    elif spec.crop == CROP_RESIZE_CENTER and spec.fidelity != FIDELITY_TORCHVISION \
            and height > 0 and width > 0:
        # TORCHVISION resizes the whole image (the box is the image).
        p.crop = resize_center_source_box(height, width, spec.resize_shorter,
                                          spec.height, spec.width)
    else:
        p.crop = (0, 0, max(height, 0), max(width, 0))
    return p


def float32_bits(x: float) -> int:
    """The IEEE bit pattern of a float32 value (for exact comparisons)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


if __name__ == "__main__":  # The worked example of docs/protocol.md.
    print("order =", epoch_order(10, 42, 0, True))
