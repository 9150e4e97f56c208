"""Shared fixtures of the Python client tests.

The daemon: $NEARPREPD, else build*/server/daemon/nearprepd under the source
root (the newest one). Tests that need it skip with the reason when it is
missing. The real images: ../shared/datasets/imagenet-sample-200 beside the
checkout (or $NEARPREP_SAMPLE_DATASET); tests that need them skip otherwise.

Generated stubs: found through PYTHONPATH / $NEARPREP_PROTO_PATH (ctest sets
both), else generated once into a cache folder by nearprep._stubs. With
NEARPREP_TEST_INSTALLED=1 the installed nearprep package (and its stubs) is
tested instead of client/python.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The source tree's client first, unless the run tests an installed nearprep
# (NEARPREP_TEST_INSTALLED=1: the venv entries of tests/python/CMakeLists.txt,
# which must import the wheel pip installed, not client/python).
if os.environ.get("NEARPREP_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))

SAMPLE_DIR = os.environ.get("NEARPREP_SAMPLE_DATASET") or os.path.normpath(
    os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-200"))


def _find_daemon():
    env = os.environ.get("NEARPREPD")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = [p for p in glob.glob(os.path.join(ROOT, "build*", "server", "daemon", "nearprepd"))
             if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


NEARPREPD = _find_daemon()


def sample_files(root=SAMPLE_DIR):
    """Relative paths of the sample dataset's images, in sample-id order
    (sorted relative paths) and their labels (index of the sorted class)."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files = []
    for c in classes:
        for f in os.listdir(os.path.join(root, c)):
            if f.lower().endswith((".jpg", ".jpeg")):
                files.append(f"{c}/{f}")
    files.sort()
    labels = [classes.index(f.split("/")[0]) for f in files]
    return files, labels


class Daemon:
    """A nearprepd process serving `datasets` ({name: root})."""

    def __init__(self, workdir, datasets, name="d", workers=2, extra=()):
        self.workdir = os.path.join(str(workdir), name)
        os.makedirs(self.workdir, exist_ok=True)
        self.datasets = datasets
        self.workers = workers
        self.extra = list(extra)
        self.port = 0
        self.proc = None
        self.config = os.path.join(self.workdir, "nearprepd.yaml")
        self.port_file = os.path.join(self.workdir, "port")
        self.log = os.path.join(self.workdir, "nearprepd.log")
        with open(self.config, "w") as f:
            f.write("listen: 127.0.0.1\nlog_level: warn\ndatasets:\n")
            for ds_name, root in datasets.items():
                f.write(f"  - name: {ds_name}\n    format: image_folder\n"
                        f"    root: {root}\n")

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def start(self, port=None, timeout=30.0):
        """Starts on `port` (default: the previous one, or a free one)."""
        port = self.port if port is None else port
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        cmd = [NEARPREPD, "--config", self.config, "--port", str(port),
               "--port-file", self.port_file, "--workers", str(self.workers)] + self.extra
        # E.g. "--decoded-cache-bytes 1G": run a suite against daemons with
        # the decoded-image cache on (its output bytes must not change).
        cmd += os.environ.get("NEARPREP_TEST_DAEMON_ARGS", "").split()
        deadline = time.monotonic() + timeout
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nearprepd exited with {self.proc.returncode}: "
                                   f"{open(self.log, errors='replace').read()[-2000:]}")
            if os.path.exists(self.port_file):
                text = open(self.port_file).read().strip()
                if text:
                    self.port = int(text)
                    return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("nearprepd did not write its port file in time")

    def kill(self):
        """SIGKILL: no drain, connections reset."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def sample_dir():
    if not os.path.isdir(SAMPLE_DIR):
        pytest.skip(f"real images not found at {SAMPLE_DIR} (../shared beside the checkout)")
    return SAMPLE_DIR


@pytest.fixture(scope="session")
def daemon_factory(tmp_path_factory):
    """Starts daemons; all are stopped at the end of the session."""
    if NEARPREPD is None:
        pytest.skip("nearprepd not built (set NEARPREPD or build target nearprepd)")
    started = []
    base = tmp_path_factory.mktemp("daemons")

    def make(datasets, name, **kw):
        d = Daemon(base, datasets, name=name, **kw)
        started.append(d)
        return d

    yield make
    for d in started:  # SIGTERM all, then wait (drains run in parallel)
        if d.proc and d.proc.poll() is None:
            d.proc.send_signal(signal.SIGTERM)
    for d in started:
        d.stop()


@pytest.fixture(scope="session")
def daemon(daemon_factory, sample_dir):
    """One daemon serving the sample dataset as 'sample' for the session."""
    return daemon_factory({"sample": sample_dir}, "main").start()


@pytest.fixture(scope="session")
def decoded(sample_dir):
    """Sample dataset decoded with djpeg -dct fast: list indexed by sample id."""
    if shutil.which("djpeg") is None:
        pytest.skip("djpeg (libjpeg-turbo-progs) not installed")
    from nearprep import reference
    files, _ = sample_files(sample_dir)
    return [reference.decode_jpeg(os.path.join(sample_dir, f)) for f in files]


@pytest.fixture(params=["grpcio", "native"])
def transport(request, monkeypatch):
    """Runs a test once per receive path of the Python client
    (nearprep.transport): every Client the test makes with native=None uses
    it ($NEARPREP_NATIVE). The native run skips when nearprep._native is not
    built, unless $NEARPREP_EXPECT_NATIVE=1 (ctest sets it when CMake built
    the module), where a missing module is a failure."""
    from nearprep import transport as tr
    if request.param == "native" and tr.load_native() is None:
        if os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
            pytest.fail("nearprep._native was built but does not import")
        pytest.skip("nearprep._native not built (pybind11-dev, python3-dev)")
    monkeypatch.setenv("NEARPREP_NATIVE", "1" if request.param == "native" else "0")
    return request.param


def fleet_daemon(tmp, name, root, *, fmt="tfrecord", manifest=None, manifest_check=None,
                 placement=None, node=None, workers=2):
    """A Daemon (not started) serving dataset "ds" of `fmt` from `root`
    (optionally with a fleet manifest, manifest_check, placement and node),
    with a metrics endpoint that metrics_value() reads."""
    metrics_file = str(tmp / f"{name}.metrics-port")
    d = Daemon(tmp, {}, name=name, workers=workers,
               extra=["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", metrics_file])
    d.metrics_file = metrics_file
    with open(d.config, "w") as f:
        f.write("listen: 127.0.0.1\nlog_level: warn\ndatasets:\n")
        f.write(f"  - name: ds\n    format: {fmt}\n    root: {root}\n")
        if manifest:
            f.write(f"    manifest: {manifest}\n")
        if manifest_check:
            f.write(f"    manifest_check: {manifest_check}\n")
        if placement:
            f.write(f"    placement: {placement}\n    node: {node}\n")
    return d


def metrics_value(d, name, labels):
    """The value of sample `name{labels}` on fleet_daemon d's /metrics page."""
    import urllib.request
    port = int(open(d.metrics_file).read().strip())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{want} not on the /metrics page")


def kill_process_groups(procs):
    """Ends subprocesses started with start_new_session=True: SIGKILLs the
    group of each one still running, reaps it, then SIGKILLs its group
    again for children left behind (DataLoader workers)."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
