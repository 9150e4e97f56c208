"""Generated JPEG edge cases for the TensorFlow oracle tests.

make_edge_dataset(root) writes an image folder (one class folder per kind)
of small JPEGs that exercise every decoder path TensorFlow's decode_jpeg
has: chroma subsamplings 4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 / 4:1:1, grayscale,
CMYK with and without Adobe's marker, YCCK, progressive and arithmetic
coding, restart markers, 1x1 / 16x1 / 1x16 images, big APPn/COM segments,
a header declaring a huge image, truncated streams, a stream with corrupt
entropy-coded data, and a file that is not a JPEG. Pillow writes most of
them; cjpeg (libjpeg-turbo-progs) the 4:4:0, 4:1:1, restart and arithmetic
ones (skipped without it). Returns the relative paths written.
"""

import os
import shutil
import struct
import subprocess

import numpy as np


def picture(h, w, seed):
    """A deterministic uint8 HxWx3 picture: gradients plus noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                     ((x + y) * 7) % 256], axis=-1).astype(np.int32)
    noise = rng.integers(-40, 40, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _segments(data):
    """(marker, start, end) of the marker segments before SOS."""
    out = []
    pos = 2
    while pos + 4 <= len(data):
        assert data[pos] == 0xFF
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        out.append((marker, pos, pos + 2 + length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return out


def _strip_adobe(data):
    for marker, start, end in _segments(data):
        if marker == 0xEE:
            return data[:start] + data[end:]
    raise ValueError("no APP14 segment")


def _adobe_transform(data, transform):
    """Sets the Adobe APP14 transform byte (0: CMYK, 2: YCCK)."""
    for marker, start, end in _segments(data):
        if marker == 0xEE and data[start + 4:start + 9] == b"Adobe":
            b = bytearray(data)
            b[end - 1] = transform
            return bytes(b)
    raise ValueError("no Adobe segment")


def _with_big_segments(data, n=4):
    """n 65533-byte APP1 + COM segments after SOI."""
    extra = b""
    for i in range(n):
        payload = bytes([(i * 7 + k) % 251 for k in range(65533)])
        marker = 0xE1 if i % 2 == 0 else 0xFE
        extra += bytes([0xFF, marker]) + struct.pack(">H", 65535) + payload
    return data[:2] + extra + data[2:]


def _huge_header(data, h, w):
    """The SOF's height and width replaced (the scan data stays tiny)."""
    for marker, start, end in _segments(data):
        if marker in (0xC0, 0xC1, 0xC2):
            b = bytearray(data)
            b[start + 5:start + 9] = struct.pack(">HH", h, w)
            return bytes(b)
    raise ValueError("no SOF")


def make_edge_dataset(root):
    from PIL import Image  # only the edge tests need Pillow

    written = []

    def put(kind, name, data):
        os.makedirs(os.path.join(root, kind), exist_ok=True)
        rel = f"{kind}/{name}.jpg"
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        written.append(rel)

    def pil_bytes(img, **kw):
        import io
        buf = io.BytesIO()
        img.save(buf, format="JPEG", **kw)
        return buf.getvalue()

    for i, (h, w) in enumerate([(97, 131), (131, 97), (300, 41)]):
        rgb = Image.fromarray(picture(h, w, i))
        put("s444", f"a{i}", pil_bytes(rgb, quality=90, subsampling=0))
        put("s422", f"a{i}", pil_bytes(rgb, quality=85, subsampling=1))
        put("s420", f"a{i}", pil_bytes(rgb, quality=75, subsampling=2))
        put("progressive", f"a{i}", pil_bytes(rgb, quality=85, progressive=True))
        put("gray", f"a{i}", pil_bytes(Image.fromarray(picture(h, w, 10 + i)[:, :, 0]),
                                       quality=90))
        cmyk = pil_bytes(Image.fromarray(picture(h, w, 20 + i)).convert("CMYK"),
                         quality=90)   # Pillow writes Adobe's marker (transform 0)
        put("cmyk", f"adobe{i}", cmyk)
        put("cmyk", f"plain{i}", _strip_adobe(cmyk))
        put("ycck", f"a{i}", _adobe_transform(cmyk, 2))
    for h, w in ((1, 1), (16, 1), (1, 16), (2, 3), (9, 9)):
        put("tiny", f"t{h}x{w}", pil_bytes(Image.fromarray(picture(h, w, h * 10 + w)),
                                           quality=95))
    base = pil_bytes(Image.fromarray(picture(120, 90, 5)), quality=85)
    put("bigheader", "app_segments", _with_big_segments(base))
    put("bad", "huge_dimensions", _huge_header(base, 60000, 60000))
    put("bad", "truncated_half", base[:len(base) // 2])
    put("bad", "truncated_no_eoi", base[:-2])
    put("bad", "not_a_jpeg", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    put("bad", "header_only", base[:200])
    corrupt = bytearray(base)
    sos = [s for s in _segments(base) if s[0] == 0xDA][0]
    for k in range(sos[2] + 50, len(base) - 10, 97):
        corrupt[k] = 0xFF if corrupt[k] != 0xFF else 0x00
    put("corrupt", "entropy_data", bytes(corrupt))
    cjpeg = shutil.which("cjpeg")
    if cjpeg:
        ppm = os.path.join(root, "src.ppm")
        Image.fromarray(picture(90, 121, 4)).save(ppm)
        for name, args in {"s440": ["-sample", "1x2"], "s411": ["-sample", "4x1"],
                           "restart": ["-restart", "1"],
                           "restart_rows": ["-restart", "1B", "-sample", "1x1"],
                           "arithmetic": ["-arithmetic"],
                           "arith_progressive": ["-arithmetic", "-progressive"],
                           "cjprog": ["-progressive"],
                           "gray": ["-grayscale"]}.items():
            out = subprocess.run([cjpeg, *args, ppm], check=True,
                                 capture_output=True).stdout
            put("cjpeg", name, out)
        os.remove(ppm)
    return sorted(written)


def make_edge_dataset_anywhere(root):
    """make_edge_dataset(root) with this Python's Pillow, or else with
    Debian's /usr/bin/python3 and python3-pil running this file (a venv
    without Pillow). Returns False when neither has Pillow."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        if not os.path.exists("/usr/bin/python3"):
            return False
        res = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), root],
                             capture_output=True, text=True)
        return res.returncode == 0
    make_edge_dataset(root)
    return True


if __name__ == "__main__":
    import sys
    make_edge_dataset(sys.argv[1])
