"""One version everywhere (issue 20, item 13): the project() VERSION of the
top CMakeLists.txt is what `nearprepd --version`, `nearprep --version`,
`nearprep info`, GetServerInfo, the nearprep_build_info metric, the
container image's label (scripts/container_build.sh) and the Python
package's __version__ say."""

import os
import re
import subprocess

import pytest

import nearprep
from conftest import NEARPREPD, ROOT, Daemon
from test_cli_stream import CLI


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"^project\(nearprep VERSION ([0-9.]+)", f.read(), re.M)
    assert m, "no project(nearprep VERSION ...) in CMakeLists.txt"
    return m.group(1)


def test_python_package_version_is_the_project_version():
    assert nearprep.__version__ == project_version()


@pytest.mark.skipif(not NEARPREPD, reason="nearprepd not built")
def test_nearprepd_version_flag():
    r = subprocess.run([NEARPREPD, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"nearprepd {project_version()}"
    assert "--version" in subprocess.run([NEARPREPD, "--help"], capture_output=True,
                                         text=True, timeout=30).stdout


@pytest.mark.skipif(not CLI, reason="nearprep CLI not built")
def test_nearprep_version_flag():
    r = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"nearprep {project_version()}"


def test_container_label_is_the_project_version():
    """The image's org.opencontainers.image.version label is the build
    argument NEARPREP_VERSION, which container_build.sh computes with its
    VERSION= line: run that line."""
    with open(os.path.join(ROOT, "scripts", "container_build.sh")) as f:
        script = f.read()
    line = next(l for l in script.splitlines() if l.startswith("VERSION="))
    assert '--build-arg "NEARPREP_VERSION=$VERSION"' in script
    out = subprocess.run(["bash", "-c", f"{line}; echo \"$VERSION\""], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == project_version()
    with open(os.path.join(ROOT, "deploy", "container", "Dockerfile")) as f:
        dockerfile = f.read()
    assert 'org.opencontainers.image.version="${NEARPREP_VERSION}"' in dockerfile


@pytest.mark.skipif(not (NEARPREPD and CLI), reason="nearprepd or nearprep CLI not built")
def test_info_server_info_and_build_info_say_the_same(tmp_path, sample_dir):
    v = project_version()
    mfile = str(tmp_path / "metrics-port")
    d = Daemon(tmp_path, {"sample": sample_dir},
               extra=["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mfile])
    d.metrics_file = mfile
    d.start()
    try:
        r = subprocess.run([CLI, "info", "--target", d.target], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0].startswith(f"nearprepd {v} at {d.target}"), r.stdout
        assert f"nearprep {v}" in r.stdout.splitlines()[0]
        with nearprep.Client(d.target) as c:
            assert c.info().version == v
        import urllib.request
        port = int(open(mfile).read().strip())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            text = page.read().decode()
        info = [l for l in text.splitlines() if l.startswith("nearprep_build_info{")]
        assert len(info) == 1 and f'version="{v}"' in info[0] and info[0].endswith(" 1"), info
    finally:
        d.stop()
