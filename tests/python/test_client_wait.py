"""Issue 35 item 6: a stream waiting for a dead daemon says so.

Before, the Python client retried silently for reconnect_deadline (60 s by
default) and only then raised. Now every wait_report_interval seconds it
logs a warning on the "nearprep" logger and calls Client(on_wait=...) with
a nearprep.WaitInfo, and Client(fail_fast=True) fails a stream that has
received nothing yet at its first UNAVAILABLE. Both receive paths; no
daemon needed (a port nobody listens on refuses the connection)."""

import logging
import socket
import time

import pytest

import nearprep


def closed_port():
    """A loopback port with no listener (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_waiting_is_logged_and_reported_to_on_wait(transport, caplog):
    target = f"127.0.0.1:{closed_port()}"
    reports = []
    client = nearprep.Client(target, reconnect_deadline=2.5, wait_report_interval=0.5,
                             initial_backoff=0.05, max_backoff=0.2, on_wait=reports.append)
    caplog.set_level(logging.WARNING, logger="nearprep")
    t0 = time.monotonic()
    with pytest.raises(nearprep.UnavailableError) as err:
        for _ in client.batches("sample", batch_size=4, height=8, width=8):
            pass
    took = time.monotonic() - t0
    client.close()
    assert "gave up reconnecting" in str(err.value)
    assert 2.5 <= took < 20, took
    # About one report per 0.5 s of the 2.5 s waited (4 or 5; at least 3
    # however the retries fall), each later than the one before.
    assert 3 <= len(reports) <= 6, reports
    waited = [r.waited for r in reports]
    assert waited == sorted(waited) and waited[0] >= 0.5, waited
    assert all(isinstance(r, nearprep.WaitInfo) for r in reports)
    assert all(r.targets == [target] and r.deadline == 2.5 and r.attempts >= 1
               for r in reports)
    assert reports[-1].error is not None and reports[-1].error.code == "UNAVAILABLE"
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "nearprep" and r.levelno == logging.WARNING]
    assert len(warnings) == len(reports), warnings
    assert f"waiting for {target}" in warnings[0] and "reconnect_deadline 2.5" in warnings[0]


def test_fail_fast_raises_at_the_first_refused_connection(transport):
    target = f"127.0.0.1:{closed_port()}"
    client = nearprep.Client(target, reconnect_deadline=30, fail_fast=True)
    t0 = time.monotonic()
    with pytest.raises(nearprep.UnavailableError) as err:
        next(iter(client.batches("sample", batch_size=4, height=8, width=8)))
    took = time.monotonic() - t0
    client.close()
    assert took < 10, took   # not the 30 s reconnect_deadline
    assert "fail_fast" in str(err.value) and err.value.target == target


def test_a_raising_on_wait_does_not_break_the_stream(transport, caplog):
    target = f"127.0.0.1:{closed_port()}"

    def boom(info):
        raise RuntimeError("callback bug")

    client = nearprep.Client(target, reconnect_deadline=1.2, wait_report_interval=0.3,
                             initial_backoff=0.05, max_backoff=0.1, on_wait=boom)
    caplog.set_level(logging.WARNING, logger="nearprep")
    with pytest.raises(nearprep.UnavailableError):
        for _ in client.batches("sample", batch_size=4, height=8, width=8):
            pass
    client.close()
    assert any("on_wait raised" in r.getMessage() for r in caplog.records)


def test_on_wait_must_be_callable():
    with pytest.raises(nearprep.InvalidArgumentError) as err:
        nearprep.Client("127.0.0.1:1", on_wait="print")
    assert err.value.field == "on_wait"
