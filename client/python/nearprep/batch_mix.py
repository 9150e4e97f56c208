"""Batch-level MixUp and CutMix: the Python twin of server/pipeline/batch_mix.

docs/protocol.md ("MixUp and CutMix") is normative. The daemon draws one set of parameters per
batch from Philox (a function of seed, epoch, shard and batch index only) and
mixes the batch's images before sending it; the trainer mixes the targets
with the reported parameters (mixed_targets). The op is torchvision 0.14's
classification reference (references/classification/transforms.py,
RandomMixup / RandomCutmix with p=1.0, picked by train.py's RandomChoice):
sample i is paired with sample i-1 and sample 0 with the last one
(`batch.roll(1, 0)`), not with sample n-1-i as timm's `x.flip(0)` does.

- draw_batch_mix(mixup_alpha, cutmix_alpha, seed, epoch, shard_index,
  batch_index, height, width) -> BatchMixParams: bit for bit the C++
  DrawBatchMix on the same libm (log, exp, cos are libm's on both sides).
- apply_batch_mix(params, images, dtype, layout): the C++ ApplyBatchMix on a
  numpy batch (returns a new array).
- mixed_targets(labels, params, num_classes, label_smoothing=0.0): the soft
  targets lam * onehot(label) + (1 - lam) * onehot(partner's label), float32,
  as the reference builds them.

Thread-safety: pure functions.
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np

from . import philox as _philox

__all__ = ["KIND_NONE", "KIND_MIXUP", "KIND_CUTMIX", "TAG_BATCH_MIX", "MAX_BLOCKS",
           "BatchMixParams", "draw_batch_mix", "partner", "apply_batch_mix",
           "mixed_targets"]

KIND_NONE = 0
KIND_MIXUP = 1
KIND_CUTMIX = 2
TAG_BATCH_MIX = _philox.K_TAG_BATCH_MIX  # server/plan/philox.h kTagBatchMix
MAX_BLOCKS = 64  # blocks 0..63 of the counter; 1..63 feed the Beta draw
_TWO_PI = 6.283185307179586
_TWO_POW_26 = 67108864.0
_TWO_POW_MINUS_53 = 1.0 / 9007199254740992.0
_M32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class BatchMixParams:
    """One batch's draw. `lam` is a float32 value (as a Python float): the
    weight of each sample's own image and label (MixUp's Beta draw, CutMix's
    1 - box area / (H * W), 1 for none). CutMix replaces rows [y1, y2) and
    columns [x1, x2) with the partner's (all 0 otherwise)."""
    kind: int = KIND_NONE
    lam: float = 1.0
    y1: int = 0
    x1: int = 0
    y2: int = 0
    x2: int = 0


def _f32(x: float) -> float:
    """The nearest float32 (ties to even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _uniform_float(x: int) -> float:
    """u(x): float32 in [0, 1) from the low 23 bits of x (docs/protocol.md)."""
    return struct.unpack("<f", struct.pack("<I", 0x3F800000 | (x & 0x7FFFFF)))[0] - 1.0


def _block(key, epoch: int, shard_index: int, batch_index: int, j: int):
    c3 = _philox.word3(TAG_BATCH_MIX, (((epoch >> 32) & 0xFFFF) << 8) | j)  # j < MAX_BLOCKS
    return _philox.philox4x32(
        (batch_index & _M32, shard_index & _M32, epoch & _M32, c3), key)


class _Dry(Exception):
    """The Beta draw's word budget (blocks 1..MAX_BLOCKS-1) is spent."""


class _Words:
    def __init__(self, key, epoch, shard_index, batch_index):
        self._args = (key, epoch, shard_index, batch_index)
        self._next_block = 1
        self._words = ()
        self._used = 4

    def next(self) -> int:
        if self._used == 4:
            if self._next_block >= MAX_BLOCKS:
                raise _Dry()
            self._words = _block(*self._args, self._next_block)
            self._next_block += 1
            self._used = 0
        w = self._words[self._used]
        self._used += 1
        return w

    def uniform53(self) -> float:
        a = self.next()
        b = self.next()
        return (float(a >> 5) * _TWO_POW_26 + float(b >> 6) + 1.0) * _TWO_POW_MINUS_53

    def normal(self) -> float:
        u1 = self.uniform53()
        u2 = self.uniform53()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


def _gamma_at_least_one(a: float, s: _Words) -> float:
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        z = s.normal()
        v = 1.0 + c * z
        if not v > 0.0:
            continue
        v = v * v * v
        u = s.uniform53()
        zz = z * z
        if u < 1.0 - 0.0331 * (zz * zz) or \
                math.log(u) < 0.5 * zz + d * ((1.0 - v) + math.log(v)):
            return d * v


def _beta(alpha: float, s: _Words) -> float:
    if alpha >= 1.0:
        x = _gamma_at_least_one(alpha, s)
        y = _gamma_at_least_one(alpha, s)
        return x / (x + y)
    logs = []
    for _ in range(2):
        g = _gamma_at_least_one(alpha + 1.0, s)
        u = s.uniform53()
        logs.append(math.log(g) + math.log(u) / alpha)
    # C's exp overflows to inf (then 1 / inf = 0); Python's raises instead.
    try:
        e = math.exp(logs[1] - logs[0])
    except OverflowError:
        e = math.inf
    return 1.0 / (1.0 + e)


def draw_batch_mix(mixup_alpha: float, cutmix_alpha: float, seed: int, epoch: int,
                   shard_index: int, batch_index: int, height: int,
                   width: int) -> BatchMixParams:
    """DrawBatchMix (docs/protocol.md ("MixUp and CutMix"), "The draw"). The alphas are used as
    float32 (as on the wire); only the low 32 bits of batch_index and bits
    0..47 of epoch count."""
    ma, ca = _f32(mixup_alpha), _f32(cutmix_alpha)
    mixup, cutmix = ma > 0.0, ca > 0.0
    if not mixup and not cutmix:
        return BatchMixParams()
    key = _philox.key_of(seed)
    b0 = _block(key, epoch, shard_index, batch_index, 0)
    if mixup and cutmix:
        kind = KIND_MIXUP if _uniform_float(b0[0]) < 0.5 else KIND_CUTMIX
    else:
        kind = KIND_MIXUP if mixup else KIND_CUTMIX
    alpha = ma if kind == KIND_MIXUP else ca
    try:
        lam = _beta(alpha, _Words(key, epoch, shard_index, batch_index))
    except _Dry:
        lam = 0.5
    if not 0.0 <= lam <= 1.0:
        lam = 0.5
    lam = _f32(lam)
    if kind == KIND_MIXUP:
        return BatchMixParams(KIND_MIXUP, lam)
    w, h = max(width, 1), max(height, 1)
    r = 0.5 * math.sqrt(1.0 - lam)
    rw_half, rh_half = int(r * w), int(r * h)
    rx, ry = b0[1] % w, b0[2] % h
    x1, y1 = max(rx - rw_half, 0), max(ry - rh_half, 0)
    x2, y2 = min(rx + rw_half, w), min(ry + rh_half, h)
    lam = _f32(1.0 - (x2 - x1) * (y2 - y1) / (w * h))
    return BatchMixParams(KIND_CUTMIX, lam, y1, x1, y2, x2)


def partner(i: int, n: int) -> int:
    """The partner of sample i in a batch of n: (i + n - 1) % n."""
    return (i + n - 1) % n


# --------------------------------------------------------------------------
# The op. dtype names as nearprep.batch.DTYPES; bfloat16 batches are uint16
# arrays of bfloat16 bits (as Batch.images gives them).

_U8_SCALE = np.float32(1.0) / np.float32(255.0)  # float32(1/255), as in C++


def _to_float32(images: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return images.astype(np.float32)
    if dtype == "float16":
        return images.astype(np.float32)  # exact
    if dtype == "bfloat16":
        return (images.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dtype == "uint8":
        return images.astype(np.float32) * _U8_SCALE
    raise ValueError(f"unknown dtype {dtype!r}")


def _from_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16)  # round to nearest even, overflow -> inf
    if dtype == "bfloat16":
        bits = x.view(np.uint32)
        nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
        out = (rounded >> np.uint32(16)).astype(np.uint16)
        quiet = ((bits >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
        return np.where(nan, quiet, out)
    if dtype == "uint8":
        c = np.minimum(x, np.float32(1.0))
        c = np.maximum(c, np.float32(0.0))
        c = np.where(c >= np.float32(0.0), c, np.float32(0.0))  # NaN -> 0
        s = c * np.float32(255.0)
        t = np.trunc(s)
        return (t + (s - t >= np.float32(0.5))).astype(np.uint8)
    raise ValueError(f"unknown dtype {dtype!r}")


def apply_batch_mix(params: BatchMixParams, images: np.ndarray, dtype: str,
                    layout: str = "NHWC") -> np.ndarray:
    """ApplyBatchMix on a batch (n, H, W, 3) for NHWC or (n, 3, H, W) for
    NCHW of `dtype` (float32, float16, bfloat16 as uint16 bits, uint8);
    returns the mixed batch (a new array of the same dtype and shape)."""
    if layout not in ("NHWC", "NCHW"):
        raise ValueError(f"unknown layout {layout!r}")
    out = np.array(images, copy=True)
    if params.kind == KIND_NONE or out.shape[0] == 0:
        return out
    rolled = np.roll(images, 1, axis=0)  # rolled[i] = images[partner(i, n)]
    if params.kind == KIND_CUTMIX:
        ys, xs = slice(params.y1, params.y2), slice(params.x1, params.x2)
        if layout == "NHWC":
            out[:, ys, xs, :] = rolled[:, ys, xs, :]
        else:
            out[:, :, ys, xs] = rolled[:, :, ys, xs]
        return out
    w_own = np.float32(params.lam)
    w_partner = np.float32(1.0 - params.lam)  # double, then rounded once
    mixed = _to_float32(images, dtype) * w_own + _to_float32(rolled, dtype) * w_partner
    return _from_float32(mixed.astype(np.float32, copy=False), dtype)


def mixed_targets(labels, params: BatchMixParams, num_classes: int,
                  label_smoothing: float = 0.0) -> np.ndarray:
    """The soft targets of a mixed batch, float32 (n, num_classes): as
    torchvision's reference, `t = one_hot(labels)`; `t.roll(1, 0) * (1 - lam)
    + t * lam` with float32 scalars (lam as the float32 reported; 1 - lam
    computed in double and rounded to float32). `label_smoothing` e then gives
    t * float32(1 - e) + float32(e / num_classes), what torch's
    CrossEntropyLoss(label_smoothing=e) does to probability targets: smooth
    here or in the loss, not both. KIND_NONE gives the plain one-hot."""
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    t = np.zeros((n, num_classes), dtype=np.float32)
    t[np.arange(n), labels] = np.float32(1.0)
    if params.kind != KIND_NONE and n > 0:
        rolled = np.roll(t, 1, axis=0) * np.float32(1.0 - params.lam)
        t = t * np.float32(params.lam) + rolled
    if label_smoothing:
        t = t * np.float32(1.0 - label_smoothing) + np.float32(label_smoothing / num_classes)
    return t
