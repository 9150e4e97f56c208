"""The pip package (client/python): its version, its declared dependencies,
and, when run against an installed wheel (NEARPREP_TEST_INSTALLED=1: the
venv entries of tests/python/CMakeLists.txt), that the wheel is what is
tested: package, generated stubs and native module all from the install,
numpy/protobuf/grpcio from PyPI, and one batch streamed from nearprepd
through the native path."""

import ast
import os
import re
import sys

import pytest

import nearprep

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PKG_SRC = os.path.join(ROOT, "client", "python")
INSTALLED = os.environ.get("NEARPREP_TEST_INSTALLED") == "1"


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*nearprep\s+VERSION\s+([0-9.]+)", f.read())
    assert m, "top CMakeLists.txt: project(nearprep VERSION ...) not found"
    return m.group(1)


def pyproject():
    with open(os.path.join(PKG_SRC, "pyproject.toml")) as f:
        return f.read()


def declared_dependencies():
    text = pyproject()
    block = re.search(r"^dependencies = \[(.*?)\]", text, re.S | re.M).group(1)
    return re.findall(r'"([^"]+)"', block)


def test_version_equals_the_cpp_project_version():
    assert nearprep.__version__ == cmake_version()
    # pip's metadata takes it from nearprep.__version__ (one source).
    assert 'dynamic = ["version"]' in pyproject()
    assert re.search(r'version = \{ attr = "nearprep.__version__" \}', pyproject())
    if INSTALLED:
        from importlib.metadata import version
        assert version("nearprep") == nearprep.__version__


# Top-level imports of the package's modules -> the PyPI distribution that
# provides them. Optional adapters (tf, torch) are extras, not dependencies.
DISTRIBUTION = {"grpc": "grpcio", "google": "protobuf", "numpy": "numpy",
                "zstandard": "zstandard"}
OPTIONAL = {"tensorflow", "torch", "grpc_tools"}


def test_every_runtime_import_is_a_declared_dependency():
    declared = {re.split(r"[<>=!~ ;\[]", d)[0].lower() for d in declared_dependencies()}
    stdlib = set(sys.stdlib_module_names)
    pkg = os.path.join(PKG_SRC, "nearprep")
    needed = set()
    for name in os.listdir(pkg):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(pkg, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top in stdlib or top == "nearprep" or top in OPTIONAL:
                    continue
                assert top in DISTRIBUTION, f"{name} imports {mod}: which distribution?"
                needed.add(DISTRIBUTION[top])
    needed.add("protobuf")  # the generated stubs import google.protobuf
    assert needed <= declared, f"undeclared: {sorted(needed - declared)}"


def test_protobuf_lower_bound_accepts_the_stub_gencode():
    """The stubs in the wheel come from the pinned grpcio-tools; protobuf's
    runtime refuses gencode newer than itself, so the declared lower bound
    must be at least the gencode's version (and grpcio's at least the
    generator's)."""
    text = pyproject()
    tools = re.search(r'"grpcio-tools==([0-9.]+)"', text).group(1)
    deps = {re.split(r"[<>=!~ ;]", d)[0]: d for d in declared_dependencies()}
    assert re.search(rf"grpcio>={re.escape(tools)}\b", deps["grpcio"]), deps["grpcio"]
    if not INSTALLED:
        pytest.skip("the gencode header is checked against an installed wheel")
    from nearprep import _stubs
    pb2, pb2_grpc = _stubs.load()
    with open(pb2.__file__) as f:
        gencode = re.search(r"# Protobuf Python Version: ([0-9.]+)", f.read()).group(1)
    low = re.search(r"protobuf>=([0-9.]+)", deps["protobuf"]).group(1)
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(low) >= as_tuple(gencode), (low, gencode)
    with open(pb2_grpc.__file__) as f:
        assert f"GRPC_GENERATED_VERSION = '{tools}'" in f.read()


@pytest.mark.skipif(not INSTALLED, reason="checks an installed wheel (NEARPREP_TEST_INSTALLED=1)")
def test_installed_wheel_is_what_runs():
    import google.protobuf
    import grpc
    import numpy as np
    pkg = os.path.dirname(os.path.abspath(nearprep.__file__))
    assert pkg.startswith(os.path.realpath(sys.prefix)) or pkg.startswith(sys.prefix), pkg
    assert not pkg.startswith(PKG_SRC), "imported client/python, not the wheel"
    from nearprep import _stubs
    pb2, pb2_grpc = _stubs.load()
    for mod in (pb2, pb2_grpc):
        assert os.path.dirname(os.path.dirname(mod.__file__)) == pkg, mod.__file__
    assert nearprep.native_available(), nearprep.native_missing_reason()
    from nearprep import _native
    assert os.path.dirname(_native.__file__) == pkg, _native.__file__
    assert not os.path.exists(os.path.join(pkg, "NATIVE_MISSING.txt"))
    # PyPI's, not Debian's (numpy 1.24, protobuf 3.21, grpcio 1.51).
    assert int(np.__version__.split(".")[0]) >= 2, np.__version__
    assert int(google.protobuf.__version__.split(".")[0]) >= 5, google.protobuf.__version__
    assert tuple(int(x) for x in grpc.__version__.split(".")[:2]) >= (1, 71), grpc.__version__
    assert "dist-packages" not in np.__file__ and "dist-packages" not in grpc.__file__


@pytest.mark.skipif(not INSTALLED, reason="checks an installed wheel (NEARPREP_TEST_INSTALLED=1)")
def test_installed_wheel_streams_a_batch_natively(daemon, monkeypatch):
    monkeypatch.delenv("NEARPREP_NATIVE", raising=False)
    from nearprep import transport as tr
    c = nearprep.Client(daemon.target, native=True)
    assert isinstance(c._transport, tr.NativeTransport)
    got = list(c.batches("sample", batch_size=8, seed=3, max_batches=1, height=16, width=16))
    assert len(got) == 1
    b = got[0]
    assert b.images.shape == (8, 16, 16, 3) and len(b.labels) == 8
    assert b.images.dtype.name == "float32"
    assert len(set(int(s) for s in b.sample_ids)) == 8


def test_stub_cache_is_per_protobuf_runtime(monkeypatch):
    """Stubs generated into ~/.cache for one protobuf runtime (a venv's 7.x)
    must not be loaded by another (Debian's 3.21): one folder per runtime."""
    import google.protobuf
    from nearprep import _stubs
    if not os.path.exists(_stubs.SOURCE_PROTO):
        pytest.skip("the stub cache is used from a source checkout only")
    monkeypatch.setattr(google.protobuf, "__version__", "3.21.12")
    debian = _stubs._cache_dir()
    monkeypatch.setattr(google.protobuf, "__version__", "7.36.2")
    pypi = _stubs._cache_dir()
    assert debian != pypi


@pytest.mark.skipif(not INSTALLED, reason="checks an installed wheel (NEARPREP_TEST_INSTALLED=1)")
def test_native_module_beside_tensorflow(daemon):
    """TensorFlow's wheel bundles its own protobuf/gRPC/Abseil; the native
    module links the system's. Both in one process (TF imported first, as a
    TF user does) must still stream."""
    import importlib.util
    import subprocess
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed in this environment")
    code = (
        "import tensorflow as tf, nearprep\n"
        "from nearprep import transport as tr\n"
        f"c = nearprep.Client({daemon.target!r}, native=True)\n"
        "assert isinstance(c._transport, tr.NativeTransport)\n"
        "b = next(iter(c.batches('sample', batch_size=4, max_batches=1, height=8, width=8)))\n"
        "t = tf.constant(b.images)\n"
        "assert t.shape == (4, 8, 8, 3), t.shape\n"
        "print('ok', tf.__version__)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, cwd="/")
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr[-3000:]
