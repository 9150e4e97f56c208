"""Real training loops with torch DDP (issue 35): the "Training loops
(PyTorch)" script of docs/python.md, run as it stands, by 2 gloo ranks on
loopback with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...),
with 0 and 2 DataLoader workers, for 2 epochs:

- per epoch the ranks' samples are disjoint and together the whole epoch
  (checked against one stream of the whole epoch: each sample's bytes name
  it), each rank gets len(loader) batches, and the two epochs differ in order
  and augmentation;
- the two ranks' models end equal (DDP averaged the gradients);
- the same run SIGKILLed (rank, workers and all) in the middle of epoch 0
  and started again resumes from its checkpoints with exactly the batches
  that were left (same order, same bytes), and trains to the same weights.

The PyTorch section's first block runs too (test_quickstart_snippet_runs).

A small harness (below) runs the docs' code block as __main__ and records,
in each rank's main process, what nearprep.torch.DataLoader hands the loop;
it can stop the loop after some batches (after that step's checkpoint) and
wait there to be killed."""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")

import nearprep  # noqa: E402
from conftest import kill_process_groups  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "python.md")
# The docs script's request (test_reference_matches_the_doc checks they agree).
REQ = dict(height=32, width=32, crop="random_resized", flip_probability=0.5, dtype="uint8",
           shuffle=True, seed=1)
BATCH = 32


def doc_block(name):
    """The ```python block after `<!-- nearprep-doc-test: NAME -->` in docs/python.md."""
    text = open(DOC).read()
    m = re.search(r"<!-- nearprep-doc-test: " + re.escape(name) + r" -->\n```python\n(.*?)```",
                  text, re.S)
    assert m, f"docs/python.md has no block marked {name}"
    return m.group(1)


HARNESS = r'''
import hashlib, json, os, sys, time

if __name__ == "__main__":
    import nearprep.torch as nt
    log = open(os.environ["HARNESS_LOG"], "a")
    stop = os.environ.get("HARNESS_STOP")  # "EPOCH:BATCHES": wait there to be killed
    inner = nt.DataLoader.__iter__

    def logged(self):
        got = 0
        log.write(json.dumps({"len": len(self), "epoch": self.dataset.epoch,
                              "rank": list(self.dataset.rank)}) + "\n")
        for images, labels in inner(self):
            got += 1
            log.write(json.dumps({"epoch": self.dataset.epoch, "labels": labels.tolist(),
                                  "samples": [hashlib.sha256(images[k].numpy().tobytes())
                                              .hexdigest()[:16] for k in range(len(labels))]})
                      + "\n")
            log.flush()
            yield images, labels
            if stop == f"{self.dataset.epoch}:{got}":  # that step's checkpoint is saved
                open(os.environ["HARNESS_LOG"] + ".stopped", "w").close()
                time.sleep(600)

    nt.DataLoader.__iter__ = logged
    path = sys.argv[1]
    exec(compile(open(path).read(), path, "exec"), {"__name__": "__main__", "__file__": path})
'''


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(daemon, work, name, workers, ckpt, stop=None, timeout=150):
    """2 ranks of the docs script; returns each rank's log (a list of dicts).
    With stop, waits until both ranks stopped there, then SIGKILLs both
    process groups (ranks and their DataLoader workers)."""
    script = os.path.join(work, "train.py")
    harness = os.path.join(work, "harness.py")
    if not os.path.exists(script):
        open(script, "w").write(doc_block("torch_ddp_train"))
        open(harness, "w").write(HARNESS)
    port = _free_port()
    procs, logs = [], []
    for r in range(2):
        log = os.path.join(work, f"{name}.rank{r}.log")
        logs.append(log)
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   NEARPREP_TARGET=daemon.target, NEARPREP_DATASET="sample", EPOCHS="2",
                   NUM_WORKERS=str(workers), SAVE_EVERY="1", CKPT_DIR=ckpt,
                   HARNESS_LOG=log, OMP_NUM_THREADS="1")
        if stop:
            env["HARNESS_STOP"] = stop
        out = open(os.path.join(work, f"{name}.rank{r}.out"), "w")
        procs.append(subprocess.Popen([sys.executable, harness, script], env=env, cwd=work,
                                      stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if stop and all(os.path.exists(log + ".stopped") for log in logs):
                break
            if all(p.poll() is not None for p in procs):
                break
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.1)
    finally:
        kill_process_groups(procs)
    for r, p in enumerate(procs):
        if not stop:
            assert p.returncode == 0, open(os.path.join(work, f"{name}.rank{r}.out")).read()[-3000:]
    return [[json.loads(line) for line in open(log)] for log in logs]


def _batches(log):
    """[(epoch, [sample hash, ...])] of the batches a rank's loop received."""
    return [(e["epoch"], e["samples"]) for e in log if "samples" in e]


def _reference(daemon, epoch):
    """{sample hash: sample id} of the whole epoch in one stream."""
    out = {}
    with nearprep.Client(daemon.target) as c:
        for b in c.batches("sample", batch_size=50, epoch=epoch, **REQ):
            for k, sid in enumerate(b.sample_ids.tolist()):
                out[hashlib.sha256(b.images[k].tobytes()).hexdigest()[:16]] = sid
    return out


def test_reference_matches_the_doc():
    code = doc_block("torch_ddp_train")
    assert 'if __name__ == "__main__":' in code
    for k, v in REQ.items():
        assert re.search(rf"\b{k}={re.escape(json.dumps(v) if isinstance(v, str) else repr(v))}",
                         code), f"the docs script's {k} is not {v!r}"
    assert f"batch_size={BATCH}" in code


def test_quickstart_snippet_runs(daemon, tmp_path):
    """The first block of the PyTorch section, on the sample dataset for 2
    epochs (its target, dataset and epoch count replaced, nothing else)."""
    code = doc_block("torch_quickstart")
    for old, new in (('"storage-node:7070"', repr(daemon.target)), ('"imagenet"', '"sample"'),
                     ("range(90)", "range(2)")):
        assert old in code
        code = code.replace(old, new)
    code = code.replace("for images, labels in loader: ...",
                        "for images, labels in loader: print(len(labels))")
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    assert [int(x) for x in out.stdout.split()] == [64, 64, 64, 8] * 2


@pytest.mark.parametrize("workers", [0, 2])
def test_ddp_two_ranks_two_epochs_and_a_resume_after_kill(daemon, tmp_path, workers):
    work = str(tmp_path)
    clean = _launch(daemon, work, "clean", workers, os.path.join(work, "ckpt-clean"))
    n = nearprep.Client(daemon.target).dataset("sample").num_samples
    per_rank = -(-(n // 2) // BATCH)  # 200 samples: 100 per rank, 4 batches of 32
    orders = {}
    for epoch in range(2):
        ref = _reference(daemon, epoch)
        seen = []
        for r in range(2):
            heads = [e for e in clean[r] if "len" in e and e["epoch"] == epoch]
            assert heads and heads[0]["len"] == per_rank, heads
            assert heads[0]["rank"] == [r, 2, "dist"]
            got = [b for e, b in _batches(clean[r]) if e == epoch]
            assert len(got) == per_rank
            # Balanced: only the rank's last batch short (100 = 3 x 32 + 4).
            assert sorted(len(b) for b in got) == [4, 32, 32, 32]
            ids = [ref[h] for b in got for h in b]  # KeyError: bytes of no sample
            seen.append(ids)
            orders[(r, epoch)] = ids
        assert not set(seen[0]) & set(seen[1]), f"epoch {epoch}: ranks overlap"
        assert sorted(seen[0] + seen[1]) == sorted(ref.values()), f"epoch {epoch}: incomplete"
    for r in range(2):
        assert orders[(r, 0)] != orders[(r, 1)]
    hashes = [{h for e, b in _batches(clean[0]) if e == ep for h in b} for ep in range(2)]
    assert not hashes[0] & hashes[1]  # augmented differently per epoch
    # DDP kept the ranks' models equal, and they trained.
    m = [torch.load(os.path.join(work, "ckpt-clean", f"rank{r}.pt")) for r in range(2)]
    for k, v in m[0]["model"].items():
        assert torch.equal(v, m[1]["model"][k]), k
    assert m[0]["data"]["epoch"] == 2
    assert m[0]["sched"]["last_epoch"] == 2 * per_rank  # OneCycleLR's total: len(loader)

    # Killed after 3 batches of epoch 0 (rank, workers and all), started again.
    ckpt = os.path.join(work, "ckpt-kill")
    killed = _launch(daemon, work, "killed", workers, ckpt, stop="0:3")
    resumed = _launch(daemon, work, "resumed", workers, ckpt)
    for r in range(2):
        assert len(_batches(killed[r])) == 3
        state = torch.load(os.path.join(work, "ckpt-clean", f"rank{r}.pt"))["data"]
        assert state["tokens"] is None
        assert _batches(killed[r]) + _batches(resumed[r]) == _batches(clean[r]), \
            f"rank {r}: the resumed run's batches differ from the clean run's"
    # The resumed training ends where the uninterrupted one did.
    again = torch.load(os.path.join(ckpt, "rank0.pt"))["model"]
    for k, v in m[0]["model"].items():
        assert torch.allclose(v, again[k], rtol=0, atol=1e-6), k
