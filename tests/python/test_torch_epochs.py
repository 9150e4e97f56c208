"""nearprep.torch.IterableDataset: set_epoch reaches persistent DataLoader
workers, and state_dict() / load_state_dict() resume mid-epoch in a new
process with exactly the batches that were left (issue 20, item 3)."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")

import nearprep.torch as nt  # noqa: E402
from nearprep.errors import InvalidArgumentError  # noqa: E402

# Random-resized crops and flips: the augmentation draws depend on the epoch.
KW = dict(batch_size=16, height=24, width=24, shuffle=True, seed=5, crop="random_resized",
          flip_probability=0.5, dtype="uint8", return_batch=True)


def _key(item):
    return (item["epoch"], item["sample_ids"].tolist(),
            hashlib.sha256(item["images"].numpy().tobytes()).hexdigest())


def test_persistent_workers_follow_set_epoch(daemon):
    ds = nt.IterableDataset(daemon.target, "sample", **KW)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn",
                                         persistent_workers=True)
    epochs, pids = [], set()
    for e in range(3):
        ds.set_epoch(e)
        items = list(loader)
        pids.add(tuple(w.pid for w in loader._iterator._workers))
        assert {i["epoch"] for i in items} == {e}
        ids = [s for i in items for s in i["sample_ids"].tolist()]
        assert sorted(ids) == list(range(200))
        pixels = {s: i["images"][k].numpy().tobytes()
                  for i in items for k, s in enumerate(i["sample_ids"].tolist())}
        epochs.append((ids, pixels))
    assert len(pids) == 1  # the same two workers served all three epochs
    for a in range(3):
        for b in range(a + 1, 3):
            assert epochs[a][0] != epochs[b][0], f"epochs {a} and {b}: same order"
            same = sum(epochs[a][1][s] == epochs[b][1][s] for s in range(200))
            assert same < 20, f"epochs {a} and {b}: {same} of 200 images augmented alike"
    # A plain DataLoader's main process never saw which batches were consumed.
    with pytest.raises(RuntimeError, match="nearprep.torch.DataLoader"):
        ds.state_dict()
    ds.set_epoch(3)
    assert ds.state_dict()["epoch"] == 3
    del loader


_RESUME_CHILD = r"""
import hashlib, json, sys
import nearprep.torch as nt
target, workers, state = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
kw = json.loads(sys.argv[4])
ds = nt.IterableDataset(target, "sample", **kw)
ds.load_state_dict(state)
for item in nt.DataLoader(ds, num_workers=workers):
    print(json.dumps([item["epoch"], item["sample_ids"].tolist(),
                      hashlib.sha256(item["images"].numpy().tobytes()).hexdigest()]))
print(json.dumps(ds.state_dict()))
"""


@pytest.mark.parametrize("workers, stop", [(2, 5), (0, 4)])
def test_state_dict_resumes_in_a_new_process(daemon, workers, stop):
    """Stopped after `stop` batches (an odd count with 2 workers: the next
    batch is the second worker's), resumed by a new process: the remaining
    batches exactly, in order, with the clean run's bytes."""
    def dataset():
        ds = nt.IterableDataset(daemon.target, "sample", **KW)
        ds.set_epoch(1)
        return ds

    ds = dataset()
    clean = [_key(i) for i in nt.DataLoader(ds, num_workers=workers)]
    # 200 samples: 13 batches of 16 (12 full, one of 8) with or without
    # workers: the two workers serve batches 0-5 and 6-12 of the one stream
    # (before issue 35: 2 x 7 batches of two sub-shards, each ending short).
    assert len(clean) == 13 and {k[0] for k in clean} == {1}
    assert sorted(len(k[1]) for k in clean) == [8] + [16] * 12
    assert ds.state_dict()["epoch"] == 2 and ds.state_dict()["tokens"] is None

    ds = dataset()
    first = []
    for item in nt.DataLoader(ds, num_workers=workers):
        first.append(_key(item))
        if len(first) == stop:
            break
    state = ds.state_dict()
    assert state["epoch"] == 1 and state["num_workers"] == workers
    assert json.loads(json.dumps(state)) == state
    # Checkpoints hold the daemon's bound resume tokens (issue 35, item 7).
    assert all(t.startswith("nearprep-resume-1;") for t in state["tokens"])

    kw = {k: v for k, v in KW.items()}
    out = subprocess.run([sys.executable, "-c", _RESUME_CHILD, daemon.target, str(workers),
                          json.dumps(state), json.dumps(kw)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    rest = [tuple(json.loads(line)) for line in lines[:-1]]
    assert first + rest == clean
    assert json.loads(lines[-1])["epoch"] == 2  # the resumed run finished the epoch

    # The state names its worker count: another one is refused, clearly.
    ds = dataset()
    ds.load_state_dict(state)
    other = 0 if workers else 2
    with pytest.raises(InvalidArgumentError, match="num_workers"):
        next(iter(nt.DataLoader(ds, num_workers=other)))
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        nt.IterableDataset(daemon.target, "sample", **dict(KW, batch_size=8)).load_state_dict(state)
    # A state of an older nearprep.torch (raw positions) is refused mid-epoch.
    old = dict(state, positions=[[3, 48]] * max(1, workers))
    del old["tokens"]
    with pytest.raises(InvalidArgumentError, match="positions"):
        dataset().load_state_dict(old)


def test_a_token_of_another_stream_is_refused(daemon):
    """A state whose token belongs to another stream (here another seed,
    which the state's own fields do not name) is refused by the daemon,
    naming the field: never a silent sample lost or repeated."""
    ds = nt.IterableDataset(daemon.target, "sample", **KW)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    it.close()
    other = nt.IterableDataset(daemon.target, "sample", **dict(KW, seed=6))
    other.load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="seed"):
        next(iter(other))


def test_persistent_workers_resume_mid_epoch(daemon):
    """nearprep.torch.DataLoader with persistent workers: stopped after 3
    batches, load_state_dict(state_dict()) sends the same two workers on
    from there (the start reaches them through shared memory)."""
    ds = nt.IterableDataset(daemon.target, "sample", **KW)
    loader = nt.DataLoader(ds, num_workers=2, persistent_workers=True)
    ds.set_epoch(1)
    clean = [_key(i) for i in loader]
    pids = [w.pid for w in loader._loader._iterator._workers]
    ds.set_epoch(1)
    first = []
    for item in loader:
        first.append(_key(item))
        if len(first) == 3:
            break
    ds.load_state_dict(ds.state_dict())
    rest = [_key(i) for i in loader]
    assert first + rest == clean
    assert [w.pid for w in loader._loader._iterator._workers] == pids
    assert ds.state_dict()["epoch"] == 2


def test_workers_split_a_dataset_with_bad_files_exactly(daemon_factory, tmp_path):
    """Under error_policy="skip" (the default) with 5 undecodable files among
    65: 1, 2 or 3 workers (run in-process as DataLoader workers would) serve
    the 60 good samples once each, as one stream does: a worker whose range
    holds bad files ends in a short batch instead of running into the next
    worker's samples; len() is the bound without failures (65 -> 9)."""
    import types
    from conftest import ROOT
    cli = os.environ.get("NEARPREP_CLI") or os.path.join(ROOT, "build", "client", "cpp",
                                                         "nearprep")
    if not os.access(cli, os.X_OK):
        pytest.skip("nearprep CLI not built")
    src = str(tmp_path / "src")
    subprocess.run([cli, "mkdataset", "--out", src, "--classes", "3", "--per-class", "20",
                    "--with-bad-files"], check=True, capture_output=True)
    d = daemon_factory({"bad": src}, "bad").start()
    kw = dict(batch_size=8, height=8, width=8, shuffle=True, seed=3)
    import nearprep
    with nearprep.Client(d.target) as c:
        one = [s for b in c.batches("bad", **kw) for s in b.sample_ids.tolist()]
    assert len(one) == 60
    real = torch.utils.data.get_worker_info
    try:
        for workers in (1, 2, 3):
            ds = nt.IterableDataset(d.target, "bad", return_batch=True, **kw)
            assert len(ds) == 9
            got = []
            for w in range(workers):
                info = types.SimpleNamespace(id=w, num_workers=workers, dataset=ds)
                torch.utils.data.get_worker_info = lambda: info
                got += [i["sample_ids"].tolist() for i in ds]
            flat = [s for b in got for s in b]
            assert sorted(flat) == sorted(one), f"{workers} workers"
            assert len(got) <= 9 and sum(len(b) < 8 for b in got) <= workers
    finally:
        torch.utils.data.get_worker_info = real
