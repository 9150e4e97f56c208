"""Exceptions raised by the nearprep client.

Every server status maps to one class; INVALID_ARGUMENT is also a ValueError
and NOT_FOUND a LookupError, so callers can catch the builtin they expect.
`field` names the offending request field when known ("transform.height").
"""

import re


class NearprepError(Exception):
    """Base class. `code` is the gRPC status name ("UNAVAILABLE", ...)."""

    code = "UNKNOWN"

    def __init__(self, message, *, code=None, field=None, target=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.field = field
        self.target = target


class InvalidArgumentError(NearprepError, ValueError):
    code = "INVALID_ARGUMENT"


class DatasetNotFoundError(NearprepError, LookupError):
    code = "NOT_FOUND"


class ResourceExhaustedError(NearprepError):
    code = "RESOURCE_EXHAUSTED"


class DataLossError(NearprepError):
    code = "DATA_LOSS"


class UnavailableError(NearprepError, ConnectionError):
    code = "UNAVAILABLE"


class PermissionDeniedError(NearprepError, PermissionError):
    """The daemon's authorization policy does not allow this identity the
    operation on the dataset (the message names both)."""
    code = "PERMISSION_DENIED"


class UnauthenticatedError(NearprepError, PermissionError):
    """The daemon could not establish who is calling (no client certificate
    or bearer token, or a token it does not know)."""
    code = "UNAUTHENTICATED"


class StubsMissingError(NearprepError, ImportError):
    code = "FAILED_PRECONDITION"


_BY_CODE = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "NOT_FOUND": DatasetNotFoundError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "DATA_LOSS": DataLossError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": UnavailableError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": UnauthenticatedError,
}

# "transform.height: must be ..." -> "transform.height"
_FIELD_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)\s*:")


def field_of(message):
    """The request field a server message names, or None."""
    m = _FIELD_RE.match(message or "")
    return m.group(1) if m else None


def from_rpc_error(err, target=None):
    """Maps a grpc.RpcError to the matching NearprepError."""
    try:
        code = err.code().name
        details = err.details() or ""
    except Exception:  # not a call object
        code, details = "UNKNOWN", str(err)
    cls = _BY_CODE.get(code, NearprepError)
    where = f" ({target})" if target else ""
    exc = cls(f"{code}: {details}{where}", code=code, field=field_of(details),
              target=target)
    exc.details = details
    return exc
