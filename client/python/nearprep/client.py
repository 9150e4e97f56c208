"""nearprep.Client: datasets(), info() and batches() against one or more
nearprepd servers.

Resume. A stream that fails with UNAVAILABLE (daemon restarted, connection
reset, shutting down) is re-opened with exponential backoff at
start_batch = last received batch_index + 1 and start_position = that
batch's next_position, until `reconnect_deadline` seconds pass without a
batch. The daemon guarantees that such a stream sends exactly the bytes the
broken one would have sent, so no batch is lost or repeated.

Several targets (same dataset configured on each). The batch indices of the
requested shard are split into chunks of `chunk_batches` consecutive
batches; chunk c covers batches [start + c*C, start + (c+1)*C) and is
requested from one target as StreamBatches(start_batch = first batch,
max_batches = C). Up to one chunk per target is in flight, each assigned to
the least loaded live target, and the client yields batches in index order,
so the sequence is the one a single server sends. A chunk needs the shard
position where its first batch begins: the client sends the exact token when
the previous batch has been received, and otherwise a prediction (the last
known position + batch_size per batch in between, exact unless samples
were skipped). Before yielding a predicted chunk the prediction is checked
against the actual next_position of the preceding batch; on a mismatch
(a skipped sample in between) the chunk and all later ones are discarded and
requested again with the exact token. If a target fails, its chunk resumes
on another live target from the last batch it delivered (failover); the
failed target is retried after a backoff.

Connections. Client.connection(target) returns the nearprep.Connection of
one target: its grpc.Channel, a PreprocessorStub, the call metadata (the
bearer token), the message module and reset() for a channel a call broke
on. The transports (nearprep.transport) and nearprep.fleet.FleetClient
reach the client only through it, and a program may too (a call this
package does not wrap, with the client's TLS, token and channel options).

Thread-safety: a Client may be shared by threads (gRPC channels are
thread-safe); a BatchStream is consumed by one thread.
"""

import atexit
import collections
import logging
import os
import queue
import threading
import time
import weakref

import grpc

from nearprep import _stubs
from nearprep import transport as _transport
from nearprep.batch import WireError
from nearprep.dataset_info import DatasetInfo, DatasetList
from nearprep.errors import (DataLossError, InvalidArgumentError, NearprepError,
                             UnavailableError, from_rpc_error)
from nearprep.request import build_request, resume_point, validate_request
from nearprep.stats import Stats
from nearprep.target import check_target

_END = object()
_log = logging.getLogger("nearprep")


class WaitInfo:
    """What Client(on_wait=...) is told while a stream waits for a daemon:
    `targets` (the stream's), `waited` (seconds since the last batch, or
    since the stream opened), `deadline` (reconnect_deadline: the stream
    gives up when waited passes it), `attempts` (failed connections so far)
    and `error` (the last one's nearprep exception, or None)."""

    __slots__ = ("targets", "waited", "deadline", "attempts", "error")

    def __init__(self, targets, waited, deadline, attempts, error):
        self.targets = targets
        self.waited = waited
        self.deadline = deadline
        self.attempts = attempts
        self.error = error

    def __repr__(self):
        why = self.error.message if self.error is not None else "no answer yet"
        return (f"WaitInfo(targets={self.targets!r}, waited={self.waited:.1f}, "
                f"deadline={self.deadline:g}, attempts={self.attempts}, error={why!r})")

# gRPC's default minimum connect timeout (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS).
_MIN_CONNECT_TIMEOUT_MS = 20000

# Seconds close() (and interpreter exit) waits for cancelled reader threads.
# A cancelled reader leaves within milliseconds (the call's cancel wakes a
# blocked receive; the queue and backoff waits watch the cancel flag): the
# bound only keeps a wedged thread from hanging the caller.
_JOIN_TIMEOUT_S = 10.0

# Every reader thread still running, process-wide (see _stop_all_readers).
_live_runs = set()
_live_lock = threading.Lock()


def _join_runs(runs, timeout=_JOIN_TIMEOUT_S):
    """Joins the threads of `runs` (already cancelled) within `timeout`
    seconds in all, never the calling thread (a BatchStream collected by the
    garbage collector inside one of its own readers). True when all ended."""
    me = threading.current_thread()
    deadline = time.monotonic() + timeout
    ok = True
    for r in runs:
        t = r._thread
        if t is me or not t.is_alive():
            continue
        t.join(max(0.0, deadline - time.monotonic()))
        ok = ok and not t.is_alive()
    return ok


def _stop_all_readers():
    """At interpreter exit: cancels and joins every reader thread still
    running (a loop left without close(), or left by exiting). A reader is a
    daemon thread; left inside the native module's receive when the
    interpreter finalises, it would be killed as it takes the GIL back
    (pthread_exit), which aborts a C++ frame ("terminate called without an
    active exception")."""
    with _live_lock:
        # Not those a forked child inherited: their threads and calls belong
        # to the parent (gRPC objects must not be used across fork()).
        runs = [r for r in _live_runs if r._pid == os.getpid()]
    for r in runs:
        r.cancel()
    _join_runs(runs)


def _at_exit(fn):
    """Runs `fn` when the interpreter exits: before threading joins its
    non-daemon threads (and concurrent.futures its pools) when possible, so a
    pool thread inside a call is cancelled rather than waited for."""
    try:
        threading._register_atexit(fn)   # Python >= 3.9; runs first
    except (AttributeError, RuntimeError):
        atexit.register(fn)


_at_exit(_stop_all_readers)


def _retryable(err):
    """Whether a failed call is retried (a stream resumed, a unary call tried
    on the next target), by its status code alone, never its message text.
    gRPC documents UNAVAILABLE as a transient condition to retry with
    backoff (connection broken, server shutting down, keepalive timeout, no
    connection). CANCELLED reaches here only for a call this client did not
    cancel (the callers check that first): the server side tore it down
    (HTTP/2 RST_STREAM CANCEL). Any other code is the server's answer, or a
    broken invariant (INTERNAL), and goes to the caller."""
    try:
        code = err.code()
    except Exception:
        return False
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class _Targets:
    """Liveness and load of the targets. Thread-safe."""

    def __init__(self, names):
        self.names = list(names)
        self._lock = threading.Lock()
        self._down_until = [0.0] * len(names)
        self._load = [0] * len(names)

    def acquire(self, exclude=None):
        """Least loaded live target (not `exclude` if another is live), or
        None with the time the first one is retried."""
        with self._lock:
            now = time.monotonic()
            live = [i for i in range(len(self.names)) if self._down_until[i] <= now]
            if exclude is not None and len(live) > 1 and exclude in live:
                live.remove(exclude)
            if not live:
                return None, min(self._down_until) - now
            best = min(live, key=lambda i: (self._load[i], i))
            self._load[best] += 1
            return best, 0.0

    def release(self, i):
        with self._lock:
            self._load[i] -= 1

    def mark_down(self, i, seconds):
        with self._lock:
            self._down_until[i] = max(self._down_until[i], time.monotonic() + seconds)

    def mark_up(self, i):
        with self._lock:
            self._down_until[i] = 0.0


# Client keyword arguments that say how to reach and authenticate to a node:
# nearprep.fleet passes them to every node alike.
CREDENTIAL_ARGS = ("tls", "root_certificates", "private_key", "certificate_chain",
                   "tls_server_name", "token", "token_file")


def _bearer_token(token, token_file):
    """The bearer token to send (str) or None: `token`, else the first line
    of `token_file`, else $NEARPREP_TOKEN_FILE's, else $NEARPREP_TOKEN. The
    token itself never appears in an error message."""
    if token is not None and token_file is not None:
        raise InvalidArgumentError("token / token_file: give one, not both", field="token")
    field = "token"
    if token is None and token_file is None:
        token_file = os.environ.get("NEARPREP_TOKEN_FILE") or None
        field = "$NEARPREP_TOKEN_FILE"
        if token_file is None:
            token = os.environ.get("NEARPREP_TOKEN") or None
            field = "$NEARPREP_TOKEN"
    if token_file is not None:
        field = "token_file" if field == "token" else field
        try:
            with open(token_file, encoding="ascii", errors="replace") as f:
                token = f.readline()
        except OSError as e:
            raise InvalidArgumentError(f"{field}: cannot read {token_file!r}: {e.strerror}",
                                       field="token_file") from None
        if not token.strip():
            raise InvalidArgumentError(f"{field}: {token_file!r} has no token on its first line",
                                       field="token_file")
    if token is None:
        return None
    if isinstance(token, (bytes, bytearray)):
        token = bytes(token).decode("ascii", errors="replace")
    if not isinstance(token, str):
        raise InvalidArgumentError(f"token: must be a str, got {type(token).__name__}",
                                   field="token")
    token = token.strip()
    if not token or not all(0x21 <= ord(c) <= 0x7e for c in token):
        raise InvalidArgumentError(
            f"{field}: the token must be non-empty printable ASCII without spaces",
            field="token")
    return token


class Connection:
    """One target of a Client: its gRPC channel, stub and call metadata.

    Client.connection(target) returns it (one per target, kept by the
    client, so every caller shares the channel); nearprep.transport and
    nearprep.fleet make their calls through it, and so may a program that
    needs a call this package does not wrap.

    target      "host:port"
    channel     the grpc.Channel to the target, opened on first use with the
                client's credentials and options; after reset(), a new one
    stub        a nearprep.v1 PreprocessorStub on `channel` (protobuf in,
                protobuf out)
    metadata    the call metadata every call must send (the bearer token's
                `authorization` entry), or None
    token       the bearer token (str) or None: for channels grpcio does not
                make (the native module's)
    secure      True when the channel uses TLS
    pb2         the generated message module (nearprep.v1.nearprep_pb2)
    closed      True once the client is closed (`channel` then raises
                NearprepError)
    reset(channel)   drops `channel`, the one a call failed on, so the next
                call connects afresh; calls still running on it keep it
                alive; a channel already replaced is left alone
    unary(method, request, response_type, timeout=None)
                one unary call of nearprep.v1.Preprocessor (method "ListDatasets",
                "GetServerInfo"), the answer parsed into `response_type`;
                grpc.RpcError as grpcio raises it, DataLossError for an answer
                that does not parse. timeout None: the client's rpc_timeout.

    Thread-safety: thread-safe, like the Client.
    """

    def __init__(self, client, target):
        self._client = client
        self.target = target
        self._channel = None

    @property
    def pb2(self):
        return self._client._pb2

    @property
    def metadata(self):
        return self._client._metadata

    @property
    def token(self):
        return self._client._token

    @property
    def secure(self):
        return self._client._creds is not None

    @property
    def closed(self):
        return self._client._closed

    @property
    def channel(self):
        c = self._client
        with c._lock:
            if c._closed:
                raise NearprepError("client is closed")
            if self._channel is None:
                if c._creds is not None:
                    self._channel = grpc.secure_channel(self.target, c._creds,
                                                        options=c._options)
                else:
                    self._channel = grpc.insecure_channel(self.target, options=c._options)
            return self._channel

    @property
    def stub(self):
        return self._client._pb2_grpc.PreprocessorStub(self.channel)

    def reset(self, channel):
        with self._client._lock:
            if self._channel is channel:
                self._channel = None

    def unary(self, method, request, response_type, timeout=None):
        call = self.channel.unary_unary(
            f"/nearprep.v1.Preprocessor/{method}",
            request_serializer=lambda r: r.SerializeToString(),
            response_deserializer=None)
        raw = call(request, timeout=self._client.rpc_timeout if timeout is None else timeout,
                   metadata=self.metadata)
        try:
            return response_type.FromString(raw)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise DataLossError(
                f"malformed {response_type.DESCRIPTOR.full_name} from {self.target}: "
                f"{type(e).__name__}: {e}", target=self.target) from None

    def _take_channel(self):
        """Under the client's lock: the channel, forgotten (close())."""
        ch, self._channel = self._channel, None
        return ch

    def __repr__(self):
        return f"<nearprep.Connection {self.target}>"


class Client:
    """A client of one or more nearprepd servers.

    target               "host:port" or a list of them (same datasets on each)
    tls                  False (plaintext), True (TLS with the system roots or
                         root_certificates / private_key / certificate_chain
                         PEM bytes), bytes (the root CA PEM itself), or a
                         grpc.ChannelCredentials
    tls_server_name      check the server certificate against this name
                         instead of the target's host (IP targets, tests)
    token, token_file    a bearer token (or a file whose first line is one)
                         sent as `authorization: Bearer ...` on every call,
                         for daemons behind a TLS-terminating proxy
                         (docs/operations.md "Access control"). Neither:
                         $NEARPREP_TOKEN_FILE, else $NEARPREP_TOKEN, else
                         none. Keep tokens off command lines.
    rpc_timeout          seconds for the unary calls
    reconnect_deadline   seconds a stream keeps retrying without progress
    initial_backoff, max_backoff   exponential backoff between retries
    chunk_batches        batches per request when splitting over targets
    prefetch             batches read ahead of the caller per stream
    channel_options      extra grpc channel options
    max_receive_bytes    gRPC's receive limit per message in bytes (None: no
                         limit); a larger batch message ends its stream with
                         RESOURCE_EXHAUSTED before it is parsed. FleetClient
                         sizes it from its request
                         (nearprep.request.max_batch_message_bytes)
    native               receive streams with the native module (None: when
                         built and the channel is plaintext; see
                         nearprep.transport)
    lock_memory          native path: mlock the reusable receive buffers
    on_wait              called with a nearprep.WaitInfo every
                         `wait_report_interval` seconds while a stream waits
                         for a daemon (reconnecting, or never connected yet),
                         from the stream's reader thread; the same report is
                         logged as a warning on the "nearprep" logger
    wait_report_interval seconds between those reports (default 5)
    fail_fast            a stream that has received nothing yet fails at the
                         first UNAVAILABLE (connection refused, no route,
                         daemon shutting down) with UnavailableError, instead
                         of retrying for reconnect_deadline; once a batch has
                         arrived, breaks are retried as usual
    """

    def __init__(self, target="localhost:7070", *, tls=False,
                 root_certificates=None, private_key=None,
                 certificate_chain=None, tls_server_name=None, token=None,
                 token_file=None, rpc_timeout=10.0,
                 reconnect_deadline=60.0, initial_backoff=0.1, max_backoff=5.0,
                 chunk_batches=16, prefetch=2, channel_options=(), native=None,
                 lock_memory=False, on_wait=None, wait_report_interval=5.0,
                 fail_fast=False, max_receive_bytes=None):
        targets = [target] if isinstance(target, str) else list(target)
        if not targets or not all(isinstance(t, str) and t for t in targets):
            raise InvalidArgumentError(
                f"target: must be a non-empty 'host:port' string or list of them, "
                f"got {target!r}", field="target")
        for t in targets:
            check_target(t)
        for name, value in (("rpc_timeout", rpc_timeout),
                            ("reconnect_deadline", reconnect_deadline),
                            ("initial_backoff", initial_backoff),
                            ("max_backoff", max_backoff),
                            ("wait_report_interval", wait_report_interval)):
            if not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidArgumentError(f"{name}: must be a number >= 0, got {value!r}",
                                           field=name)
        for name, value in (("chunk_batches", chunk_batches), ("prefetch", prefetch)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{name}: must be an integer >= 1, got {value!r}",
                                           field=name)
        if on_wait is not None and not callable(on_wait):
            raise InvalidArgumentError(f"on_wait: must be callable, got {on_wait!r}",
                                       field="on_wait")
        self._pb2, self._pb2_grpc = _stubs.load()
        self.targets = targets
        self.on_wait = on_wait
        self.wait_report_interval = float(wait_report_interval)
        self.fail_fast = bool(fail_fast)
        self.rpc_timeout = float(rpc_timeout)
        self.reconnect_deadline = float(reconnect_deadline)
        self.initial_backoff = float(initial_backoff)
        self.max_backoff = float(max_backoff)
        self.chunk_batches = chunk_batches
        self.prefetch = prefetch
        self.channel_options = tuple(channel_options)  # the caller's extra options
        self._token = _bearer_token(token, token_file)
        # Call metadata every call carries (the bearer token); never logged.
        self._metadata = (("authorization", "Bearer " + self._token),) if self._token else None
        if isinstance(tls, grpc.ChannelCredentials):
            self._creds = tls
        elif isinstance(tls, (bytes, bytearray)):
            if root_certificates is not None:
                raise InvalidArgumentError(
                    "tls: give the root CA either as tls=<PEM bytes> or as "
                    "root_certificates, not both", field="tls")
            self._creds = grpc.ssl_channel_credentials(
                bytes(tls), private_key, certificate_chain)
        elif isinstance(tls, str):
            raise InvalidArgumentError(
                "tls: expects True, PEM bytes or grpc.ChannelCredentials, not a "
                "str (read the CA file: tls=open(path, 'rb').read())", field="tls")
        elif tls:
            self._creds = grpc.ssl_channel_credentials(
                root_certificates, private_key, certificate_chain)
        else:
            self._creds = None
        if max_receive_bytes is not None and (
                not isinstance(max_receive_bytes, int) or max_receive_bytes < 1):
            raise InvalidArgumentError(
                f"max_receive_bytes: must be a positive int or None (no limit), "
                f"got {max_receive_bytes!r}", field="max_receive_bytes")
        # None: -1 (no limit), gRPC's own for "unlimited"; above 2^31 - 1
        # gRPC cannot express a limit either.
        self.max_receive_bytes = (-1 if max_receive_bytes is None or max_receive_bytes > 2**31 - 1
                                  else max_receive_bytes)
        self._options = [
            ("grpc.max_receive_message_length", self.max_receive_bytes),
            ("grpc.max_send_message_length", -1),
            # Reconnect soon after a daemon restarts (first retry after
            # 0.1 s, then at most every 1 s)...
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # ...but give each connection attempt (TCP, TLS, the HTTP/2
            # SETTINGS frame) as long as a unary call may take, and at least
            # gRPC's default 20 s: this option is gRPC's minimum *connect
            # timeout*, and 100 ms here failed every call to a daemon that
            # was busy or paused for a moment.
            ("grpc.min_reconnect_backoff_ms",
             max(_MIN_CONNECT_TIMEOUT_MS, int(self.rpc_timeout * 1000))),
            ("grpc.enable_retries", 0),
            # Own subchannels per channel, so that Connection.reset() really
            # starts a fresh connection instead of waiting out the shared
            # subchannel's reconnect backoff.
            ("grpc.use_local_subchannel_pool", 1),
        ] + ([("grpc.ssl_target_name_override", tls_server_name)]
             if tls_server_name else []) + list(channel_options)
        self._lock = threading.Lock()
        self._connections = {}   # target -> Connection
        self._stats = Stats()
        self._closed = False
        self._streams = weakref.WeakSet()   # live BatchStreams, closed by close()
        if _transport.want_native(native, self._creds is not None, channel_options):
            self._transport = _transport.NativeTransport(self, lock_memory=lock_memory)
        else:
            self._transport = _transport.GrpcioTransport(self)

    @property
    def transport(self):
        """"native" or "grpcio": how this client receives batches."""
        return self._transport.name

    # -- connections ------------------------------------------------------

    def connection(self, target=None):
        """The Connection to `target` (default: the first target): its
        channel, stub and call metadata (see nearprep.Connection). One per
        target, made on first use; any "host:port" may be asked for, also
        one outside `targets` (nearprep.fleet probes its nodes this way)."""
        if target is None:
            target = self.targets[0]
        with self._lock:
            conn = self._connections.get(target)
            if conn is not None:
                return conn
        check_target(target)
        with self._lock:
            return self._connections.setdefault(target, Connection(self, target))

    def close(self):
        """Closes the streams still open (cancelled, their reader threads
        joined) and the channels."""
        with self._lock:
            self._closed = True
            channels = [c._take_channel() for c in self._connections.values()]
            streams = list(self._streams)
        for s in streams:
            s.close()
        self._transport.close()
        for ch in channels:
            if ch is not None:
                ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- unary calls ------------------------------------------------------

    def _unary(self, method, request, response_type, target=None):
        """Calls on `target`, or on each target in turn until one answers.
        The answer is received as bytes and parsed here, so one that does
        not parse is a DataLossError naming the message type (grpcio's own
        deserializer gives an INTERNAL error without saying what)."""
        targets = [target] if target else self.targets
        last = None
        for t in targets:
            try:
                return self.connection(t).unary(method, request, response_type)
            except grpc.RpcError as e:
                last = from_rpc_error(e, t)
                if not _retryable(e):
                    raise last from None
        raise last

    def datasets(self, target=None):
        """The served datasets: a list of nearprep.DatasetInfo (name, format,
        num_samples, num_classes, class_names, num_refused, ... : every
        field of nearprep.v1.DatasetInfo as an attribute, the message itself
        as `.proto`), printed one line per dataset."""
        resp = self._unary("ListDatasets", self._pb2.ListDatasetsRequest(),
                           self._pb2.ListDatasetsResponse, target)
        return DatasetList(DatasetInfo(d) for d in resp.datasets)

    def dataset(self, name, target=None):
        """The nearprep.DatasetInfo called `name`; DatasetNotFoundError if none."""
        from nearprep.errors import DatasetNotFoundError
        for d in self.datasets(target):
            if d.name == name:
                return d
        raise DatasetNotFoundError(f"dataset: no dataset named {name!r}", field="dataset")

    def info(self, target=None):
        """nearprep.v1.ServerInfo of `target` (default: the first that answers)."""
        return self._unary("GetServerInfo", self._pb2.GetServerInfoRequest(),
                           self._pb2.ServerInfo, target)

    # -- streaming --------------------------------------------------------

    def request(self, dataset, **kwargs):
        """The validated StreamBatchesRequest batches() would send."""
        return build_request(self._pb2, dataset, **kwargs)

    def batches(self, dataset=None, *, request=None, **kwargs):
        """Streams one epoch's shard as Batch objects (a BatchStream).

        dataset          dataset name (ListDatasets)
        batch_size       samples per batch (default 32)
        seed, epoch, shuffle, shard_index, num_shards
        start_batch, start_position, max_batches, drop_remainder
        resume_token     Batch.resume_token of the last batch received: resume
                         right after it (the daemon refuses a token of
                         another stream, naming the field that differs)
        height, width    output size (default 224 x 224)
        crop             "none" | "center" | "random_resized" | "resize_center"
        center_fraction, scale=(min, max), ratio=(min, max)
        resize_shorter_side  resize_center: the shorter side's new size
                         (default 256; >= max(height, width))
        flip_probability, brightness_max_delta, saturation=(lower, upper)
        contrast_lower, contrast_upper, hue_max_delta, gamma, gain
                         TF_COMPAT's random_contrast, random_hue, adjust_gamma
        color_ops        their order, e.g. ["brightness", "contrast", "hue"]
                         (default: flip, gamma, brightness, contrast,
                         saturation, hue; docs/protocol.md)
        clip (default True), mean=(r, g, b), std=(r, g, b)
        fidelity         "tf_compat" | "fast" | "torchvision" (torchvision
                         0.14's transforms on PIL images, bit for bit;
                         nearprep.torch.imagenet_train / imagenet_eval)
        dtype            "float32" | "float16" | "bfloat16" | "uint8"
        layout           "NHWC" | "NCHW"
        compression      "none" | "delta_zstd" | "gradient_zstd" (uint8 only;
                         see ServerInfo.compressions); compression_level
                         0 (= 1) or -1000..19. Batches arrive decoded.
        error_policy     "skip" | "fail_stream"
        include_params   fill Batch.params
        Or pass a ready nearprep.v1.StreamBatchesRequest as `request`.
        """
        if request is not None:
            if dataset is not None or kwargs:
                raise InvalidArgumentError(
                    "request: give either a request message or keyword arguments",
                    field="request")
            req = self._pb2.StreamBatchesRequest()
            req.CopyFrom(request)
            validate_request(req)
        else:
            req = build_request(self._pb2, dataset, **kwargs)
        stream = BatchStream(self, req)
        with self._lock:
            self._streams.add(stream)
        return stream

    def stats(self):
        """Stats over every stream of this client that has ended or been
        closed (a live stream's own figures: BatchStream.stats)."""
        return self._stats


class _ChunkRun:
    """Reads batches [start, start+count) (count None: to the end) of the
    request into a queue, failing over between targets. One thread.

    The thread holds no reference to its BatchStream (only the client,
    request, targets and stats), so a stream the caller drops is collected
    and its __del__ stops the thread."""

    def __init__(self, stream, start, position, count, predicted):
        self.client = stream.client
        self.request = stream.request
        self.targets = stream.targets
        self.stats = stream.stats
        self.start = start
        self.position = position
        self.count = count
        self.predicted = predicted
        self.delivered = 0   # batches the consumer took
        bound = self.client.prefetch + 1
        if count is not None and count + 1 <= self.client.chunk_batches + 1:
            bound = count + 1
        self.q = queue.Queue(maxsize=bound)
        self.cancelled = threading.Event()
        self._call = None
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"nearprep-chunk-{start}")
        with _live_lock:
            _live_runs.add(self)
        try:
            self._thread.start()
        except BaseException:
            with _live_lock:
                _live_runs.discard(self)
            raise

    def cancel(self):
        self.cancelled.set()
        if os.getpid() != self._pid:
            return  # a forked child's copy: the call is the parent's
        call = self._call
        if call is not None:
            call.cancel()

    def _put(self, item):
        while not self.cancelled.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fail(self, err):
        """Ends this chunk with `err` for the consumer, cancelling the call."""
        call = self._call
        if call is not None:
            call.cancel()
        self._put(err)

    def _run(self):
        try:
            self._read()
        except BaseException as e:  # noqa: BLE001 - never leave the consumer waiting
            self._put(e if isinstance(e, NearprepError) else
                      NearprepError(f"reader thread failed: {type(e).__name__}: {e}",
                                    code="INTERNAL"))
        finally:
            with _live_lock:
                _live_runs.discard(self)

    def _read(self):
        s = self
        client = s.client
        targets = s.targets
        next_b, pos = self.start, self.position
        # The token bound to (next_b, pos), sent on each (re)connection
        # while known: the request's own, then each batch's.
        token = s.request.resume_token or None
        if token is not None and resume_point(token) != (next_b, pos):
            token = None
        remaining = self.count
        backoff = client.initial_backoff
        last_progress = time.monotonic()
        last_error = None
        previous = None
        received = False
        waits = _WaitReporter(client)
        while not self.cancelled.is_set():
            if remaining == 0:
                self._put(_END)
                return
            waits.tick(last_progress, last_error)
            idx, wait = targets.acquire(exclude=previous)
            if idx is None:
                left = client.reconnect_deadline - (time.monotonic() - last_progress)
                if left <= 0:
                    self._put(_gave_up(client, last_error, last_progress))
                    return
                self.cancelled.wait(min(max(wait, 0.01), left, waits.next_in(last_progress)))
                continue
            target = targets.names[idx]
            if previous is not None and idx != previous:
                s.stats.count("failovers")
            req = s.request.__class__()
            req.CopyFrom(s.request)
            req.start_batch = next_b
            req.start_position = pos
            if token is not None:
                req.resume_token = token
            else:
                req.ClearField("resume_token")
            req.max_batches = remaining or 0
            channel = None
            try:
                channel, call = client._transport.open(target, req)
                self._call = call
                if self.cancelled.is_set():
                    call.cancel()
                for batch in call:
                    if batch.index != next_b:
                        raise NearprepError(
                            f"server {target} sent batch {batch.index}, expected {next_b}",
                            code="INTERNAL", target=target)
                    if not self._put(batch):
                        return
                    targets.mark_up(idx)
                    next_b += 1
                    pos = batch.next_position
                    token = batch.resume_token or None
                    received = True
                    waits.progress()
                    last_progress = time.monotonic()
                    backoff = client.initial_backoff
                    if remaining is not None:
                        remaining -= 1
                        if remaining == 0:
                            break
                self._put(_END)
                return
            except grpc.RpcError as e:
                if self.cancelled.is_set():
                    return
                err = from_rpc_error(e, target)
                if not _retryable(e):
                    self._put(err)
                    return
                if client.fail_fast and not received and self.start == s.request.start_batch:
                    self._put(UnavailableError(
                        f"{err.message} (fail_fast: no batch received yet, not retried)",
                        target=target))
                    return
                last_error = err
                waits.attempts += 1
                s.stats.count("reconnects")
                client._transport.reset(target, channel)
                targets.mark_down(idx, backoff)
                backoff = min(backoff * 2, client.max_backoff)
                previous = idx
                if time.monotonic() - last_progress > client.reconnect_deadline:
                    self._put(_gave_up(client, err, last_progress))
                    return
            except NearprepError as e:
                self._fail(e)
                return
            except Exception as e:  # noqa: BLE001 - any parse failure
                # A message that does not parse (WireError, protobuf's
                # DecodeError, ...) is data lost: the consumer gets the error
                # and the call is cancelled, never a silent end or a hang.
                what = "" if isinstance(e, WireError) else f"{type(e).__name__}: "
                self._fail(DataLossError(
                    f"malformed batch from {target}: {what}{e}", target=target))
                return
            finally:
                self._call = None
                targets.release(idx)


class _WaitReporter:
    """Client.on_wait and the "nearprep" logger's warnings while a reader
    waits: one report per wait_report_interval without a batch."""

    def __init__(self, client):
        self.client = client
        self.attempts = 0
        self.reported = 0   # reports since the last batch

    def progress(self):
        if self.reported:
            _log.warning("nearprep: %s answers again", ", ".join(self.client.targets))
        self.reported = 0
        self.attempts = 0

    def next_in(self, since):
        """Seconds until the next report is due."""
        due = since + self.client.wait_report_interval * (self.reported + 1)
        return max(due - time.monotonic(), 0.01)

    def tick(self, since, error):
        client = self.client
        waited = time.monotonic() - since
        if waited < client.wait_report_interval * (self.reported + 1) or self.attempts == 0:
            return
        self.reported += 1
        info = WaitInfo(list(client.targets), waited, client.reconnect_deadline,
                        self.attempts, error)
        why = error.message if error is not None else "no answer"
        _log.warning("nearprep: waiting for %s: %.0f s without a batch, %d failed "
                     "attempt(s), giving up after reconnect_deadline %g s: %s",
                     ", ".join(client.targets), waited, self.attempts,
                     client.reconnect_deadline, why)
        if client.on_wait is not None:
            try:
                client.on_wait(info)
            except Exception:  # noqa: BLE001 - a callback never breaks the stream
                _log.exception("nearprep: on_wait raised")


def _gave_up(client, last_error, since):
    """The UnavailableError that ends a stream whose retries ran out: the
    real time spent (`since`: the last progress), the targets and why the
    last attempt failed."""
    waited = time.monotonic() - since
    names = ", ".join(client.targets)
    why = last_error.message if last_error is not None else "no target is reachable"
    return UnavailableError(
        f"gave up reconnecting to {names} after {waited:.1f} s without a batch "
        f"(reconnect_deadline {client.reconnect_deadline:g} s): {why}",
        target=getattr(last_error, "target", None))


class BatchStream:
    """Iterator of Batch objects (see Client.batches). Use as an iterator,
    optionally in a `with` block; close() cancels the server streams."""

    def __init__(self, client, request):
        self.client = client
        self.request = request
        self.targets = _Targets(client.targets)
        self.stats = Stats()
        self._chunked = len(client.targets) > 1
        self._next_b = request.start_batch
        # Shard position where batch _next_b begins; None: unknown (the
        # daemon recomputes it when sent 0).
        if request.start_batch == 0:
            self._known_pos = 0
        else:
            self._known_pos = request.start_position or None
        self._limit = (request.start_batch + request.max_batches
                       if request.max_batches else None)
        self._chunks = collections.deque()
        self._next_assign = self._next_b
        self._done = False
        self._last_return = None
        self._merged = False
        self._cancelled = []   # chunks cancelled early: close() joins them

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Garbage collection (a loop left without close()): the same as
        # close(); never raises, never joins the thread it runs in.
        try:
            self.close()
        except Exception:
            pass

    def close(self):
        """Cancels the server streams and waits (at most _JOIN_TIMEOUT_S) for
        the reader threads to end, so none is left inside a receive call.
        Safe to call again, from __del__, and from any thread."""
        chunks = list(self._chunks) + self._cancelled
        self._chunks.clear()
        self._cancelled = []
        self._done = True
        for c in chunks:
            c.cancel()
        _join_runs(chunks)
        if not self._merged:
            self._merged = True
            self.client._stats.merge(self.stats)

    def _spawn(self):
        want = len(self.client.targets)
        while (len(self._chunks) < want and
               (self._limit is None or self._next_assign < self._limit)):
            start = self._next_assign
            if not self._chunked:
                count = None if self._limit is None else self._limit - start
            else:
                count = self.client.chunk_batches
                if self._limit is not None:
                    count = min(count, self._limit - start)
            if start == self._next_b:
                position, predicted = self._known_pos or 0, False
            elif self._known_pos is None:
                position, predicted = 0, False   # daemon recomputes: exact
            else:
                position = self._known_pos + (start - self._next_b) * self.request.batch_size
                predicted = True
            self._chunks.append(_ChunkRun(self, start, position, count, predicted))
            self._next_assign = start + (count if count is not None else 1 << 62)
            if count is None:
                break

    def _drop_chunks(self):
        """Cancels every chunk in flight (joined by close())."""
        self._cancelled = [c for c in self._cancelled if c._thread.is_alive()]
        for c in self._chunks:
            c.cancel()
            self._cancelled.append(c)
        self._chunks.clear()

    def _discard_from_head(self):
        self._drop_chunks()
        self._next_assign = self._next_b

    def __next__(self):
        entered = time.monotonic()
        try:
            batch = self._next_batch()
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        now = time.monotonic()
        compute = entered - self._last_return if self._last_return is not None else None
        self.stats.add_batch(batch, now - entered, compute)
        self._last_return = now
        return batch

    def _next_batch(self):
        while True:
            if self._done or (self._limit is not None and self._next_b >= self._limit):
                raise StopIteration
            self._spawn()
            if not self._chunks:
                raise StopIteration
            ch = self._chunks[0]
            if ch.delivered == 0 and ch.predicted:
                if ch.position != self._known_pos:
                    # A sample was skipped before this chunk: ask again with
                    # the exact token.
                    self.stats.count("respeculations")
                    self._discard_from_head()
                    continue
                ch.predicted = False
            item = ch.q.get()
            if item is _END:
                self._chunks.popleft()
                if ch.count is None or ch.delivered < ch.count:
                    self._done = True   # the shard ended inside this chunk
                    self._drop_chunks()
                continue
            if isinstance(item, BaseException):
                if (self._chunked and ch.delivered == 0 and
                        ch.start > self.request.start_batch and
                        getattr(item, "code", "") in ("OUT_OF_RANGE", "INVALID_ARGUMENT") and
                        getattr(item, "field", None) in ("start_batch", "start_position")):
                    # A chunk that starts exactly past the end of the shard.
                    self._done = True
                    continue
                raise item
            ch.delivered += 1
            self._next_b += 1
            self._known_pos = item.next_position
            if ch.count is not None and ch.delivered == ch.count:
                self._chunks.popleft()
            return item
