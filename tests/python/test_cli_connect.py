"""A wrong target never hangs silently (issue 20, item 4).

`nearprep` refuses an address without a port when it parses its flags
(exit 2, at once); a stream to an address nothing answers says on stderr
what it waits for and why while it retries, and gives up after
--reconnect-deadline (alias --connect-timeout). The Python Client refuses an
address without a port in its constructor, and its "gave up" message states
the time really spent."""

import os
import pty
import re
import select
import socket
import subprocess
import time

import pytest

import nearprep
from test_cli_stream import CLI

needs_cli = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")


def free_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD_TARGETS = [
    ("127.0.0.1", "has no port"),
    ("localhost:", "has no port"),
    (":7070", "has no host"),
    ("127.0.0.1:0", "outside 1..65535"),
    ("127.0.0.1:70000", "outside 1..65535"),
    ("127.0.0.1:http", "not a number"),
    ("::1", "without brackets"),
    ("[::1]", "has no port"),
]


@needs_cli
@pytest.mark.parametrize("target,why", BAD_TARGETS)
def test_cli_refuses_a_target_without_a_usable_port_at_once(target, why):
    for argv in (["stream", "--target", target, "--dataset", "d"],
                 ["info", "--target", target],
                 ["fetch", "--target", target, "--dataset", "d", "--out", "/nonexistent"],
                 ["load", "--target", f"127.0.0.1:1,{target}", "--dataset", "d"],
                 ["fleet-read", "--targets", f"127.0.0.1:1,{target}", "--manifest", "M"]):
        t0 = time.monotonic()
        r = subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert time.monotonic() - t0 < 5
        assert why in r.stderr and "--target" in r.stderr, (argv, r.stderr)


@needs_cli
def test_cli_accepts_the_documented_target_forms():
    for target in ("localhost:7070", "127.0.0.1:1", "[::1]:7070", "dns:///localhost:7070",
                   "ipv4:127.0.0.1:1,127.0.0.2:2", "unix:/tmp/nearprep.sock"):
        r = subprocess.run([CLI, "stream", "--target", target, "--dataset", "d", "--dry-run"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, (target, r.stderr)


@needs_cli
def test_unreachable_target_says_what_it_waits_for_then_gives_up():
    target = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = subprocess.run([CLI, "stream", "--target", target, "--dataset", "d",
                        "--reconnect-deadline", "2.5"],
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stderr
    assert 2.0 < took < 20, took
    # Not a terminal: one line when the wait starts (then every 10 s).
    waits = re.findall(rf"waiting for {re.escape(target)}: connection refused \(\d+ s of 2\.5 s\)",
                       r.stderr)
    assert len(waits) == 1, r.stderr
    m = re.search(rf"gave up reconnecting to {re.escape(target)} after (\d+) ms", r.stderr)
    assert m and 2400 <= int(m.group(1)) < 20000, r.stderr


@needs_cli
def test_connect_timeout_is_the_same_flag_and_zero_means_no_retry():
    target = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = subprocess.run([CLI, "stream", "--target", target, "--dataset", "d",
                        "--connect-timeout", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and time.monotonic() - t0 < 10, r.stderr
    assert "UNAVAILABLE" in r.stderr and "waiting for" not in r.stderr, r.stderr


@needs_cli
def test_unknown_host_is_reported_while_waiting():
    r = subprocess.run([CLI, "stream", "--target", "no-such-host.invalid:7070", "--dataset",
                        "d", "--connect-timeout", "1.5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    m = re.search(r"waiting for no-such-host\.invalid:7070: ([^(]+) \(", r.stderr)
    assert m and m.group(1).strip(), r.stderr


@needs_cli
def test_on_a_terminal_the_wait_is_reported_every_second():
    target = f"127.0.0.1:{free_port()}"
    master, slave = pty.openpty()
    p = subprocess.Popen([CLI, "stream", "--target", target, "--dataset", "d",
                          "--reconnect-deadline", "3.5"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    assert p.wait(timeout=30) == 1
    text = out.decode(errors="replace")
    seconds = re.findall(rf"\rwaiting for {re.escape(target)}: connection refused \((\d) s of 3\.5 s\)",
                         text)
    # About once a second over 3.5 s: 0, 1, 2, 3 (at least three of them).
    assert len(seconds) >= 3 and len(set(seconds)) >= 3, text


@pytest.mark.parametrize("target,why", BAD_TARGETS)
def test_python_client_refuses_a_target_without_a_usable_port(target, why):
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        nearprep.Client(target)
    assert e.value.field == "target" and why in str(e.value)
    with pytest.raises(nearprep.InvalidArgumentError):
        nearprep.Client(["localhost:7070", target])


def test_python_client_accepts_the_documented_target_forms():
    for target in ("localhost:7070", "[::1]:7070", "dns:///localhost:7070",
                   "ipv4:127.0.0.1:1,127.0.0.2:2", "unix:/tmp/nearprep.sock"):
        nearprep.Client(target, native=False).close()


def test_python_gave_up_message_states_the_real_time(transport):
    target = f"127.0.0.1:{free_port()}"
    c = nearprep.Client(target, reconnect_deadline=1.5, initial_backoff=0.05, max_backoff=0.2)
    t0 = time.monotonic()
    try:
        with pytest.raises(nearprep.UnavailableError) as e:
            list(c.batches("d", batch_size=1))
    finally:
        c.close()
    took = time.monotonic() - t0
    msg = str(e.value)
    assert "after 0 ms" not in msg, msg
    m = re.search(rf"gave up reconnecting to {re.escape(target)} after ([\d.]+) s", msg)
    assert m, msg
    assert 1.4 <= float(m.group(1)) <= took + 0.1, (msg, took)
