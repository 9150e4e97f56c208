#!/usr/bin/env python3
"""Should the decoded-image cache (server/data/decoded_cache) store raw RGB
or compress it? Issue 32 asks to measure a fast lossless codec on decoded
RGB before choosing. For each image of a folder: decode to RGB (Pillow),
then zstd at a few levels on the whole image and on the row-delta image
(each byte minus the one above it, mod 256: a cheap predictor), timing
compression and decompression per image and the ratio. A cache hit must
cost less than a decode to pay: the decode time per image is printed
beside (Pillow's full decode here; the daemon's libjpeg-turbo decode is of
the same order, docs/benchmarks.md).

    /usr/bin/python3 bench/python/decoded_codec_bench.py [--root DIR] [--levels 1,3,-5]

Debian's python3-zstandard and python3-pil; LZ4 is not packaged for Debian's
python3 here, so it is not measured (its decoder is faster than zstd's at a
lower ratio).
"""

import argparse
import glob
import os
import statistics
import time

import numpy as np
import zstandard
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "datasets",
                                        "imagenet-sample-200"))


def best_of(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=DEFAULT)
    ap.add_argument("--levels", default="-5,1,3")
    ap.add_argument("--limit", type=int, default=200)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.root, "*", "*")))[:a.limit]
    if not files:
        raise SystemExit(f"no images under {a.root}")
    levels = [int(x) for x in a.levels.split(",")]
    rows = {}
    decode_ms, raw_total = [], 0
    for path in files:
        data = open(path, "rb").read()

        def decode():
            with Image.open(__import__("io").BytesIO(data)) as im:
                return np.asarray(im.convert("RGB"))
        t, rgb = best_of(decode, 3)
        decode_ms.append(t * 1e3)
        raw = np.ascontiguousarray(rgb).tobytes()
        raw_total += len(raw)
        delta = rgb.astype(np.int16)
        delta[1:] -= rgb[:-1].astype(np.int16)
        delta = (delta % 256).astype(np.uint8).tobytes()
        for level in levels:
            for name, payload in (("rgb", raw), ("row-delta", delta)):
                c = zstandard.ZstdCompressor(level=level)
                d = zstandard.ZstdDecompressor()
                tc, blob = best_of(lambda: c.compress(payload))
                td, back = best_of(lambda: d.decompress(blob))
                assert back == payload
                r = rows.setdefault((name, level), {"bytes": 0, "c": [], "d": []})
                r["bytes"] += len(blob)
                r["c"].append(tc * 1e3)
                r["d"].append(td * 1e3)
    print(f"{len(files)} images, {raw_total / len(files) / 2**20:.3f} MiB RGB per image; "
          f"Pillow full decode {statistics.mean(decode_ms):.2f} ms per image (mean)")
    print("| stored as | zstd level | size / raw RGB | compress ms/img | decompress ms/img | "
          "decompress / decode |")
    print("|---|---:|---:|---:|---:|---:|")
    for (name, level), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        dms = statistics.mean(r["d"])
        print(f"| {name} | {level} | {r['bytes'] / raw_total:.3f} | {statistics.mean(r['c']):.2f} | "
              f"{dms:.2f} | {dms / statistics.mean(decode_ms):.2f} |")


if __name__ == "__main__":
    main()
