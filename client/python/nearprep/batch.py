"""Batch: one served batch, with its tensor as a numpy view of the message
(grpcio path) or of the native path's receive buffer (nearprep.transport).

The StreamBatches response is received as raw bytes (a custom gRPC
deserializer) and only its small header is parsed with protobuf; `images` is
np.frombuffer over the received bytes at the offset of Tensor.data, so the
tensor bytes are never copied by the client (gRPC's own copy of the socket
data into a Python bytes object is the only one). The array is therefore
read-only; call images.copy() to modify it. A compressed tensor
(Tensor.compression) is decoded by nearprep.codec into a new array (the
header's compression fields are then cleared, as on the native path).

bfloat16 has no numpy dtype: `images` then holds the raw bits as uint16 and
bfloat16_to_float32() widens them exactly.

Thread-safety: a Batch is an immutable value; share it freely.
"""

import dataclasses
from typing import List, Optional, Tuple

import numpy as np

from nearprep import codec
from nearprep.errors import DataLossError
from nearprep.plan import AUGMENT_OPS

DTYPES = ("float32", "float16", "bfloat16", "uint8")
LAYOUTS = ("NHWC", "NCHW")
# Proto enum value -> (name, numpy dtype of `images`).
_NP_DTYPE = {
    0: ("float32", np.dtype("<f4")),
    1: ("float16", np.dtype("<f2")),
    2: ("bfloat16", np.dtype("<u2")),
    3: ("uint8", np.dtype("u1")),
}


def numpy_dtype(dtype):
    """numpy dtype that `Batch.images` has for a dtype name (bfloat16: uint16)."""
    return {name: d for name, d in _NP_DTYPE.values()}[dtype]


def bfloat16_to_float32(bits):
    """Widens bfloat16 bits (uint16 array) to float32, exactly."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


@dataclasses.dataclass(frozen=True)
class CropBox:
    y: int
    x: int
    height: int
    width: int


@dataclasses.dataclass(frozen=True)
class SampleParams:
    """A sample's random draws, as applied by the server (include_params)."""
    flipped: bool
    brightness_delta: float
    saturation_factor: float
    crop: CropBox
    source_height: int
    source_width: int
    # random_contrast's factor (1.0 when disabled), random_hue's delta (0.0).
    contrast_factor: float = 1.0
    hue_delta: float = 0.0
    # FIDELITY_TORCHVISION's ColorJitter: brightness, contrast, saturation
    # factors (1.0 when disabled), hue delta (0.0), and the order applied
    # (0 brightness, 1 contrast, 2 saturation, 3 hue; () when it is off).
    jitter_brightness: float = 1.0
    jitter_contrast: float = 1.0
    jitter_saturation: float = 1.0
    jitter_hue: float = 0.0
    jitter_order: Tuple[int, ...] = ()
    # The auto-augment ops applied, in order: (torchvision's op name, e.g.
    # "ShearX", the magnitude its _apply_op received, sign applied).
    augment: Tuple[Tuple[str, float], ...] = ()
    # RandomErasing's box in output pixels; None when nothing was erased.
    erased: Optional[CropBox] = None


@dataclasses.dataclass(frozen=True)
class BatchMix:
    """A batch's MixUp / CutMix draw. kind: "none", "mixup" or "cutmix";
    lam: the weight of each image's own label (1.0 for "none"); box: CutMix's
    (y1, x1, y2, x2), rows [y1, y2) and columns [x1, x2) taken from the
    partner image (i - 1, image 0's the last); (0, 0, 0, 0) otherwise."""
    kind: str = "none"
    lam: float = 1.0
    box: Tuple[int, int, int, int] = (0, 0, 0, 0)


_MIX_KINDS = ("none", "mixup", "cutmix")


def _augment_op_name(op):
    return AUGMENT_OPS[op] if 0 <= op < len(AUGMENT_OPS) else f"AugmentOp({op})"


def _has_field(msg, name):
    """msg.HasField(name), False where the stubs predate the field."""
    try:
        return msg.HasField(name)
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class SampleError:
    """A sample skipped while assembling a batch. `path` is for display (bytes
    of a file name that are not UTF-8 read as \\xNN); `path_bytes` is the
    exact path relative to the dataset root."""
    sample_id: int
    path: str
    code: str
    message: str
    path_bytes: bytes = b""


@dataclasses.dataclass(frozen=True)
class Timings:
    """Server worker time of the batch, microseconds (sums over samples)."""
    read_us: int
    decode_us: int
    transform_us: int
    queue_wait_us: int


class Batch:
    """One batch. Attributes:

    epoch, batch_index  batch position in the epoch's shard stream (the
                        proto's and `nearprep fetch` JSON's name; `index`
                        is the same value, the older name)
    images              numpy array (read-only view of the message bytes)
    dtype, layout       "float32"/"float16"/"bfloat16"/"uint8", "NHWC"/"NCHW"
    labels              int64 array, one per image
    sample_ids          uint64 array, one per image
    params              list of SampleParams (empty unless include_params)
    mix                 BatchMix: the batch's MixUp / CutMix draw (kind
                        "none" without Transform.mixup_alpha/cutmix_alpha)
    mix_labels          int64 array: per image its partner's label (image i
                        is mixed with image i - 1, image 0 with the last);
                        the loss weighs labels by mix.lam and mix_labels by
                        1 - mix.lam; empty when the batch is not mixed
    errors              list of SampleError skipped while assembling it
    timings             server stage Timings
    next_position       shard position where batch index + 1 begins
    resume_token        the resume point as a token bound to this stream:
                        batches(..., resume_token=) resumes after this batch
    target              the server that sent it
    header              the nearprep.v1.Batch message without tensor data
    """

    __slots__ = ("epoch", "index", "images", "dtype", "layout", "labels",
                 "sample_ids", "_header", "next_position", "target",
                 "_params", "nbytes", "mix_labels")

    def __init__(self, header, images, dtype, layout, target=None):
        self._header = header
        self.epoch = header.epoch
        self.index = header.batch_index
        self.images = images
        self.dtype = dtype
        self.layout = layout
        self.labels = np.array(header.labels, dtype=np.int64)
        self.sample_ids = np.array(header.sample_ids, dtype=np.uint64)
        # Stubs generated before MixUp / CutMix: no mix.
        self.mix_labels = np.array(getattr(header, "mix_labels", ()), dtype=np.int64)
        self.next_position = header.next_position
        self.target = target
        self._params = None
        self.nbytes = images.nbytes

    @property
    def resume_token(self):
        return self._header.resume_token

    @property
    def batch_index(self):
        """The batch's index in the epoch's shard stream (= index)."""
        return self.index

    @property
    def header(self):
        return self._header

    def __len__(self):
        return int(self.images.shape[0]) if self.images.ndim else 0

    @property
    def mix(self) -> BatchMix:
        if not _has_field(self._header, "mix"):
            return BatchMix()
        m = self._header.mix
        kind = _MIX_KINDS[m.kind] if 0 <= m.kind < len(_MIX_KINDS) else str(m.kind)
        if kind == "none":
            return BatchMix()
        return BatchMix(kind, getattr(m, "lambda"), (m.y1, m.x1, m.y2, m.x2))

    @property
    def params(self) -> List[SampleParams]:
        if self._params is None:
            self._params = [_sample_params(p) for p in self._header.params]
        return self._params

    @property
    def errors(self) -> List[SampleError]:
        return [SampleError(e.sample_id, e.path, e.code, e.message, e.path_bytes)
                for e in self._header.errors]

    @property
    def timings(self) -> Timings:
        t = self._header.timings
        return Timings(t.read_us, t.decode_us, t.transform_us, t.queue_wait_us)

    def images_float32(self):
        """images as float32 (bfloat16 widened; others converted; a copy)."""
        if self.dtype == "bfloat16":
            return bfloat16_to_float32(self.images)
        return self.images.astype(np.float32)

    def __repr__(self):
        return (f"Batch(epoch={self.epoch}, batch_index={self.index}, "
                f"images={self.dtype}{list(self.images.shape)} {self.layout}, "
                f"errors={len(self._header.errors)})")


def _sample_params(p) -> SampleParams:
    # Stubs generated before a field: getattr's default, the field's own.
    order = tuple(getattr(p, "jitter_order", ()))
    erased = None
    if _has_field(p, "erased"):
        e = p.erased
        erased = CropBox(e.y, e.x, e.height, e.width)
    return SampleParams(
        flipped=p.flipped,
        brightness_delta=p.brightness_delta,
        saturation_factor=p.saturation_factor,
        crop=CropBox(p.crop.y, p.crop.x, p.crop.height, p.crop.width),
        source_height=p.source_height,
        source_width=p.source_width,
        contrast_factor=getattr(p, "contrast_factor", 1.0),
        hue_delta=getattr(p, "hue_delta", 0.0),
        # The server sends ColorJitter's factors only with its order (the
        # proto's 0 would read as a factor otherwise).
        jitter_brightness=p.jitter_brightness if order else 1.0,
        jitter_contrast=p.jitter_contrast if order else 1.0,
        jitter_saturation=p.jitter_saturation if order else 1.0,
        jitter_hue=p.jitter_hue if order else 0.0,
        jitter_order=order,
        augment=tuple((_augment_op_name(a.op), a.magnitude)
                      for a in getattr(p, "augment", ())),
        erased=erased)


# ---------------------------------------------------------------------------
# Wire parsing


class WireError(ValueError):
    pass


def _varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _skip(buf, pos, end, wire_type):
    if wire_type == 0:
        _, pos = _varint(buf, pos, end)
    elif wire_type == 1:
        pos += 8
    elif wire_type == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    elif wire_type == 5:
        pos += 4
    else:
        raise WireError(f"unsupported wire type {wire_type}")
    if pos > end:
        raise WireError("field runs past the end")
    return pos


def find_field(buf, start, end, number) -> Optional[Tuple[int, int, int]]:
    """(tag_start, value_start, value_end) of the single length-delimited
    field `number` in buf[start:end], or None. Raises WireError on malformed
    input or if the field occurs twice (then protobuf's merge rule applies
    and the caller must fall back to a full parse)."""
    found = None
    pos = start
    while pos < end:
        tag_start = pos
        key, pos = _varint(buf, pos, end)
        field, wire_type = key >> 3, key & 7
        if field == number and wire_type == 2:
            n, vstart = _varint(buf, pos, end)
            if vstart + n > end:
                raise WireError("field runs past the end")
            if found is not None:
                raise WireError("field repeated")
            found = (tag_start, vstart, vstart + n)
            pos = vstart + n
        else:
            pos = _skip(buf, pos, end, wire_type)
    return found


def parse_batch(raw, pb2, target=None) -> Batch:
    """Builds a Batch from the serialized nearprep.v1.Batch `raw` (bytes)."""
    header = None
    try:
        mv = memoryview(raw)
        end = len(raw)
        tensor = find_field(mv, 0, end, 15)
        if tensor is not None:
            t_tag, t_start, t_end = tensor
            data = find_field(mv, t_start, t_end, 15)
            header = pb2.Batch.FromString(bytes(mv[:t_tag]) + bytes(mv[t_end:]))
            if data is not None:
                d_tag, d_start, d_end = data
                tensor_msg = pb2.Tensor.FromString(
                    bytes(mv[t_start:d_tag]) + bytes(mv[d_end:t_end]))
            else:
                d_start = d_end = 0
                tensor_msg = pb2.Tensor.FromString(bytes(mv[t_start:t_end]))
            header.tensor.CopyFrom(tensor_msg)
            buffer, offset, nbytes = raw, d_start, d_end - d_start
        else:
            header = pb2.Batch.FromString(raw)
            buffer, offset, nbytes = b"", 0, 0
    except WireError:
        # Not the layout our server sends: let protobuf parse it (one copy).
        full = pb2.Batch.FromString(raw)
        buffer, offset, nbytes = full.tensor.data, 0, len(full.tensor.data)
        header = full
        header.tensor.ClearField("data")
    return _make_batch(header, buffer, offset, nbytes, target)


def buffer_batch(header_bytes, buffer, pb2, target=None) -> Batch:
    """Builds a Batch from a serialized header (nearprep.v1.Batch without
    tensor data) and a buffer-protocol object holding exactly the tensor
    bytes (the native receive path); `images` is a view of `buffer`."""
    header = pb2.Batch.FromString(header_bytes)
    if buffer is None:
        return _make_batch(header, b"", 0, 0, target)
    return _make_batch(header, buffer, 0, len(buffer), target)


def _make_batch(header, buffer, offset, nbytes, target):
    t = header.tensor
    if t.dtype not in _NP_DTYPE:
        raise WireError(f"tensor.dtype: unknown value {t.dtype}")
    dtype_name, np_dtype = _NP_DTYPE[t.dtype]
    shape = tuple(int(s) for s in t.shape)
    if t.compression:
        # Compressed uint8 (the native path decodes in C++ and never gets
        # here): decode into a new array; the header then reads as if the
        # tensor had come uncompressed, as on the native path.
        if t.dtype != 3:
            raise DataLossError(f"tensor.compression {t.compression} with "
                                f"dtype {dtype_name}")
        images = codec.decompress(
            t.compression, shape, t.layout == 1,
            memoryview(buffer)[offset:offset + nbytes], t.uncompressed_bytes)
        t.ClearField("compression")
        t.ClearField("uncompressed_bytes")
        buffer, offset, nbytes = images, 0, images.nbytes
    count = 1
    for s in shape:
        count *= s
    if count * np_dtype.itemsize != nbytes:
        raise WireError(f"tensor.data: {nbytes} bytes for shape {list(shape)} "
                        f"of {dtype_name}")
    images = np.frombuffer(buffer, dtype=np_dtype, count=count,
                           offset=offset).reshape(shape)
    layout = LAYOUTS[t.layout] if t.layout < len(LAYOUTS) else str(t.layout)
    return Batch(header, images, dtype_name, layout, target)
