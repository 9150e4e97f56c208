"""Client logic without nearprepd: argument validation, error mapping, wire
parsing, stats, resume and multi-target splitting against a Python fake
server, the tf adapter's TF-free parts."""

import threading
import time

import grpc
import numpy as np
import pytest

import nearprep
from nearprep import batch as batch_mod
from nearprep import errors
from nearprep import tf as nptf
from fake_server import FakePreprocessor, FakeServer, all_batches, pb2


# -- arguments ---------------------------------------------------------------

# Only what the message needs is checked client-side (types, shapes, enum
# names, field widths); the field named is the request's own.
@pytest.mark.parametrize("kwargs, field", [
    (dict(batch_size=2.5), "batch_size"),
    (dict(height="224"), "transform.height"),
    (dict(width=1 << 40), "transform.width"),
    (dict(flip_probability="high"), "transform.flip_probability"),
    (dict(saturation=(0.5, "x")), "transform.saturation_upper"),
    (dict(scale=(0.5,)), "transform.scale_min"),
    (dict(mean="0.5"), "transform.mean"),
    (dict(mean=(0, 0, 0), std=(1, None, 1)), "transform.std[1]"),
    (dict(dtype="int8"), "output.dtype"),
    (dict(layout="HWC"), "output.layout"),
    (dict(crop="diagonal"), "transform.crop"),
    (dict(error_policy="ignore"), "error_policy"),
    (dict(seed=-1), "seed"),
    (dict(bacth_size=3), "bacth_size"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    client = nearprep.Client("127.0.0.1:1")
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        client.batches("sample", **kwargs)
    assert isinstance(exc.value, ValueError)
    assert exc.value.field == field
    assert str(exc.value).startswith(field + ":")


def test_value_rules_are_left_to_the_daemon():
    # Rules about values are the daemon's alone (request_validation.cc); the
    # client builds these requests as given and the daemon answers
    # (test_daemon.py: test_value_rules_come_from_the_daemon).
    client = nearprep.Client("127.0.0.1:1")
    req = client.request("d", batch_size=0, height=0, shard_index=2, num_shards=2,
                         flip_probability=1.5, ratio=(1.0, 2e6), brightness_max_delta=2e6,
                         saturation=(1.5, 0.5), mean=(0.5, 0.5, 0.5))
    t = req.transform
    assert (req.batch_size, t.height, req.shard_index, req.num_shards) == (0, 0, 2, 2)
    assert t.flip_probability == pytest.approx(1.5)
    assert (t.ratio_min, t.ratio_max) == (1.0, 2e6)
    assert (t.saturation_lower, t.saturation_upper) == (1.5, 0.5)
    assert list(t.mean) == [0.5, 0.5, 0.5] and len(t.std) == 0


def test_bad_dataset_and_target():
    with pytest.raises(ValueError, match="dataset"):
        nearprep.Client("127.0.0.1:1").batches("")
    with pytest.raises(ValueError, match="target"):
        nearprep.Client([])
    with pytest.raises(ValueError, match="chunk_batches"):
        nearprep.Client("x:1", chunk_batches=0)


def test_request_defaults_and_enums():
    client = nearprep.Client("127.0.0.1:1")
    req = client.request("d", batch_size=8, dtype="bfloat16", layout="nchw",
                         crop="random_resized", scale=(0.08, 1.0), clip=False,
                         error_policy="fail_stream", include_params=True)
    assert req.batch_size == 8 and req.transform.height == 224
    assert req.output.dtype == pb2.DTYPE_BFLOAT16 and req.output.layout == pb2.LAYOUT_NCHW
    assert req.transform.crop == pb2.CROP_MODE_RANDOM_RESIZED
    assert req.transform.disable_clip and req.include_params
    assert req.error_policy == pb2.ERROR_POLICY_FAIL_STREAM
    assert req.transform.scale_min == pytest.approx(0.08)


def test_error_mapping_from_server_message():
    class FakeErr(grpc.RpcError):
        def __init__(self, code, details):
            self._c, self._d = code, details

        def code(self):
            return self._c

        def details(self):
            return self._d

    e = errors.from_rpc_error(FakeErr(grpc.StatusCode.INVALID_ARGUMENT,
                                      "transform.height: must be in [1, 4096], got 0"))
    assert isinstance(e, nearprep.InvalidArgumentError) and isinstance(e, ValueError)
    assert e.field == "transform.height" and "got 0" in str(e)
    e = errors.from_rpc_error(FakeErr(grpc.StatusCode.NOT_FOUND, "dataset: unknown 'x'"))
    assert isinstance(e, nearprep.DatasetNotFoundError) and isinstance(e, LookupError)
    e = errors.from_rpc_error(FakeErr(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many"))
    assert isinstance(e, nearprep.ResourceExhaustedError) and e.field is None


# -- wire parsing --------------------------------------------------------------

def _batch_message(dtype=pb2.DTYPE_FLOAT32, n=2):
    arr = np.arange(n * 2 * 3 * 3, dtype=np.float32).reshape(n, 2, 3, 3)
    data = {pb2.DTYPE_FLOAT32: arr.tobytes(), pb2.DTYPE_UINT8: arr.astype(np.uint8).tobytes(),
            pb2.DTYPE_FLOAT16: arr.astype(np.float16).tobytes(),
            pb2.DTYPE_BFLOAT16: (arr.view(np.uint32) >> 16).astype(np.uint16).tobytes()}[dtype]
    msg = pb2.Batch(epoch=3, batch_index=5, labels=[1, 2][:n], sample_ids=[10, 11][:n],
                    next_position=17,
                    params=[pb2.SampleParams(flipped=True, brightness_delta=0.25,
                                             crop=pb2.CropBox(y=1, x=2, height=3, width=4))],
                    tensor=pb2.Tensor(shape=[n, 2, 3, 3], dtype=dtype, data=data))
    return msg, arr


@pytest.mark.parametrize("dtype", [pb2.DTYPE_FLOAT32, pb2.DTYPE_FLOAT16,
                                   pb2.DTYPE_BFLOAT16, pb2.DTYPE_UINT8])
def test_parse_batch_is_zero_copy(dtype):
    msg, arr = _batch_message(dtype)
    raw = msg.SerializeToString()
    b = batch_mod.parse_batch(raw, pb2, target="t")
    assert (b.epoch, b.index, b.next_position, b.target) == (3, 5, 17, "t")
    np.testing.assert_array_equal(b.labels, [1, 2])
    assert b.sample_ids.dtype == np.uint64
    assert b.params[0].flipped and b.params[0].crop == nearprep.CropBox(1, 2, 3, 4)
    np.testing.assert_array_equal(b.images_float32(), arr)
    # The array lies inside the received bytes: no copy was made.
    raw_view = np.frombuffer(raw, np.uint8)
    lo = raw_view.__array_interface__["data"][0]
    addr = b.images.__array_interface__["data"][0]
    assert lo <= addr and addr + b.images.nbytes <= lo + len(raw)
    assert not b.images.flags.writeable
    assert b.header.tensor.data == b""


def test_parse_batch_falls_back_on_unusual_layout():
    msg, arr = _batch_message()
    raw = msg.SerializeToString()
    # A second Tensor field: protobuf merges them; the fast path refuses.
    extra = pb2.Batch(tensor=pb2.Tensor(layout=pb2.LAYOUT_NHWC)).SerializeToString()
    b = batch_mod.parse_batch(raw + extra, pb2)
    np.testing.assert_array_equal(b.images, arr)
    bad = pb2.Batch(tensor=pb2.Tensor(shape=[2, 2], dtype=pb2.DTYPE_FLOAT32,
                                      data=b"123")).SerializeToString()
    with pytest.raises(ValueError, match="tensor.data"):
        batch_mod.parse_batch(bad, pb2)


def test_parse_batch_reads_torchvision_params_and_mix():
    if not hasattr(pb2, "BatchMix"):
        pytest.skip("stubs generated before issue 36's fields")
    msg, _ = _batch_message()
    msg.params[0].jitter_brightness = 1.25
    msg.params[0].jitter_contrast = 1.0  # disabled: sent as 1
    msg.params[0].jitter_saturation = 0.5
    msg.params[0].jitter_hue = -0.125
    msg.params[0].jitter_order.extend([2, 0, 3, 1])
    msg.params[0].augment.add(op=pb2.AUGMENT_OP_SHEAR_X, magnitude=-0.25)
    msg.params[0].augment.add(op=pb2.AUGMENT_OP_EQUALIZE, magnitude=0.0)
    msg.params[0].erased.CopyFrom(pb2.CropBox(y=5, x=6, height=7, width=8))
    msg.params.add(flipped=False)  # no torchvision augmentation drawn
    msg.mix.kind = pb2.BatchMix.KIND_CUTMIX
    setattr(msg.mix, "lambda", 0.75)
    msg.mix.y1, msg.mix.x1, msg.mix.y2, msg.mix.x2 = 1, 2, 3, 3
    msg.mix_labels.extend([2, 1])
    b = batch_mod.parse_batch(msg.SerializeToString(), pb2)
    p, q = b.params
    assert (p.jitter_brightness, p.jitter_contrast, p.jitter_saturation,
            p.jitter_hue) == (1.25, 1.0, 0.5, -0.125)
    assert p.jitter_order == (2, 0, 3, 1)
    assert p.augment == (("ShearX", -0.25), ("Equalize", 0.0))
    assert p.erased == batch_mod.CropBox(5, 6, 7, 8)
    # Without ColorJitter the fields are absent: 1, 1, 1, 0, not proto's 0.
    assert (q.jitter_brightness, q.jitter_contrast, q.jitter_saturation,
            q.jitter_hue, q.jitter_order) == (1.0, 1.0, 1.0, 0.0, ())
    assert q.augment == () and q.erased is None
    assert b.mix == batch_mod.BatchMix("cutmix", 0.75, (1, 2, 3, 3))
    assert b.mix_labels.dtype == np.int64
    np.testing.assert_array_equal(b.mix_labels, [2, 1])
    msg.mix.kind = pb2.BatchMix.KIND_MIXUP
    msg.mix.y1 = msg.mix.x1 = msg.mix.y2 = msg.mix.x2 = 0
    assert batch_mod.parse_batch(msg.SerializeToString(), pb2).mix == \
        batch_mod.BatchMix("mixup", 0.75, (0, 0, 0, 0))
    # Not mixed: kind "none", lam 1, no partner labels.
    plain, _ = _batch_message()
    b = batch_mod.parse_batch(plain.SerializeToString(), pb2)
    assert b.mix == batch_mod.BatchMix("none", 1.0, (0, 0, 0, 0))
    assert b.mix_labels.shape == (0,) and b.mix_labels.dtype == np.int64


def test_bfloat16_helper_widens_exactly():
    bits = np.array([0x3F80, 0xC020, 0x0000], np.uint16)
    np.testing.assert_array_equal(nearprep.bfloat16_to_float32(bits), [1.0, -2.5, 0.0])


# -- against the fake server ---------------------------------------------------

def _ids(stream):
    out = []
    for b in stream:
        ids = [int(s) for s in b.sample_ids]
        img = b.images.reshape(len(b), 3)
        assert [int(v[0]) + 256 * int(v[1]) for v in img] == ids
        out.append((b.index, ids, b.next_position))
    return out


def test_single_target_stream_and_stats(transport):
    srv = FakeServer(FakePreprocessor(23, bad={4}))
    try:
        c = nearprep.Client(srv.target)
        assert c.transport == transport
        assert c.datasets()[0].name == "fake"
        got = _ids(c.batches("fake", batch_size=5))
        want = [(i, ids, pos) for i, (ids, pos) in enumerate(all_batches(23, 5, bad={4}))]
        assert got == want
        s = c.stats().snapshot()
        assert s["batches"] == len(want) and s["images"] == 22
        assert s["skipped_samples"] == 1
        assert len(c.stats().wait_s) == len(want)
        assert "images/s" in c.stats().summary()
        with pytest.raises(nearprep.DatasetNotFoundError):
            next(iter(c.batches("nope", batch_size=5)))
        with pytest.raises(nearprep.InvalidArgumentError) as exc:
            next(iter(c.batches(request=_with_center_fraction(c, 2.0))))
        assert exc.value.field == "transform.center_fraction"
    finally:
        srv.stop()


def _with_center_fraction(client, value):
    req = client.request("fake", batch_size=5)
    req.transform.center_fraction = value
    return req


def test_resume_after_unavailable_loses_nothing(transport):
    servicer = FakePreprocessor(40, bad={7, 8}, abort_after=3)
    srv = FakeServer(servicer)
    try:
        c = nearprep.Client(srv.target, initial_backoff=0.01)
        stream = c.batches("fake", batch_size=4)
        first = [next(stream) for _ in range(2)]
        got = [(b.index, [int(s) for s in b.sample_ids]) for b in first]

        def heal():  # the "restarted" server serves again
            servicer.abort_after = None
        threading.Timer(0.2, heal).start()
        got += [(b.index, [int(s) for s in b.sample_ids]) for b in stream]
        want = [(i, ids) for i, (ids, _) in enumerate(all_batches(40, 4, bad={7, 8}))]
        assert got == want
        assert stream.stats.reconnects >= 1
        resumed = [r for r in servicer.requests if r.start_batch > 0]
        assert resumed and resumed[0].start_position == all_batches(
            40, 4, bad={7, 8})[resumed[0].start_batch - 1][1]
    finally:
        srv.stop()


def test_resume_gives_up_after_deadline(transport):
    srv = FakeServer(FakePreprocessor(40, abort_after=0))
    try:
        c = nearprep.Client(srv.target, initial_backoff=0.01, max_backoff=0.05,
                            reconnect_deadline=0.3)
        with pytest.raises(nearprep.UnavailableError):
            list(c.batches("fake", batch_size=4))
    finally:
        srv.stop()


class _GoesSilent(FakePreprocessor):
    """Sends `first` batches, then nothing (no message, no status, no reset)
    until the caller gives up, or for 10 s, then UNAVAILABLE (so that a
    client without a deadline fails the test instead of hanging it)."""

    def __init__(self, first):
        super().__init__(40)
        self.first = first

    def StreamBatches(self, req, context):
        for i, b in enumerate(super().StreamBatches(req, context)):
            if i == self.first:
                break
            yield b
        t_end = time.monotonic() + 10
        while context.is_active() and time.monotonic() < t_end:
            time.sleep(0.01)
        context.abort(grpc.StatusCode.UNAVAILABLE, "gave up waiting for the client")


@pytest.mark.parametrize("first", [0, 2])
def test_stream_timeout_ends_a_silent_call_with_deadline_exceeded(first, transport):
    """transport.open(timeout=): the deadline the fleet client fails over on,
    counted from the call's start (batches received before do not extend
    it), on both receive paths."""
    srv = FakeServer(_GoesSilent(first))
    try:
        with nearprep.Client(srv.target) as c:
            assert c.transport == transport
            t0 = time.monotonic()
            _, call = c._transport.open(srv.target, c.request("fake", batch_size=4),
                                        timeout=0.8)
            got = []
            with pytest.raises(grpc.RpcError) as exc:
                for b in call:
                    got.append(b.sample_ids.tolist())
            took = time.monotonic() - t0
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, exc.value
        assert got == [ids for ids, _ in all_batches(40, 4)[:first]]
        assert 0.75 <= took < 3.0, took
    finally:
        srv.stop()


@pytest.mark.parametrize("code, message", [
    (grpc.StatusCode.INTERNAL, "Stream removed"),
    (grpc.StatusCode.UNKNOWN, "Socket closed"),
    (grpc.StatusCode.INTERNAL, "recvmsg:Connection reset by peer"),
])
def test_retry_depends_on_the_code_not_the_message(code, message):
    """Text that reads like a transport failure does not make INTERNAL or
    UNKNOWN retryable."""
    servicer = FakePreprocessor(40, abort_after=2, abort_code=code, abort_message=message)
    srv = FakeServer(servicer)
    try:
        c = nearprep.Client(srv.target, initial_backoff=0.01)
        stream = c.batches("fake", batch_size=4)
        got = [next(stream).index, next(stream).index]
        with pytest.raises(nearprep.NearprepError) as exc:
            next(stream)
        assert got == [0, 1]
        assert exc.value.code == code.name and exc.value.details == message
        assert stream.stats.reconnects == 0 and len(servicer.requests) == 1
    finally:
        srv.stop()


def test_unary_call_goes_to_the_next_target_only_when_unavailable():
    a, b = FakeServer(FakePreprocessor(4)), FakeServer(FakePreprocessor(5))
    try:
        c = nearprep.Client([a.target, b.target])
        a.servicer.unary_abort = (grpc.StatusCode.INTERNAL, "Stream removed")
        with pytest.raises(nearprep.NearprepError) as exc:
            c.datasets()
        assert exc.value.code == "INTERNAL" and exc.value.target == a.target
        a.servicer.unary_abort = (grpc.StatusCode.UNAVAILABLE, "draining")
        assert c.datasets()[0].num_samples == 5
    finally:
        a.stop()
        b.stop()


def test_unavailable_is_retried_whatever_its_message():
    servicer = FakePreprocessor(40, abort_after=2, abort_message="draining: bye")
    srv = FakeServer(servicer)
    try:
        c = nearprep.Client(srv.target, initial_backoff=0.01)
        stream = c.batches("fake", batch_size=4)
        got = [next(stream).index for _ in range(2)]
        deadline = time.monotonic() + 10
        while servicer.aborts == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        servicer.abort_after = None
        got += [b.index for b in stream]
        assert got == list(range(10))
        assert stream.stats.reconnects >= 1
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", [set(), {3, 17, 18, 40}])
def test_two_targets_split_and_equal_one_server(bad, transport):
    a = FakeServer(FakePreprocessor(61, bad=bad))
    b = FakeServer(FakePreprocessor(61, bad=bad))
    try:
        c = nearprep.Client([a.target, b.target], chunk_batches=2)
        got = _ids(c.batches("fake", batch_size=3, shard_index=1, num_shards=2))
        want = [(i, ids, pos) for i, (ids, pos) in
                enumerate(all_batches(61, 3, bad=bad, shard_index=1, num_shards=2))]
        assert got == want
        assert a.servicer.sent > 0 and b.servicer.sent > 0
        if bad:
            assert c.stats().respeculations >= 1
        # max_batches and start_batch are honoured across targets too.
        got = _ids(c.batches("fake", batch_size=3, start_batch=2, max_batches=5))
        want = [(i, ids, pos) for i, (ids, pos) in
                enumerate(all_batches(61, 3, bad=bad))][2:7]
        assert got == want
    finally:
        a.stop()
        b.stop()


def test_two_targets_one_dies_mid_epoch(transport):
    a = FakeServer(FakePreprocessor(90))
    dying = FakePreprocessor(90, abort_after=3)
    b = FakeServer(dying)
    try:
        c = nearprep.Client([a.target, b.target], chunk_batches=2, initial_backoff=0.05)
        stream = c.batches("fake", batch_size=4)
        got = []
        for i, batch in enumerate(stream):
            got.append((batch.index, [int(s) for s in batch.sample_ids]))
            if i == 4:
                b.stop()  # gone for good
        want = [(i, ids) for i, (ids, _) in enumerate(all_batches(90, 4))]
        assert got == want
        assert stream.stats.failovers >= 1
    finally:
        a.stop()


# -- tf adapter without TensorFlow -------------------------------------------

def test_tf_signature_and_dtypes():
    (shape, dt), (lshape, ldt) = nptf.signature_spec(8, 32, 48, "uint8", "NHWC", True)
    assert shape == (8, 32, 48, 3) and dt == "uint8" and lshape == (8,) and ldt == "int64"
    (shape, dt), (lshape, _) = nptf.signature_spec(8, 32, 48, "bfloat16", "NCHW", False)
    assert shape == (None, 3, 32, 48) and dt == "bfloat16" and lshape == (None,)
    assert [nptf.tf_dtype_name(d) for d in ("float32", "float16")] == ["float32", "float16"]
    with pytest.raises(ValueError, match="output.dtype"):
        nptf.tf_dtype_name("int32")

    class FakeTF:
        float32 = "tf.float32"
        int64 = "tf.int64"

        @staticmethod
        def TensorSpec(shape, dtype):
            return ("spec", shape, dtype)

    assert nptf.output_signature(FakeTF, 4, 2, 2) == (
        ("spec", (None, 2, 2, 3), "tf.float32"), ("spec", (None,), "tf.int64"))


def test_tf_reader_streams_in_order_and_reopens_elsewhere():
    # nearprep.tf's fetch side without TensorFlow: batch k of an epoch comes
    # from the stream standing at k; any other k opens a stream there.
    srv = FakeServer(FakePreprocessor(10))
    try:
        c = nearprep.Client(srv.target)
        reader = nptf._Reader(nptf._client_stream(c, "fake", dict(batch_size=4)))
        got = [reader.fetch(3, k, "") for k in range(4)]
        assert [len(g[1]) for g in got[:3]] == [4, 4, 2] and got[3] is None
        assert [g[2] for g in got[:3]] == [0, 1, 2]
        assert all(isinstance(g[0], np.ndarray) and g[1].dtype == np.int64 for g in got[:3])
        assert reader.opened == 1
        # A restore: the bound token of batch 0 (this fake sends none, so
        # one is made up); without a token, start_batch alone.
        again = reader.fetch(4, 1, "t;batch=1;position=4")
        assert again[2] == 1 and reader.opened == 2
        req = srv.servicer.requests[-1]
        assert (req.epoch, req.start_batch, req.start_position, req.resume_token) == (
            4, 1, 4, "t;batch=1;position=4")
        again = reader.fetch(5, 2, "")
        req = srv.servicer.requests[-1]
        assert (req.epoch, req.start_batch, req.start_position, req.resume_token) == (
            5, 2, 0, "")
        # peek: whether the batch is the epoch's last.
        assert [reader.fetch(6, k, "", peek=True)[1] for k in range(3)] == [False, False, True]
        reader.close()
    finally:
        srv.stop()


def test_tf_dataset_with_tensorflow():
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                             "(not in Debian, no PyPI here)")
    srv = FakeServer(FakePreprocessor(10))
    try:
        ds = nptf.dataset(srv.target, "fake", batch_size=4, height=1, width=1,
                          dtype="uint8")
        got = [(i.numpy(), l.numpy()) for i, l in ds]
        assert [len(l) for _, l in got] == [4, 4, 2]
        assert got[0][0].dtype == np.uint8
        assert ds.element_spec[0].shape.as_list() == [None, 1, 1, 3]
    finally:
        srv.stop()


def test_tls_client_against_plaintext_server_fails_cleanly():
    srv = FakeServer(FakePreprocessor(4))
    try:
        c = nearprep.Client(srv.target, tls=True, rpc_timeout=2.0)
        with pytest.raises(nearprep.UnavailableError) as exc:
            c.datasets()
        assert exc.value.target == srv.target
        c = nearprep.Client(srv.target, tls=True, reconnect_deadline=0.5,
                            initial_backoff=0.05)
        with pytest.raises(nearprep.UnavailableError):
            list(c.batches("fake", batch_size=2))
    finally:
        srv.stop()


# -- the public connection object (issue 26, step 3) ---------------------------

class _SeesMetadata(FakePreprocessor):
    """Records each call's `authorization` metadata by method."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.auth = []

    def _note(self, method, context):
        md = dict(context.invocation_metadata())
        with self.lock:
            self.auth.append((method, md.get("authorization")))

    def GetServerInfo(self, request, context):
        self._note("GetServerInfo", context)
        return super().GetServerInfo(request, context)

    def StreamBatches(self, req, context):
        self._note("StreamBatches", context)
        yield from super().StreamBatches(req, context)


def test_connection_is_the_clients_public_seam(transport):
    # What a program does with Client.connection(): a call the package does
    # not wrap, through the client's channel with its token; the streams of
    # either transport go through the same object.
    servicer = _SeesMetadata(9)
    srv = FakeServer(servicer)
    try:
        c = nearprep.Client(srv.target, token="tok-1")
        conn = c.connection()
        assert isinstance(conn, nearprep.Connection)
        assert conn is c.connection(srv.target) and conn.target == srv.target
        assert conn.metadata == (("authorization", "Bearer tok-1"),)
        assert conn.token == "tok-1" and conn.secure is False and conn.closed is False
        info = conn.stub.GetServerInfo(conn.pb2.GetServerInfoRequest(),
                                       metadata=conn.metadata, timeout=5)
        assert info.version == "fake"
        got = conn.unary("ListDatasets", conn.pb2.ListDatasetsRequest(),
                         conn.pb2.ListDatasetsResponse)
        assert got.datasets[0].num_samples == 9
        assert [len(b) for b in c.batches("fake", batch_size=4)] == [4, 4, 1]
        assert ("GetServerInfo", "Bearer tok-1") in servicer.auth
        assert ("StreamBatches", "Bearer tok-1") in servicer.auth
        # reset(): the channel a call broke on is dropped; a stale one is not.
        first = conn.channel
        assert conn.channel is first
        conn.reset(first)
        second = conn.channel
        assert second is not first
        conn.reset(first)
        assert conn.channel is second
        # Any target may be asked for (a fleet's nodes); a malformed one is refused.
        assert c.connection("127.0.0.1:1").target == "127.0.0.1:1"
        with pytest.raises(nearprep.InvalidArgumentError) as exc:
            c.connection("127.0.0.1")
        assert exc.value.field == "target"
        c.close()
        assert conn.closed is True
        with pytest.raises(nearprep.NearprepError, match="client is closed"):
            conn.channel
    finally:
        srv.stop()


def test_transports_and_fleet_use_only_the_public_connection():
    # nearprep.transport and nearprep.fleet reach a Client through its
    # public surface (Client.connection() and public attributes), never
    # through its private attributes (`client._channel`, `._metadata`, ...).
    import ast
    import os
    pkg = os.path.dirname(nearprep.client.__file__)
    found = []
    for name in ("transport.py", "fleet.py", "fleet_torch.py", "tf.py", "torch.py"):
        tree = ast.parse(open(os.path.join(pkg, name)).read())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
                continue
            inner = node.value
            owner = (inner.attr if isinstance(inner, ast.Attribute)
                     else inner.id if isinstance(inner, ast.Name) else None)
            if owner in ("client", "_client"):
                found.append(f"{name}:{node.lineno}: {owner}.{node.attr}")
    assert not found, found


# -- one vocabulary: the proto is the table ----------------------------------

def _flattened_fields():
    """(keyword, field path, field descriptor) for every singular field
    of the request and its transform / output / block_shuffle messages,
    walked from the descriptors."""
    out = []
    for f in pb2.StreamBatchesRequest.DESCRIPTOR.fields:
        if f.message_type is not None and f.name in ("transform", "output", "block_shuffle"):
            out += [(g.name, f"{f.name}.{g.name}", g) for g in f.message_type.fields]
        elif f.name not in ("dataset", "sample_ids", "manifest_hash", "plan_block_samples"):
            out.append((f.name, f.name, f))
    return out


def test_request_keywords_are_the_descriptors_field_names():
    from nearprep.request import build_request, is_repeated, request_keys
    pairs = {"scale_min": "scale", "scale_max": "scale", "ratio_min": "ratio",
             "ratio_max": "ratio", "saturation_lower": "saturation",
             "saturation_upper": "saturation", "disable_clip": "clip"}
    want = []
    for name, _, _ in _flattened_fields():
        kw = pairs.get(name, name)
        if kw not in want:
            want.append(kw)
    assert list(request_keys(pb2)) == want
    # Each keyword sets its field (by the field's proto type).
    from google.protobuf.descriptor import FieldDescriptor as FD
    for name, path, f in _flattened_fields():
        if name in pairs or is_repeated(f) or name == "resume_token":
            continue
        if f.cpp_type == FD.CPPTYPE_ENUM:
            value, expect = f.enum_type.values[-1].number, f.enum_type.values[-1].number
        elif f.cpp_type == FD.CPPTYPE_BOOL:
            value = expect = True
        elif f.cpp_type in (FD.CPPTYPE_FLOAT, FD.CPPTYPE_DOUBLE):
            value = expect = 0.75
        else:
            value = expect = 3
        kw = {name: value}
        if name == "compression":
            kw["dtype"] = "uint8"
        if name == "compression_level":
            kw.update(dtype="uint8", compression="delta_zstd")
        req = build_request(pb2, "d", **kw)
        msg = req
        for part in path.split(".")[:-1]:
            msg = getattr(msg, part)
        assert getattr(msg, f.name) == pytest.approx(expect), path


def test_enum_names_and_older_spellings_come_from_the_proto():
    from nearprep.request import deprecated_names, enum_names
    for enum in pb2.DESCRIPTOR.enum_types_by_name.values():
        values = sorted(enum.values, key=lambda v: v.number)
        prefix = values[0].name
        for v in values[1:]:
            while not v.name.startswith(prefix):
                prefix = prefix[:-1]
        prefix = prefix[:prefix.rfind("_") + 1]
        assert enum_names(enum) == {v.name[len(prefix):].lower(): v.number
                                    for v in values}, enum.name
    # The table the CLI and this client hard-coded before the proto held it.
    assert {e: deprecated_names(getattr(pb2, e))
            for e in ("CropMode", "Fidelity", "Compression", "ErrorPolicy",
                      "DType", "Layout", "ShuffleMode")} == {
        "CropMode": {"rrc": "random_resized"}, "Fidelity": {"tf": "tf_compat"},
        "Compression": {"delta": "delta_zstd", "gradient": "gradient_zstd"},
        "ErrorPolicy": {"fail": "fail_stream"}, "DType": {}, "Layout": {},
        "ShuffleMode": {}}


def test_a_field_and_a_value_added_to_the_proto_need_no_edit_in_request_py():
    """nearprep.proto plus a transform field and a CropMode value (with an
    older spelling), loaded into a pool of its own: request.py takes both."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from nearprep.request import build_request, request_keys
    fdp = descriptor_pb2.FileDescriptorProto.FromString(pb2.DESCRIPTOR.serialized_pb)
    transform = next(m for m in fdp.message_type if m.name == "Transform")
    transform.field.add(name="contrast_max_delta", number=99, json_name="contrastMaxDelta",
                        type=descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    crop = next(e for e in fdp.enum_type if e.name == "CropMode")
    zoom = crop.value.add(name="CROP_MODE_ZOOM", number=4)
    zoom.options.Extensions[pb2.deprecated_spelling].append("zm")
    pool = descriptor_pool.DescriptorPool()
    dp = descriptor_pb2.FileDescriptorProto()
    descriptor_pb2.DESCRIPTOR.CopyToProto(dp)
    pool.Add(dp)
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("nearprep.v1.StreamBatchesRequest")
    if hasattr(message_factory, "GetMessageClass"):
        cls = message_factory.GetMessageClass(desc)
    else:  # protobuf 3.x
        cls = message_factory.MessageFactory(pool).GetPrototype(desc)

    class Plus:
        StreamBatchesRequest = cls
        DTYPE_UINT8 = pb2.DTYPE_UINT8

    assert "contrast_max_delta" in request_keys(Plus)
    assert "contrast_max_delta" not in request_keys(pb2)
    for spelling in ("zoom", "ZOOM", "zm"):
        req = build_request(Plus, "d", contrast_max_delta=0.25, crop=spelling)
        assert req.transform.contrast_max_delta == 0.25 and req.transform.crop == 4
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        build_request(Plus, "d", contrast_max_delta="x")
    assert exc.value.field == "transform.contrast_max_delta"
    with pytest.raises(nearprep.InvalidArgumentError):
        build_request(pb2, "d", crop="zoom")
