"""Batch-level MixUp / CutMix: C++ (server/pipeline/batch_mix) against the
Python twin (client/python/nearprep/batch_mix.py) and torchvision 0.14's
reference formula run with torch.

The C++ side is the nearprep_batch_mix_apply driver
(tests/unit/pipeline/batch_mix_apply.cc) in $NEARPREP_BATCH_MIX_APPLY;
tests that need it skip when it is unset. The torch comparisons skip
without torch.
"""

import math
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest

from nearprep import batch_mix as bm

DRIVER = os.environ.get("NEARPREP_BATCH_MIX_APPLY")
needs_driver = pytest.mark.skipif(
    not DRIVER or not os.path.exists(DRIVER),
    reason="NEARPREP_BATCH_MIX_APPLY (the nearprep_batch_mix_apply tool) not set")

try:
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is expected
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not importable")

DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2, "uint8": 3}
LAYOUT_CODE = {"NHWC": 0, "NCHW": 1}


def _bits(f):
    return struct.unpack("<I", struct.pack("<f", f))[0]


def _cpp_draws(rows):
    """DrawBatchMix of each (ma, ca, seed, epoch, shard, batch, h, w)."""
    text = "".join(f"0x{_bits(ma):08x} 0x{_bits(ca):08x} {s} {e} {sh} {b} {h} {w}\n"
                   for ma, ca, s, e, sh, b, h, w in rows)
    out = subprocess.run([DRIVER, "draw"], input=text, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    params = []
    for line in out[:len(rows)]:
        kind, lam, y1, x1, y2, x2 = line.split()
        lam = struct.unpack("<f", struct.pack("<I", int(lam, 16)))[0]
        params.append(bm.BatchMixParams(int(kind), lam, int(y1), int(x1), int(y2), int(x2)))
    assert len(params) == len(rows)
    return params


def _cpp_apply(p, images, dtype, layout):
    n = images.shape[0]
    h, w = (images.shape[1], images.shape[2]) if layout == "NHWC" else \
        (images.shape[2], images.shape[3])
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        np.ascontiguousarray(images).tofile(src)
        subprocess.run([DRIVER, "apply", str(p.kind), f"0x{_bits(p.lam):08x}",
                        str(p.y1), str(p.x1), str(p.y2), str(p.x2), str(DTYPE_CODE[dtype]),
                        str(LAYOUT_CODE[layout]), str(n), str(h), str(w), src, dst],
                       check=True)
        return np.fromfile(dst, dtype=images.dtype).reshape(images.shape)


ALPHAS = (0.2, 1.0, 0.1, 5.0)


def _draw_rows():
    rng = np.random.default_rng(7)
    rows = []
    for ma in ALPHAS + (0.0,):
        for ca in ALPHAS + (0.0,):
            for _ in range(12):
                rows.append((ma, ca, int(rng.integers(0, 2**64, dtype=np.uint64)),
                             int(rng.choice([0, 1, 3, 2**32 + 5, 2**47 + 2**33])),
                             int(rng.integers(0, 2**32)), int(rng.integers(0, 2**32)),
                             int(rng.integers(1, 400)), int(rng.integers(1, 400))))
    rows.append((1.0, 1.0, 0, 0, 0, 0, 1, 1))
    rows.append((0.7, 0.3, 2**64 - 1, 2**48 - 1, 2**32 - 1, 2**32 - 1, 224, 224))
    return rows


# ---------------------------------------------------------------------------
# Python only.

def test_disabled_draws_nothing():
    assert bm.draw_batch_mix(0.0, 0.0, 1, 2, 3, 4, 5, 6) == bm.BatchMixParams()


def test_partner_is_roll_by_one():
    assert [bm.partner(i, 5) for i in range(5)] == [4, 0, 1, 2, 3]
    assert bm.partner(0, 1) == 0


def test_choice_is_fair_and_stream_is_shared():
    # Both enabled: about half MixUp; a batch that picked MixUp has the lambda
    # MixUp alone would have drawn (the choice word is reserved either way).
    picks = []
    for b in range(2000):
        p = bm.draw_batch_mix(0.2, 1.0, 11, 3, 0, b, 32, 48)
        picks.append(p.kind)
        if p.kind == bm.KIND_MIXUP and b < 200:
            assert p == bm.draw_batch_mix(0.2, 0.0, 11, 3, 0, b, 32, 48)
    frac = picks.count(bm.KIND_MIXUP) / len(picks)
    assert abs(frac - 0.5) < 0.05, frac


def test_cutmix_box_and_lambda():
    for b in range(300):
        p = bm.draw_batch_mix(0.0, 1.0, 5, 0, 1, b, 17, 40)
        assert p.kind == bm.KIND_CUTMIX
        assert 0 <= p.x1 <= p.x2 <= 40 and 0 <= p.y1 <= p.y2 <= 17
        assert p.lam == np.float32(1.0 - (p.x2 - p.x1) * (p.y2 - p.y1) / (17 * 40))


# ---------------------------------------------------------------------------
# The distribution of lambda: Beta(alpha, alpha).

def _beta_cdf(alpha):
    """The CDF of Beta(alpha, alpha) as a vectorized function: scipy's when
    present, else numerical integration. With t = s^(1/alpha),
    int_0^x t^(a-1) (1-t)^(a-1) dt = (1/a) int_0^(x^a) (1 - s^(1/a))^(a-1) ds,
    whose integrand is bounded on [0, 0.5^a]; the symmetric CDF is 1/2 at
    1/2."""
    try:
        from scipy import stats
        return lambda x: stats.beta.cdf(x, alpha, alpha)
    except ImportError:
        pass
    top = 0.5 ** alpha
    s = np.linspace(0.0, top, 400001)
    f = (1.0 - s ** (1.0 / alpha)) ** (alpha - 1.0)
    cum = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) * 0.5 * np.diff(s))])
    half = cum[-1]

    def cdf(x):
        x = np.asarray(x, dtype=np.float64)
        m = np.minimum(x, 1.0 - x)
        g = 0.5 * np.interp(np.clip(m, 0.0, 0.5) ** alpha, s, cum) / half
        return np.where(x <= 0.5, g, 1.0 - g)
    return cdf


def _ks(sample, cdf):
    """The Kolmogorov-Smirnov distance of a float32 sample to float32(X),
    X ~ cdf: a value v stands for (v_below, v_above), the half-way points to
    its float32 neighbours (lambdas of Beta(0.1, 0.1) round to exactly 1.0
    about 9% of the time)."""
    x32 = np.sort(np.asarray(sample, dtype=np.float32))
    x = x32.astype(np.float64)
    up = (x + np.nextafter(x32, np.float32(np.inf)).astype(np.float64)) / 2
    down = (x + np.nextafter(x32, np.float32(-np.inf)).astype(np.float64)) / 2
    n = len(x)
    i = np.arange(1, n + 1)
    return max(np.max(i / n - cdf(up)), np.max(cdf(down) - (i - 1) / n))


def test_cdf_integration_is_accurate():
    mpmath = pytest.importorskip("mpmath")
    for a in ALPHAS:
        cdf = _beta_cdf(a)
        for x in (1e-4, 0.03, 0.2, 0.5, 0.77, 0.999):
            want = float(mpmath.betainc(a, a, 0, x, regularized=True))
            assert abs(float(cdf(x)) - want) < 2e-4, (a, x)


@needs_driver
@pytest.mark.parametrize("alpha", ALPHAS)
def test_lambda_is_beta(alpha):
    n = 4000
    rows = [(alpha, 0.0, 1234, 2, 0, b, 8, 8) for b in range(n)]
    lam = [p.lam for p in _cpp_draws(rows)]
    crit = 1.95 / math.sqrt(n)  # Kolmogorov-Smirnov, significance 0.001
    assert _ks(lam, _beta_cdf(alpha)) < crit
    # The same test must tell a wrong alpha.
    for wrong in (alpha * 0.7, alpha / 0.7):
        assert _ks(lam, _beta_cdf(wrong)) > crit, wrong


# ---------------------------------------------------------------------------
# C++ against Python.

@needs_driver
def test_cpp_draws_equal_python():
    rows = _draw_rows()
    cpp = _cpp_draws(rows)
    kinds = set()
    for row, got in zip(rows, cpp):
        want = bm.draw_batch_mix(*row)
        assert got == want, (row, got, want)
        kinds.add(got.kind)
    assert kinds == {bm.KIND_NONE, bm.KIND_MIXUP, bm.KIND_CUTMIX}


@needs_driver
def test_cpp_conversions_equal_server_image():
    # BatchMixStore / BatchMixLoad restate server/image's StoreElement (which
    # server/pipeline may not include); the driver compares them.
    out = subprocess.run([DRIVER, "convcheck"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[0]) > 1000000


def _batch(dtype, n, h, w, layout, rng):
    shape = (n, h, w, 3) if layout == "NHWC" else (n, 3, h, w)
    x = rng.normal(0.3, 1.2, size=shape).astype(np.float32)
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "bfloat16":
        return (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _cases():
    h, w = 5, 7
    params = [
        bm.draw_batch_mix(0.2, 0.0, 3, 1, 0, 0, h, w),
        bm.draw_batch_mix(1.0, 0.0, 3, 1, 0, 1, h, w),
        bm.BatchMixParams(bm.KIND_MIXUP, float(np.float32(1e-7))),
        bm.BatchMixParams(bm.KIND_MIXUP, float(np.float32(0.1))),
        bm.draw_batch_mix(0.0, 1.0, 3, 1, 0, 2, h, w),
        bm.BatchMixParams(bm.KIND_CUTMIX, 0.0, 0, 0, h, w),
        bm.BatchMixParams(bm.KIND_CUTMIX, 1.0, 2, 3, 2, 6),  # empty box
        bm.BatchMixParams(),
    ]
    for dtype in DTYPE_CODE:
        for layout in LAYOUT_CODE:
            for n in (1, 2, 5):
                for p in params:
                    yield dtype, layout, n, h, w, p


@needs_driver
def test_cpp_apply_equals_python():
    rng = np.random.default_rng(3)
    for dtype, layout, n, h, w, p in _cases():
        images = _batch(dtype, n, h, w, layout, rng)
        want = bm.apply_batch_mix(p, images, dtype, layout)
        got = _cpp_apply(p, images, dtype, layout)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (dtype, layout, n, p)


# ---------------------------------------------------------------------------
# Against torchvision's reference formula (references/classification/
# transforms.py, v0.14): on the float32 NCHW batch, rolled = batch.roll(1, 0);
# MixUp rolled.mul_(1.0 - lam); batch.mul_(lam).add_(rolled); CutMix
# batch[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2].

def _torch_reference(p, batch):
    batch = batch.clone()
    rolled = batch.roll(1, 0)
    if p.kind == bm.KIND_MIXUP:
        rolled.mul_(1.0 - p.lam)
        batch.mul_(p.lam).add_(rolled)
    elif p.kind == bm.KIND_CUTMIX:
        batch[:, :, p.y1:p.y2, p.x1:p.x2] = rolled[:, :, p.y1:p.y2, p.x1:p.x2]
    return batch


def _torch_oracle(p, images, dtype, layout):
    """The reference on the float32 values the elements stand for, stored
    back with the dtype's rounding (CutMix: on the raw elements)."""
    raw = images.view(np.int16) if dtype == "bfloat16" else images
    t = torch.from_numpy(np.ascontiguousarray(raw))
    if layout == "NHWC":
        t = t.permute(0, 3, 1, 2).contiguous()
    if dtype == "bfloat16":
        t = t.view(torch.int16).view(torch.bfloat16)
    if p.kind == bm.KIND_CUTMIX or p.kind == bm.KIND_NONE:
        out = _torch_reference(p, t)
    elif dtype == "uint8":
        scale = torch.tensor(np.float32(1.0) / np.float32(255.0))
        s = _torch_reference(p, t.float() * scale).clamp(0.0, 1.0) * 255.0
        s = torch.nan_to_num(s, nan=0.0)
        tr = s.trunc()
        out = (tr + (s - tr >= 0.5).float()).to(torch.uint8)
    else:
        out = _torch_reference(p, t.float()).to(t.dtype)  # round to nearest even
    if dtype == "bfloat16":
        out = out.view(torch.int16)
    if layout == "NHWC":
        out = out.permute(0, 2, 3, 1).contiguous()
    return out.numpy().view(images.dtype)


@needs_torch
def test_python_apply_equals_torch_reference():
    rng = np.random.default_rng(5)
    for dtype, layout, n, h, w, p in _cases():
        images = _batch(dtype, n, h, w, layout, rng)
        got = bm.apply_batch_mix(p, images, dtype, layout)
        want = _torch_oracle(p, images, dtype, layout)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (dtype, layout, n, p)


@needs_torch
def test_torch_scalar_is_rounded_to_float32():
    # What the op's definition rests on: torch 1.13's mul_ with a Python
    # float rounds the scalar to float32 first, then multiplies in float32.
    x = torch.from_numpy(np.random.default_rng(1).random(100000, dtype=np.float32))
    lam = 0.123456789012345
    assert torch.equal(x.clone().mul_(lam), x * torch.tensor(np.float32(lam)))
    assert not torch.equal(x.clone().mul_(lam), (x.double() * lam).float())


@needs_torch
def test_mixed_targets_equal_torch_formula():
    rng = np.random.default_rng(9)
    num_classes = 10
    for p in (bm.draw_batch_mix(0.2, 0.0, 1, 0, 0, 4, 8, 8),
              bm.draw_batch_mix(0.0, 1.0, 1, 0, 0, 5, 13, 9),
              bm.BatchMixParams(bm.KIND_MIXUP, float(np.float32(0.3))),
              bm.BatchMixParams()):
        for n in (1, 2, 5):
            labels = rng.integers(0, num_classes, size=n)
            target = torch.nn.functional.one_hot(torch.from_numpy(labels),
                                                 num_classes).to(torch.float32)
            if p.kind != bm.KIND_NONE:
                rolled = target.roll(1, 0)
                rolled.mul_(1.0 - p.lam)
                target.mul_(p.lam).add_(rolled)
            got = bm.mixed_targets(labels, p, num_classes)
            assert np.array_equal(got, target.numpy()), (p, n)
            # Label smoothing here equals the loss's own.
            logits = torch.from_numpy(rng.normal(size=(n, num_classes)).astype(np.float32))
            smooth = bm.mixed_targets(labels, p, num_classes, label_smoothing=0.1)
            a = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
            b = torch.nn.functional.cross_entropy(logits, torch.from_numpy(smooth))
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)
