"""The TensorFlow input pipeline in numpy (TF_COMPAT semantics), bit for bit.

    image = tf.image.decode_jpeg(data, channels=3)            # decode_jpeg()
    image = tf.image.convert_image_dtype(image, tf.float32)   # to_float()
    image = tf.image.resize(image, [h, w])                    # resize_bilinear()
    image = tf.image.random_flip_left_right(image)            # flip_left_right()
    image = tf.image.random_brightness(image, max_delta)      # adjust_brightness()
    image = tf.image.random_saturation(image, lower, upper)   # adjust_saturation()
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
               mean=None, std=None, dtype="float32", layout="NHWC"):
    """One decoded uint8 HxWx3 image through the pipeline. None disables
    brightness / saturation (note: saturation with factor 1.0 is not the
    identity: the HSV round trip rounds)."""
    x = resize_bilinear(to_float(image_u8), height, width, crop)
    if flip:
        x = flip_left_right(x)
    if brightness_delta is not None:
        x = adjust_brightness(x, brightness_delta)
    if saturation_factor is not None:
        x = adjust_saturation(x, saturation_factor)
    if clip_output:
        x = clip(x)
    if mean is not None:
        x = normalize(x, mean, std)
    return to_layout(to_dtype(x, dtype), layout)


_DTYPE_NAMES = {0: "float32", 1: "float16", 2: "bfloat16", 3: "uint8"}


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
    return preprocess(
        image_u8, t.height, t.width, crop=box,
        flip=bool(flipped),
        brightness_delta=params.brightness_delta if t.brightness_max_delta > 0 else None,
        saturation_factor=params.saturation_factor if sat_on else None,
        clip_output=not t.disable_clip,
        mean=list(t.mean) if len(t.mean) else None,
        std=list(t.std) if len(t.std) else None,
        dtype=_DTYPE_NAMES[request.output.dtype],
        layout="NCHW" if request.output.layout == 1 else "NHWC")
