"""Reliability findings of issue 12 against a real nearprepd and fakes:
file and folder names that are not UTF-8, a message the client cannot
parse, garbage request bytes on the unary RPCs, a daemon paused for a moment,
and the SIGTERM drain (health NOT_SERVING, new streams UNAVAILABLE).

Every wait is bounded (run_bounded), so a hang fails the test instead of
blocking the suite."""

import os
import shutil
import signal
import threading
import time
from concurrent import futures

import grpc
import pytest

import nearprep
from conftest import sample_files
from fake_server import FakePreprocessor, pb2

_SERVICE = "/nearprep.v1.Preprocessor/"


def run_bounded(fn, timeout=30.0):
    """fn() on a thread; its result, or its exception re-raised; fails the
    test when it has not returned within `timeout` seconds (a hang)."""
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"did not return within {timeout} s (hang)")
    if "error" in out:
        raise out["error"]
    return out["value"]


# ---------------------------------------------------------------------------
# 1. Names that are not UTF-8


@pytest.fixture(scope="module")
def odd_names_dir(tmp_path_factory, sample_dir):
    """image_folder with a class folder named b"caf\\xe9" (Latin-1 e-acute:
    not UTF-8) holding two real JPEGs and a non-JPEG named b"bad\\xff.jpg",
    and a class "ok" with one JPEG: 3 images, 1 sample that fails."""
    root = str(tmp_path_factory.mktemp("odd_names"))
    files, _ = sample_files(sample_dir)
    rootb = os.fsencode(root)
    odd = os.path.join(rootb, b"caf\xe9")
    os.makedirs(odd)
    os.makedirs(os.path.join(root, "ok"))
    shutil.copy(os.path.join(sample_dir, files[0]), os.path.join(odd, b"a.jpg"))
    shutil.copy(os.path.join(sample_dir, files[1]), os.path.join(odd, b"b.jpg"))
    with open(os.path.join(odd, b"bad\xff.jpg"), "wb") as f:
        f.write(b"this is not a JPEG file\n" * 8)
    shutil.copy(os.path.join(sample_dir, files[2]), os.path.join(root, "ok", "c.jpg"))
    return root


@pytest.fixture(scope="module")
def odd_daemon(daemon_factory, odd_names_dir):
    return daemon_factory({"odd": odd_names_dir}, "odd").start()


def test_non_utf8_class_names_listed(odd_daemon):
    c = nearprep.Client(odd_daemon.target)
    try:
        (info,) = run_bounded(c.datasets)
        assert info.name == "odd"
        assert list(info.class_names) == ["caf\\xe9", "ok"]
        assert list(info.class_name_bytes) == [b"caf\xe9", b"ok"]
        assert info.num_samples == 4
    finally:
        c.close()


def test_non_utf8_paths_in_sample_errors(odd_daemon, transport):
    c = nearprep.Client(odd_daemon.target, reconnect_deadline=5)
    try:
        # Batches of 2 over 4 samples (one bad), no shuffle: every batch, and
        # the one that reports the bad file, must arrive.
        batches = run_bounded(lambda: list(c.batches(
            "odd", batch_size=2, shuffle=False, height=16, width=16)))
    finally:
        c.close()
    assert sum(len(b) for b in batches) == 3
    errors = [e for b in batches for e in b.errors]
    assert len(errors) == 1
    (e,) = errors
    assert e.path == "caf\\xe9/bad\\xff.jpg"
    assert e.path_bytes == b"caf\xe9/bad\xff.jpg"
    assert e.code == "INVALID_ARGUMENT"
    assert "\\xe9" in e.message or "JPEG" in e.message


class _Unparseable(FakePreprocessor):
    """Sends one good batch, then one whose SampleError.path is not UTF-8
    (so protobuf refuses it), then would send forever; records whether the
    client cancelled the call."""

    def __init__(self):
        super().__init__(64)
        self.cancelled = threading.Event()

    def StreamBatches(self, req, context):
        context.add_callback(self.cancelled.set)
        good = pb2.Batch(epoch=req.epoch, batch_index=0, labels=[0], sample_ids=[0],
                         next_position=1,
                         tensor=pb2.Tensor(shape=[1, 1, 1, 3], dtype=pb2.DTYPE_UINT8,
                                           data=b"\x01\x02\x03"))
        yield good.SerializeToString()
        bad = pb2.Batch(epoch=req.epoch, batch_index=1, labels=[1], sample_ids=[1],
                        next_position=2,
                        errors=[pb2.SampleError(sample_id=9, path="caf\u00e9.jpg",
                                                code="INVALID_ARGUMENT")],
                        tensor=pb2.Tensor(shape=[1, 1, 1, 3], dtype=pb2.DTYPE_UINT8,
                                          data=b"\x04\x05\x06"))
        raw = bad.SerializeToString()
        assert raw.count(b"\xc3\xa9") == 1
        yield raw.replace(b"\xc3\xa9", b"\xe9\xe9")  # same length: invalid UTF-8
        index = 2
        while context.is_active():
            yield pb2.Batch(epoch=req.epoch, batch_index=index, next_position=index + 1,
                            tensor=pb2.Tensor(shape=[0, 1, 1, 3],
                                              dtype=pb2.DTYPE_UINT8)).SerializeToString()
            index += 1
            time.sleep(0.05)


def test_unparseable_batch_is_an_error_and_cancels(transport):
    servicer = _Unparseable()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    handler = grpc.method_handlers_generic_handler("nearprep.v1.Preprocessor", {
        "StreamBatches": grpc.unary_stream_rpc_method_handler(
            servicer.StreamBatches, request_deserializer=pb2.StreamBatchesRequest.FromString,
            response_serializer=lambda b: b)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    c = nearprep.Client(f"127.0.0.1:{port}", reconnect_deadline=5)
    try:
        stream = c.batches("fake", batch_size=1)
        first = run_bounded(lambda: next(stream))
        assert first.index == 0
        with pytest.raises(nearprep.DataLossError) as exc:
            run_bounded(lambda: next(stream))
        assert "malformed" in str(exc.value)
        assert servicer.cancelled.wait(10), "the client did not cancel the call"
    finally:
        c.close()
        server.stop(None)


def test_unparseable_unary_answer_is_data_loss():
    """A ListDatasets answer with a class name that is not UTF-8 (what the
    daemon used to send) is a DataLossError naming the message type."""
    info = pb2.DatasetInfo(name="fake", class_names=["caf\u00e9"])
    raw = pb2.ListDatasetsResponse(datasets=[info]).SerializeToString()
    assert raw.count(b"\xc3\xa9") == 1
    raw = raw.replace(b"\xc3\xa9", b"\xe9\xe9")
    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler("nearprep.v1.Preprocessor", {
        "ListDatasets": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: raw, request_deserializer=None,
            response_serializer=lambda b: b)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    c = nearprep.Client(f"127.0.0.1:{port}")
    try:
        with pytest.raises(nearprep.DataLossError) as exc:
            run_bounded(c.datasets)
        assert "malformed nearprep.v1.ListDatasetsResponse" in str(exc.value)
    finally:
        c.close()
        server.stop(None)


# ---------------------------------------------------------------------------
# 5c. Garbage request bytes on the unary RPCs


@pytest.mark.parametrize("method,message", [
    ("ListDatasets", "nearprep.v1.ListDatasetsRequest"),
    ("GetServerInfo", "nearprep.v1.GetServerInfoRequest"),
])
def test_unary_garbage_is_invalid_argument(daemon, method, message):
    with grpc.insecure_channel(daemon.target) as ch:
        call = ch.unary_unary(_SERVICE + method)   # raw bytes both ways
        with pytest.raises(grpc.RpcError) as exc:
            call(b"\xff\xff\xff\xff\x0f garbage", timeout=10)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in exc.value.details()
        # And well-formed (empty) requests still work through the same path.
        assert call(b"", timeout=10)


# ---------------------------------------------------------------------------
# 3. A daemon that is slow to answer


def test_datasets_waits_for_a_daemon_paused_half_a_second(daemon_factory, sample_dir):
    d = daemon_factory({"sample": sample_dir}, "paused").start()
    try:
        c = nearprep.Client(d.target)   # no connection yet
        d.proc.send_signal(signal.SIGSTOP)
        resumer = threading.Timer(0.5, d.proc.send_signal, (signal.SIGCONT,))
        t0 = time.monotonic()
        resumer.start()
        try:
            datasets = run_bounded(c.datasets)
        finally:
            resumer.join()
        elapsed = time.monotonic() - t0
        assert [x.name for x in datasets] == ["sample"]
        assert elapsed >= 0.4, f"answered in {elapsed:.2f} s while paused?"
        c.close()
    finally:
        if d.proc.poll() is None:
            d.proc.send_signal(signal.SIGCONT)
        d.kill()


# ---------------------------------------------------------------------------
# 5b. SIGTERM drain


def _health(channel):
    """grpc.health.v1.Health/Check for the whole server: the status number
    (1 SERVING, 2 NOT_SERVING), parsed by hand (no grpc_health module)."""
    raw = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=5)
    assert raw[:1] == b"\x08" and len(raw) == 2, raw
    return raw[1]


def test_sigterm_drain_keeps_health_and_refuses_new_streams(daemon_factory, sample_dir):
    d = daemon_factory({"sample": sample_dir}, "drain",
                       extra=["--drain-seconds", "20"]).start()
    # The whole epoch as 224x224 float32 (50 batches, 120 MB): far more than
    # the transport buffers hold, so the stream is still in flight (in the
    # daemon's registry) when SIGTERM arrives.
    req = pb2.StreamBatchesRequest(
        dataset="sample", batch_size=4, transform=pb2.Transform(height=224, width=224))
    try:
        with grpc.insecure_channel(d.target) as ch:
            assert _health(ch) == 1
            stream = ch.unary_stream(_SERVICE + "StreamBatches",
                                     request_serializer=lambda r: r.SerializeToString())
            call = stream(req, timeout=60)
            it = iter(call)
            assert pb2.Batch.FromString(next(it)).batch_index == 0
            d.proc.send_signal(signal.SIGTERM)
            # The drain has begun once health says NOT_SERVING.
            deadline = time.monotonic() + 10
            while _health(ch) != 2:
                assert time.monotonic() < deadline, "health never NOT_SERVING"
                time.sleep(0.05)
            with grpc.insecure_channel(d.target) as fresh:
                with pytest.raises(grpc.RpcError) as exc:
                    list(fresh.unary_stream(
                        _SERVICE + "StreamBatches",
                        request_serializer=lambda r: r.SerializeToString())(req, timeout=10))
                assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "shutting down" in exc.value.details()
                assert _health(fresh) == 2
            # The stream in flight runs to its end.
            rest = [pb2.Batch.FromString(b).batch_index for b in it]
            assert rest == list(range(1, 50))
        # Exit 0 (gRPC's own shutdown sometimes takes ~10 s more, before
        # and after this change: a poller thread joined in grpc_shutdown).
        assert d.proc.wait(timeout=20) == 0
    finally:
        d.kill()
