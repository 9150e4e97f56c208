"""The native receive path (nearprep._native) specifically: zero copy into
pooled page-aligned buffers, buffer reuse, the GIL released while waiting,
cancel, malformed messages, transport choice. The shared behaviour (resume,
failover, several targets, stats) runs against both paths in
test_client_unit.py and test_daemon.py (the `transport` fixture)."""

import os
import threading
import time

import grpc
import numpy as np
import pytest

import nearprep
from nearprep import transport as tr
from fake_server import FakePreprocessor, FakeServer, pb2

native = tr.load_native()
if native is None and os.environ.get("NEARPREP_EXPECT_NATIVE") != "1":
    pytest.skip("nearprep._native not built", allow_module_level=True)

PAGE = os.sysconf("SC_PAGE_SIZE")


class BigBatches(FakePreprocessor):
    """Batches of `n` float32 images of 64x64x3 whose values encode
    (sample id, position), optionally `delay` seconds apart."""

    def __init__(self, batches=6, n=4, delay=0.0):
        super().__init__(batches * n)
        self.n = n
        self.delay = delay

    def StreamBatches(self, req, context):
        index = req.start_batch
        end = self.num_samples // self.n
        if req.max_batches:
            end = min(end, index + req.max_batches)
        while index < end:
            if self.delay:
                time.sleep(self.delay)
            ids = list(range(index * self.n, (index + 1) * self.n))
            img = np.stack([np.full((64, 64, 3), s, np.float32) for s in ids])
            img += np.arange(64 * 64 * 3, dtype=np.float32).reshape(64, 64, 3) / 1e4
            yield pb2.Batch(epoch=req.epoch, batch_index=index, labels=ids, sample_ids=ids,
                            next_position=(index + 1) * self.n,
                            tensor=pb2.Tensor(shape=list(img.shape), dtype=pb2.DTYPE_FLOAT32,
                                              data=img.tobytes()))
            index += 1


def _expected(ids):
    img = np.stack([np.full((64, 64, 3), s, np.float32) for s in ids])
    return img + np.arange(64 * 64 * 3, dtype=np.float32).reshape(64, 64, 3) / 1e4


def _buffer_of(array):
    """The object that owns an array's memory (through views/memoryviews)."""
    base = array
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return base


@pytest.fixture
def big_server():
    srv = FakeServer(BigBatches())
    yield srv
    srv.stop()


def test_images_are_views_of_page_aligned_pooled_buffers(big_server):
    c = nearprep.Client(big_server.target, native=True)
    assert c.transport == "native"
    held = []
    for b in c.batches("fake", batch_size=4):
        np.testing.assert_array_equal(b.images, _expected(b.sample_ids.tolist()))
        # No copy after the receive: the array's memory is the native buffer.
        base = _buffer_of(b.images)
        assert isinstance(base, native.Buffer), type(base)
        assert b.images.ctypes.data == base.address
        assert base.address % PAGE == 0
        assert b.images.flags.writeable and b.images.flags.c_contiguous
        held.append(b)
    stats = c._transport.pool.stats()
    assert stats["allocated"] >= 6 and stats["reused"] == 0  # all still held
    del held, b, base
    list(c.batches("fake", batch_size=4))
    stats = c._transport.pool.stats()
    # Batches dropped by the caller are recycled: no new mappings needed.
    assert stats["reused"] >= 5, stats


class ShortLastBatch(BigBatches):
    """5 batches of 4 images, then one of 1 (an epoch's short last batch),
    in lockstep with the consumer: each batch after the first waits until
    the consumer called turn() for the one before, so that the consumer
    holds one batch while the next is received (2 buffers in use at once,
    whatever the scheduling: no batch waits in the prefetch queue)."""

    def __init__(self):
        super().__init__(batches=6, n=4)
        self._turns = threading.Semaphore(1)

    def turn(self):
        """The consumer is done with the batch before: send the next."""
        self._turns.release()

    def StreamBatches(self, req, context):
        for b in super().StreamBatches(req, context):
            if not self._turns.acquire(timeout=30):
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "the test did not take batch %d in 30 s" % (b.batch_index - 1))
            if b.batch_index == 5:
                img = np.frombuffer(b.tensor.data, np.float32).reshape(4, 64, 64, 3)[:1]
                del b.labels[1:], b.sample_ids[1:]
                b.tensor.shape[0] = 1
                b.tensor.data = img.tobytes()
            yield b


def _all_returned(pool, timeout=10.0):
    """Waits until every buffer of `pool` is back (the reader thread of an
    ended stream drops its last batch a moment after the consumer got the
    end); the pool's stats then."""
    deadline = time.monotonic() + timeout
    while True:
        s = pool.stats()
        if s["allocated"] - s["released"] == s["free_buffers"] or time.monotonic() > deadline:
            return s
        time.sleep(0.01)


def test_short_last_batch_reuses_a_bigger_free_buffer():
    impl = ShortLastBatch()
    srv = FakeServer(impl)
    try:
        c = nearprep.Client(srv.target, native=True)
        # Keep as few free buffers as a stream uses at once, as in a long
        # epoch of big batches: a small buffer kept aside would hide the case.
        c._transport.pool = native.ReceiveBufferPool(max_free=2)
        big = set()   # addresses of the buffers of 4-image batches
        for epoch in range(3):
            sizes = []
            for b in c.batches("fake", batch_size=4, epoch=epoch):
                np.testing.assert_array_equal(b.images, _expected(b.sample_ids.tolist()))
                sizes.append(len(b))
                address = _buffer_of(b.images).address
                if len(b) == 4:
                    big.add(address)
                else:
                    # The 1-image batch is received into a 4-image buffer.
                    assert address in big, (epoch, hex(address), [hex(a) for a in big])
                impl.turn()
            del b
            assert sizes == [4, 4, 4, 4, 4, 1]
            stats = _all_returned(c._transport.pool)
            assert stats["allocated"] - stats["released"] == stats["free_buffers"], stats
            if epoch == 0:
                first = stats
        # Epochs 2 and 3 map nothing new: the 1-image batch takes a free
        # 4-image buffer instead of a fresh mapping faulted in page by page.
        assert stats["allocated"] == first["allocated"], (first, stats)
        assert stats["reused"] >= first["reused"] + 12, (first, stats)
    finally:
        srv.stop()


def test_locked_pool_locks_or_counts_failures(big_server):
    c = nearprep.Client(big_server.target, native=True, lock_memory=True)
    bufs = [_buffer_of(b.images) for b in c.batches("fake", batch_size=4, max_batches=2)]
    stats = c._transport.pool.stats()
    assert stats["allocated"] == 2
    # Each new buffer is either locked or counted as a failed lock
    # (RLIMIT_MEMLOCK); never an error.
    assert sum(b.locked for b in bufs) + stats["lock_failures"] == 2
    pages = -(-4 * 64 * 64 * 3 * 4 // PAGE) * PAGE
    assert stats["locked_bytes"] == pages * sum(b.locked for b in bufs)


def test_gil_released_while_waiting():
    srv = FakeServer(BigBatches(batches=3, delay=0.4))
    try:
        c = nearprep.Client(srv.target, native=True, prefetch=1)
        stream = c._transport.open(srv.target, c.request("fake", batch_size=4))[1]
        ticks = []
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.005)
        t = threading.Thread(target=spin)
        t.start()
        n = sum(1 for _ in stream)   # blocks ~1.2 s inside native next()
        stop.set()
        t.join()
        assert n == 3
        gaps = np.diff(ticks)
        assert len(ticks) > 50 and gaps.max() < 0.2, (len(ticks), gaps.max())
    finally:
        srv.stop()


def test_cancel_unblocks_a_waiting_stream():
    srv = FakeServer(BigBatches(batches=3, delay=5.0))
    try:
        c = nearprep.Client(srv.target, native=True)
        _, call = c._transport.open(srv.target, c.request("fake", batch_size=4))
        threading.Timer(0.3, call.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as exc:
            list(call)
        assert exc.value.code() == grpc.StatusCode.CANCELLED
        assert time.monotonic() - t0 < 3.0
    finally:
        srv.stop()


class Garbage(FakePreprocessor):
    """Sends bytes that are not a Batch message."""

    def StreamBatches(self, req, context):
        yield b"\x7a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"


def test_malformed_message_is_a_clear_error():
    servicer = Garbage(4)
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler("nearprep.v1.Preprocessor", {
        "StreamBatches": grpc.unary_stream_rpc_method_handler(
            servicer.StreamBatches, request_deserializer=pb2.StreamBatchesRequest.FromString,
            response_serializer=lambda b: b)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        c = nearprep.Client(f"127.0.0.1:{port}", native=True)
        with pytest.raises(nearprep.NearprepError) as exc:
            list(c.batches("fake", batch_size=4))
        assert exc.value.code == "DATA_LOSS" and "malformed" in str(exc.value)
    finally:
        server.stop(None)


def test_transport_choice(monkeypatch):
    monkeypatch.delenv("NEARPREP_NATIVE", raising=False)
    assert nearprep.Client("127.0.0.1:1").transport == "native"
    assert nearprep.Client("127.0.0.1:1", native=False).transport == "grpcio"
    assert nearprep.Client("127.0.0.1:1", tls=True).transport == "grpcio"
    assert nearprep.Client("127.0.0.1:1", channel_options=[("grpc.x", 1)]).transport == "grpcio"
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        nearprep.Client("127.0.0.1:1", tls=True, native=True)
    assert exc.value.field == "native"
    monkeypatch.setenv("NEARPREP_NATIVE", "0")
    assert nearprep.Client("127.0.0.1:1").transport == "grpcio"
