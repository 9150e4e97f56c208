"""Issue 35 item 7: resume points bound to their stream.

- The daemon refuses a bare start_position that the request itself shows
  cannot be a Batch.next_position of this stream: before start_batch full
  batches, past the end of the shard, or (error_policy fail_stream: nothing
  is skipped) anywhere but start_batch * batch_size. What it cannot check
  without the token: a position in range under error_policy skip (it would
  have to validate every sample before it; docs/protocol.md "Resume").
- The C++ CLI: `nearprep fetch` writes each batch's resume_token into its
  .json and prints how to continue; `--resume-token` continues exactly
  there, and a token of another stream (another seed) is refused, naming
  the field."""

import json
import os
import re
import subprocess

import numpy as np
import pytest

import nearprep
from test_cli_stream import CLI

ARGS = dict(batch_size=8, seed=3, shuffle=True, height=16, width=16, dtype="uint8",
            flip_probability=0.5)


@pytest.mark.parametrize("position,policy,why", [
    (15, "skip", "must be >= start_batch * batch_size"),
    (201, "skip", "past the end of shard 0 of 1"),
    (17, "fail_stream", "under error_policy fail_stream"),
])
def test_daemon_refuses_a_bare_position_of_another_stream(daemon, position, policy, why):
    with nearprep.Client(daemon.target) as c:
        with pytest.raises(nearprep.InvalidArgumentError) as err:
            next(iter(c.batches("sample", start_batch=2, start_position=position,
                                error_policy=policy, **ARGS)))
    assert err.value.field == "start_position", err.value
    assert why in str(err.value)


def test_daemon_accepts_the_positions_its_streams_hand_out(daemon):
    with nearprep.Client(daemon.target) as c:
        full = [(b.index, b.images.tobytes()) for b in c.batches("sample", **ARGS)]
        for policy in ("skip", "fail_stream"):
            tail = [(b.index, b.images.tobytes()) for b in
                    c.batches("sample", start_batch=20, start_position=160,
                              error_policy=policy, **ARGS)]
            assert tail == full[20:]
        # Shard 1 of 3 holds 67 positions (1, 4, ..., 199): its end is a valid
        # (empty) resume point, one past it is not.
        sharded = dict(ARGS, shard_index=1, num_shards=3)
        assert list(c.batches("sample", start_batch=8, start_position=67, **sharded)) == []
        with pytest.raises(nearprep.InvalidArgumentError) as err:
            list(c.batches("sample", start_batch=8, start_position=68, **sharded))
        assert "past the end of shard 1 of 3" in str(err.value)


def test_the_token_after_a_short_last_batch_resumes_to_an_empty_stream(daemon, transport):
    # 200 samples in batches of 64: batch 3 holds 8 and ends the epoch at
    # position 200 < 4 * 64. Its token is a valid resume point (nothing
    # left), for both policies (a checkpoint taken at the end of an epoch).
    for policy in ("skip", "fail_stream"):
        args = dict(ARGS, batch_size=64, error_policy=policy)
        with nearprep.Client(daemon.target) as c:
            last = list(c.batches("sample", **args))[-1]
            assert (last.index, len(last.labels), last.next_position) == (3, 8, 200)
            assert list(c.batches("sample", resume_token=last.resume_token, **args)) == []
            assert list(c.batches("sample", start_batch=4, start_position=200, **args)) == []


def fetch(daemon, out, *flags):
    r = subprocess.run([CLI, "fetch", "--target", daemon.target, "--dataset", "sample",
                        "--batch-size", "8", "--seed", "3", "--shuffle", "--height", "16",
                        "--width", "16", "--dtype", "uint8", "--flip", "0.5",
                        "--out", str(out), *flags],
                       capture_output=True, text=True, timeout=120)
    return r


@pytest.mark.skipif(not CLI, reason="nearprep CLI not built")
def test_cli_fetch_resumes_on_the_bound_token(daemon, tmp_path):
    full = fetch(daemon, tmp_path / "full", "--max-batches", "5")
    assert full.returncode == 0, full.stderr
    first = fetch(daemon, tmp_path / "first", "--max-batches", "2")
    assert first.returncode == 0, first.stderr
    with open(tmp_path / "first" / "batch_00001.json") as f:
        token = json.load(f)["resume_token"]
    assert token.startswith("nearprep-resume-"), token
    m = re.search(r"add --resume-token '([^']+)'", first.stdout)
    assert m and m.group(1) == token, first.stdout
    rest = fetch(daemon, tmp_path / "rest", "--max-batches", "3", "--resume-token", token)
    assert rest.returncode == 0, rest.stderr
    assert sorted(os.listdir(tmp_path / "rest")) == [
        f"batch_{k:05d}.{ext}" for k in (2, 3, 4) for ext in ("json", "npy")]
    for k in (2, 3, 4):
        a = np.load(tmp_path / "full" / f"batch_{k:05d}.npy")
        b = np.load(tmp_path / "rest" / f"batch_{k:05d}.npy")
        np.testing.assert_array_equal(a, b)
    # The token is bound to its stream: with another seed it is refused.
    other = subprocess.run([CLI, "fetch", "--target", daemon.target, "--dataset", "sample",
                            "--batch-size", "8", "--seed", "4", "--shuffle", "--height", "16",
                            "--width", "16", "--dtype", "uint8", "--flip", "0.5",
                            "--out", str(tmp_path / "other"), "--resume-token", token],
                           capture_output=True, text=True, timeout=120)
    assert other.returncode != 0
    assert "resume_token" in other.stderr and "seed" in other.stderr, other.stderr


@pytest.mark.skipif(not CLI, reason="nearprep CLI not built")
def test_cli_stream_resumes_the_first_epoch_only(daemon, tmp_path):
    first = fetch(daemon, tmp_path / "first", "--max-batches", "2")
    assert first.returncode == 0, first.stderr
    with open(tmp_path / "first" / "batch_00001.json") as f:
        token = json.load(f)["resume_token"]
    r = subprocess.run([CLI, "stream", "--target", daemon.target, "--dataset", "sample",
                        "--batch-size", "8", "--seed", "3", "--shuffle", "--height", "16",
                        "--width", "16", "--dtype", "uint8", "--flip", "0.5",
                        "--epochs", "2", "--resume-token", token],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"streamed (\d+) images in (\d+) batches", r.stdout)
    # Epoch 0 from batch 2 (200 - 16 images), then all of epoch 1.
    assert m and (int(m.group(1)), int(m.group(2))) == (184 + 200, 23 + 25), r.stdout
