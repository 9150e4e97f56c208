"""nearprep.torch.finish_uint8: uint8 batches finished on the device (here
CPU tensors) against float64 arithmetic and against the daemon's own float32
output for the same request.

Tolerances: against ((x / 255) - mean) / std in float64, 1e-6 absolute
(values are below 3 in magnitude, where a float32 ulp is 2.4e-7; the op
rounds twice). Against the server's float32 output, the 8-bit quantisation:
0.5/255 / min(std) plus that 1e-6."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nearprep  # noqa: E402
from nearprep import torch as nt  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _ref(x_nhwc, mean, std):
    return (x_nhwc.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "channels_last"])
@pytest.mark.parametrize("input_layout", ["NHWC", "NCHW"])
def test_matches_float64_arithmetic(layout, input_layout):
    x = np.random.default_rng(1).integers(0, 256, (3, 7, 5, 3), dtype=np.uint8)
    want = _ref(x, MEAN, STD)
    src = x if input_layout == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    got = nt.finish_uint8(src, MEAN, STD, layout=layout, input_layout=input_layout)
    assert got.dtype == torch.float32
    if layout == "NHWC":
        assert got.shape == (3, 7, 5, 3) and got.is_contiguous()
    else:
        want = want.transpose(0, 3, 1, 2)
        assert got.shape == (3, 3, 7, 5)
        if layout == "channels_last":
            assert got.is_contiguous(memory_format=torch.channels_last)
        else:
            assert got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)
    # Without mean/std: x / 255.
    plain = nt.finish_uint8(src, layout=layout, input_layout=input_layout)
    np.testing.assert_allclose(plain.numpy(), _ref(x, (0, 0, 0), (1, 1, 1)).transpose(
        (0, 1, 2, 3) if layout == "NHWC" else (0, 3, 1, 2)), rtol=0, atol=1e-7)


def test_half_types_and_tensor_input():
    x = torch.from_numpy(np.random.default_rng(2).integers(0, 256, (2, 4, 4, 3), dtype=np.uint8))
    want = _ref(x.numpy(), MEAN, STD).transpose(0, 3, 1, 2)
    for dtype, tol in ((torch.float16, 2.0 ** -8 * 3), (torch.bfloat16, 2.0 ** -7 * 3)):
        got = nt.finish_uint8(x, MEAN, STD, dtype=dtype)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.float().numpy(), want, rtol=0, atol=tol)


@pytest.mark.parametrize("kwargs, field", [
    (dict(layout="HWC"), "layout"),
    (dict(input_layout="CHW"), "input_layout"),
    (dict(dtype=torch.int32), "dtype"),
    (dict(mean=MEAN), "mean"),
    (dict(mean=MEAN, std=(1, 0, 1)), "std"),
    (dict(mean=(0.5,), std=(1,)), "std"),
])
def test_bad_arguments(kwargs, field):
    x = np.zeros((1, 2, 2, 3), np.uint8)
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        nt.finish_uint8(x, **kwargs)
    assert exc.value.field == field
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        nt.finish_uint8(np.zeros((1, 2, 2, 3), np.float32))
    assert exc.value.field == "images"


def test_against_the_servers_float32_output(daemon):
    """uint8 on the wire + finish_uint8 vs float32 on the wire with the same
    mean/std: the difference is bounded by the 8-bit quantisation."""
    c = nearprep.Client(daemon.target)
    args = dict(batch_size=25, seed=7, shuffle=True, height=64, width=64, max_batches=4,
                flip_probability=0.5, brightness_max_delta=32 / 255, saturation=(0.5, 1.5))
    f32 = [b.images for b in c.batches("sample", dtype="float32", layout="NCHW",
                                       mean=MEAN, std=STD, **args)]
    u8 = [b.images for b in c.batches("sample", dtype="uint8", **args)]
    assert len(f32) == len(u8) == 4
    bound = 0.5 / 255 / min(STD) + 1e-6
    worst = 0.0
    for a, q in zip(f32, u8):
        got = nt.finish_uint8(q, MEAN, STD).numpy()
        assert got.shape == a.shape
        worst = max(worst, float(np.abs(got - a).max()))
    assert 0 < worst <= bound, (worst, bound)
