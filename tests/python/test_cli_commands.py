"""The CLI's commands as a user runs them (cli/commands/):
`fleet-read` takes `nearprep stream`'s flags for what each sample becomes
(RequestFlags, the same names and spellings), and sends them: its tensors
are the Python FleetClient's for the same keywords."""

import hashlib
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import NEARPREPD, fleet_daemon
from test_cli_stream import CLI

pytestmark = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")

# `stream`'s flags that say which samples a stream reads and how it runs:
# fleet-read takes its positions from the fleet plan (some of these names it
# defines itself, with the plan's meaning), the fleet client decodes no
# compressed tensor and prints no per-sample parameters.
STREAM_ONLY = {"--target", "--batch-size", "--max-batches", "--batches", "--start-batch",
               "--resume-token",
               "--seed", "--epoch", "--shuffle", "--shuffle-mode", "--block-samples",
               "--open-blocks", "--window", "--shard", "--drop-remainder", "--error-policy",
               "--policy", "--dry-run", "--compression", "--compression-level",
               "--include-params", "--params", "--epochs", "--sheet", "--columns"}


def flags_of(command):
    """Every spelling of every flag `nearprep COMMAND --help` lists."""
    r = subprocess.run([CLI, command, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    names = set()
    for line in r.stdout.splitlines():
        m = re.match(r"\s+(-[-\w]+(?:,-[-\w]+)*)", line)
        if m:
            names.update(m.group(1).split(","))
    return names


def test_fleet_read_takes_the_stream_flags_of_each_sample():
    stream, fleet_read = flags_of("stream"), flags_of("fleet-read")
    assert "--brightness-max-delta" in stream and "--tls-ca" in stream
    missing = stream - STREAM_ONLY - fleet_read - {"-h", "--help"}
    assert not missing, f"stream flags fleet-read does not take: {sorted(missing)}"


def test_fleet_read_parses_the_transform_flags():
    base = [CLI, "fleet-read", "--targets", "127.0.0.1:1", "--manifest", "/nonexistent/M"]
    for flags in (["--brightness-max-delta", "0.2"], ["--brightness", "0.2"],
                  ["--saturation", "0.5", "1.5"], ["--fidelity", "fast"], ["--fidelity", "tf"],
                  ["--layout", "nchw"], ["--no-clip"], ["--center-fraction", "0.5"],
                  ["--crop", "resize_center", "--resize-shorter-side", "32"],
                  ["--scale", "0.2", "1", "--ratio", "0.5", "2"],
                  ["--mean", "0.5", "0.5", "0.5", "--std", "0.2", "0.2", "0.2"],
                  ["--reconnect-deadline", "1"]):
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        # Past flag parsing (2 = a flag error): it fails on the missing manifest.
        assert r.returncode == 1 and "cannot open" in r.stderr, (flags, r.stderr)
    for flags in (["--fidelity", "bogus"], ["--shuffle"], ["--compression", "delta_zstd"],
                  ["--dry-run"]):
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (flags, r.stderr)


def run(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not NEARPREPD, reason="nearprepd not built")
def test_fleet_read_sends_the_transform_flags(tmp_path):
    """fleet-read's tensors with --brightness-max-delta, --saturation, --mean/--std
    and --layout nchw are the Python FleetClient's with the same keywords, and
    differ from the tensors without them."""
    from nearprep.fleet import FleetClient
    src, shards, manifest = tmp_path / "src", tmp_path / "shards", str(tmp_path / "M")
    run("mkdataset", "--out", str(src), "--classes", "2", "--per-class", "4")
    run("pack", "--source", str(src), "--out", str(shards), "--format", "tfrecord")
    run("manifest", "--root", str(shards), "--format", "tfrecord", "--partitions", "1",
        "--out", manifest)
    d = fleet_daemon(tmp_path, "n0", str(shards), manifest=manifest).start()
    try:
        plan = ["--manifest", manifest, "--seed", "5", "--block", "2", "--global-batch", "4"]
        common = ["--height", "8", "--width", "8", "--crop", "random_resized"]
        extra = ["--brightness-max-delta", "0.3", "--saturation", "0.5", "1.5",
                 "--mean", "0.4", "0.5", "0.6", "--std", "0.2", "0.25", "0.3",
                 "--layout", "nchw"]

        def cpp(flags):
            out = run("fleet-read", "--targets", d.target, *plan, *flags).stdout
            return {int(pos): (int(sid), h)
                    for _, pos, sid, h in (line.split() for line in out.splitlines())}

        plain, full = cpp(common), cpp(common + extra)
        assert sorted(full) == list(range(8)) and sorted(plain) == list(range(8))
        assert all(full[p][1] != plain[p][1] for p in full), "the flags changed nothing"
        got = {}
        with FleetClient([d.target], "ds", manifest=manifest, seed=5, block_samples=2,
                         global_batch=4, height=8, width=8, crop="random_resized",
                         brightness_max_delta=0.3, saturation=(0.5, 1.5),
                         mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), layout="nchw") as fc:
            for fb in fc.epoch(0):
                for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids)):
                    data = np.ascontiguousarray(fb.images[i]).tobytes()
                    got[p] = (sid, hashlib.sha256(data).hexdigest())
        assert got == full
    finally:
        d.kill()
