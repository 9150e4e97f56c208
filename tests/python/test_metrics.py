"""nearprepd's Prometheus endpoint (--metrics-listen) against a real daemon:
the exposition parses and passes `promtool check metrics`, and the counters
and histograms move as batches are streamed, refused and failed."""

import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import nearprep
from conftest import NEARPREPD, sample_files

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset(labels)): value}, and {name: type} from # TYPE."""
    values, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, f"not an exposition line: {line!r}"
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        key = (m.group(1), labels)
        assert key not in values, f"duplicate series {key}"
        values[key] = float(m.group(4))
    return values, types


def value(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def wait_for_file(path, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read().strip())
        assert proc.poll() is None, "nearprepd exited"
        time.sleep(0.02)
    raise AssertionError(f"{path} not written in time")


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory, sample_dir):
    """A small dataset: 6 real JPEGs and 2 files that are not JPEGs."""
    root = tmp_path_factory.mktemp("mixed")
    files, _ = sample_files(sample_dir)
    os.makedirs(root / "a")
    for i, f in enumerate(files[:6]):
        shutil.copy(os.path.join(sample_dir, f), root / "a" / f"img{i}.jpg")
    (root / "a" / "bad0.jpg").write_bytes(b"not a jpeg at all")
    (root / "a" / "bad1.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    return str(root)


@pytest.fixture(scope="module")
def metrics_daemon(daemon_factory, sample_dir, mixed_dir, tmp_path_factory):
    port_file = str(tmp_path_factory.mktemp("metrics") / "metrics_port")
    d = daemon_factory({"sample": sample_dir, "mixed": mixed_dir}, "metrics",
                       extra=["--metrics-listen", "127.0.0.1:0",
                              "--metrics-port-file", port_file]).start()
    d.metrics_port = wait_for_file(port_file, d.proc)
    return d


def test_metrics_move_and_pass_promtool(metrics_daemon, tmp_path):
    d = metrics_daemon
    status, ctype, text0 = get(d.metrics_port, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4")
    before, types = parse(text0)

    c = nearprep.Client(d.target)
    got = list(c.batches("sample", batch_size=10, max_batches=5, height=32, width=32))
    assert sum(len(b) for b in got) == 50
    mixed = list(c.batches("mixed", batch_size=3, height=16, width=16))
    assert sum(len(b) for b in mixed) == 6
    with pytest.raises(nearprep.InvalidArgumentError):
        list(c.batches("sample", batch_size=4, max_batches=1, height=0, width=32))

    # The daemon finishes a stream's bookkeeping (streams_active, the last
    # send's histogram) after the client has its last message: scrape until
    # it has (at most 10 s).
    deadline = time.monotonic() + 10
    while True:
        _, _, text = get(d.metrics_port, "/metrics")
        after, types = parse(text)
        if value(after, "nearprep_streams_active") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)

    def delta(name, **labels):
        return value(after, name, **labels) - before.get(
            (name, frozenset(labels.items())), 0.0)

    assert delta("nearprep_batches_sent_total", dataset="sample") == 5
    assert delta("nearprep_samples_sent_total", dataset="sample") == 50
    assert delta("nearprep_samples_sent_total", dataset="mixed") == 6
    assert delta("nearprep_batches_sent_total", dataset="mixed") == 2
    assert delta("nearprep_sent_bytes_total", dataset="sample") >= 50 * 32 * 32 * 3
    assert delta("nearprep_streams_started_total") == 2
    assert delta("nearprep_dataset_streams_started_total", dataset="mixed") == 1
    assert delta("nearprep_streams_rejected_total") == 1
    assert delta("nearprep_errors_total", kind="request") == 1
    assert delta("nearprep_errors_total", kind="decode") == 2
    assert delta("nearprep_errors_total", kind="io") == 0
    assert delta("nearprep_samples_failed_total") == 2
    assert delta("nearprep_samples_processed_total") >= 56
    assert value(after, "nearprep_streams_active") == 0
    assert value(after, "nearprep_draining") == 0
    assert value(after, "nearprep_worker_pool_workers") == 2
    assert delta("nearprep_worker_pool_busy_seconds_total") > 0
    assert value(after, "nearprep_build_info", version=c.info().version, backend="cpu") == 1
    # Every processed sample has its stage times; every sent batch its
    # queue wait and send time.
    for h in ("nearprep_sample_read_seconds", "nearprep_sample_decode_seconds",
              "nearprep_sample_transform_seconds"):
        assert types[h] == "histogram"
        assert delta(h + "_count") >= 58, h
        assert delta(h + "_sum") > 0 or h == "nearprep_sample_read_seconds", h
    assert delta("nearprep_sample_read_size_bytes_count") >= 58
    assert delta("nearprep_batch_queue_wait_seconds_count") >= 7
    assert delta("nearprep_batch_send_seconds_count") == 7
    # One Next per sent batch plus the end of each stream.
    assert delta("nearprep_stream_next_wait_seconds_count") >= 9
    assert delta("nearprep_batch_size_bytes_count") == 7
    # The cpu backend reads everything buffered.
    assert delta("nearprep_backend_reads_total", backend="cpu", kind="buffered") >= 58
    assert value(after, "nearprep_backend_reads_total", backend="cpu", kind="p2p") == 0
    assert value(after, "nearprep_backend_fallbacks_total", backend="cpu") == 0
    # Histogram buckets are cumulative and end at the count.
    for h in [n for n, t in types.items() if t == "histogram"]:
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items()
                          if k[0] == h + "_bucket"), key=lambda x: x[0])
        assert buckets and buckets[-1][0] == float("inf"), h
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), h
        assert counts[-1] == value(after, h + "_count"), h
    # process_* as the official clients name them.
    assert value(after, "process_resident_memory_bytes") > 1e6
    assert value(after, "process_open_fds") > 3
    assert value(after, "process_cpu_seconds_total") > 0
    assert abs(value(after, "process_start_time_seconds") - time.time()) < 3600
    # Labels stay bounded: dataset, backend, kind (+ le, version of build_info,
    # decision of nearprep_authz_decisions_total: allow, deny, unauthenticated).
    for name, labels in after:
        assert {k for k, _ in labels} <= {"dataset", "backend", "kind", "le", "version",
                                          "decision"}, name

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus): "
                    "the exposition was parsed but not linted")
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       capture_output=True)
    assert p.returncode == 0, (p.stdout + p.stderr).decode()
    # The check can fail: a counter without _total and a duplicate series.
    bad = text + "# HELP bad_counter x\n# TYPE bad_counter counter\nbad_counter 1\n"
    p = subprocess.run([promtool, "check", "metrics"], input=bad.encode(),
                       capture_output=True)
    assert p.returncode != 0


def test_healthz_and_unknown_paths(metrics_daemon):
    status, _, body = get(metrics_daemon.metrics_port, "/healthz")
    assert status == 200 and body == "ok\n"
    with pytest.raises(urllib.error.HTTPError) as e:
        get(metrics_daemon.metrics_port, "/nope")
    assert e.value.code == 404


def test_bad_metrics_listen_is_a_config_error(tmp_path, sample_dir):
    if NEARPREPD is None:
        pytest.skip("nearprepd not built")
    for bad in ("9464", "127.0.0.1:99999", "::1:9464", "host:x"):
        p = subprocess.run([NEARPREPD, "--dataset", f"s={sample_dir}", "--port", "0",
                            "--metrics-listen", bad], capture_output=True, timeout=30)
        assert p.returncode == 2, (bad, p.stderr)
        assert b"metrics.listen" in p.stderr, p.stderr


def test_metrics_port_in_use_exits_1(metrics_daemon, sample_dir):
    p = subprocess.run([NEARPREPD, "--dataset", f"s={sample_dir}", "--listen", "127.0.0.1",
                        "--port", "0", "--metrics-listen",
                        f"127.0.0.1:{metrics_daemon.metrics_port}"],
                       capture_output=True, timeout=30)
    assert p.returncode == 1, p.stderr
    assert b"metrics: cannot listen" in p.stderr, p.stderr


# --- The endpoint under hostile clients (issue 23, items 3 and 4) ----------

import resource
import socket
import threading


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def scrape_values(port):
    status, _, text = get(port, "/metrics")
    assert status == 200
    return parse(text)[0]


def test_huge_headers_get_431_and_do_not_grow_memory(metrics_daemon):
    """One GET followed by up to 64 MB of short header lines ("Xn: v"): the
    daemon answers 431 once past its limits and stops reading; its RSS does
    not grow by the headers (cpp-httplib kept them all: +143 MB)."""
    d = metrics_daemon
    get(d.metrics_port, "/metrics")  # the scrape path's own memory first
    before = rss_bytes(d.proc.pid)
    chunk = "".join(f"X{i}: v\r\n" for i in range(100_000)).encode()  # ~1 MB
    s = socket.create_connection(("127.0.0.1", d.metrics_port), timeout=20)
    sent = [0]

    def send():
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            for _ in range(64):
                s.sendall(chunk)
                sent[0] += len(chunk)
            s.sendall(b"\r\n")
        except OSError:
            pass  # the daemon closed the connection: expected

    t = threading.Thread(target=send, daemon=True)
    t.start()
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = s.recv(65536)
        if not data:
            break
        answer += data
    t.join(30)
    s.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    grown = rss_bytes(d.proc.pid) - before
    assert grown < 16 << 20, f"RSS grew by {grown >> 20} MB ({sent[0] >> 20} MB sent)"
    # The daemon still serves, and counted the refusal.
    values = scrape_values(d.metrics_port)
    assert value(values, "nearprep_metrics_http_requests_rejected_total",
                 kind="header_too_large") >= 1


def test_too_many_header_lines_is_431_and_a_normal_request_is_not(metrics_daemon):
    port = metrics_daemon.metrics_port

    def ask(headers):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
            answer = b""
            while True:
                data = s.recv(65536)
                if not data:
                    return answer
                answer += data

    assert ask(b"".join(b"H%d: v\r\n" % i for i in range(98))).startswith(b"HTTP/1.1 200 ")
    assert ask(b"".join(b"H%d: v\r\n" % i for i in range(200))).startswith(b"HTTP/1.1 431 ")
    assert ask(b"Big: " + b"v" * 20000 + b"\r\n").startswith(b"HTTP/1.1 431 ")


def test_slowloris_connections_do_not_block_scrapes(metrics_daemon):
    """Four connections each trickling one header line every 0.5 s: every
    scrape meanwhile is answered at once (cpp-httplib's two threads were
    both held by the trickles: no scrape while they lasted)."""
    port = metrics_daemon.metrics_port
    stop = threading.Event()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]

    def trickle():
        for s in socks:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        i = 0
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.sendall(b"X-%d: v\r\n" % i)
                except OSError:
                    pass
            i += 1

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        time.sleep(0.3)
        for path in ("/metrics", "/healthz", "/metrics"):
            start = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                assert r.status == 200
            assert time.monotonic() - start < 2
    finally:
        stop.set()
        t.join(5)
        for s in socks:
            s.close()


def test_many_idle_connections_do_not_block_scrapes(metrics_daemon):
    """10,000 idle connections (or as many as this process may open): the
    endpoint keeps at most its cap open, closing the oldest unfinished ones,
    and 3 of 3 scrapes succeed while the rest are held (0 of 3 before)."""
    port = metrics_daemon.metrics_port
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 10_000
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, want + 200)), hard))
    n = min(want, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))  # connected or in progress: held
            socks.append(s)
        time.sleep(0.5)
        ok = 0
        for _ in range(3):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as r:
                    ok += r.status == 200
            except OSError:
                pass
        assert ok == 3, f"{ok}/3 scrapes with {n} idle connections held"
        values = scrape_values(port)
        assert value(values, "nearprep_metrics_http_connections_rejected_total") > 0
        assert value(values, "nearprep_metrics_http_connections_active") <= \
            value(values, "nearprep_metrics_http_connections_limit")
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
