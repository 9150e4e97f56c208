"""`nearprep stream` (the C++ CLI's receive loop, BatchReader::NextInto into
one reused buffer): the image and byte counts it prints, and its contact
sheet of the first batch, for plain and compressed uint8 and for float32."""

import glob
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import NEARPREPD, ROOT

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)

pytestmark = pytest.mark.skipif(
    not (CLI and NEARPREPD), reason="nearprep CLI or nearprepd not built")


def stream(daemon, tmp_path, name, *flags):
    sheet = str(tmp_path / f"{name}.png")
    out = subprocess.run(
        [CLI, "stream", "--target", daemon.target, "--dataset", "sample",
         "--batch-size", "32", "--height", "64", "--width", "64", "--crop", "rrc",
         "--flip", "0.5", "--seed", "5", "--sheet", sheet, *flags],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"streamed (\d+) images in (\d+) batches .*\(([\d.]+) MB;", out.stdout)
    assert m, out.stdout
    return int(m.group(1)), int(m.group(2)), float(m.group(3)), sheet


@pytest.mark.parametrize("dtype,itemsize", [("uint8", 1), ("float32", 4)])
def test_stream_counts_every_image_and_tensor_byte(daemon, tmp_path, dtype, itemsize):
    images, batches, mb, sheet = stream(daemon, tmp_path, dtype, "--dtype", dtype)
    assert (images, batches) == (200, 7)
    assert mb == round(200 * 64 * 64 * 3 * itemsize / 1e6, 1)
    assert os.path.getsize(sheet) > 1000


def test_compressed_stream_gives_the_same_bytes_and_sheet(daemon, tmp_path):
    from PIL import Image
    plain = stream(daemon, tmp_path, "plain", "--dtype", "uint8")
    packed = stream(daemon, tmp_path, "packed", "--dtype", "uint8",
                    "--compression", "gradient")
    # Lossless: the same decoded tensor bytes counted, the same sheet drawn.
    assert plain[:3] == packed[:3]
    a = np.asarray(Image.open(plain[3]))
    b = np.asarray(Image.open(packed[3]))
    assert a.shape == b.shape and a.std() > 10
    np.testing.assert_array_equal(a, b)
