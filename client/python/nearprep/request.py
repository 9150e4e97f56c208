"""Builds and validates a StreamBatchesRequest from keyword arguments.

The same checks as the daemon, done before any network traffic, so a typo
fails fast with an InvalidArgumentError naming the field the way the server
would ("transform.height: must be in [1, 16384], got 0"). The daemon stays the
authority: limits that depend on its configuration (max batch size, max
output pixels) are only checked there.

Thread-safety: pure functions.
"""

import math
import numbers

from nearprep.errors import InvalidArgumentError

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
MAX_SIDE = 16384

CROPS = {"none": 0, "center": 1, "random_resized": 2}
FIDELITIES = {"tf_compat": 0, "fast": 1}
DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2, "uint8": 3}
LAYOUTS = {"nhwc": 0, "nchw": 1}
ERROR_POLICIES = {"skip": 0, "fail_stream": 1, "fail": 1}
SHUFFLE_MODES = {"global": 0, "block": 1}

# Keyword arguments batches() accepts besides dataset (documented there).
REQUEST_KEYS = (
    "batch_size", "seed", "epoch", "shuffle", "shard_index", "num_shards",
    "start_batch", "start_position", "max_batches", "drop_remainder",
    "height", "width", "crop", "center_fraction", "scale", "ratio",
    "flip_probability", "brightness_max_delta", "saturation", "clip", "mean",
    "std", "fidelity", "dtype", "layout", "error_policy", "include_params",
    "shuffle_mode", "block_samples", "open_blocks", "window")


def _bad(field, why, value):
    return InvalidArgumentError(f"{field}: {why}, got {value!r}", field=field)


def _int(field, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _bad(field, "must be an integer", value)
    value = int(value)
    if not lo <= value <= hi:
        raise _bad(field, f"must be in [{lo}, {hi}]", value)
    return value


def _float(field, value, lo=-math.inf, hi=math.inf, lo_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(field, "must be a number", value)
    value = float(value)
    if math.isnan(value) or value > hi or value < lo or (lo_open and value <= lo):
        lo_b = "(" if lo_open else "["
        raise _bad(field, f"must be in {lo_b}{lo}, {hi}]", value)
    return value


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


def _pair(field, value, check):
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise _bad(field, "must be a (min, max) pair", value) from None
    lo = check(f"{field}[0]", lo)
    hi = check(f"{field}[1]", hi)
    if lo > hi:
        raise _bad(field, "min must be <= max", value)
    return lo, hi


def _triple(field, value, positive=False):
    try:
        vals = [float(v) for v in value]
    except (TypeError, ValueError):
        raise _bad(field, "must be 3 numbers", value) from None
    if len(vals) != 3:
        raise _bad(field, "must have exactly 3 values (one per channel)", value)
    for v in vals:
        if not math.isfinite(v) or (positive and v <= 0):
            raise _bad(field, "values must be finite" + (" and > 0" if positive else ""),
                       value)
    return vals


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
    req.batch_size = _int("batch_size", g("batch_size", 32), 1, _U32)
    req.seed = _int("seed", g("seed", 0), 0, _U64)
    req.epoch = _int("epoch", g("epoch", 0), 0, _U64)
    req.shuffle = _bool("shuffle", g("shuffle", False))
    req.shuffle_mode = _enum("shuffle_mode", g("shuffle_mode", "global"),
                             SHUFFLE_MODES)
    req.block_shuffle.block_samples = _int(
        "block_shuffle.block_samples", g("block_samples", 0), 0, _U64)
    req.block_shuffle.open_blocks = _int(
        "block_shuffle.open_blocks", g("open_blocks", 0), 0, 1024)
    req.block_shuffle.window = _int(
        "block_shuffle.window", g("window", 0), 0, 1 << 20)
    num_shards = _int("num_shards", g("num_shards", 1), 1, _U32)
    shard_index = _int("shard_index", g("shard_index", 0), 0, _U32)
    if shard_index >= num_shards:
        raise InvalidArgumentError(
            f"shard_index: must be < num_shards ({num_shards}), got {shard_index}",
            field="shard_index")
    req.shard_index, req.num_shards = shard_index, num_shards
    req.start_batch = _int("start_batch", g("start_batch", 0), 0, _U64)
    req.start_position = _int("start_position", g("start_position", 0), 0, _U64)
    req.max_batches = _int("max_batches", g("max_batches", 0), 0, _U64)
    req.drop_remainder = _bool("drop_remainder", g("drop_remainder", False))

    t = req.transform
    t.height = _int("transform.height", g("height", 224), 1, MAX_SIDE)
    t.width = _int("transform.width", g("width", 224), 1, MAX_SIDE)
    t.crop = _enum("transform.crop", g("crop", "none"), CROPS)
    if g("center_fraction") is not None:
        t.center_fraction = _float("transform.center_fraction",
                                   g("center_fraction"), 0.0, 1.0, lo_open=True)
    if g("scale") is not None:
        t.scale_min, t.scale_max = _pair(
            "transform.scale", g("scale"),
            lambda f, v: _float(f, v, 0.0, 1.0, lo_open=True))
    if g("ratio") is not None:
        t.ratio_min, t.ratio_max = _pair(
            "transform.ratio", g("ratio"),
            lambda f, v: _float(f, v, 0.0, 1e6, lo_open=True))
    t.flip_probability = _float("transform.flip_probability",
                                g("flip_probability", 0.0), 0.0, 1.0)
    t.brightness_max_delta = _float("transform.brightness_max_delta",
                                    g("brightness_max_delta", 0.0), 0.0, 1e6)
    if g("saturation") is not None:
        t.saturation_lower, t.saturation_upper = _pair(
            "transform.saturation", g("saturation"),
            lambda f, v: _float(f, v, 0.0, 1e6))
    t.disable_clip = not _bool("transform.clip", g("clip", True))
    mean, std = g("mean"), g("std")
    if (mean is None) != (std is None):
        field = "transform.std" if std is None else "transform.mean"
        raise InvalidArgumentError(
            f"{field}: mean and std must be given together", field=field)
    if mean is not None:
        t.mean.extend(_triple("transform.mean", mean))
        t.std.extend(_triple("transform.std", std, positive=True))
    t.fidelity = _enum("transform.fidelity", g("fidelity", "tf_compat"), FIDELITIES)
    req.output.dtype = _enum("output.dtype", g("dtype", "float32"), DTYPES)
    req.output.layout = _enum("output.layout", g("layout", "NHWC"), LAYOUTS)
    req.error_policy = _enum("error_policy", g("error_policy", "skip"), ERROR_POLICIES)
    req.include_params = _bool("include_params", g("include_params", False))
    return req


def validate_request(req):
    """Checks a caller-built StreamBatchesRequest with the same rules."""
    if not req.dataset:
        raise _bad("dataset", "must be a non-empty string", req.dataset)
    if req.batch_size < 1:
        raise _bad("batch_size", f"must be in [1, {_U32}]", req.batch_size)
    num_shards = req.num_shards or 1
    if req.shard_index >= num_shards:
        raise InvalidArgumentError(
            f"shard_index: must be < num_shards ({num_shards}), got {req.shard_index}",
            field="shard_index")
    t = req.transform
    for name in ("height", "width"):
        v = getattr(t, name)
        if not 1 <= v <= MAX_SIDE:
            raise _bad(f"transform.{name}", f"must be in [1, {MAX_SIDE}]", v)
    if not 0.0 <= t.flip_probability <= 1.0:
        raise _bad("transform.flip_probability", "must be in [0, 1]",
                   t.flip_probability)
    if not t.brightness_max_delta >= 0.0:
        raise _bad("transform.brightness_max_delta", "must be >= 0",
                   t.brightness_max_delta)
    if not 0.0 <= t.saturation_lower <= t.saturation_upper:
        raise _bad("transform.saturation_lower",
                   "must satisfy 0 <= lower <= upper",
                   (t.saturation_lower, t.saturation_upper))
    if len(t.mean) != len(t.std) or len(t.mean) not in (0, 3):
        raise _bad("transform.mean", "mean and std need 3 values each",
                   (list(t.mean), list(t.std)))
    return req
