"""Issue 37 item 4: a refused caller's strings are logged escaped.

The daemon logs every refused StreamBatches with the status message, which
holds the caller's dataset name. Raw, a newline in that name ended the log
record and the rest read as a record of its own (a forged warning). Now
control bytes are written as \\n, \\xNN (server/service/display_string.h,
LogSafe)."""

import os
import re

import pytest

import nearprep
from conftest import Daemon, NEARPREPD

pytestmark = pytest.mark.skipif(not NEARPREPD, reason="nearprepd not built")

FORGED = "[2026-01-01 00:00:00.000] [warning] FORGED record"


def test_a_newline_in_a_dataset_name_cannot_forge_a_log_record(tmp_path, sample_dir):
    d = Daemon(tmp_path, {"sample": sample_dir}, name="log", workers=1,
               extra=["--log-level", "info"]).start()
    try:
        conn = nearprep.Client(d.target).connection()
        req = conn.pb2.StreamBatchesRequest(dataset="nope\n" + FORGED + "\x1b[2J", batch_size=1)
        req.transform.height = req.transform.width = 8
        with pytest.raises(Exception) as err:
            list(conn.stub.StreamBatches(req, metadata=conn.metadata, timeout=10))
        assert "NOT_FOUND" in str(err.value) or "not served" in str(err.value)
    finally:
        d.stop()
    with open(d.log, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    refused = [ln for ln in lines if "refused" in ln and "nope" in ln]
    assert refused, lines[-10:]
    assert "nope\\n[2026-01-01" in refused[0] and "\\x1b[2J" in refused[0], refused[0]
    assert not any(ln.startswith("[2026-01-01") for ln in lines), lines
    assert not any("\x1b" in ln for ln in lines)
