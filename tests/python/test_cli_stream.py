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


def test_several_epochs_report_steady_state_apart_from_the_first(daemon, tmp_path):
    # Issue 20 item 12: the demo's figure must not mix the first batch's
    # latency into the throughput: with --epochs N the CLI prints epochs
    # 2..N's images/s and MB/s, the first epoch's and the time to first batch
    # apart.
    out = subprocess.run(
        [CLI, "stream", "--target", daemon.target, "--dataset", "sample",
         "--batch-size", "32", "--height", "64", "--width", "64", "--dtype", "uint8",
         "--epochs", "3"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"streamed (\d+) images in (\d+) batches in ([\d.]+) s: ([\d.]+) images/s",
                  out.stdout)
    assert m and int(m.group(1)) == 600, out.stdout
    s = re.search(r"steady state \(epochs 2-3\): ([\d.]+) images/s, ([\d.]+) MB/s; "
                  r"first epoch: ([\d.]+) images/s; time to first batch: (\d+) ms",
                  out.stdout)
    assert s, out.stdout
    steady, mbps, first, ttfb = (float(s.group(i)) for i in range(1, 5))
    assert steady > 0 and first > 0 and ttfb > 0
    # MB/s and images/s describe the same window: 64x64x3 uint8 per image.
    assert mbps == pytest.approx(steady * 64 * 64 * 3 / 1e6, rel=0.02, abs=0.1)
    # The whole run's rate lies between the first epoch's and the steady one's.
    overall = float(m.group(4))
    assert min(first, steady) * 0.999 <= overall <= max(first, steady) * 1.001
    # One epoch: no steady-state line (nothing to separate).
    one = subprocess.run(
        [CLI, "stream", "--target", daemon.target, "--dataset", "sample",
         "--batch-size", "32", "--height", "64", "--width", "64", "--dtype", "uint8"],
        capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and "steady state" not in one.stdout, one.stdout
