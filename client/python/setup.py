"""pip install client/python: setuptools plus three steps.

1. build_py generates the gRPC stubs nearprep/v1/nearprep_pb2{,_grpc}.py from
   proto/nearprep/v1/nearprep.proto into the wheel with grpc_tools (the
   pinned grpcio-tools build requirement, whose gencode the runtime
   dependencies in pyproject.toml accept). They are never committed.
2. build_ext builds nearprep._native (the native receive path) by running
   CMake on native/wheel/CMakeLists.txt: the C++ client compiled against the
   system's gRPC C++ / protobuf (Debian: libgrpc++-dev, protobuf-compiler-grpc,
   libprotobuf-dev, libabsl-dev, libzstd-dev, python3-dev, cmake) with pybind11
   from PyPI. When that fails, the wheel is pure Python: a banner says why on
   stderr (`pip install -v` shows it), the wheel carries
   nearprep/NATIVE_MISSING.txt, `import nearprep` warns, and
   nearprep.native_available() is False; the client then receives through
   grpcio. NEARPREP_NATIVE=0 skips the native build, NEARPREP_NATIVE=1 makes
   its failure an error.
3. sdist copies the sources that live outside client/python (the proto, the
   C++ client, common/) into the sdist's _src/, so that the sdist builds on
   its own. Sources are looked up in _src/ first, then in ../../ (a checkout).
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))

# Files outside client/python that the build needs, relative to the
# repository root (the sdist keeps them under _src/ with the same layout).
EXTERNAL_FILES = [
    "proto/nearprep/v1/nearprep.proto",
    "client/cpp/include/nearprep/client.h",
    "client/cpp/src/client.cc",
    "client/cpp/src/batch_decoder.cc",
    "client/cpp/src/batch_decoder.h",
    "common/mutex.h",
    "common/pem.cc",
    "common/pem.h",
    "common/tensor_codec.cc",
    "common/tensor_codec.h",
]
# The native module's own sources (in client/python/native): the CMake
# project compiles them from <src>/client/python/native.
NATIVE_FILES = ["native_module.cc", "receive_buffer_pool.cc", "receive_buffer_pool.h"]


def source_root():
    """The folder holding proto/, client/cpp/, common/: the sdist's _src copy
    or the checkout two levels up."""
    for root in (os.path.join(HERE, "_src"), os.path.normpath(os.path.join(HERE, "..", ".."))):
        if all(os.path.exists(os.path.join(root, f)) for f in EXTERNAL_FILES):
            return root
    return None


def generate_stubs(out_dir):
    root = source_root()
    if root is None:
        sys.exit("nearprep: proto/nearprep/v1/nearprep.proto not found (neither in _src/ "
                 "nor in ../../proto): build from a nearprep checkout or its sdist")
    proto_root = os.path.join(root, "proto")
    proto = os.path.join(proto_root, "nearprep", "v1", "nearprep.proto")
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.exit("nearprep: the build requirement grpcio-tools is missing (build with pip, "
                 "which installs it, or install grpcio-tools)")
    import importlib.resources
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    rc = protoc.main(["protoc", f"-I{include}", f"--proto_path={proto_root}",
                      f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", proto])
    if rc != 0:
        sys.exit(f"nearprep: grpc_tools.protoc failed on {proto} (exit {rc})")
    open(os.path.join(out_dir, "nearprep", "v1", "__init__.py"), "a").close()


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(self.build_lib)


def banner(lines):
    width = max(len(line) for line in lines) + 4
    out = ["", "*" * width] + [f"* {line.ljust(width - 4)} *" for line in lines] + ["*" * width, ""]
    print("\n".join(out), file=sys.stderr, flush=True)


class BuildNative(build_ext):
    """Builds nearprep._native with CMake; on failure, a pure-Python wheel
    that says so."""

    def run(self):
        for ext in self.extensions:
            self.build_extension(ext)

    def build_extension(self, ext):
        out_file = os.path.abspath(self.get_ext_fullpath(ext.name))
        out_dir = os.path.dirname(out_file)
        marker = os.path.join(out_dir, "NATIVE_MISSING.txt")
        os.makedirs(out_dir, exist_ok=True)
        mode = os.environ.get("NEARPREP_NATIVE", "auto")
        if mode == "0":
            reason = "NEARPREP_NATIVE=0 (native build skipped on request)"
        else:
            reason = self.try_cmake(out_dir)
            if reason is None:
                if os.path.exists(marker):
                    os.remove(marker)
                return
        for stale in os.listdir(out_dir):  # from an earlier build in this tree
            if stale.startswith("_native.") and stale.endswith(".so"):
                os.remove(os.path.join(out_dir, stale))
        if mode == "1":
            sys.exit(f"nearprep: the native receive module nearprep._native was not built: "
                     f"{reason}")
        with open(marker, "w") as f:
            f.write(f"nearprep._native was not built when this package was installed: "
                    f"{reason}\n")
        banner(["WARNING: nearprep._native (the native receive path) was NOT built.",
                 f"Reason: {reason}",
                 "nearprep still works, receiving through grpcio (slower, more copies).",
                 "For the native path: apt-get install cmake g++ libgrpc++-dev",
                 "protobuf-compiler-grpc libprotobuf-dev libabsl-dev libzstd-dev python3-dev,",
                 "then reinstall (pip install -v shows the build log)."])

    def try_cmake(self, out_dir):
        """Configures and builds native/wheel; returns None on success or the
        reason it failed."""
        cmake = shutil.which("cmake")
        if cmake is None:
            return "cmake not found on PATH"
        root = source_root()
        if root is None or not all(
                os.path.exists(os.path.join(root, "client", "python", "native", f))
                for f in NATIVE_FILES):
            return "the C++ sources (client/cpp, common, native/) are not in this source tree"
        try:
            import pybind11
        except ImportError:
            return "pybind11 (a build requirement) is not importable"
        build_dir = os.path.abspath(os.path.join(self.build_temp, "nearprep_native"))
        # A build folder left by an older proto is thrown away: its client
        # objects do not all depend on the generated headers, and objects of
        # the old message layout linked with the new ones read garbage.
        import hashlib
        stamp = hashlib.sha256()
        for rel in [f for f in EXTERNAL_FILES if f.endswith(".proto")]:
            path = os.path.join(root, rel)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    stamp.update(f.read())
        stamp_file = os.path.join(build_dir, "nearprep-proto.sha256")
        old_stamp = None
        if os.path.exists(stamp_file):
            with open(stamp_file) as f:
                old_stamp = f.read().strip()
        if old_stamp != stamp.hexdigest() and os.path.isdir(build_dir):
            shutil.rmtree(build_dir)
        os.makedirs(build_dir, exist_ok=True)
        with open(stamp_file, "w") as f:
            f.write(stamp.hexdigest())
        args = [cmake, "-S", os.path.join(HERE, "native", "wheel"), "-B", build_dir,
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DNEARPREP_SRC={root}",
                f"-DNEARPREP_NATIVE_OUT={out_dir}",
                f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        jobs = os.environ.get("NEARPREP_NATIVE_JOBS") or str(min(os.cpu_count() or 1, 8))
        steps = [args, [cmake, "--build", build_dir, "-j", jobs]]
        log = []
        for step in steps:
            print("nearprep: " + " ".join(step), file=sys.stderr, flush=True)
            res = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            sys.stderr.write(res.stdout)
            log.append(res.stdout)
            if res.returncode != 0:
                errors = [line.strip() for line in res.stdout.splitlines()
                          if "Error" in line or "error:" in line or "not found" in line]
                detail = errors[0] if errors else f"exit {res.returncode}"
                return f"{'CMake configure' if step is args else 'compile'} failed: {detail}"
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not os.path.exists(os.path.join(out_dir, "_native" + suffix)):
            return f"CMake built no _native{suffix} in {out_dir}"
        return None

    def get_outputs(self):
        return [self.get_ext_fullpath(ext.name) for ext in self.extensions]


class SdistWithSources(sdist):
    """Copies EXTERNAL_FILES and the native sources into the sdist's _src/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = source_root()
        if root is None:
            sys.exit("nearprep: sdist needs a nearprep checkout (../../proto etc.)")
        wanted = EXTERNAL_FILES + [f"client/python/native/{f}" for f in NATIVE_FILES]
        for rel in wanted:
            dst = os.path.join(base_dir, "_src", rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), dst)


setup(
    ext_modules=[Extension("nearprep._native", sources=[])],
    cmdclass={"build_py": BuildWithStubs, "build_ext": BuildNative,
              "sdist": SdistWithSources},
)
