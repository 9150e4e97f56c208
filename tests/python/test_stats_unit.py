"""Stall attribution of nearprep.stats (the same rule as `nearprep load`):
which stage bounded the supply, from synthetic batch timings."""

from types import SimpleNamespace

from nearprep.stats import Stats, attribute_wait


class _Batch:
    def __init__(self, read_us, decode_us, transform_us, queue_wait_us, n=4):
        timings = SimpleNamespace(read_us=read_us, decode_us=decode_us,
                                  transform_us=transform_us,
                                  queue_wait_us=queue_wait_us)
        self.header = SimpleNamespace(timings=timings, errors=[])
        self.nbytes = 100 * n
        self._n = n

    def __len__(self):
        return self._n


def test_attribute_wait_splits_by_queue_then_worker_time():
    # 20 ms wait, 4 ms of it with the batch queued, rest split 10/70/20.
    r, d, t, q = attribute_wait(0.020, 1000, 7000, 2000, 4000)
    assert abs(q - 0.004) < 1e-12
    assert abs(r - 0.0016) < 1e-12 and abs(d - 0.0112) < 1e-12
    assert abs(t - 0.0032) < 1e-12
    # A batch that waited in the queue longer than the trainer waited.
    assert attribute_wait(0.010, 100, 800, 100, 30000) == (0.0, 0.0, 0.0, 0.010)
    assert attribute_wait(0.0, 1, 1, 1, 1) == (0.0, 0.0, 0.0, 0.0)


def test_bound_stage_and_compute_bound():
    s = Stats()
    for _ in range(3):
        s.add_batch(_Batch(9000, 500, 500, 0), wait_s=0.2, compute_s=0.1)
    snap = s.snapshot()
    assert snap["stall_bound"] == "read"
    assert abs(snap["stall_by_stage"]["read"] - 0.6 * 0.9) < 1e-9
    assert "bound: read" in s.summary()
    # A trainer that hardly waits is compute-bound whatever the stages.
    fed = Stats()
    for _ in range(3):
        fed.add_batch(_Batch(100, 9000, 100, 0), wait_s=0.001, compute_s=0.1)
    assert fed.snapshot()["stall_bound"] == "none (compute-bound)"
    # merge() carries the attribution.
    total = Stats()
    total.merge(s)
    total.merge(fed)
    assert abs(sum(total.snapshot()["stall_by_stage"].values()) - 0.603) < 1e-9
