"""nearprep.torch without nearprepd: worker split arithmetic and tensors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")

import nearprep.torch as nt  # noqa: E402
from fake_server import FakePreprocessor, FakeServer, plan  # noqa: E402


@pytest.mark.parametrize("shard, shards, workers", [(0, 1, 2), (1, 3, 4), (2, 4, 3)])
def test_worker_shards_partition_the_rank_shard(shard, shards, workers):
    n = 101
    rank_positions = plan(n, shard, shards)
    parts = []
    for w in range(workers):
        k, m = nt.worker_shard(shard, shards, w, workers)
        parts.append(plan(n, k, m))
    union = sorted(x for p in parts for x in p)
    assert union == sorted(rank_positions)
    assert len(union) == len(set(union))
    with pytest.raises(ValueError, match="worker_id"):
        nt.worker_shard(0, 1, 2, 2)


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
        assert [len(i["labels"]) for i in items] == [4, 4, 2]
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
    finally:
        srv.stop()
