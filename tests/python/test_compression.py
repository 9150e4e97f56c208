"""Compressed uint8 batches (nearprep.v1.Compression) in the Python client:
the pure-Python decoder (nearprep.codec) against an encoder written here from
the definition, edge geometries, and damaged payloads on both receive paths
(the native path decodes in C++). The daemon end-to-end check is in
test_daemon.py (test_compressed_uint8_equals_uncompressed)."""

import os

import numpy as np
import pytest

import nearprep
from nearprep import codec
from nearprep import transport as tr
from fake_server import FakePreprocessor, FakeServer, pb2

zstandard = pytest.importorskip("zstandard")


def encode(images, compression, nchw, level=1):
    """Payload of a uint8 tensor, written from the protocol's definition:
    per image, residual = x - prediction (mod 256), one zstd frame each."""
    x = images.astype(np.int32)
    if nchw:   # (n, c, h, w): each channel is a plane, 1 channel per pixel
        v = x[..., None]
    else:      # (n, h, w, c): one plane
        v = x[:, None]
    left = np.zeros_like(v)
    left[:, :, :, 1:] = v[:, :, :, :-1]
    pred = left
    if compression == codec.GRADIENT_ZSTD:
        up = np.zeros_like(v)
        up[:, :, 1:] = v[:, :, :-1]
        upleft = np.zeros_like(v)
        upleft[:, :, 1:, 1:] = v[:, :, :-1, :-1]
        pred = left + up - upleft
    r = ((v - pred) & 0xFF).astype(np.uint8)
    c = zstandard.ZstdCompressor(level=level, write_checksum=True,
                                 write_content_size=True)
    return b"".join(c.compress(r[i].tobytes()) for i in range(len(images)))


SHAPES = [((1, 1, 1, 3), False), ((1, 3, 1, 1), True), ((3, 5, 7, 3), False),
          ((3, 3, 5, 7), True), ((2, 1, 9, 3), False), ((2, 9, 1, 3), False),
          ((2, 3, 224, 224), True), ((0, 4, 4, 3), False)]


@pytest.mark.parametrize("compression", [codec.DELTA_ZSTD, codec.GRADIENT_ZSTD])
@pytest.mark.parametrize("shape, nchw", SHAPES)
def test_python_decoder_round_trips(shape, nchw, compression):
    rng = np.random.default_rng(sum(shape))
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    payload = encode(images, compression, nchw)
    got = codec.decompress(compression, shape, nchw, payload, images.nbytes)
    assert got.shape == shape and got.dtype == np.uint8
    assert got.tobytes() == images.tobytes()


def test_python_decoder_rejects_damage():
    shape = (3, 8, 8, 3)
    images = (np.arange(np.prod(shape)) % 251).astype(np.uint8).reshape(shape)
    payload = encode(images, codec.GRADIENT_ZSTD, False)
    bad = bytearray(payload)
    bad[len(bad) // 2] ^= 0x40
    bad[-2] ^= 0x11
    cases = {
        "flipped": bytes(bad),
        "truncated": payload[:-7],
        "trailing": payload + b"\0",
        "empty": b"",
    }
    for name, p in cases.items():
        with pytest.raises(nearprep.DataLossError) as exc:
            codec.decompress(codec.GRADIENT_ZSTD, shape, False, p, images.nbytes)
        assert "compressed tensor" in str(exc.value), name
    with pytest.raises(nearprep.DataLossError, match="uncompressed_bytes"):
        codec.decompress(codec.GRADIENT_ZSTD, shape, False, payload, images.nbytes + 1)
    with pytest.raises(nearprep.DataLossError, match="unknown compression"):
        codec.decompress(7, shape, False, payload, images.nbytes)


def test_request_checks_compression_client_side():
    c = nearprep.Client("127.0.0.1:1", native=False)
    req = c.request("x", dtype="uint8", compression="gradient_zstd",
                    compression_level=3)
    assert req.output.compression == pb2.COMPRESSION_GRADIENT_ZSTD
    assert req.output.compression_level == 3
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        c.request("x", compression="delta_zstd")  # float32
    assert exc.value.field == "output.compression"
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        c.request("x", dtype="uint8", compression="lz4")
    assert exc.value.field == "output.compression"
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        c.request("x", dtype="uint8", compression_level=2)
    assert exc.value.field == "output.compression_level"


class Compressed(FakePreprocessor):
    """Batches of 4 NCHW uint8 images 3x6x5, compressed; `corrupt` flips a
    byte of the payload of batch 1."""

    SHAPE = (4, 3, 6, 5)

    def __init__(self, corrupt=False):
        super().__init__(12)
        self.corrupt = corrupt

    @classmethod
    def images(cls, index):
        rng = np.random.default_rng(index)
        return rng.integers(0, 256, size=cls.SHAPE, dtype=np.uint8)

    def StreamBatches(self, req, context):
        for index in range(req.start_batch, 3):
            img = self.images(index)
            payload = bytearray(encode(img, codec.GRADIENT_ZSTD, True))
            if self.corrupt and index == 1:
                payload[len(payload) // 3] ^= 0x22
                payload[-1] ^= 0x01
            ids = list(range(index * 4, index * 4 + 4))
            yield pb2.Batch(
                epoch=req.epoch, batch_index=index, labels=ids, sample_ids=ids,
                next_position=(index + 1) * 4,
                tensor=pb2.Tensor(shape=list(img.shape), dtype=pb2.DTYPE_UINT8,
                                  layout=pb2.LAYOUT_NCHW,
                                  compression=pb2.COMPRESSION_GRADIENT_ZSTD,
                                  uncompressed_bytes=img.nbytes,
                                  data=bytes(payload)))


def _paths():
    paths = [False]
    if tr.load_native() is not None:
        paths.append(True)
    elif os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
        pytest.fail("nearprep._native was built but does not import")
    return paths


@pytest.mark.parametrize("native", _paths())
def test_both_paths_decode_a_payload_encoded_here(native):
    srv = FakeServer(Compressed())
    try:
        c = nearprep.Client(srv.target, native=native)
        got = list(c.batches("fake", batch_size=4, dtype="uint8", layout="NCHW",
                             compression="gradient_zstd"))
        assert len(got) == 3
        for i, b in enumerate(got):
            assert b.images.shape == Compressed.SHAPE
            assert b.images.tobytes() == Compressed.images(i).tobytes()
            assert b.header.tensor.compression == 0
    finally:
        srv.stop()


@pytest.mark.parametrize("native", _paths())
def test_corrupt_payload_is_a_clear_error(native):
    srv = FakeServer(Compressed(corrupt=True))
    try:
        c = nearprep.Client(srv.target, native=native)
        seen = []
        with pytest.raises(nearprep.DataLossError) as exc:
            for b in c.batches("fake", batch_size=4, dtype="uint8",
                               layout="NCHW", compression="gradient_zstd"):
                seen.append(b.index)
        assert seen == [0]
        assert "compressed tensor" in str(exc.value), str(exc.value)
    finally:
        srv.stop()
