"""The TensorFlow input pipeline in numpy (TF_COMPAT semantics), bit for bit.

    image = tf.image.decode_jpeg(data, channels=3)            # decode_jpeg()
    image = tf.image.convert_image_dtype(image, tf.float32)   # to_float()
    image = tf.image.resize(image, [h, w])                    # resize_bilinear()
    image = tf.image.random_flip_left_right(image)            # flip_left_right()
    image = tf.image.random_brightness(image, max_delta)      # adjust_brightness()
    image = tf.image.random_saturation(image, lower, upper)   # adjust_saturation()
    (optional, issue 36: adjust_gamma() before brightness, adjust_contrast()
    after it, adjust_hue() after saturation; draws from Batch.params)
    image = tf.clip_by_value(image, 0.0, 1.0)                 # clip()
    then nearprep's optional normalize(), to_dtype(), to_layout().

Written from TensorFlow's documented kernel behaviour (not from nearprep's
C++ code) so that it can check the daemon: every step rounds to float32
exactly where TF's CPU kernel does, and numpy never fuses a multiply-add.
The random draws are not recomputed here: pass the per-sample parameters the
daemon reports (StreamBatchesRequest.include_params) to expected_sample().

Decoding is the one step numpy cannot do: decode_jpeg() runs libjpeg-turbo's
own `djpeg -dct fast` (IFAST DCT and fancy upsampling, TF's decode_jpeg
defaults) and reads its PPM/PGM output.

Thread-safety: pure functions.
"""

import subprocess

import numpy as np

_F = np.float32
_INV255 = np.float32(1.0 / 255.0)


# ---------------------------------------------------------------------------
# Decode


def read_pnm(data):
    """uint8 HxWxC array from binary PPM (P6) / PGM (P5) bytes, maxval 255."""
    tokens = []
    pos = 0
    while len(tokens) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        tokens.append(data[start:pos])
    pos += 1  # the single whitespace after maxval
    magic, width, height, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    if magic not in (b"P5", b"P6") or maxval != 255:
        raise ValueError(f"unsupported PNM: {magic!r} maxval {maxval}")
    channels = 3 if magic == b"P6" else 1
    pixels = np.frombuffer(data, dtype=np.uint8, count=height * width * channels,
                           offset=pos)
    return pixels.reshape(height, width, channels)


def decode_jpeg(path, djpeg="djpeg"):
    """decode_jpeg(channels=3): uint8 HxWx3 via `djpeg -dct fast`;
    grayscale is replicated to RGB."""
    out = subprocess.run([djpeg, "-dct", "fast", "-pnm", str(path)],
                         check=True, capture_output=True).stdout
    img = read_pnm(out)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return img


# ---------------------------------------------------------------------------
# Float ops (HWC float32 images)


def to_float(image_u8):
    """convert_image_dtype(uint8 -> float32): float32(x) * float32(1/255)."""
    return np.asarray(image_u8, dtype=np.uint8).astype(_F) * _INV255


def _taps(in_size, out_size):
    scale = _F(in_size) / _F(out_size)
    src = (np.arange(out_size, dtype=_F) + _F(0.5)) * scale - _F(0.5)
    floor = np.floor(src)
    lo = np.maximum(floor, _F(0)).astype(np.int64)
    hi = np.minimum(np.ceil(src), _F(in_size - 1)).astype(np.int64)
    return lo, hi, (src - floor).astype(_F)


def resize_bilinear(image, out_h, out_w, crop=None):
    """resize(method=bilinear, antialias=False) with half-pixel centers on
    image[y:y+h, x:x+w] for crop = (y, x, h, w) (None: the whole image)."""
    image = np.asarray(image, dtype=_F)
    if crop is not None:
        y, x, h, w = (int(v) for v in crop)
        if h > 0 and w > 0:
            image = image[y:y + h, x:x + w]
    in_h, in_w = image.shape[:2]
    if (in_h, in_w) == (out_h, out_w):
        return image.copy()
    ylo, yhi, wy = _taps(in_h, out_h)
    xlo, xhi, wx = _taps(in_w, out_w)
    top_rows, bot_rows = image[ylo], image[yhi]
    wx = wx[None, :, None]
    tl, tr = top_rows[:, xlo], top_rows[:, xhi]
    bl, br = bot_rows[:, xlo], bot_rows[:, xhi]
    top = tl + (tr - tl) * wx
    bot = bl + (br - bl) * wx
    return top + (bot - top) * wy[:, None, None]


def flip_left_right(image):
    return np.ascontiguousarray(image[:, ::-1])


def adjust_brightness(image, delta):
    """x + delta, no clipping."""
    return image + _F(delta)


def rgb_to_hsv(r, g, b):
    """TF's adjust_saturation CPU kernel's HSV, vectorized (float32 arrays)."""
    v = np.maximum(r, np.maximum(g, b))
    rng = v - np.minimum(r, np.minimum(g, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(v > 0, rng / np.where(v > 0, v, _F(1)), _F(0)).astype(_F)
        norm = _F(1) / (_F(6) * rng)
        h_r = norm * (g - b)
        # The constants are doubles in TF's kernel: the sum happens in double
        # and is rounded back to float.
        h_g = ((norm * (b - r)).astype(np.float64) + 2.0 / 6.0).astype(_F)
        h_b = ((norm * (r - g)).astype(np.float64) + 4.0 / 6.0).astype(_F)
    h = np.where(r == v, h_r, np.where(g == v, h_g, h_b))
    h = np.where(rng <= 0, _F(0), h)
    h = np.where(h < 0, h + _F(1), h).astype(_F)
    return h, s, v


def hsv_to_rgb(h, s, v):
    c = s * v
    m = v - c
    dh = h * _F(6)
    category = dh.astype(np.int64)  # truncation, as static_cast<int>
    f = dh.copy()
    while True:  # while (f <= 0) f += 2
        mask = f <= 0
        if not mask.any():
            break
        f = np.where(mask, f + _F(2), f)
    while True:  # while (f >= 2) f -= 2
        mask = f >= _F(2)
        if not mask.any():
            break
        f = np.where(mask, f - _F(2), f)
    x = c * (_F(1) - np.abs(f - _F(1)))
    zero = np.zeros_like(c)
    # (r, g, b) before adding m, per sextant; anything else (6: hue rounded
    # to 1.0) gives (0, 0, 0).
    table = [(c, x, zero), (x, c, zero), (zero, c, x), (zero, x, c),
             (x, zero, c), (c, zero, x)]
    out = []
    for ch in range(3):
        val = zero
        for k in range(6):
            val = np.where(category == k, table[k][ch], val)
        out.append((val + m).astype(_F))
    return out


def adjust_saturation(image, factor):
    """adjust_saturation: HSV round trip with s' = clamp(s * factor, 0, 1)."""
    image = np.asarray(image, dtype=_F)
    h, s, v = rgb_to_hsv(image[..., 0], image[..., 1], image[..., 2])
    s = np.minimum(_F(1), np.maximum(_F(0), s * _F(factor)))
    r, g, b = hsv_to_rgb(h, s, v)
    return np.stack([r, g, b], axis=-1)


def adjust_contrast(image, factor):
    """adjust_contrast (TF's AdjustContrastv2 CPU kernel): per channel
    mean + factor * (x - mean); the float32 mean is the kernel's halving
    fold of the pixels (pixel i + left added to pixel i, the middle pixel of
    an odd count carried over, repeated until one is left) times
    float32(1 / pixels)."""
    image = np.asarray(image, dtype=_F)
    px = image.reshape(-1, 3)
    n = px.shape[0]
    right = n // 2
    left = n - right
    acc = np.empty((left, 3), _F)
    acc[:right] = px[left:left + right] + px[:right]
    if left > right:
        acc[right] = px[right]
    n = left
    while n > 1:
        right = n // 2
        left = n - right
        acc[:right] = acc[:right] + acc[left:left + right]
        n = left
    mean = acc[0] * (_F(1) / _F(px.shape[0]))
    return (mean + _F(factor) * (image - mean)).astype(_F)


def adjust_hue(image, delta):
    """adjust_hue (TF's AdjustHue CPU kernel): RGB -> (hue in [0, 6), min,
    max) -> hue + delta * 6 wrapped into [0, 6) -> RGB, float32."""
    image = np.asarray(image, dtype=_F)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    # The kernel's comparison tree: sextant, max, middle and min channel.
    rg = r < g
    cases = [
        (rg & (b < r), 1, g, r, b),
        (rg & ~(b < r) & (b > g), 3, b, g, r),
        (rg & ~(b < r) & ~(b > g), 2, g, b, r),
        (~rg & (b < g), 0, r, g, b),
        (~rg & ~(b < g) & (b > r), 4, b, r, g),
        (~rg & ~(b < g) & ~(b > r), 5, r, b, g),
    ]
    sextant = np.zeros(r.shape, np.int64)
    hi = np.zeros_like(r)
    mid = np.zeros_like(r)
    lo = np.zeros_like(r)
    for mask, k, a, m, z in cases:
        sextant = np.where(mask, k, sextant)
        hi = np.where(mask, a, hi)
        mid = np.where(mask, m, mid)
        lo = np.where(mask, z, lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mid - lo) / (hi - lo)
    t = np.where(sextant % 2 == 0, t, _F(1) - t)
    h = np.where(hi == lo, _F(0), sextant.astype(_F) + t).astype(_F)
    h = h + _F(delta) * _F(6)
    while (h < 0).any():
        h = np.where(h < 0, h + _F(6), h)
    while (h >= 6).any():
        h = np.where(h >= 6, h - _F(6), h)
    k = h.astype(np.int64)
    t = h - k.astype(_F)
    t = np.where(k % 2 == 0, t, _F(1) - t)
    m = lo + t * (hi - lo)
    table = [(hi, m, lo), (m, hi, lo), (lo, hi, m), (lo, m, hi), (m, lo, hi),
             (hi, lo, m)]
    out = []
    for ch in range(3):
        val = table[5][ch]
        for kk in range(5):
            val = np.where(k == kk, table[kk][ch], val)
        out.append(val.astype(_F))
    return np.stack(out, axis=-1)


# TensorFlow 2.21's float32 pow on x86 (tf.pow, adjust_gamma): Eigen 3.5's
# vectorized generic_pow, built without fused multiply-adds (pmadd(a, b, c)
# = a * b + c, two roundings). Each constant below is a float32 value.
_LOG2_C = [np.float32(v) for v in (
    9.7010828554630279541015625e-02, -1.6896486282348632812500000e-01,
    1.7200836539268493652343750e-01, -1.7892272770404815673828125e-01,
    2.0505344867706298828125000e-01, -2.4046677350997924804687500e-01,
    2.8857553005218505859375000e-01, -3.6067414283752441406250000e-01,
    4.8089790344238281250000000e-01)]


def _dw_constant(c):
    """A double as a float32 pair (hi, lo), hi + lo ~ c."""
    hi = np.float32(c)
    return hi, np.float32(c - float(hi))


_LOG2_C1 = _dw_constant(-7.2134751588268664068692714863573201000690460205078125e-01)
_LOG2_C0 = _dw_constant(1.442695041742110273474963832995854318141937255859375e+00)
_EXP_P = [np.float32(v) for v in (
    0.49999988079071044921875, 0.16666518151760101318359375,
    4.166965186595916748046875e-2, 8.36894474923610687255859375e-3,
    1.37449637986719608306884765625e-3)]  # p2 .. p6


def _quick_two_sum(x, y):
    hi = (x + y).astype(_F)
    return hi, (y - (hi - x)).astype(_F)


def _exact_product(x, y):
    def split(v):
        g = _F(4097) * v
        h = (v - g) + g
        return h, v - h
    xh, xl = split(x)
    yh, yl = split(y)
    hi = x * y
    e = xh * yh + (-hi)
    e = xh * yl + e
    e = xl * yh + e
    return hi, xl * yl + e


def _word_times(xh, xl, y):
    ch, cl1 = _exact_product(xh, y)
    th, tl1 = _quick_two_sum(ch, xl * y)
    return _quick_two_sum(th, tl1 + cl1)


def _quick_word_sum(xh, xl, yh, yl):
    rh, rl = _quick_two_sum(xh, yh)
    return _quick_two_sum(rh, (yl + rl) + xl)


def _ldexp_bits(v, n):
    """v * 2**n with 2**n built from its exponent bits, the biased exponent
    clamped to [0, 255] (Eigen's pldexp_fast)."""
    e = np.clip(n.astype(np.int64) + 127, 0, 255).astype(np.uint32) << np.uint32(23)
    return (v * e.view(_F)).astype(_F)


def _exp_float(x):
    """Eigen's pexp_float for |x| < 87 (Cephes' range reduction, degree-6
    polynomial)."""
    m = np.floor(x * _F(1.44269504088896341) + _F(0.5)).astype(_F)
    r = m * _F(-0.693359375) + x
    r = m * _F(2.12194440e-4) + r
    r2 = r * r
    p2, p3, p4, p5, p6 = _EXP_P
    even = r2 * p6 + p4
    odd = r2 * p5 + p3
    even = r2 * even + p2
    low = r + _F(1)
    y = r * odd + even
    y = r2 * y + low
    return np.maximum(_ldexp_bits(y, m), x).astype(_F)


def tf_pow(x, y):
    """pow(x, y) in float32 as TensorFlow 2.21's Pow kernel computes it on
    x86 (Eigen's vectorized generic_pow without FMA): log2 of the mantissa
    in double words, y * log2(x) in double words, split into an integer n
    and r in [-1/2, 1/2], exp2(r) = exp(hi(ln2 * r)) * (1 + lo(ln2 * r)),
    times 2**n. For x >= 0 and y > 0 (adjust_gamma after validation);
    x < 0 with a non-integer y gives NaN, other special inputs numpy's
    power."""
    x = np.asarray(x, dtype=_F)
    y = _F(y)
    if y == 1:
        return x.copy()
    m, e = np.frexp(np.abs(x))
    m = m.astype(_F)
    ex = e.astype(_F)
    small = m < _F(0.70710678118654752440)
    m = np.where(small, _F(2) * m, m)
    ex = np.where(small, ex - _F(1), ex)
    # log2(m) as a double word: Horner in float32, then the last two steps
    # and the product by z = m - 1 in double words.
    z = m - _F(1)
    p = np.full_like(z, _LOG2_C[0])
    for c in _LOG2_C[1:]:
        p = p * z + c
    ph, pl = _exact_product(z, p)
    ph, pl = _quick_word_sum(_LOG2_C1[0], _LOG2_C1[1], ph, pl)
    ph, pl = _word_times(ph, pl, z)
    ph, pl = _quick_word_sum(_LOG2_C0[0], _LOG2_C0[1], ph, pl)
    rh, rl = _word_times(ph, pl, z)
    f1h, f1l = _exact_product(ex, np.full_like(ex, y))
    f2h, f2l = _word_times(rh, rl, y)
    fh, fl = _quick_word_sum(f1h, f1l, f2h, f2l)

    def round_away(v):  # half away from zero, exact in float64
        return (np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)).astype(_F)
    n = round_away(fh)
    r = (fh - n) + fl
    nr = round_away(r)
    r = r - nr
    n = n + nr
    qh, ql = _exact_product(np.full_like(r, _F(0.693147180559945309417)), r)
    e_r = (_exp_float(qh) * (_F(1) + ql)).astype(_F)
    out = _ldexp_bits(e_r, n)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        special = ~np.isfinite(x) | (x <= 0) | (x == 1)
        out = np.where(special, np.power(x, y), out).astype(_F)
    return out


def adjust_gamma(image, gamma, gain=1.0):
    """adjust_gamma: gain * x ** gamma (TF's float Pow, tf_pow)."""
    return (_F(gain) * tf_pow(image, gamma)).astype(_F)


def clip(image, lo=0.0, hi=1.0):
    """clip_by_value: max(min(x, hi), lo)."""
    return np.maximum(np.minimum(image, _F(hi)), _F(lo))


def normalize(image, mean, std):
    """(x - mean[c]) / std[c], float32."""
    return (image - np.asarray(mean, dtype=_F)) / np.asarray(std, dtype=_F)


# ---------------------------------------------------------------------------
# Output


def float32_to_bfloat16_bits(x):
    """Round to nearest even bfloat16; returns the uint16 bits."""
    bits = np.ascontiguousarray(x, dtype=_F).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    quiet = (((bits >> 16) & 0x8000) | 0x7FC0).astype(np.uint16)
    return np.where(nan, quiet, rounded)


def to_uint8(x):
    """round(clip(x, 0, 1) * 255), half away from zero."""
    y = clip(np.asarray(x, dtype=_F)) * _F(255)
    return np.floor(y.astype(np.float64) + 0.5).astype(np.uint8)


def to_dtype(image, dtype):
    """float32 image -> the wire dtype (bfloat16 as uint16 bits)."""
    if dtype == "float32":
        return np.asarray(image, dtype=_F)
    if dtype == "float16":
        return np.asarray(image, dtype=_F).astype(np.float16)
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(image)
    if dtype == "uint8":
        return to_uint8(image)
    raise ValueError(f"dtype: unknown {dtype!r}")


def to_layout(image, layout):
    if layout.upper() == "NHWC":
        return image
    if layout.upper() == "NCHW":
        return np.ascontiguousarray(np.moveaxis(image, -1, -3))
    raise ValueError(f"layout: unknown {layout!r}")


# ---------------------------------------------------------------------------
# Whole pipeline


def preprocess(image_u8, height, width, *, crop=None, flip=False,
               brightness_delta=None, saturation_factor=None, clip_output=True,
               mean=None, std=None, dtype="float32", layout="NHWC",
               gamma=None, gain=1.0, contrast_factor=None, hue_delta=None,
               color_ops=None):
    """One decoded uint8 HxWx3 image through the pipeline. None disables
    an op (note: saturation with factor 1.0 is not the identity: the HSV
    round trip rounds; hue's round trip likewise). The colour ops run in
    `color_ops` order (names), by default nearprep's: gamma, brightness,
    contrast, saturation, hue."""
    x = resize_bilinear(to_float(image_u8), height, width, crop)
    if flip:
        x = flip_left_right(x)
    ops = {
        "gamma": (gamma, lambda v: adjust_gamma(v, gamma, gain)),
        "brightness": (brightness_delta, lambda v: adjust_brightness(v, brightness_delta)),
        "contrast": (contrast_factor, lambda v: adjust_contrast(v, contrast_factor)),
        "saturation": (saturation_factor, lambda v: adjust_saturation(v, saturation_factor)),
        "hue": (hue_delta, lambda v: adjust_hue(v, hue_delta)),
    }
    for name in color_ops or DEFAULT_COLOR_OPS:
        value, op = ops[name]
        if value is not None:
            x = op(x)
    if clip_output:
        x = clip(x)
    if mean is not None:
        x = normalize(x, mean, std)
    return to_layout(to_dtype(x, dtype), layout)


_DTYPE_NAMES = {0: "float32", 1: "float16", 2: "bfloat16", 3: "uint8"}
DEFAULT_COLOR_OPS = ("gamma", "brightness", "contrast", "saturation", "hue")
_COLOR_OP_NAMES = {1: "gamma", 2: "brightness", 3: "contrast", 4: "saturation", 5: "hue"}


def expected_sample(image_u8, request, params):
    """What the daemon must send for one sample: `request` is the
    StreamBatchesRequest, `params` the sample's Batch.params entry
    (nearprep.SampleParams or the proto). Returns an HWC/CHW array in the
    wire dtype (bfloat16 as uint16 bits). TF_COMPAT only: FIDELITY_TORCHVISION
    is PIL's and torchvision's arithmetic (tests compare it with those
    libraries themselves), FAST is approximate."""
    t = request.transform
    if t.fidelity == 2:
        raise ValueError("expected_sample: FIDELITY_TORCHVISION has no NumPy "
                         "reference here; compare with PIL + torchvision")
    crop = params.crop
    box = None
    if crop is not None and crop.height > 0 and crop.width > 0:
        box = (crop.y, crop.x, crop.height, crop.width)
    flipped = getattr(params, "flipped", False)
    sat_on = not (t.saturation_lower == 0 and t.saturation_upper == 0)
    con_on = not (getattr(t, "contrast_lower", 0) == 0 and getattr(t, "contrast_upper", 0) == 0)
    gamma = getattr(t, "gamma", 0)
    return preprocess(
        image_u8, t.height, t.width, crop=box,
        flip=bool(flipped),
        gamma=gamma if gamma != 0 else None,
        gain=getattr(t, "gain", 0) or 1.0,
        contrast_factor=params.contrast_factor if con_on else None,
        hue_delta=params.hue_delta if getattr(t, "hue_max_delta", 0) > 0 else None,
        color_ops=[_COLOR_OP_NAMES[v] for v in getattr(t, "color_ops", [])] or None,
        brightness_delta=params.brightness_delta if t.brightness_max_delta > 0 else None,
        saturation_factor=params.saturation_factor if sat_on else None,
        clip_output=not t.disable_clip,
        mean=list(t.mean) if len(t.mean) else None,
        std=list(t.std) if len(t.std) else None,
        dtype=_DTYPE_NAMES[request.output.dtype],
        layout="NCHW" if request.output.layout == 1 else "NHWC")
