#!/usr/bin/env bash
# Installs nearprep's build and test dependencies (Debian 12 packages only),
# then configures and builds everything into ./build.
#   scripts/setup.sh            install + configure + build
#   NEARPREP_SKIP_APT=1 ...     skip apt-get (packages already there)
#   NEARPREP_SKIP_VENV=1 ...    skip the Python test venv (<build>/venv, from
#                               PyPI: scripts/python_venv.sh); its ctest
#                               entries are then not registered
#   NEARPREP_SKIP_PEERS=1 ...   skip bench/peers's DALI venv (<build>/peers-venv,
#                               scripts/peers_venv.sh); its rows say "not installed"
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake pkg-config git ninja-build
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libturbojpeg0-dev libjpeg62-turbo-dev libjpeg-turbo-progs
  libspdlog-dev libabsl-dev libcli11-dev libyaml-cpp-dev libpng-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libxrt-dev uuid-dev libarchive-dev zlib1g-dev libsystemd-dev systemd libzstd-dev
  libcpp-httplib-dev prometheus
  clang
  python3-grpcio python3-protobuf python3-numpy python3-pytest python3-torch python3-yaml
  python3-kubernetes
  python3-dev pybind11-dev python3-pybind11 python3-venv
  python3-pil python3-torchvision python3-zstandard
)

if [ "${NEARPREP_SKIP_APT:-0}" != "1" ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
JOBS="${NEARPREP_JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${NEARPREP_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$JOBS"

# The Python test venv (PyPI: nearprep's wheel, numpy 2, protobuf, grpcio,
# pytest, tensorflow-cpu; pinned by client/python/constraints.txt). Its ctest
# entries (tests/python/CMakeLists.txt) are registered when it exists at
# configure time: configure again the first time.
if [ "${NEARPREP_SKIP_VENV:-0}" != "1" ]; then
  NEARPREP_BUILD_DIR="$BUILD_DIR" scripts/python_venv.sh
  # bench/peers's DALI venv (<build>/peers-venv, ~490 MB); never fails setup.
  NEARPREP_BUILD_DIR="$BUILD_DIR" scripts/peers_venv.sh
  if ! grep -qs python_venv_ "$BUILD_DIR/tests/python/CTestTestfile.cmake"; then
    cmake -S . -B "$BUILD_DIR" > /dev/null
  fi
fi
