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

One vocabulary, with the proto as the table. The keywords are the request's
field names, read from the pb2 descriptors (request_keys()): the fields of
StreamBatchesRequest and of its transform, output and block_shuffle
messages, flattened (`crop` sets transform.crop), except for three (min,
max) pairs (scale, ratio, saturation) and `clip` (not transform.disable_clip).
A field added to the proto is a keyword without an edit here. An enum value
is named as the proto names it, in lower case without the enum's prefix
(CROP_MODE_RANDOM_RESIZED -> "random_resized", FIDELITY_TF_COMPAT ->
"tf_compat"): the names the CLI (`nearprep stream --crop random_resized`,
cli/vocabulary.h) takes too. Case and '-' vs '_' do not matter;
the older spellings the proto lists as a value's
(nearprep.v1.deprecated_spelling) are accepted as well.

Thread-safety: pure functions.
"""

import numbers
import os

from nearprep.errors import InvalidArgumentError

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1

def deprecated_names(enum):
    """{old spelling: canonical name} of a pb2 enum (or its descriptor): the
    values' (nearprep.v1.deprecated_spelling) options in the proto, the same
    table the CLI reads (cli/vocabulary.cc)."""
    d = getattr(enum, "DESCRIPTOR", enum)
    canonical = {v.number: n for n, v in zip(enum_names(d), _by_number(d))}
    out = {}
    for v in d.values:
        for field, value in v.GetOptions().ListFields():
            if field.full_name == "nearprep.v1.deprecated_spelling":
                for old in value:
                    out[old] = canonical[v.number]
    return out


def _by_number(d):
    return sorted(d.values, key=lambda v: v.number)


def enum_names(enum):
    """{name: number} of a pb2 enum (e.g. pb2.CropMode) in number order:
    each value's proto name in lower case without the prefix all its values
    share ("CROP_MODE_")."""
    d = getattr(enum, "DESCRIPTOR", enum)
    names = [v.name for v in d.values]
    prefix = os.path.commonprefix(names)
    prefix = prefix[:prefix.rfind("_") + 1]
    return {v.name[len(prefix):].lower(): v.number for v in _by_number(d)}


# The request's fields that are not keywords: the dataset (its own
# argument), the sub-messages (their fields are keywords) and the fleet's
# (nearprep.fleet sets them).
_NOT_KEYWORDS = ("dataset", "sample_ids", "manifest_hash", "plan_block_samples")
# Sub-messages whose fields are keywords without the message's name.
_FLATTENED = ("transform", "output", "block_shuffle")
# Keywords that set two fields: a (min, max) pair.
_PAIRS = {"scale": ("scale_min", "scale_max"), "ratio": ("ratio_min", "ratio_max"),
          "saturation": ("saturation_lower", "saturation_upper")}
# Keywords that set a bool field to their negation.
_NEGATED = {"clip": "disable_clip"}
# Defaults that are not the field's zero.
_DEFAULTS = {"batch_size": 32, "num_shards": 1, "height": 224, "width": 224}
_FD = None  # google.protobuf.descriptor.FieldDescriptor, imported lazily
_KEYWORD_FIELDS = {}  # descriptor full name -> (descriptor, _keyword_fields())


def _keyword_fields(pb2):
    """[(keyword, path of the message ("" or "transform"), [field
    descriptors])] in the proto's field order, from the descriptors."""
    cached = _KEYWORD_FIELDS.get(pb2.StreamBatchesRequest.DESCRIPTOR.full_name)
    if cached is not None and cached[0] is pb2.StreamBatchesRequest.DESCRIPTOR:
        return cached[1]
    seconds = {hi for _, hi in _PAIRS.values()}
    pair_of = {lo: kw for kw, (lo, _) in _PAIRS.items()}
    negated = {f: kw for kw, f in _NEGATED.items()}
    out = []

    def walk(desc, path):
        for f in desc.fields:
            if f.message_type is not None and f.name in _FLATTENED and not path:
                walk(f.message_type, f.name)
                continue
            if not path and f.name in _NOT_KEYWORDS:
                continue
            if f.name in seconds:  # the second field of a pair
                continue
            if f.name in pair_of:
                lo, hi = _PAIRS[pair_of[f.name]]
                out.append((pair_of[f.name], path, [f, desc.fields_by_name[hi]]))
            else:
                out.append((negated.get(f.name, f.name), path, [f]))

    walk(pb2.StreamBatchesRequest.DESCRIPTOR, "")
    _KEYWORD_FIELDS[pb2.StreamBatchesRequest.DESCRIPTOR.full_name] = (
        pb2.StreamBatchesRequest.DESCRIPTOR, out)
    return out


def request_keys(pb2):
    """The keyword arguments batches() accepts besides dataset, in the
    proto's field order: derived from the StreamBatchesRequest descriptor."""
    return tuple(k for k, _, _ in _keyword_fields(pb2))


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
    """The number of the value of pb2 enum `enum` (or its descriptor) that
    `value` names (a name of enum_names(), a deprecated one, or the number
    itself)."""
    table = enum_names(enum)
    if isinstance(value, str):
        key = value.lower().replace("-", "_")
        key = deprecated_names(enum).get(key, key)
        if key in table:
            return table[key]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and int(value) in table.values():
        return int(value)
    raise _bad(field, f"must be one of {', '.join(table)}", value)


def _signed(field, value, bits):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _bad(field, "must be an integer", value)
    if not -(1 << (bits - 1)) <= int(value) < (1 << (bits - 1)):
        raise _bad(field, f"must fit the field (int{bits})", value)
    return int(value)


def is_repeated(f):
    """Whether field descriptor `f` is repeated (protobuf 7 has no `label`;
    3.x has no `is_repeated`)."""
    repeated = getattr(f, "is_repeated", None)
    if repeated is not None:
        return repeated
    return f.label == f.LABEL_REPEATED


def _value(path, f, value):
    """`value` converted for field descriptor `f` (path: its name in
    messages), by the field's proto type."""
    global _FD
    if _FD is None:
        from google.protobuf.descriptor import FieldDescriptor as _FD
    if is_repeated(f):
        if f.cpp_type in (_FD.CPPTYPE_FLOAT, _FD.CPPTYPE_DOUBLE):
            return _floats(path, value)
        if f.cpp_type == _FD.CPPTYPE_ENUM:  # a list of names (color_ops)
            items = [value] if isinstance(value, (str, int)) else list(value)
            return [_enum(f"{path}[{i}]", v, f.enum_type) for i, v in enumerate(items)]
        raise TypeError(f"{path}: no keyword conversion for this repeated field")
    t = f.cpp_type
    if t == _FD.CPPTYPE_ENUM:
        return _enum(path, value, f.enum_type)
    if t == _FD.CPPTYPE_BOOL:
        return _bool(path, value)
    if t in (_FD.CPPTYPE_FLOAT, _FD.CPPTYPE_DOUBLE):
        return _float(path, value)
    if t == _FD.CPPTYPE_UINT32:
        return _int(path, value, _U32)
    if t == _FD.CPPTYPE_UINT64:
        return _int(path, value, _U64)
    if t == _FD.CPPTYPE_INT32:
        return _signed(path, value, 32)
    if t == _FD.CPPTYPE_INT64:
        return _signed(path, value, 64)
    if t == _FD.CPPTYPE_STRING and f.type == _FD.TYPE_STRING:
        if not isinstance(value, str):
            raise _bad(path, "must be a str", value)
        return value
    raise TypeError(f"{path}: no keyword conversion for this field")


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
    """Returns a validated nearprep.v1.StreamBatchesRequest. A keyword left
    out or None leaves its field at its default (_DEFAULTS, else 0)."""
    fields = _keyword_fields(pb2)
    keys = [k for k, _, _ in fields]
    unknown = sorted(set(kw) - set(keys))
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]}: unknown argument (accepted: {', '.join(keys)})",
            field=unknown[0])
    if not isinstance(dataset, str) or not dataset:
        raise _bad("dataset", "must be a non-empty string", dataset)
    req = pb2.StreamBatchesRequest()
    req.dataset = dataset
    for k, path, fds in fields:
        msg = req
        if path:
            msg = getattr(req, path)
            msg.SetInParent()
        value = kw.get(k)
        if value is None:
            value = _DEFAULTS.get(k)
        if value is None:
            continue
        names = [f"{path}.{f.name}" if path else f.name for f in fds]
        if k == "resume_token":
            if not isinstance(value, str):
                raise _bad(k, "must be Batch.resume_token (a str)", value)
        if len(fds) == 2:
            lo, hi = _pair(k, names[0], names[1], value)
            setattr(msg, fds[0].name, lo)
            setattr(msg, fds[1].name, hi)
        elif k in _NEGATED:
            setattr(msg, fds[0].name, not _bool(f"{path}.{k}", value))
        elif is_repeated(fds[0]):
            getattr(msg, fds[0].name).extend(_value(names[0], fds[0], value))
        else:
            setattr(msg, fds[0].name, _value(names[0], fds[0], value))
    apply_resume_token(req)
    _check_compression(req.output, pb2)
    return req


def max_batch_message_bytes(req, samples):
    """The largest Batch message a daemon can send for StreamBatchesRequest
    `req` with at most `samples` samples per message, in bytes; None when the
    request names no output size. The C++ client's MaxBatchMessageBytes, the
    same bound: the tensor (3 x height x width elements of output.dtype per
    sample, plus a compression's worst-case growth: 1/64 and 64 KiB), 16 KiB
    per sample for its id, label, drawn parameters and a per-sample error,
    and 1 MiB for the rest."""
    h, w = int(req.transform.height), int(req.transform.width)
    if h == 0 or w == 0:
        return None
    elem = {"DTYPE_UINT8": 1, "DTYPE_FLOAT16": 2, "DTYPE_BFLOAT16": 2}.get(
        type(req).DESCRIPTOR.fields_by_name["output"].message_type
        .fields_by_name["dtype"].enum_type.values_by_number[int(req.output.dtype)].name, 4)
    tensor = int(samples) * h * w * 3 * elem
    return tensor + tensor // 64 + (64 << 10) + int(samples) * (16 << 10) + (1 << 20)


def _check_compression(output, pb2):
    if output.compression and output.dtype != pb2.DTYPE_UINT8:
        raise _bad("output.compression", "requires dtype 'uint8'",
                   output.compression)
    if not output.compression and output.compression_level:
        raise _bad("output.compression_level",
                   "must be 0 without output.compression",
                   output.compression_level)


def token_fields(token):
    """{name: value} of a resume token's fields (after its magic):
    docs/protocol.md "Resume protocol"."""
    return dict(p.split("=", 1) for p in token.split(";")[1:] if "=" in p)


def resume_point(token):
    """(batch, position) a resume token (Batch.resume_token) resumes at.
    The daemon checks the rest of it (that it belongs to this stream)."""
    fields = token_fields(token)
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
