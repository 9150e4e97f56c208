"""How a BatchStream receives StreamBatches: grpcio or the native module.

Both transports give the same thing to nearprep.client: `open(target,
request)` returns a call object that iterates Batch objects, has cancel(),
and raises grpc.RpcError (with code() and details()) when the stream fails,
so resume, failover and stats logic is shared and identical.
`open(target, request, timeout=seconds)` gives the call a deadline on both
(grpcio's `timeout=`; the native stream's StreamOptions::timeout): a server
that stops answering ends it with DEADLINE_EXCEEDED (nearprep.fleet uses it).

Both take what they need of the Client through its public connection
object (Client.connection(target): channel, metadata, token, pb2, reset;
see nearprep.client.Connection), never its private attributes.

- GrpcioTransport: grpcio's unary_stream on the Connection's channel, with a
  raw-bytes deserializer;
  nearprep.batch.parse_batch wraps the tensor without copying it (grpcio
  itself copies each message a few times under the GIL).
- NativeTransport: nearprep._native (client/python/native, built by CMake
  when pybind11 is available): the C++ client receives with the GIL
  released and copies the tensor once, from gRPC's receive buffers into a
  page-aligned buffer of a reusable pool; `images` is a writable numpy view
  of that buffer, which returns to the pool when no array uses it. Plaintext
  channels only.

Choice (Client(native=...)): None ("auto", the default) uses the native
module when it is importable and the channel is plaintext without custom
channel_options; $NEARPREP_NATIVE=0 / 1 overrides "auto"; True requires it;
False never uses it.

Thread-safety: transports are shared by a client's streams (thread-safe);
a call object is iterated by one thread, cancel() from any.
"""

import os
import sys
import threading

import grpc

from nearprep.batch import buffer_batch, parse_batch
from nearprep.errors import InvalidArgumentError

_STREAM_METHOD = "/nearprep.v1.Preprocessor/StreamBatches"


def _deepbind_flags():
    """dlopen flags for importing nearprep._native, or None to keep the
    defaults. RTLD_DEEPBIND: the module and the system gRPC C++ / protobuf /
    Abseil libraries it loads bind to one another first, not to same-named
    symbols that TensorFlow exported globally (TF loads its own copies with
    RTLD_GLOBAL; with `import tensorflow` before the first native stream, the
    stream crashed with SIGSEGV). Not under a sanitizer runtime (it refuses
    DEEPBIND) nor with NEARPREP_NATIVE_DEEPBIND=0."""
    if not hasattr(os, "RTLD_DEEPBIND") or "nearprep._native" in sys.modules:
        return None
    if os.environ.get("NEARPREP_NATIVE_DEEPBIND", "1") == "0":
        return None
    try:
        with open("/proc/self/maps") as f:
            if any("libasan" in line or "libtsan" in line for line in f):
                return None
    except OSError:
        pass
    return sys.getdlopenflags() | os.RTLD_DEEPBIND


def load_native():
    """The nearprep._native module, or None when it is not built."""
    flags = _deepbind_flags()
    if flags is not None:
        # Process-wide until restored: an extension another thread imports
        # meanwhile gets DEEPBIND too (harmless for self-contained modules).
        old = sys.getdlopenflags()
        sys.setdlopenflags(flags)
    try:
        from nearprep import _native
    except ImportError:
        return None
    finally:
        if flags is not None:
            sys.setdlopenflags(old)
    return _native


def want_native(native, secure, channel_options):
    """Decides the transport (see the module docstring). True / False."""
    if native is None:
        env = os.environ.get("NEARPREP_NATIVE", "").strip().lower()
        if env in ("0", "false", "no", "off"):
            return False
        if env in ("1", "true", "yes", "on"):
            native = True
    if native is None:
        return load_native() is not None and not secure and not channel_options
    if not native:
        return False
    if load_native() is None:
        raise InvalidArgumentError(
            "native: nearprep._native is not built (cmake option "
            "NEARPREP_WITH_PYTHON_NATIVE, needs pybind11-dev and python3-dev)",
            field="native")
    if secure or channel_options:
        raise InvalidArgumentError(
            "native: the native receive path supports plaintext channels without "
            "channel_options only; use native=False", field="native")
    return True


class _GrpcioCall:
    def __init__(self, call, pb2, target):
        self._call = call
        self._pb2 = pb2
        self._target = target

    def __iter__(self):
        for raw in self._call:
            yield parse_batch(raw, self._pb2, self._target)

    def cancel(self):
        self._call.cancel()


class GrpcioTransport:
    name = "grpcio"

    def __init__(self, client):
        self._client = client

    def open(self, target, request, timeout=None):
        """(channel, call): `channel` is what reset(target, channel) takes;
        `timeout`: seconds for the whole call, None for no deadline."""
        conn = self._client.connection(target)
        channel = conn.channel
        method = channel.unary_stream(
            _STREAM_METHOD, request_serializer=lambda r: r.SerializeToString(),
            response_deserializer=None)
        call = method(request, timeout=timeout, metadata=conn.metadata)
        return channel, _GrpcioCall(call, conn.pb2, target)

    def reset(self, target, channel):
        self._client.connection(target).reset(channel)

    def close(self):
        pass


class NativeRpcError(grpc.RpcError):
    """A native stream's final status, shaped like grpcio's call errors."""

    def __init__(self, code_name, message):
        super().__init__(f"{code_name}: {message}")
        self._code = getattr(grpc.StatusCode, code_name, grpc.StatusCode.UNKNOWN)
        self._message = message

    def code(self):
        return self._code

    def details(self):
        return self._message


class _NativeCall:
    def __init__(self, stream, pb2, target):
        self._stream = stream
        self._pb2 = pb2
        self._target = target

    def __iter__(self):
        while True:
            item = self._stream.next()   # releases the GIL while it waits
            if item is None:
                code, message = self._stream.status()
                if code != "OK":
                    raise NativeRpcError(code, message)
                return
            header, buffer = item
            yield buffer_batch(header, buffer, self._pb2, self._target)

    def cancel(self):
        self._stream.cancel()


_MALLOC_TUNED = False


def _keep_freed_memory(native):
    """Once per process: glibc keeps up to 256 MiB of freed heap instead of
    returning it to the kernel, so gRPC's receive buffers are not faulted in
    again for every message ($NEARPREP_KEEP_FREED_MEMORY=0 disables it;
    another value sets the byte count)."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    value = os.environ.get("NEARPREP_KEEP_FREED_MEMORY", str(256 << 20))
    if value.isdigit() and int(value) > 0:
        native.keep_freed_memory(int(value))


class NativeTransport:
    name = "native"

    def __init__(self, client, lock_memory=False, max_free_buffers=None,
                 keepalive_time=60.0, keepalive_timeout=20.0):
        self._native = load_native()
        _keep_freed_memory(self._native)
        self._client = client
        # HTTP/2 keepalive of the channels (seconds): a ping after this much
        # silence on an open stream, UNAVAILABLE when unanswered for
        # keepalive_timeout.
        self._keepalive = (float(keepalive_time), float(keepalive_timeout))
        self._lock = threading.Lock()
        self._channels = {}
        if max_free_buffers is None:
            # Enough for every batch a stream holds in flight (prefetch queue
            # per target, plus the one being filled and the caller's).
            max_free_buffers = (client.prefetch + 3) * len(client.targets)
        self.pool = self._native.ReceiveBufferPool(max_free=max_free_buffers, lock=lock_memory)

    def _channel(self, conn):
        with self._lock:
            if conn.closed:
                from nearprep.errors import NearprepError
                raise NearprepError("client is closed")
            ch = self._channels.get(conn.target)
            if ch is None:
                ch = self._native.Channel(conn.target, keepalive_time=self._keepalive[0],
                                          keepalive_timeout=self._keepalive[1],
                                          token=conn.token or "",
                                          max_receive_bytes=getattr(
                                              self._client, "max_receive_bytes", -1))
                self._channels[conn.target] = ch
            return ch

    def open(self, target, request, timeout=None):
        conn = self._client.connection(target)
        channel = self._channel(conn)
        stream = channel.stream(request.SerializeToString(), self.pool, timeout=timeout)
        return channel, _NativeCall(stream, conn.pb2, target)

    def reset(self, target, channel):
        with self._lock:
            if self._channels.get(target) is channel:
                del self._channels[target]

    def close(self):
        with self._lock:
            self._channels.clear()
