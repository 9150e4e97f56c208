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

One vocabulary. An enum value is named as the proto names it, in lower case
without the enum's prefix, read from the pb2 descriptors (CROP_MODE_RANDOM_RESIZED
-> "random_resized", FIDELITY_TF_COMPAT -> "tf_compat"): the names the CLI
(`nearprep stream --crop random_resized`, client/cpp/src/vocabulary.h) takes
too. Case and '-' vs '_' do not matter; the CLI's older spellings
(DEPRECATED_NAMES) are accepted as well.

Thread-safety: pure functions.
"""

import numbers
import os

from nearprep.errors import InvalidArgumentError

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1

# Older spellings (the CLI's before one vocabulary), still accepted; keyed by
# the enum's proto name. The same table as client/cpp/src/vocabulary.cc.
DEPRECATED_NAMES = {
    "CropMode": {"rrc": "random_resized"},
    "Fidelity": {"tf": "tf_compat"},
    "Compression": {"delta": "delta_zstd", "gradient": "gradient_zstd"},
    "ErrorPolicy": {"fail": "fail_stream"},
}


def enum_names(enum):
    """{name: number} of a pb2 enum (e.g. pb2.CropMode) in number order:
    each value's proto name in lower case without the prefix all its values
    share ("CROP_MODE_")."""
    d = getattr(enum, "DESCRIPTOR", enum)
    names = [v.name for v in d.values]
    prefix = os.path.commonprefix(names)
    prefix = prefix[:prefix.rfind("_") + 1]
    return {v.name[len(prefix):].lower(): v.number
            for v in sorted(d.values, key=lambda v: v.number)}

# Keyword arguments batches() accepts besides dataset (documented there).
REQUEST_KEYS = (
    "batch_size", "seed", "epoch", "shuffle", "shard_index", "num_shards",
    "start_batch", "start_position", "max_batches", "drop_remainder",
    "height", "width", "crop", "center_fraction", "resize_shorter_side",
    "scale", "ratio",
    "flip_probability", "brightness_max_delta", "saturation", "clip", "mean",
    "std", "fidelity", "dtype", "layout", "error_policy", "include_params",
    "shuffle_mode", "block_samples", "open_blocks", "window", "compression",
    "compression_level", "resume_token")


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


def _enum(field, value, enum):
    """The number of the value of pb2 enum `enum` that `value` names (a name
    of enum_names(), a deprecated one, or the number itself)."""
    table = enum_names(enum)
    if isinstance(value, str):
        key = value.lower().replace("-", "_")
        key = DEPRECATED_NAMES.get(enum.DESCRIPTOR.name, {}).get(key, key)
        if key in table:
            return table[key]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and int(value) in table.values():
        return int(value)
    raise _bad(field, f"must be one of {', '.join(table)}", value)


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
                             pb2.ShuffleMode)
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
    if g("resume_token") is not None:
        if not isinstance(g("resume_token"), str):
            raise _bad("resume_token", "must be Batch.resume_token (a str)",
                       g("resume_token"))
        req.resume_token = g("resume_token")
        apply_resume_token(req)

    t = req.transform
    t.height = _int("transform.height", g("height", 224), _U32)
    t.width = _int("transform.width", g("width", 224), _U32)
    t.crop = _enum("transform.crop", g("crop", "none"), pb2.CropMode)
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
    t.fidelity = _enum("transform.fidelity", g("fidelity", "tf_compat"), pb2.Fidelity)
    req.output.dtype = _enum("output.dtype", g("dtype", "float32"), pb2.DType)
    req.output.layout = _enum("output.layout", g("layout", "nhwc"), pb2.Layout)
    req.output.compression = _enum("output.compression",
                                   g("compression", "none"), pb2.Compression)
    level = g("compression_level", 0)
    if isinstance(level, bool) or not isinstance(level, numbers.Integral):
        raise _bad("output.compression_level", "must be an integer", level)
    if not -(1 << 31) <= int(level) < (1 << 31):
        raise _bad("output.compression_level", "must fit the field (int32)", level)
    req.output.compression_level = int(level)
    _check_compression(req.output, pb2)
    req.error_policy = _enum("error_policy", g("error_policy", "skip"), pb2.ErrorPolicy)
    req.include_params = _bool("include_params", g("include_params", False))
    return req


def _check_compression(output, pb2):
    if output.compression and output.dtype != pb2.DTYPE_UINT8:
        raise _bad("output.compression", "requires dtype 'uint8'",
                   output.compression)
    if not output.compression and output.compression_level:
        raise _bad("output.compression_level",
                   "must be 0 without output.compression",
                   output.compression_level)


def resume_point(token):
    """(batch, position) a resume token (Batch.resume_token) resumes at.
    The daemon checks the rest of it (that it belongs to this stream)."""
    fields = dict(p.split("=", 1) for p in token.split(";")[1:] if "=" in p)
    try:
        return int(fields["batch"]), int(fields["position"])
    except (KeyError, ValueError):
        raise _bad("resume_token", "not a resume token (send back "
                   "Batch.resume_token unchanged)", token) from None


def apply_resume_token(req):
    """Sets start_batch and start_position of a request with a resume_token
    to the token's (the daemon takes either 0 or the same values), so that
    the stream knows where it starts."""
    if req.resume_token:
        batch, position = resume_point(req.resume_token)
        for field, value in (("start_batch", batch), ("start_position", position)):
            if getattr(req, field) not in (0, value):
                raise _bad(field, f"differs from resume_token's {value} "
                           "(leave it 0 with a resume_token)", getattr(req, field))
        req.start_batch, req.start_position = batch, position
    return req


def validate_request(req):
    """A caller-built StreamBatchesRequest: protobuf has checked the types;
    only the dataset name is needed to address anything. The daemon checks
    the values."""
    if not req.dataset:
        raise _bad("dataset", "must be a non-empty string", req.dataset)
    return apply_resume_token(req)
