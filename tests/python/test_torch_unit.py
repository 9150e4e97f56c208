"""nearprep.torch without nearprepd: the rank and world size, the split of a
rank's batches between DataLoader workers, tensors."""

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")

import nearprep.torch as nt  # noqa: E402
from fake_server import FakePreprocessor, FakeServer, all_batches, plan  # noqa: E402


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("max_batches", [0, 5])
def test_worker_ranges_split_the_rank_stream_evenly(drop, max_batches):
    for size in (0, 1, 7, 16, 17, 100, 101):
        for b in (1, 4, 16):
            t = nt.rank_batches(size, b, drop, max_batches)
            whole = nt.worker_range(size, b, 0, 1, drop, max_batches)
            assert (whole.first_batch, whole.end_batch, whole.start_position) == (0, t, 0)
            assert whole.end_position == min(t * b, size)
            for workers in (1, 2, 3, 4, 8):
                rs = [nt.worker_range(size, b, w, workers, drop, max_batches)
                      for w in range(workers)]
                counts = [r.end_batch - r.first_batch for r in rs]
                assert sum(counts) == t and max(counts) - min(counts) <= 1
                # Consecutive, batch-aligned position ranges: together the
                # single stream's positions, each once.
                assert rs[0].start_position == 0 and rs[-1].end_position == whole.end_position
                for a, c in zip(rs, rs[1:]):
                    assert a.end_position == c.start_position == c.first_batch * b
    with pytest.raises(ValueError, match="worker_id"):
        nt.worker_range(10, 2, 2, 2)


def test_rank_and_world_rules(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert nt.rank_and_world() == (0, 1, "default")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"\$RANK is not set"):
        nt.rank_and_world()
    monkeypatch.setenv("RANK", "1")
    assert nt.rank_and_world() == (1, 2, "env")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match=r"not in \[0"):
        nt.rank_and_world()
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        nt.rank_and_world()
    monkeypatch.setenv("RANK", "0")
    assert nt.rank_and_world() == (0, 1, "env")
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(ValueError, match="integers"):
        nt.rank_and_world()


def _fake_dist(monkeypatch, rank, world):
    import torch.distributed as dist
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: rank)
    monkeypatch.setattr(dist, "get_world_size", lambda: world)


def test_rank_fixed_at_first_use_and_a_late_init_refused(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    srv = FakeServer(FakePreprocessor(40))
    try:
        # Made before init_process_group, used after it: the rank of torch.distributed.
        ds = nt.IterableDataset(srv.target, "fake", batch_size=4)
        _fake_dist(monkeypatch, 1, 2)
        assert ds.rank == (1, 2, "dist") and len(ds) == 5
        # Used (len) before init_process_group, iterated after it: refused,
        # not every rank reading the whole epoch.
        monkeypatch.undo()
        ds = nt.IterableDataset(srv.target, "fake", batch_size=4)
        assert len(ds) == 10
        _fake_dist(monkeypatch, 1, 2)
        with pytest.raises(RuntimeError, match="rank 0 of 1 .* now torch.distributed says "
                                               "rank 1 of 2"):
            next(iter(ds))
        # Explicit shards win over everything.
        ds = nt.IterableDataset(srv.target, "fake", batch_size=4, shard_index=0, num_shards=4)
        assert ds.rank == (0, 4, "explicit") and len(ds) == 3
    finally:
        srv.stop()


def _as_worker(monkeypatch, ds, worker, workers):
    """Iterates ds as DataLoader worker `worker` of `workers` would."""
    info = types.SimpleNamespace(id=worker, num_workers=workers, dataset=ds)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    try:
        return list(ds)
    finally:
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: None)


@pytest.mark.parametrize("bad", [(), (3, 9, 10, 11, 40, 41, 88)])
@pytest.mark.parametrize("drop", [False, True])
def test_workers_partition_the_rank_stream(monkeypatch, bad, drop):
    """2 ranks x {1, 2, 3, 5} workers over 101 samples: each rank's workers
    serve its samples once each (failed ones left out), ranks disjoint; the
    batches are the single stream's (no failures), only the rank's last one
    short; with failures a worker's range ends in a short batch instead of
    running into the next worker's."""
    n, b = 101, 4
    srv = FakeServer(FakePreprocessor(n, bad=bad))
    try:
        seen = []
        for rank in range(2):
            ds = nt.IterableDataset(srv.target, "fake", batch_size=b, shard_index=rank,
                                    num_shards=2, return_batch=True, drop_remainder=drop)
            single = [i["sample_ids"].tolist() for i in ds]
            assert len(single) <= len(ds)
            want = [s for s in plan(n, rank, 2) if s not in bad]
            if not bad:
                assert single == [ids for ids, _ in all_batches(n, b, (), rank, 2)
                                  if len(ids) == b or not drop]
            for workers in (1, 2, 3, 5):
                parts = [[i["sample_ids"].tolist() for i in _as_worker(monkeypatch, ds, w,
                                                                        workers)]
                         for w in range(workers)]
                batches = [x for p in parts for x in p]
                ids = [s for x in batches for s in x]
                assert len(ids) == len(set(ids))
                assert len(batches) <= len(ds)
                if drop:
                    assert set(ids) <= set(want) and all(len(x) == b for x in batches)
                else:
                    assert sorted(ids) == sorted(want)
                if not bad:
                    assert batches == single  # the same batches, in worker order
                    assert len(batches) == len(ds)
                else:
                    short = [x for x in batches if len(x) < b]
                    assert len(short) <= (0 if drop else workers)
            seen.append(set(want))
        assert not seen[0] & seen[1]
    finally:
        srv.stop()


def test_to_torch_shares_memory_and_handles_bfloat16():
    buf = np.arange(6, dtype=np.float32).tobytes()
    arr = np.frombuffer(buf, np.float32)
    t = nt.to_torch(arr)
    assert t.data_ptr() == arr.__array_interface__["data"][0]
    bits = np.array([0x3F80, 0xC020], np.uint16)
    tb = nt.to_torch(bits)
    assert tb.dtype == torch.bfloat16 and tb.float().tolist() == [1.0, -2.5]


def test_iterable_dataset_in_process():
    srv = FakeServer(FakePreprocessor(10))
    try:
        ds = nt.IterableDataset(srv.target, "fake", batch_size=4, return_batch=True)
        items = list(ds)
        assert [len(i["labels"]) for i in items] == [4, 4, 2] and len(ds) == 3
        assert sorted(s for i in items for s in i["sample_ids"].tolist()) == list(range(10))
        ds.set_epoch(7)
        images, labels = next(iter(nt.IterableDataset(srv.target, "fake", batch_size=4)))
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64
        # Built eagerly: a type error shows at construction (value rules are
        # the daemon's and show at the first batch).
        with pytest.raises(ValueError, match="batch_size"):
            nt.IterableDataset(srv.target, "fake", batch_size="4")
        with pytest.raises(ValueError, match="shard_index"):
            nt.IterableDataset(srv.target, "fake", shard_index=1)
        with pytest.raises(TypeError, match="size is unknown"):
            len(nt.IterableDataset(srv.target, "nope", batch_size=4))
    finally:
        srv.stop()


def test_fleet_adapter_follows_the_same_rank_rules(monkeypatch):
    """nearprep.fleet_torch: $WORLD_SIZE > 1 without $RANK is refused (before
    issue 35 it silently made every process rank 0), before any file is read."""
    from nearprep.fleet_torch import FleetIterableDataset
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"\$RANK is not set"):
        FleetIterableDataset("127.0.0.1:1", "ds", manifest="/nonexistent/manifest")


def test_a_destroyed_process_group_is_not_a_new_rank(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    srv = FakeServer(FakePreprocessor(40))
    try:
        _fake_dist(monkeypatch, 1, 2)
        ds = nt.IterableDataset(srv.target, "fake", batch_size=4)
        assert len(ds) == 5
        monkeypatch.undo()  # destroy_process_group(): nothing names a rank now
        assert ds.state_dict()["shard"] == [1, 2]
    finally:
        srv.stop()
