"""The decoded-image cache through the daemon (issue 32): a nearprepd with
--decoded-cache-bytes serves the same bytes as one without, epoch after
epoch (TF_COMPAT and TORCHVISION), its metrics count the hits per dataset, a
file replaced in place is served with its new pixels at once, and two
datasets keep their own entries."""

import os
import re
import shutil
import time
import urllib.request

import numpy as np
import pytest

import nearprep
from conftest import sample_files

N = 16  # images per dataset

TF = dict(height=48, width=40, crop="random_resized", flip_probability=0.5,
          brightness_max_delta=32 / 255, saturation=(0.5, 1.5), dtype="float32")
TV = dict(fidelity="torchvision", height=40, width=40, crop="random_resized",
          flip_probability=0.5, dtype="uint8", layout="NCHW")


def _metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(nearprep_decoded_cache_\w+)\{([^}]*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = (m.group(1), labels.get("dataset"), labels.get("kind"))
            out[key] = float(m.group(3))
    return out


def _epoch(client, dataset, epoch, kw):
    images, labels = [], []
    for b in client.batches(dataset, seed=5, epoch=epoch, batch_size=5, **kw):
        images.append(np.array(b.images, copy=True))
        labels.append(np.array(b.labels, copy=True))
    return np.concatenate(images), np.concatenate(labels)


@pytest.fixture(scope="module")
def roots(tmp_path_factory, sample_dir):
    files, _ = sample_files(sample_dir)
    out = {}
    for name, part in (("a", files[:N]), ("b", files[N:2 * N])):
        root = tmp_path_factory.mktemp(f"dcache_{name}")
        os.makedirs(root / "x")
        for i, f in enumerate(part):
            shutil.copy(os.path.join(sample_dir, f), root / "x" / f"{i:02d}.jpg")
        out[name] = str(root)
    out["spare"] = os.path.join(sample_dir, files[2 * N])
    return out


@pytest.fixture(scope="module")
def daemons(daemon_factory, roots, tmp_path_factory):
    port_file = str(tmp_path_factory.mktemp("dcache") / "mport")
    datasets = {"a": roots["a"], "b": roots["b"]}
    cached = daemon_factory(datasets, "dcache_on", workers=1,
                            extra=["--decoded-cache-bytes", "64M",
                                   "--metrics-listen", "127.0.0.1:0",
                                   "--metrics-port-file", port_file]).start()
    for _ in range(500):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.02)
    cached.metrics_port = int(open(port_file).read().strip())
    plain = daemon_factory(datasets, "dcache_off", workers=1).start()
    return cached, plain


def test_cached_daemon_serves_the_same_bytes_and_counts_hits(daemons):
    cached, plain = daemons
    c_on, c_off = nearprep.Client(cached.target), nearprep.Client(plain.target)
    assert "decoded-image cache" in c_on.info().backend_detail
    for kw in (TF, TV):
        for epoch in range(3):
            for ds in ("a", "b"):
                got, got_labels = _epoch(c_on, ds, epoch, kw)
                want, want_labels = _epoch(c_off, ds, epoch, kw)
                assert got.shape[0] == N
                assert np.array_equal(got_labels, want_labels)
                assert got.tobytes() == want.tobytes(), (kw.get("fidelity"), epoch, ds)
    m = _metrics(cached.metrics_port)
    for ds in ("a", "b"):
        # Two styles (TensorFlow's, Pillow's) x N images, decoded once each;
        # every later epoch hits.
        assert m[("nearprep_decoded_cache_admitted_total", ds, None)] == 2 * N
        assert m[("nearprep_decoded_cache_lookups_total", ds, "miss")] == 2 * N
        assert m[("nearprep_decoded_cache_lookups_total", ds, "hit")] == 2 * 2 * N
        assert m[("nearprep_decoded_cache_entries", ds, None)] == 2 * N
        held = m[("nearprep_decoded_cache_bytes", ds, None)]
        assert 0 < held <= m[("nearprep_decoded_cache_budget_bytes", ds, None)]
        assert m[("nearprep_decoded_cache_budget_bytes", ds, None)] == 32 << 20


def test_file_replaced_in_place_is_served_with_its_new_pixels(daemons, roots):
    cached, plain = daemons
    c_on, c_off = nearprep.Client(cached.target), nearprep.Client(plain.target)
    before, _ = _epoch(c_on, "a", 7, TF)  # every image of "a" cached by now
    shutil.copy(roots["spare"], os.path.join(roots["a"], "x", "03.jpg"))
    got, _ = _epoch(c_on, "a", 7, TF)
    want, _ = _epoch(c_off, "a", 7, TF)
    assert got.tobytes() == want.tobytes()
    assert got.tobytes() != before.tobytes()  # the replaced image changed
    m = _metrics(cached.metrics_port)
    assert m[("nearprep_decoded_cache_stale_total", "a", None)] == 1
    assert m[("nearprep_decoded_cache_stale_total", "b", None)] == 0


CLI = os.environ.get("NEARPREP_CLI")


def test_info_reports_the_cache_as_the_metrics_do(daemon_factory, roots, tmp_path):
    """ServerInfo.decoded_cache (Python's Client.info() and `nearprep info`)
    carries the figures of the metrics endpoint, per dataset a stream read."""
    port_file = str(tmp_path / "mport")
    d = daemon_factory({"a": roots["b"], "b": roots["b"]}, "dcache_info", workers=1,
                       extra=["--decoded-cache-bytes", "64M",
                              "--metrics-listen", "127.0.0.1:0",
                              "--metrics-port-file", port_file]).start()
    for _ in range(500):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.02)
    mport = int(open(port_file).read().strip())
    c = nearprep.Client(d.target)
    assert list(c.info().decoded_cache) == []  # nothing asked yet
    _epoch(c, "a", 0, TF)  # N misses, N admitted
    for b in c.batches("a", seed=5, epoch=1, batch_size=5, max_batches=2, **TF):
        pass  # 10 hits
    m = _metrics(mport)
    info = list(c.info().decoded_cache)
    assert [x.dataset for x in info] == ["a"]  # "b" was never streamed
    got = info[0]
    assert (got.hits, got.misses, got.admitted) == (10, N, N)
    for field, name, kind in (("hits", "lookups_total", "hit"),
                              ("misses", "lookups_total", "miss"),
                              ("admitted", "admitted_total", None),
                              ("evicted", "evicted_total", None),
                              ("stale", "stale_total", None),
                              ("bytes", "bytes", None),
                              ("entries", "entries", None),
                              ("budget_bytes", "budget_bytes", None)):
        assert getattr(got, field) == m[(f"nearprep_decoded_cache_{name}", "a", kind)], field
    assert got.entries == N and 0 < got.bytes <= got.budget_bytes == 32 << 20
    if not CLI:
        pytest.skip("NEARPREP_CLI not set: the CLI half not run")
    import subprocess
    out = subprocess.run([CLI, "info", "--target", d.target], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    line = re.search(r"decoded cache a: hits (\d+), misses (\d+) \(hit rate ([\d.]+)\), "
                     r"admitted (\d+), evicted (\d+) \(stale (\d+)\),\s+(\d+) entries, "
                     r"(\d+) of (\d+) bytes", out)
    assert line, out
    assert [int(line.group(i)) for i in (1, 2, 4, 5, 6, 7, 8, 9)] == [
        got.hits, got.misses, got.admitted, got.evicted, got.stale, got.entries,
        got.bytes, got.budget_bytes]
    assert float(line.group(3)) == pytest.approx(10 / (10 + N), abs=1e-3)
    assert "decoded cache b" not in out


def test_info_without_a_cache_lists_none(daemons):
    _, plain = daemons
    c = nearprep.Client(plain.target)
    _epoch(c, "a", 0, TF)
    assert list(c.info().decoded_cache) == []
