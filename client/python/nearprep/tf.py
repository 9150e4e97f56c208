"""tf.data adapter: nearprep batches as a checkpointable tf.data.Dataset.

    import nearprep.tf
    ds = nearprep.tf.dataset("storage-node:7070", "imagenet", batch_size=64,
                             seed=1, shuffle=True, flip_probability=0.5,
                             brightness_max_delta=32 / 255,
                             saturation=(0.5, 1.5), epochs=10,
                             drop_remainder=True)
    model.fit(ds, ...)

Elements are (images, labels): images [batch, height, width, 3] (NHWC) or
[batch, 3, height, width] (NCHW) of tf.float32 / float16 / bfloat16 / uint8,
labels [batch] tf.int64. The batch dimension is static when
drop_remainder=True, None otherwise. Epochs start_epoch, start_epoch + 1,
... follow each other (epochs=None: forever); each epoch is the daemon's
stream of that epoch number (its own shuffle and draws). Note that
`.repeat()` replays the same epoch numbers: use `epochs=`.

How. The dataset is built from TensorFlow's own datasets:

    range(start_epoch, start_epoch + epochs).flat_map(lambda epoch:
        range(2**62).scan(position, fetch(epoch, k, position))
                    .take_while(not end of epoch))

fetch is a tf.numpy_function returning batch k of the epoch. The iterator's
state is therefore TensorFlow's: the epoch, the batch index k and the
daemon's resume token (Batch.next_position, the scan's state; see
docs/protocol.md "Resume"), plus whatever prefetch buffers hold. So
`tf.train.Checkpoint(ds=iterator)` saves the position and, restored in
another process, the iterator continues with exactly the remaining batches
(the daemon restarts the stream at start_batch = k, start_position = token:
the same bytes). Behind fetch, one open nearprep stream per iterator is read
in order (the client reads `prefetch` batches ahead), so k, k+1, ... cost no
extra round trips; a fetch of another batch (a restored iterator, a second
iterator) opens a stream there.

Sharding: pass a tf.distribute.InputContext as `input_context` (from
strategy.distribute_datasets_from_function): its input_pipeline_id and
num_input_pipelines become the request's shard_index and num_shards, so
every sample is read once per epoch across input pipelines.

Errors: dataset() checks the request by fetching the first batch (unknown
dataset, bad values, an unreachable daemon raise nearprep's exceptions
there, with the daemon's message; pass validate=False to skip). Errors while
iterating (the daemon gone for longer than the client's reconnect_deadline,
FAIL_STREAM data loss) end get_next() with a tf.errors.OpError whose message
holds nearprep's exception and the gRPC message; the data never just ends.

Fleet datasets: fleet_dataset(FleetClient factory, ...) gives the same for a
partitioned dataset (nearprep.fleet): global batch g of each epoch is this
trainer's FleetBatch g (batch dimension None: failed samples drop out).

Copies: the received tensor bytes become the TF tensor with one copy (or
none where TensorFlow can adopt the numpy buffer); bfloat16 is received as
uint16 bits and bitcast, never converted.

Receive path: the adapter's clients use grpcio (native=False): nearprep's
native module, built against Debian's gRPC C++, crashes in a process that
has loaded TensorFlow (which bundles its own gRPC and protobuf). Make the
FleetClient of fleet_dataset() with native=False too.

Only dataset(), fleet_dataset() and output_signature() import TensorFlow.
Thread-safety: the datasets follow tf.data's rules; iterators may run in
parallel (each reads its own stream).
"""

import threading

import numpy as np

from nearprep.errors import InvalidArgumentError

_TF_DTYPES = {"float32": "float32", "float16": "float16",
              "bfloat16": "bfloat16", "uint8": "uint8"}
# The numpy dtype fetch() returns per output dtype (bfloat16: its bits).
_WIRE_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
            "uint8": np.uint8}
_NO_END = (1 << 62)   # batches per epoch are bounded by the end of the stream


def tf_dtype_name(dtype):
    """TensorFlow dtype name (tf.<name>) for a nearprep output dtype."""
    key = str(dtype).lower()
    if key not in _TF_DTYPES:
        raise InvalidArgumentError(
            f"output.dtype: must be one of {', '.join(_TF_DTYPES)}, got {dtype!r}",
            field="output.dtype")
    return _TF_DTYPES[key]


def signature_spec(batch_size, height=224, width=224, dtype="float32",
                   layout="NHWC", drop_remainder=False):
    """((image_shape, image_dtype_name), (label_shape, "int64")) without TF."""
    if str(layout).upper() not in ("NHWC", "NCHW"):
        raise InvalidArgumentError(f"output.layout: must be NHWC or NCHW, got {layout!r}",
                                   field="output.layout")
    batch = int(batch_size) if drop_remainder else None
    if str(layout).upper() == "NHWC":
        shape = (batch, int(height), int(width), 3)
    else:
        shape = (batch, 3, int(height), int(width))
    return (shape, tf_dtype_name(dtype)), ((batch,), "int64")


def output_signature(tf, batch_size, height=224, width=224, dtype="float32",
                     layout="NHWC", drop_remainder=False):
    """(tf.TensorSpec images, tf.TensorSpec labels) using module `tf`."""
    (ishape, idtype), (lshape, ldtype) = signature_spec(
        batch_size, height, width, dtype, layout, drop_remainder)
    return (tf.TensorSpec(shape=ishape, dtype=getattr(tf, idtype)),
            tf.TensorSpec(shape=lshape, dtype=getattr(tf, ldtype)))


class _Reader:
    """The open streams behind fetch(), keyed by (epoch, next batch index).

    open_fn(epoch, start_batch, start_position) returns an iterator of
    (images, labels, batch_index, next_position). fetch(epoch, k, position)
    continues the stream that stands at (epoch, k), or opens one there, and
    returns batch k, or None when the epoch has no batch k. At most
    `max_open` idle streams are kept (the least recently used is closed).
    Thread-safe: a stream is taken out of the table while it is read."""

    def __init__(self, open_fn, max_open=4):
        self._open = open_fn
        self._max_open = max_open
        self._lock = threading.Lock()
        self._idle = {}      # (epoch, next index) -> iterator, insertion = LRU order
        self.opened = 0      # streams opened (tests, stats)

    def fetch(self, epoch, index, position):
        key = (epoch, index)
        with self._lock:
            it = self._idle.pop(key, None)
        if it is None:
            it = self._open(epoch, index, position)
            self.opened += 1
        try:
            item = next(it)
        except StopIteration:
            return None
        except BaseException:
            _close(it)
            raise
        if item[2] != index:
            _close(it)
            raise RuntimeError(f"nearprep: stream sent batch {item[2]}, expected {index}")
        with self._lock:
            self._idle[(epoch, index + 1)] = it
            while len(self._idle) > self._max_open:
                _close(self._idle.pop(next(iter(self._idle))))
        return item

    def prime(self, epoch, index, it):
        with self._lock:
            self._idle[(epoch, index)] = it

    def close(self):
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for it in idle:
            _close(it)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _close(it):
    close = getattr(it, "close", None)
    if close is not None:
        try:
            close()
        except Exception:
            pass


class _Peeked:
    """An iterator with its first item already taken (dataset(validate=True))."""

    def __init__(self, first, rest):
        self._first = [first]
        self._rest = rest

    def __iter__(self):
        return self

    def __next__(self):
        if self._first:
            return self._first.pop()
        return next(self._rest)

    def close(self):
        _close(self._rest)


def _client_stream(client, dataset_name, kwargs):
    """open_fn for a nearprep.Client."""

    def open_fn(epoch, start_batch, start_position):
        stream = client.batches(dataset_name, epoch=int(epoch), start_batch=int(start_batch),
                                start_position=int(start_position), **kwargs)
        return _batch_items(stream)

    return open_fn


class _BatchItems:
    """(images, labels, index, next_position) of a BatchStream's batches."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        b = next(self._stream)
        return b.images, b.labels, b.index, b.next_position

    def close(self):
        self._stream.close()


def _batch_items(stream):
    return _BatchItems(stream)


def _build(tf, reader, spec, epochs, start_epoch, prefetch, first_position=0):
    """The tf.data pipeline around reader.fetch (see the module docstring)."""
    (ishape, idtype), (lshape, _) = spec
    wire_np = _WIRE_NP[idtype]
    wire_tf = tf.uint16 if idtype == "bfloat16" else getattr(tf, idtype)
    empty_images = np.zeros((0,) + tuple(ishape[1:]), dtype=wire_np)
    empty_labels = np.zeros((0,), dtype=np.int64)

    def fetch(epoch, index, position):
        # Never let StopIteration / IndexError out: tf.numpy_function maps
        # them to OUT_OF_RANGE, which tf.data takes for a silent end of data.
        try:
            item = reader.fetch(int(epoch), int(index), int(position))
        except (StopIteration, IndexError) as e:
            raise RuntimeError(f"nearprep: {type(e).__name__}: {e}") from None
        if item is None:
            return empty_images, empty_labels, np.int64(position), np.bool_(False)
        images, labels, _, next_position = item
        if images.dtype != wire_np:
            images = images.view(wire_np)   # bfloat16 bits (uint16): same bytes
        return images, labels, np.int64(next_position), np.bool_(True)

    def epoch_batches(epoch):
        def step(position, index):
            images, labels, next_position, valid = tf.numpy_function(
                fetch, [epoch, index, position], [wire_tf, tf.int64, tf.int64, tf.bool],
                stateful=True, name="nearprep_fetch")
            return next_position, (images, labels, valid)

        return (tf.data.Dataset.range(_NO_END)
                .scan(tf.constant(first_position, tf.int64), step)
                .take_while(lambda images, labels, valid: valid))

    def finish(images, labels, valid):
        if idtype == "bfloat16":
            images = tf.bitcast(images, tf.bfloat16)
        images = tf.ensure_shape(images, ishape)
        labels = tf.ensure_shape(labels, lshape)
        return images, labels

    last = np.iinfo(np.int64).max if epochs is None else start_epoch + epochs
    ds = tf.data.Dataset.range(start_epoch, last).flat_map(epoch_batches).map(finish)
    options = tf.data.Options()
    # The fetch op's state (open streams) is a cache: the position lives in
    # the range / scan state, so checkpoints need not (cannot) hold it.
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    ds = ds.with_options(options)
    if prefetch != 0:
        ds = ds.prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch)
    return ds


def _shard_from_context(input_context, batch_kwargs):
    if input_context is None:
        return
    if "shard_index" in batch_kwargs or "num_shards" in batch_kwargs:
        raise InvalidArgumentError(
            "input_context: give either input_context or shard_index/num_shards",
            field="shard_index")
    batch_kwargs["shard_index"] = int(input_context.input_pipeline_id)
    batch_kwargs["num_shards"] = int(input_context.num_input_pipelines)


def dataset(target, dataset, batch_size=32, *, epochs=1, start_epoch=0,
            prefetch=None, client_options=None, input_context=None, validate=True,
            client=None, **batch_kwargs):
    """tf.data.Dataset of (images, labels); see the module docstring.

    target          "host:port" or a list (nearprep.Client's target)
    epochs          number of epochs (None: forever), from start_epoch
    prefetch        tf.data prefetch after the adapter (None: AUTOTUNE, 0: none)
    client_options  keyword arguments of nearprep.Client (prefetch,
                    reconnect_deadline, tls, ...)
    input_context   tf.distribute.InputContext: shard by input pipeline
    validate        fetch the first batch now, so a bad request raises here
    client          a nearprep.Client to use instead of making one
    batch_kwargs    Client.batches() arguments (height, width, dtype, layout,
                    seed, shuffle, shard_index, num_shards, drop_remainder,
                    augmentations, ...); epoch / start_batch / start_position
                    / max_batches are the adapter's."""
    import tensorflow as tf  # noqa: only here
    from nearprep.client import Client

    for key in ("epoch", "start_batch", "start_position", "max_batches"):
        if key in batch_kwargs:
            raise InvalidArgumentError(
                f"{key}: set by the tf adapter (use start_epoch / epochs, and "
                f"tf.train.Checkpoint for positions)", field=key)
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 0):
        raise InvalidArgumentError(f"epochs: must be an integer >= 0 or None, got {epochs!r}",
                                   field="epochs")
    if isinstance(start_epoch, bool) or not isinstance(start_epoch, int) or start_epoch < 0:
        raise InvalidArgumentError(f"start_epoch: must be an integer >= 0, got {start_epoch!r}",
                                   field="start_epoch")
    batch_kwargs = dict(batch_kwargs)
    _shard_from_context(input_context, batch_kwargs)
    if client is None:
        options = dict(client_options or {})
        # grpcio, not nearprep._native: the native module (Debian's gRPC C++)
        # and TensorFlow's own bundled gRPC/protobuf in one process crash
        # (segfault opening a stream, seen with tensorflow-cpu 2.21).
        options.setdefault("native", False)
        client = Client(target, **options)
    # Client-side checks (types, names) before anything else.
    client.request(dataset, batch_size=batch_size, **batch_kwargs)
    spec = signature_spec(
        batch_size, batch_kwargs.get("height", 224), batch_kwargs.get("width", 224),
        batch_kwargs.get("dtype", "float32"), batch_kwargs.get("layout", "NHWC"),
        batch_kwargs.get("drop_remainder", False))
    reader = _Reader(_client_stream(client, dataset, dict(batch_size=batch_size,
                                                          **batch_kwargs)))
    if validate and epochs != 0:
        # The daemon's checks (dataset name, values, limits) and reachability,
        # now: the first batch is kept for the first iterator.
        it = reader._open(start_epoch, 0, 0)
        try:
            first = next(it)
        except StopIteration:
            pass   # an empty shard: nothing to keep
        else:
            reader.prime(start_epoch, 0, _Peeked(first, it))
    ds = _build(tf, reader, spec, epochs, start_epoch, prefetch)
    ds._nearprep_reader = reader   # keeps the streams alive with the dataset
    return ds


def fleet_dataset(fleet_factory, *, epochs=1, start_epoch=0, prefetch=None,
                  height=224, width=224, dtype="float32", layout="NHWC"):
    """tf.data.Dataset of a fleet dataset: this trainer's FleetBatch of each
    global batch, as (images, labels) with batch dimension None.
    fleet_factory() returns the nearprep.fleet.FleetClient to read with
    (called once, now); height/width/dtype/layout must be those it was made
    with. The position (epoch, global batch) is checkpointable as for
    dataset()."""
    import tensorflow as tf  # noqa: only here

    fleet = fleet_factory()

    def open_fn(epoch, start_batch, start_position):
        def items():
            for fb in fleet.epoch(epoch, start_batch=start_batch):
                images = fb.images
                if images.size == 0:   # every sample of this slice failed
                    images = images.reshape((0,) + tuple(spec[0][0][1:]))
                yield images, fb.labels, fb.batch, 0
        return items()

    spec = signature_spec(1, height, width, dtype, layout, drop_remainder=False)
    reader = _Reader(open_fn)
    ds = _build(tf, reader, spec, epochs, start_epoch, prefetch)
    ds._nearprep_reader = reader
    ds._nearprep_fleet = fleet
    return ds
