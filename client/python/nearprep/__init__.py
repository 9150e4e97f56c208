"""nearprep: Python client of nearprepd, the near-storage image preprocessor.

    import nearprep
    client = nearprep.Client("storage-node:7070")
    for batch in client.batches("imagenet", batch_size=64, seed=1, shuffle=True,
                                flip_probability=0.5):
        batch.images   # numpy array over the message bytes (no copy)
        batch.labels   # int64 numpy array
    print(client.stats().summary())

Submodules: nearprep.reference (numpy TF pipeline), nearprep.tf (tf.data
adapter), nearprep.torch (PyTorch IterableDataset), nearprep.plan (epoch plan).

The generated protobuf/gRPC modules (nearprep.v1.nearprep_pb2, *_pb2_grpc) are
not part of the source tree: the build writes them to <build>/python/nearprep/v1
(`cmake --build build --target nearprep_python_stubs`), and pip install runs
protoc. This package extends its own __path__ with every `nearprep` folder on
sys.path or in $NEARPREP_PROTO_PATH (os.pathsep-separated) that holds them, so
`PYTHONPATH=client/python:build/python` is all a source-tree user needs.
"""

import os as _os
import sys as _sys


def _extend_path():
    roots = []
    env = _os.environ.get("NEARPREP_PROTO_PATH", "")
    roots.extend(p for p in env.split(_os.pathsep) if p)
    roots.extend(p for p in _sys.path if isinstance(p, str))
    for root in roots:
        candidate = _os.path.join(root or ".", "nearprep")
        if (_os.path.isfile(_os.path.join(candidate, "v1", "nearprep_pb2.py"))
                and _os.path.abspath(candidate) not in
                [_os.path.abspath(p) for p in __path__]):
            __path__.append(candidate)


_extend_path()

from nearprep.errors import (  # noqa: E402
    NearprepError, InvalidArgumentError, DatasetNotFoundError,
    ResourceExhaustedError, DataLossError, UnavailableError, StubsMissingError,
    PermissionDeniedError, UnauthenticatedError)
from nearprep.batch import Batch, SampleParams, CropBox, bfloat16_to_float32  # noqa: E402
from nearprep.stats import Stats  # noqa: E402
from nearprep.client import BatchStream, Client, Connection, WaitInfo  # noqa: E402
from nearprep.dataset_info import DatasetInfo  # noqa: E402

__version__ = "0.1.0"


def native_available():
    """True when nearprep._native, the native receive module, imports (pip
    builds it when the system has gRPC C++; the CMake build writes it to
    <build>/python/nearprep). False means the client receives through grpcio;
    native_missing_reason() says why."""
    from nearprep import transport as _transport
    return _transport.load_native() is not None


def native_missing_reason():
    """Why nearprep._native is missing: the reason pip's build recorded in
    NATIVE_MISSING.txt, or a generic line; None when it is available."""
    if native_available():
        return None
    try:
        with open(_os.path.join(_os.path.dirname(__file__), "NATIVE_MISSING.txt")) as f:
            return f.read().strip()
    except OSError:
        return "nearprep._native is not built (not in this package nor on NEARPREP_PROTO_PATH)"


def _warn_native_missing():
    # pip hides a successful build's output: a wheel built without the native
    # module (setup.py writes NATIVE_MISSING.txt) says so here instead.
    if _os.path.exists(_os.path.join(_os.path.dirname(__file__), "NATIVE_MISSING.txt")):
        import warnings
        warnings.warn(native_missing_reason() + " -- the client receives through grpcio; "
                      "see docs/python.md", RuntimeWarning, stacklevel=2)


_warn_native_missing()

__all__ = [
    "Client", "BatchStream", "Connection", "WaitInfo", "DatasetInfo", "Batch", "SampleParams", "CropBox", "Stats",
    "bfloat16_to_float32", "NearprepError", "InvalidArgumentError",
    "DatasetNotFoundError", "ResourceExhaustedError", "DataLossError",
    "UnavailableError", "StubsMissingError", "PermissionDeniedError",
    "UnauthenticatedError", "native_available",
    "native_missing_reason",
]
