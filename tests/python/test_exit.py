"""Leaving a batch loop early ends the process cleanly (issue 20, item 1).

Each way a user leaves `for b in client.batches(...)` before the end --
break, it.close(), an exception in the loop body, garbage collection
(del it; gc.collect()), and interpreter exit with the stream still open --
runs in child interpreters (/usr/bin/python3, as a user's script), on both
receive paths (native=True, native=False), and in a 2-worker torch
DataLoader over nearprep.torch.IterableDataset (spawned workers). Every
child must exit 0 with no "terminate called" on stderr (before the fix: a
reader thread inside the native receive when the interpreter finalised
aborted the process, exit 134), and, for every way but interpreter exit,
no reader thread may be left running once the loop is left.

Trials: $NEARPREP_EXIT_TRIALS per way and path (default 10; the issue's
proof uses 20). A child runs its trials in sequence with a fresh Client
each, except interpreter exit: one child per trial. Children run
concurrently. The DataLoader runs TRIALS // 10 trials per way and path
(each starts two spawned workers that import torch: seconds each).
"""

import concurrent.futures
import os
import subprocess
import sys

import pytest

TRIALS = int(os.environ.get("NEARPREP_EXIT_TRIALS", "10"))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CHILD_TIMEOUT_S = 120

# The request (16 full-size images a batch). prefetch=16: the reader
# never waits for room in its queue, so when the loop is left it is inside
# the receive call (waiting for the daemon), the case that aborted.
_CHILD = r"""
import gc, sys, threading, time
import nearprep
target, native, way, trials = sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4])
KW = dict(batch_size=16, shuffle=True, seed=1, height=224, width=224)

def readers():
    return [t for t in threading.enumerate() if t.name.startswith("nearprep-chunk")]

left = 0
for trial in range(trials):
    c = nearprep.Client(target, native=native, prefetch=16)
    assert c.transport == ("native" if native else "grpcio"), c.transport
    if way == "break":
        for i, b in enumerate(c.batches("sample", **KW)):
            if i == 2:
                break
    elif way == "close":
        it = c.batches("sample", **KW)
        for i, b in enumerate(it):
            if i == 2:
                break
        it.close()
    elif way == "exception":
        try:
            for i, b in enumerate(c.batches("sample", **KW)):
                if i == 2:
                    raise KeyError("leave the loop")
        except KeyError:
            pass
    elif way == "gc":
        it = c.batches("sample", **KW)
        for i, b in enumerate(it):
            if i == 2:
                break
        del it
        gc.collect()
    elif way == "exit":
        it = c.batches("sample", **KW)   # still open when the interpreter exits
        for i, b in enumerate(it):
            if i == 2:
                break
        # A program whose teardown takes a moment (big objects, a flush):
        # finalisation, where a thread that takes the GIL back is killed,
        # lasts long enough for a reader to receive its next batch.
        class SlowTeardown:
            def __del__(self, sleep=time.sleep):
                sleep(0.1)
        slow = SlowTeardown()
    else:
        raise SystemExit("unknown way " + way)
    if way != "exit" and readers():
        left += 1
print("readers-left-running", left, flush=True)
"""

# A 2-worker DataLoader (spawned workers, nearprep.torch's advice). "break":
# the loop is left, the iterator dropped (the DataLoader shuts its workers
# down), and each worker's exit code is read; "exit": the interpreter exits
# with the workers mid-epoch.
_LOADER_CHILD = r"""
import sys
import torch
import nearprep.torch as nt
target, native, way, trials = sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4])
ds = nt.IterableDataset(target, "sample", batch_size=8, shuffle=True, seed=1,
                        client_options={"native": native})
codes = []
for trial in range(trials):
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    it = iter(loader)
    for i in range(3):
        next(it)
    if way == "exit":
        break
    workers = list(it._workers)
    del it
    for w in workers:
        w.join(30)
        codes.append(w.exitcode)
print("worker-exit-codes", codes, flush=True)
"""


def _env():
    env = dict(os.environ)
    env.pop("NEARPREP_NATIVE", None)
    return env


def _run(script, target, native, way, trials):
    cmd = [PYTHON, "-c", script, target, "1" if native else "0", way, str(trials)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                           env=_env())
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return way, native, None, out[-500:], "timed out (a hang at exit?)"
    return way, native, p.returncode, p.stdout, p.stderr


def _check(results, expect_line):
    failures = []
    for way, native, rc, out, err in results:
        bad = []
        if rc != 0:
            bad.append(f"exit {rc}")
        if "terminate called" in err:
            bad.append("'terminate called' on stderr")
        if expect_line is not None and expect_line not in out:
            bad.append(f"stdout lacks {expect_line!r}")
        if bad:
            failures.append(f"{way} native={native}: {', '.join(bad)}; stdout {out[-300:]!r}; "
                            f"stderr {err[-600:]!r}")
    return failures


def _native_param():
    from nearprep import transport as tr
    params = [False]
    if tr.load_native() is not None:
        params.append(True)
    elif os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
        pytest.fail("nearprep._native was built but does not import")
    return params


def test_leaving_a_loop_early_exits_cleanly(daemon):
    """break / close / exception / gc: one child per way and path running
    TRIALS trials (no reader left running after each); interpreter exit:
    TRIALS children per path. All exit 0 without 'terminate called'."""
    jobs = []
    for native in _native_param():
        for way in ("break", "close", "exception", "gc"):
            jobs.append((_CHILD, daemon.target, native, way, TRIALS))
        jobs += [(_CHILD, daemon.target, native, "exit", 1)] * TRIALS
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda j: _run(*j), jobs))
    failures = _check([r for r in results if r[0] != "exit"], "readers-left-running 0")
    failures += _check([r for r in results if r[0] == "exit"], "readers-left-running")
    assert not failures, (f"{len(failures)} of {len(results)} children failed:\n" +
                          "\n".join(failures))


def test_leaving_a_dataloader_early_exits_cleanly(daemon):
    """A 2-worker DataLoader over nearprep.torch.IterableDataset: left after
    3 batches (workers shut down by the DataLoader must exit 0), and the
    interpreter exiting with the workers mid-epoch."""
    pytest.importorskip("torch")
    trials = max(1, TRIALS // 10)
    jobs = []
    for native in _native_param():
        jobs.append((_LOADER_CHILD, daemon.target, native, "break", trials))
        jobs += [(_LOADER_CHILD, daemon.target, native, "exit", 1)] * trials
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: _run(*j), jobs))
    failures = _check(results, "worker-exit-codes")
    for way, native, rc, out, err in results:
        if way == "break" and rc == 0:
            codes = out.split("worker-exit-codes", 1)[1].strip()
            if codes != repr([0] * 2 * trials):
                failures.append(f"break native={native}: worker exit codes {codes}; "
                                f"stderr {err[-600:]!r}")
    assert not failures, "\n".join(failures)
