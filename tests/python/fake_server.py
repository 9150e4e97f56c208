"""An in-process Python stand-in for nearprepd's StreamBatches semantics,
to test the client's resume / multi-target logic without the daemon.

Samples 0..n-1 in manifest order (no shuffle); shard k of n_shards takes
positions k, k + n_shards, ...; positions in `bad` fail (ERROR_POLICY_SKIP:
left out, listed in the batch's errors). Each image is 1x1x3 uint8 holding
the sample id's low bytes, so the bytes identify the sample.
"""

import threading
import time
from concurrent import futures

import grpc
import numpy as np

from nearprep import _stubs

pb2, pb2_grpc = _stubs.load()


def plan(num_samples, shard_index, num_shards):
    return list(range(shard_index, num_samples, num_shards))


def all_batches(num_samples, batch_size, bad=(), shard_index=0, num_shards=1):
    """[(sample_ids, next_position)] of the whole shard."""
    ids = plan(num_samples, shard_index, num_shards)
    out, cur = [], []
    for pos, sid in enumerate(ids):
        if sid in bad:
            continue
        cur.append(sid)
        if len(cur) == batch_size:
            out.append((cur, pos + 1))
            cur = []
    if cur:
        out.append((cur, len(ids)))
    return out


class FakePreprocessor(pb2_grpc.PreprocessorServicer):
    def __init__(self, num_samples, bad=(), abort_after=None,
                 abort_code=grpc.StatusCode.UNAVAILABLE, abort_message="going away"):
        self.num_samples = num_samples
        self.bad = set(bad)
        self.abort_after = abort_after  # batches sent before the abort
        self.abort_code = abort_code
        self.abort_message = abort_message
        self.aborts = 0
        self.unary_abort = None  # (code, message) makes ListDatasets fail
        self.sent = 0
        self.requests = []
        self.lock = threading.Lock()

    def ListDatasets(self, request, context):
        if self.unary_abort:
            context.abort(*self.unary_abort)
        return pb2.ListDatasetsResponse(datasets=[pb2.DatasetInfo(
            name="fake", format="image_folder", num_samples=self.num_samples)])

    def GetServerInfo(self, request, context):
        return pb2.ServerInfo(version="fake", backend="cpu")

    def StreamBatches(self, req, context):
        with self.lock:
            self.requests.append(req)
        if req.dataset != "fake":
            context.abort(grpc.StatusCode.NOT_FOUND, f"dataset: unknown '{req.dataset}'")
        if req.transform.center_fraction > 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "transform.center_fraction: must be in (0, 1], got 2")
        ids = plan(self.num_samples, req.shard_index, req.num_shards or 1)
        pos = req.start_position
        if req.start_batch > 0 and pos == 0:  # recompute
            done = 0
            for p, sid in enumerate(ids):
                if done == req.start_batch * req.batch_size:
                    break
                if sid not in self.bad:
                    done += 1
                pos = p + 1
        index = req.start_batch
        sent_here = 0
        while pos < len(ids):
            if req.max_batches and sent_here >= req.max_batches:
                return
            samples, errors = [], []
            while pos < len(ids) and len(samples) < req.batch_size:
                sid = ids[pos]
                if sid in self.bad:
                    errors.append(pb2.SampleError(sample_id=sid, path=f"{sid}.jpg",
                                                  code="DATA_LOSS", message="corrupt"))
                else:
                    samples.append(sid)
                pos += 1
            if not samples:
                return
            with self.lock:
                if self.abort_after is not None and self.sent >= self.abort_after:
                    self.aborts += 1
                    context.abort(self.abort_code, self.abort_message)
                self.sent += 1
            img = np.array([[[[s & 255, (s >> 8) & 255, 7]]] for s in samples], np.uint8)
            yield pb2.Batch(
                epoch=req.epoch, batch_index=index, labels=[s % 5 for s in samples],
                sample_ids=samples, errors=errors, next_position=pos,
                tensor=pb2.Tensor(shape=list(img.shape), dtype=pb2.DTYPE_UINT8,
                                  data=img.tobytes()))
            index += 1
            sent_here += 1


class FakeServer:
    def __init__(self, servicer, port=0):
        self.servicer = servicer
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb2_grpc.add_PreprocessorServicer_to_server(servicer, self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        self.server.stop(None).wait()


class Relay:
    """A gRPC server in front of a real daemon (`upstream`): it passes the
    Preprocessor calls through byte for byte and logs, in one list shared by
    every relay given the same `log` (with its lock), each StreamBatches
    request's ids and each response message's ids (samples and errors), so a
    test can count what a client asked each node for and what it received.

    die_after: after this many response messages in total the relay acts as
    a dead node: the call in progress and every later call (ListDatasets
    too) end with UNAVAILABLE. silent=True: a dead relay answers nothing
    instead (no message, no status, no reset: a node that stopped answering)
    until the caller gives up (its deadline or cancel), at most
    `silent_max` seconds, then UNAVAILABLE. Log entries: ("request", relay,
    call, ids), ("deliver", relay, call, ids), ("abort", relay, call): the
    relay stopped serving the call (at once, or silently).

    A lying relay (issue 23): fail_calls, a list of (grpc.StatusCode,
    message): the first len(fail_calls) StreamBatches calls end at once with
    those statuses (logged as "abort"); rewrite(batch, request, call, index)
    -> Batch or None: each response message (a parsed nearprep.v1.Batch, its
    request, the call's number and the message's) is replaced by what it
    returns (None: passed on unchanged)."""

    SERVICE = "nearprep.v1.Preprocessor"

    def __init__(self, upstream, log, lock, die_after=None, silent=False, silent_max=30.0,
                 fail_calls=(), rewrite=None):
        self.upstream = upstream
        self.fail_calls = list(fail_calls)
        self.rewrite = rewrite
        self.log, self.lock = log, lock
        self.die_after = die_after
        self.silent, self.silent_max = silent, silent_max
        self.messages = 0
        self.calls = 0
        self.dead = False
        self.channel = grpc.insecure_channel(
            upstream, options=[("grpc.max_receive_message_length", -1)])
        handlers = {
            "ListDatasets": grpc.unary_unary_rpc_method_handler(self._unary("ListDatasets")),
            "GetServerInfo": grpc.unary_unary_rpc_method_handler(self._unary("GetServerInfo")),
            "StreamBatches": grpc.unary_stream_rpc_method_handler(self._stream),
        }
        # The daemon's ping policy (server/service/server.cc): pings down to
        # every 0.5 s while calls are open. With grpcio's default (5 min) a
        # call silent for ~8 s under the C++ FleetClient's 2 s keepalive
        # ends with GOAWAY "too_many_pings" (UNAVAILABLE: a dead node).
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                  options=[("grpc.max_send_message_length", -1),
                                           ("grpc.http2.min_ping_interval_without_data_ms",
                                            500)])
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(self.SERVICE, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @staticmethod
    def _caller_timeout(context):
        """The time left of the caller's deadline, for the upstream call, or
        None when the caller set no deadline (the C++ client's streams: it
        relies on keepalive instead). grpcio reports "no deadline" as
        time_remaining() of about 9.2e18 s, and passing that as a timeout
        overflows into a deadline in the past: the upstream call ends at once
        with DEADLINE_EXCEEDED, which the relay passed on, so every node
        looked dead to a client that sets no stream deadline."""
        left = context.time_remaining()
        return left if left < 1e9 else None

    def _unary(self, method):
        fn = self.channel.unary_unary(f"/{self.SERVICE}/{method}")

        def handle(raw, context):
            if self.dead:
                self._die(context, "relay: node is dead")
            try:
                return fn(raw, timeout=10)
            except grpc.RpcError as e:
                context.abort(e.code(), e.details())
        return handle

    def _stream(self, raw, context):
        req = pb2.StreamBatchesRequest.FromString(raw)
        with self.lock:
            call = self.calls
            self.calls += 1
            self.log.append(("request", self.target, call, list(req.sample_ids)))
            dead = self.dead
            fail = self.fail_calls.pop(0) if self.fail_calls else None
            if fail is not None:
                self.log.append(("abort", self.target, call))
        if fail is not None:
            context.abort(*fail)
        if dead:
            with self.lock:
                self.log.append(("abort", self.target, call))
            self._die(context, "relay: node is dead")
        upstream = self.channel.unary_stream(f"/{self.SERVICE}/StreamBatches")(
            raw, timeout=self._caller_timeout(context))
        try:
            for index, msg in enumerate(upstream):
                if self.rewrite is not None:
                    lie = self.rewrite(pb2.Batch.FromString(msg), req, call, index)
                    if lie is not None:
                        msg = lie.SerializeToString()
                with self.lock:
                    if self.die_after is not None and self.messages >= self.die_after:
                        self.dead = True
                    dying = self.dead
                    if dying:
                        self.log.append(("abort", self.target, call))
                        upstream.cancel()
                    else:
                        b = pb2.Batch.FromString(msg)
                        self.log.append(("deliver", self.target, call,
                                         list(b.sample_ids) + [e.sample_id for e in b.errors]))
                        self.messages += 1
                if dying:  # outside the lock: silent relays wait here
                    self._die(context, "relay: node died mid-answer")
                yield msg
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                context.abort(e.code(), e.details())

    def _die(self, context, message):
        if self.silent:
            t_end = time.monotonic() + self.silent_max
            while context.is_active() and time.monotonic() < t_end:
                time.sleep(0.01)
        context.abort(grpc.StatusCode.UNAVAILABLE, message)

    def stop(self):
        self.server.stop(None).wait()
        self.channel.close()
