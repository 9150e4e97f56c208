"""The nearprep epoch plan in pure Python, bit for bit equal to the daemon's.

Recomputes, without numpy and without a server, what a StreamBatches request
serves: the epoch order (Philox4x32-10 driven Fisher-Yates), a shard's
samples, and each sample's random parameters (flip, brightness delta,
saturation factor, crop box). docs/protocol.md is the normative description;
server/data/epoch_plan.cc and server/data/plan_math.cc are the C++ twins.

float32 arithmetic: every float32 operation is done on Python floats
(IEEE doubles) and rounded to float32 right after (_f32). For +, -, * of
float32 operands this equals the float32 operation exactly (a double holds
the exact product of two float32 values, and double rounding is innocuous
for these operations since 53 >= 2*24 + 2).

Thread-safety: pure functions.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import List, Optional, Sequence, Tuple

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
    "center_crop_box", "random_resized_crop_box", "draw_sample_params",
    "batches", "shard_size", "shard_batches", "float32_bits",
]

try:
    from .philox import M32 as _M32, key_of as _key, philox4x32
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
    _M32, _key, philox4x32 = _philox.M32, _philox.key_of, _philox.philox4x32

K_TAG_PERMUTATION = 1
K_TAG_SAMPLE_PARAMS = 2
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


def _f32(x: float) -> float:
    """Rounds a double to the nearest float32 (ties to even)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


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
    w3 = ((((epoch >> 32) & 0xFFFFFF) << 8) | K_TAG_PERMUTATION) & _M32
    out = philox4x32((i & _M32, (i >> 32) & _M32, epoch & _M32, w3), _key(seed))
    return out[0] | (out[1] << 32)


def sample_param_words(seed: int, epoch: int, sample_id: int,
                       block: int) -> Tuple[int, int, int, int]:
    w3 = ((((epoch >> 32) & 0xFFFF) << 16) | ((block & 0xFF) << 8)
          | K_TAG_SAMPLE_PARAMS)
    return philox4x32((sample_id & _M32, (sample_id >> 32) & _M32,
                       epoch & _M32, w3), _key(seed))


def epoch_order(num_samples: int, seed: int, epoch: int,
                shuffle: bool) -> List[int]:
    order = list(range(num_samples))
    if not shuffle:
        return order
    for i in range(num_samples - 1, 0, -1):
        j = permutation_draw(seed, epoch, i) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


K_TAG_BLOCK_PERMUTATION = 3
K_TAG_WINDOW_SHUFFLE = 4


def block_permutation_draw(seed: int, epoch: int, i: int) -> int:
    w3 = ((((epoch >> 32) & 0xFFFFFF) << 8) | K_TAG_BLOCK_PERMUTATION) & _M32
    out = philox4x32((i & _M32, (i >> 32) & _M32, epoch & _M32, w3), _key(seed))
    return out[0] | (out[1] << 32)


def window_draw(seed: int, epoch: int, window: int, i: int) -> int:
    w3 = ((((window >> 32) & 0xFFFFFF) << 8) | K_TAG_WINDOW_SHUFFLE) & _M32
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
    perm = list(range(nb))
    for i in range(nb - 1, 0, -1):
        j = block_permutation_draw(seed, epoch, i) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
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
        length = min(w, n - start)
        for i in range(length - 1, 0, -1):
            j = window_draw(seed, epoch, win, i) % (i + 1)
            order[start + i], order[start + j] = order[start + j], order[start + i]
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
    height: int = 224  # output size (CROP_RESIZE_CENTER reads it)
    width: int = 224


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
