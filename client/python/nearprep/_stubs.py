"""Loads the generated nearprep.v1 protobuf/gRPC modules.

Order: an importable nearprep.v1.nearprep_pb2 (the build tree's
<build>/python on sys.path or $NEARPREP_PROTO_PATH, or an installed wheel);
otherwise, in a source checkout with protoc and grpc_python_plugin (Debian:
protobuf-compiler, protobuf-compiler-grpc) or grpc_tools available, the stubs
are generated into a per-user cache folder once and loaded from there.

Thread-safety: load() is idempotent; call it from any thread.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import threading

from nearprep.errors import StubsMissingError

_lock = threading.Lock()
_loaded = None

HERE = os.path.dirname(os.path.abspath(__file__))
# client/python/nearprep -> repository root.
SOURCE_PROTO = os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "proto", "nearprep", "v1", "nearprep.proto"))


def generate(proto_file, out_dir):
    """Runs protoc on proto_file (…/proto/nearprep/v1/nearprep.proto) and
    writes nearprep/v1/nearprep_pb2{,_grpc}.py under out_dir. Returns True on
    success."""
    proto_root = os.path.dirname(os.path.dirname(os.path.dirname(proto_file)))
    os.makedirs(out_dir, exist_ok=True)
    args = [f"--proto_path={proto_root}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", proto_file]
    try:
        from grpc_tools import protoc as grpc_protoc  # PyPI grpcio-tools
        return grpc_protoc.main(["protoc"] + args) == 0
    except ImportError:
        pass
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin") or (
        "/usr/bin/grpc_python_plugin" if os.path.exists("/usr/bin/grpc_python_plugin")
        else None)
    if not protoc or not plugin:
        return False
    res = subprocess.run([protoc, f"--plugin=protoc-gen-grpc_python={plugin}"] + args,
                         capture_output=True, text=True)
    return res.returncode == 0


def _cache_dir():
    with open(SOURCE_PROTO, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    # One folder per protobuf runtime too: stubs that grpcio-tools made for a
    # venv's protobuf 7 do not load under Debian's protobuf 3.21, and the
    # reverse is not guaranteed either.
    try:
        import google.protobuf
        runtime = google.protobuf.__version__
    except ImportError:
        runtime = "none"
    return os.path.join(base, "nearprep", f"stubs-{digest}-protobuf{runtime}")


def _try_import():
    from nearprep.v1 import nearprep_pb2, nearprep_pb2_grpc  # noqa: F401
    return nearprep_pb2, nearprep_pb2_grpc


def load():
    """Returns (nearprep_pb2, nearprep_pb2_grpc)."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        try:
            _loaded = _try_import()
            return _loaded
        except ImportError as first:
            error = first
        import nearprep
        if os.path.exists(SOURCE_PROTO):
            cache = _cache_dir()
            pkg = os.path.join(cache, "nearprep")
            if not os.path.exists(os.path.join(pkg, "v1", "nearprep_pb2_grpc.py")):
                tmp = f"{cache}.tmp{os.getpid()}"
                if generate(SOURCE_PROTO, tmp):
                    os.makedirs(os.path.dirname(cache), exist_ok=True)
                    try:
                        os.rename(tmp, cache)
                    except OSError:  # another process won the race
                        shutil.rmtree(tmp, ignore_errors=True)
            if os.path.exists(os.path.join(pkg, "v1", "nearprep_pb2_grpc.py")):
                if pkg not in nearprep.__path__:
                    nearprep.__path__.append(pkg)
                sys.modules.pop("nearprep.v1", None)
                try:
                    _loaded = _try_import()
                    return _loaded
                except ImportError as second:
                    error = second
        raise StubsMissingError(
            "nearprep's generated gRPC stubs (nearprep.v1.nearprep_pb2) are not "
            "importable: run `cmake --build build --target nearprep_python_stubs` "
            "and add build/python to PYTHONPATH (or NEARPREP_PROTO_PATH), or "
            f"`pip install client/python` ({error})") from error
