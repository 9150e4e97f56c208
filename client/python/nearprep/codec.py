"""Pure-Python decoder of compressed uint8 tensors (nearprep.v1.Compression),
the grpcio path's fallback; the native path decodes in C++
(common/tensor_codec.cc) before Python sees the batch.

Payload: one zstd frame per image (content size and checksum included), in
image order; each frame holds the image's filtered bytes. Filters, per
channel along each row of the tensor's layout, arithmetic mod 256, missing
neighbours 0:
  DELTA_ZSTD     r = x - left
  GRADIENT_ZSTD  r = x - (left + up - upleft)
Inverses: a running sum along the row (per channel), then for GRADIENT a
running sum down the rows: both are numpy cumsums in uint8.

Needs python3-zstandard (Debian). Thread-safety: pure functions.
"""

import numpy as np

from nearprep.errors import DataLossError, NearprepError

NONE, DELTA_ZSTD, GRADIENT_ZSTD = 0, 1, 2

_zstd = None


def _zstandard():
    global _zstd
    if _zstd is None:
        try:
            import zstandard
        except ImportError as e:
            raise NearprepError(
                "compressed batches need nearprep._native or the zstandard "
                "module (Debian: python3-zstandard)",
                code="FAILED_PRECONDITION") from e
        _zstd = zstandard
    return _zstd


def _geometry(shape, layout_nchw):
    """(images, planes, rows, cols, channels) of a 4-D uint8 tensor."""
    if len(shape) != 4:
        raise DataLossError(f"compressed tensor: shape {list(shape)} is not 4-D")
    n, a, b, c = (int(s) for s in shape)
    return (n, a, b, c, 1) if layout_nchw else (n, 1, a, b, c)


def unfilter(filtered, compression, shape, layout_nchw):
    """Inverts the prediction filter in place on a uint8 array of the tensor's
    bytes (any shape with the right size); returns it shaped as `shape`."""
    n, planes, rows, cols, ch = _geometry(shape, layout_nchw)
    v = filtered.reshape(n, planes, rows, cols, ch)
    np.cumsum(v, axis=3, dtype=np.uint8, out=v)
    if compression == GRADIENT_ZSTD:
        np.cumsum(v, axis=2, dtype=np.uint8, out=v)
    return filtered.reshape(tuple(int(s) for s in shape))


def decompress(compression, shape, layout_nchw, payload, uncompressed_bytes):
    """The uint8 tensor (a new writable array of `shape`) that `payload`
    (bytes-like) encodes. DataLossError on a damaged payload."""
    if compression not in (DELTA_ZSTD, GRADIENT_ZSTD):
        raise DataLossError(
            f"compressed tensor: unknown compression {compression}")
    n, planes, rows, cols, ch = _geometry(shape, layout_nchw)
    total = n * planes * rows * cols * ch
    if total != uncompressed_bytes:
        raise DataLossError(
            f"compressed tensor: uncompressed_bytes {uncompressed_bytes} does "
            f"not match shape {list(shape)}")
    out = np.empty(total, dtype=np.uint8)
    if total:
        zstd = _zstandard()
        got = 0
        try:
            reader = zstd.ZstdDecompressor().stream_reader(
                payload, read_across_frames=True)
            view = memoryview(out)
            while got < total:
                k = reader.readinto(view[got:])
                if not k:
                    break
                got += k
            extra = reader.read(1)
        except zstd.ZstdError as e:
            raise DataLossError(f"compressed tensor: {e}") from None
        if got != total or extra:
            raise DataLossError(
                f"compressed tensor: payload decodes to "
                f"{'more than ' if extra else ''}{got} bytes, expected {total}")
    elif len(payload):
        raise DataLossError("compressed tensor: payload for an empty tensor")
    return unfilter(out, compression, shape, layout_nchw)
