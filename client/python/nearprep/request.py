"""Builds a StreamBatchesRequest from keyword arguments.

Only what the request message itself needs is checked here, before any
network traffic: unknown arguments, a value of the wrong type (a string for
an integer, a pair that is not two numbers), an enum name that does not
exist, an integer that does not fit its field. These raise
InvalidArgumentError naming the request field ("transform.scale_min: must be
a number, got 'x'").

Every rule about values (ranges, min <= max, mean/std, shards, limits) is the
daemon's alone (server/service/request_validation.cc): a request that breaks
one gets the daemon's INVALID_ARGUMENT, which nearprep raises as
InvalidArgumentError with the field the daemon named. One source of truth,
so the client can never refuse what the daemon accepts or word a rule
differently.

Thread-safety: pure functions.
"""

import numbers

from nearprep.errors import InvalidArgumentError

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1

CROPS = {"none": 0, "center": 1, "random_resized": 2, "resize_center": 3}
FIDELITIES = {"tf_compat": 0, "fast": 1, "torchvision": 2}
DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2, "uint8": 3}
LAYOUTS = {"nhwc": 0, "nchw": 1}
ERROR_POLICIES = {"skip": 0, "fail_stream": 1, "fail": 1}
SHUFFLE_MODES = {"global": 0, "block": 1}
COMPRESSIONS = {"none": 0, "delta_zstd": 1, "gradient_zstd": 2}

# Keyword arguments batches() accepts besides dataset (documented there).
REQUEST_KEYS = (
    "batch_size", "seed", "epoch", "shuffle", "shard_index", "num_shards",
    "start_batch", "start_position", "max_batches", "drop_remainder",
    "height", "width", "crop", "center_fraction", "resize_shorter_side",
    "scale", "ratio",
    "flip_probability", "brightness_max_delta", "saturation", "clip", "mean",
    "std", "fidelity", "dtype", "layout", "error_policy", "include_params",
    "shuffle_mode", "block_samples", "open_blocks", "window", "compression",
    "compression_level")


def _bad(field, why, value):
    return InvalidArgumentError(f"{field}: {why}, got {value!r}", field=field)


def _int(field, value, hi):
    """An integer that fits an unsigned field of maximum `hi`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _bad(field, "must be an integer", value)
    value = int(value)
    if not 0 <= value <= hi:
        raise _bad(field, f"must fit the field: [0, {hi}]", value)
    return value


def _float(field, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(field, "must be a number", value)
    return float(value)


def _bool(field, value):
    if not isinstance(value, (bool, numbers.Integral)) or value not in (0, 1):
        raise _bad(field, "must be a bool", value)
    return bool(value)


def _enum(field, value, table):
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and int(value) in table.values():
        return int(value)
    names = ", ".join(sorted({k for k in table}))
    raise _bad(field, f"must be one of {names}", value)


def _pair(arg, lo_field, hi_field, value):
    """A (low, high) pair of numbers for the fields lo_field, hi_field."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise _bad(lo_field, f"{arg} must be a (min, max) pair", value) from None
    return _float(lo_field, lo), _float(hi_field, hi)


def _floats(field, value):
    """A sequence of numbers (the daemon checks how many)."""
    if isinstance(value, (str, bytes)):
        raise _bad(field, "must be a sequence of numbers", value)
    try:
        items = list(value)
    except TypeError:
        raise _bad(field, "must be a sequence of numbers", value) from None
    return [_float(f"{field}[{i}]", v) for i, v in enumerate(items)]


def build_request(pb2, dataset, **kw):
    """Returns a validated nearprep.v1.StreamBatchesRequest."""
    unknown = sorted(set(kw) - set(REQUEST_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]}: unknown argument (accepted: {', '.join(REQUEST_KEYS)})",
            field=unknown[0])
    if not isinstance(dataset, str) or not dataset:
        raise _bad("dataset", "must be a non-empty string", dataset)
    g = kw.get
    req = pb2.StreamBatchesRequest()
    req.dataset = dataset
    req.batch_size = _int("batch_size", g("batch_size", 32), _U32)
    req.seed = _int("seed", g("seed", 0), _U64)
    req.epoch = _int("epoch", g("epoch", 0), _U64)
    req.shuffle = _bool("shuffle", g("shuffle", False))
    req.shuffle_mode = _enum("shuffle_mode", g("shuffle_mode", "global"),
                             SHUFFLE_MODES)
    req.block_shuffle.block_samples = _int(
        "block_shuffle.block_samples", g("block_samples", 0), _U64)
    req.block_shuffle.open_blocks = _int(
        "block_shuffle.open_blocks", g("open_blocks", 0), _U32)
    req.block_shuffle.window = _int(
        "block_shuffle.window", g("window", 0), _U32)
    req.num_shards = _int("num_shards", g("num_shards", 1), _U32)
    req.shard_index = _int("shard_index", g("shard_index", 0), _U32)
    req.start_batch = _int("start_batch", g("start_batch", 0), _U64)
    req.start_position = _int("start_position", g("start_position", 0), _U64)
    req.max_batches = _int("max_batches", g("max_batches", 0), _U64)
    req.drop_remainder = _bool("drop_remainder", g("drop_remainder", False))

    t = req.transform
    t.height = _int("transform.height", g("height", 224), _U32)
    t.width = _int("transform.width", g("width", 224), _U32)
    t.crop = _enum("transform.crop", g("crop", "none"), CROPS)
    if g("center_fraction") is not None:
        t.center_fraction = _float("transform.center_fraction",
                                   g("center_fraction"))
    if g("resize_shorter_side") is not None:
        t.resize_shorter_side = _int("transform.resize_shorter_side",
                                     g("resize_shorter_side"), _U32)
    if g("scale") is not None:
        t.scale_min, t.scale_max = _pair(
            "scale", "transform.scale_min", "transform.scale_max", g("scale"))
    if g("ratio") is not None:
        t.ratio_min, t.ratio_max = _pair(
            "ratio", "transform.ratio_min", "transform.ratio_max", g("ratio"))
    t.flip_probability = _float("transform.flip_probability",
                                g("flip_probability", 0.0))
    t.brightness_max_delta = _float("transform.brightness_max_delta",
                                    g("brightness_max_delta", 0.0))
    if g("saturation") is not None:
        t.saturation_lower, t.saturation_upper = _pair(
            "saturation", "transform.saturation_lower",
            "transform.saturation_upper", g("saturation"))
    t.disable_clip = not _bool("transform.clip", g("clip", True))
    if g("mean") is not None:
        t.mean.extend(_floats("transform.mean", g("mean")))
    if g("std") is not None:
        t.std.extend(_floats("transform.std", g("std")))
    t.fidelity = _enum("transform.fidelity", g("fidelity", "tf_compat"), FIDELITIES)
    req.output.dtype = _enum("output.dtype", g("dtype", "float32"), DTYPES)
    req.output.layout = _enum("output.layout", g("layout", "NHWC"), LAYOUTS)
    req.output.compression = _enum("output.compression",
                                   g("compression", "none"), COMPRESSIONS)
    level = g("compression_level", 0)
    if isinstance(level, bool) or not isinstance(level, numbers.Integral):
        raise _bad("output.compression_level", "must be an integer", level)
    if not -(1 << 31) <= int(level) < (1 << 31):
        raise _bad("output.compression_level", "must fit the field (int32)", level)
    req.output.compression_level = int(level)
    _check_compression(req.output)
    req.error_policy = _enum("error_policy", g("error_policy", "skip"), ERROR_POLICIES)
    req.include_params = _bool("include_params", g("include_params", False))
    return req


def _check_compression(output):
    if output.compression and output.dtype != DTYPES["uint8"]:
        raise _bad("output.compression", "requires dtype 'uint8'",
                   output.compression)
    if not output.compression and output.compression_level:
        raise _bad("output.compression_level",
                   "must be 0 without output.compression",
                   output.compression_level)


def validate_request(req):
    """A caller-built StreamBatchesRequest: protobuf has checked the types;
    only the dataset name is needed to address anything. The daemon checks
    the values."""
    if not req.dataset:
        raise _bad("dataset", "must be a non-empty string", req.dataset)
    return req
