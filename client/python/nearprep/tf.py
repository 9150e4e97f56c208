"""tf.data adapter: nearprep batches as a checkpointable tf.data.Dataset.

    import nearprep.tf
    ds = nearprep.tf.dataset("storage-node:7070", "imagenet", batch_size=64,
                             seed=1, shuffle=True, flip_probability=0.5,
                             brightness_max_delta=32 / 255,
                             saturation=(0.5, 1.5), drop_remainder=True,
                             error_policy="fail_stream")
    model.fit(ds, epochs=10)   # 10 Keras epochs = nearprep epochs 0..9

Elements are (images, labels): images [batch, height, width, 3] (NHWC) or
[batch, 3, height, width] (NCHW) of tf.float32 / float16 / bfloat16 / uint8,
labels [batch] tf.int64. The batch dimension is static when
drop_remainder=True, None otherwise.

Epochs. Each iteration of the dataset (each iterator: a `for` loop, each
Keras epoch, each pass of .repeat()) continues with the next epochs, as
tf.data's shuffle(reshuffle_each_iteration=True) does: an iterator starts
iteration i = the number of iterations read to their end so far, and
streams the epochs start_epoch + i * epochs ... start_epoch + (i + 1) *
epochs - 1, each the daemon's stream of that epoch number (its own order
and draws). `epochs` is therefore the number of epochs per iteration
(default 1: model.fit(ds, epochs=N) sees epochs start_epoch ...
start_epoch + N - 1); epochs=None: each iteration runs forever from
start_epoch. An iteration counts as read to its end when its last batch
is fetched (the adapter reads one batch ahead to know). An iteration left
before its end (a take(), a break, the one batch Keras's fit reads under a
tf.distribute strategy to build the model) does not count: the next one
starts the same epochs again. Iterators that run at the same time get the
same iteration. To resume a Keras run at Keras epoch k
(fit(initial_epoch=k)), make the dataset with start_epoch=k (epochs=1).

How. The dataset is built from TensorFlow's own datasets:

    range(1).map(i = iterations completed so far)
      .flat_map(range(start_epoch + i * epochs, ... + epochs))
      .flat_map(lambda epoch: range(2**62).scan(token, fetch(epoch, k, token))
                                           .take_while(not end of epoch))

fetch is a tf.numpy_function returning batch k of the epoch. The iterator's
state is therefore TensorFlow's: the iteration, the epoch, the batch index
k and the daemon's bound resume token (Batch.resume_token of batch k - 1, a
tf.string: the scan's state, or an end-of-epoch mark after the epoch's last
batch; docs/protocol.md "Resume"), plus whatever
prefetch buffers hold. So `tf.train.Checkpoint(ds=iterator)` saves the
position and, restored in another process, the iterator continues with
exactly the remaining batches (the daemon restarts the stream at the token:
the same bytes; a token of another stream, e.g. a checkpoint restored into
a dataset of another seed or dataset, is refused with INVALID_ARGUMENT
naming the field that differs, never silently shifted). A restored
iterator that fetches its iteration's last batch counts its iteration as
done, so the next iterator continues with the following epochs; one
restored with that batch already in its prefetch buffers (saved at the
end of an iteration) does not: to resume at an epoch boundary, make the
dataset with start_epoch = the next epoch.

Behind fetch, one open nearprep stream per iterator is read in order (the
client reads `prefetch` batches ahead), so k, k+1, ... cost no extra round
trips; a fetch of another batch (a restored iterator, a second iterator)
opens a stream there.

Length. When the length is known, the dataset asserts it
(tf.data.experimental.assert_cardinality), so ds.cardinality() is the
number of batches per iteration, Keras shows a progress total and never
warns that the input "ran out of data". It is known when epochs is finite,
the dataset was validated (validate=True: the shard size comes from
ListDatasets' num_samples, shard_index / num_shards, batch_size and
drop_remainder) and error_policy="fail_stream". Under the default
error_policy "skip" a bad file is left out and the batches are filled from
the next samples, so an epoch can be a batch shorter than the shard size
says: the length is not known in advance and cardinality() is UNKNOWN (-2).

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

Receive path: the adapter's client receives with nearprep's native module
(nearprep.native_available(); it is imported with RTLD_DEEPBIND, so its
gRPC C++ and TensorFlow's bundled gRPC/protobuf do not mix): a sixth of
grpcio's trainer CPU per image (docs/benchmarks.md). Where it cannot (not built, $NEARPREP_NATIVE=0, TLS
or channel_options) the adapter uses grpcio and says why in a
RuntimeWarning; client_options=dict(native=False) chooses grpcio silently.

Only dataset(), fleet_dataset() and output_signature() import TensorFlow.
Thread-safety: the datasets follow tf.data's rules; iterators may run in
parallel (each reads its own stream).
"""

import threading
import warnings

import numpy as np

from nearprep.errors import InvalidArgumentError

_TF_DTYPES = {"float32": "float32", "float16": "float16",
              "bfloat16": "bfloat16", "uint8": "uint8"}
# The numpy dtype fetch() returns per output dtype (bfloat16: its bits).
_WIRE_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
            "uint8": np.uint8}
_NO_END = (1 << 62)   # batches per epoch are bounded by the end of the stream
_INT64_MAX = np.iinfo(np.int64).max
# The scan state after an epoch's last batch (never a daemon's token).
_END = "nearprep:end-of-epoch"


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


def batches_per_epoch(num_samples, batch_size, shard_index=0, num_shards=1,
                      drop_remainder=False):
    """Batches in one epoch of shard `shard_index` of `num_shards` of a
    dataset of num_samples samples when no sample is skipped: the shard
    holds positions shard_index, shard_index + num_shards, ... of the
    epoch order."""
    from nearprep.plan import shard_batches, shard_size
    return shard_batches(shard_size(int(num_samples), int(shard_index), int(num_shards)),
                         int(batch_size), drop_remainder)


class _Iterations:
    """Numbers a dataset's iterations: an iteration gets the number of
    iterations completed (read to the end of their epochs) when its
    iterator asks for its first element; complete(i) (the last batch of
    iteration i fetched, also by a restored iterator) counts i as done.
    An iteration abandoned before its end (a take(), a break, Keras's
    one-batch model-building probe under a tf.distribute strategy) does
    not move the count. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._completed = 0

    def take(self):
        with self._lock:
            return np.int64(self._completed)

    def complete(self, i):
        with self._lock:
            self._completed = max(self._completed, int(i) + 1)

    @property
    def next(self):
        """The iteration number the next new iterator gets."""
        with self._lock:
            return self._completed


class _Reader:
    """The open streams behind fetch(), keyed by (epoch, next batch index).

    open_fn(epoch, start_batch, token) returns an iterator of (images,
    labels, batch_index, resume_token); token is the resume token of batch
    start_batch - 1 ("" at batch 0). fetch(epoch, k, token) continues the
    stream that stands at (epoch, k), or opens one there, and returns batch
    k, or None when the epoch has no batch k. At most `max_open` idle
    streams are kept (the least recently used is closed).
    Thread-safe: a stream is taken out of the table while it is read."""

    def __init__(self, open_fn, max_open=4):
        self._open = open_fn
        self._max_open = max_open
        self._lock = threading.Lock()
        self._idle = {}      # (epoch, next index) -> iterator, insertion = LRU order
        self.opened = 0      # streams opened (tests, stats)

    def fetch(self, epoch, index, token, peek=False):
        """Batch k = index of the epoch, or None past its end. peek: also
        read ahead whether the epoch ends with this batch; then returns
        (batch, is_last)."""
        key = (epoch, index)
        with self._lock:
            it = self._idle.pop(key, None)
        if it is None:
            it = self._open(epoch, index, token)
            self.opened += 1
        try:
            item = next(it)
            last = False
            if peek:
                try:
                    ahead = next(it)
                except StopIteration:
                    last = True
                else:
                    if isinstance(it, _Peeked):
                        it.push(ahead)
                    else:
                        it = _Peeked(ahead, it)
        except StopIteration:
            return (None, True) if peek else None
        except BaseException:
            _close(it)
            raise
        if item[2] != index:
            _close(it)
            raise RuntimeError(f"nearprep: stream sent batch {item[2]}, expected {index}")
        if last:
            return item, True   # the stream has ended: nothing to keep
        with self._lock:
            self._idle[(epoch, index + 1)] = it
            while len(self._idle) > self._max_open:
                _close(self._idle.pop(next(iter(self._idle))))
        return (item, last) if peek else item

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

    def push(self, item):
        """Puts an item back in front (read ahead by _Reader.fetch)."""
        self._first.append(item)

    def close(self):
        _close(self._rest)


def _client_stream(client, dataset_name, kwargs):
    """open_fn for a nearprep.Client: resumes on the bound token."""

    def open_fn(epoch, start_batch, token):
        if token:
            where = dict(resume_token=token)
        else:
            # Batch 0, or (a daemon that sent no token) batch k with the
            # position recomputed by the daemon: slower, the same bytes.
            where = dict(start_batch=int(start_batch))
        stream = client.batches(dataset_name, epoch=int(epoch), **where, **kwargs)
        return _BatchItems(stream)

    return open_fn


class _BatchItems:
    """(images, labels, index, resume_token) of a BatchStream's batches."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        b = next(self._stream)
        return b.images, b.labels, b.index, b.resume_token

    def close(self):
        self._stream.close()


def _build(tf, reader, spec, epochs, start_epoch, prefetch, cardinality=None):
    """The tf.data pipeline around reader.fetch (see the module docstring).
    Returns (dataset, _Iterations)."""
    (ishape, idtype), (lshape, _) = spec
    wire_np = _WIRE_NP[idtype]
    wire_tf = tf.uint16 if idtype == "bfloat16" else getattr(tf, idtype)
    empty_images = np.zeros((0,) + tuple(ishape[1:]), dtype=wire_np)
    empty_labels = np.zeros((0,), dtype=np.int64)
    iterations = _Iterations()

    def fetch(epoch, index, token):
        # Never let StopIteration / IndexError out: tf.numpy_function maps
        # them to OUT_OF_RANGE, which tf.data takes for a silent end of data.
        token = token.decode() if isinstance(token, bytes) else str(token)
        epoch = int(epoch)
        if token == _END:
            # The batch before was the epoch's last: no stream to open (a
            # restored iterator), and no token past a short last batch to
            # send.
            return empty_images, empty_labels, np.bytes_(_END.encode()), np.bool_(False)
        # Whether this batch ends the epoch is read ahead (in steady state
        # the client holds the next batch already). The last epoch of an
        # iteration so counts as complete before its last batch is
        # delivered, and the next iterator continues with the next epochs;
        # a restored iterator's iteration completes the same way.
        try:
            item, ends = reader.fetch(epoch, int(index), token, peek=True)
        except (StopIteration, IndexError) as e:
            raise RuntimeError(f"nearprep: {type(e).__name__}: {e}") from None
        if ends and epochs and (epoch - start_epoch) % epochs == epochs - 1:
            iterations.complete((epoch - start_epoch) // epochs)
        if item is None:
            return empty_images, empty_labels, np.bytes_(token.encode()), np.bool_(False)
        images, labels, _, next_token = item
        if ends:
            next_token = _END
        if images.dtype != wire_np:
            images = images.view(wire_np)   # bfloat16 bits (uint16): same bytes
        return images, labels, np.bytes_(next_token.encode()), np.bool_(True)

    def epoch_batches(epoch):
        def step(token, index):
            images, labels, next_token, valid = tf.numpy_function(
                fetch, [epoch, index, token], [wire_tf, tf.int64, tf.string, tf.bool],
                stateful=True, name="nearprep_fetch")
            next_token = tf.reshape(next_token, [])
            return next_token, (images, labels, valid)

        return (tf.data.Dataset.range(_NO_END)
                .scan(tf.constant("", tf.string), step)
                .take_while(lambda images, labels, valid: valid))

    def finish(images, labels, valid):
        if idtype == "bfloat16":
            images = tf.bitcast(images, tf.bfloat16)
        images = tf.ensure_shape(images, ishape)
        labels = tf.ensure_shape(labels, lshape)
        return images, labels

    if epochs is None:
        epoch_numbers = tf.data.Dataset.range(start_epoch, _INT64_MAX)
    else:
        def take(_):
            i = tf.numpy_function(iterations.take, [], tf.int64, stateful=True,
                                  name="nearprep_iteration")
            return tf.reshape(i, [])

        def epochs_of(i):
            first = start_epoch + i * epochs
            return tf.data.Dataset.range(first, first + epochs)

        epoch_numbers = tf.data.Dataset.range(1).map(take).flat_map(epochs_of)
    ds = epoch_numbers.flat_map(epoch_batches).map(finish)
    if cardinality is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    options = tf.data.Options()
    # The fetch op's state (open streams) is a cache and the iteration
    # count is moved by a restored iterator's fetches: the position lives
    # in the range / flat_map / scan state, so checkpoints need not
    # (cannot) hold the Python state.
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    ds = ds.with_options(options)
    if prefetch != 0:
        ds = ds.prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch)
    return ds, iterations


def _shard_from_context(input_context, batch_kwargs):
    if input_context is None:
        return
    if "shard_index" in batch_kwargs or "num_shards" in batch_kwargs:
        raise InvalidArgumentError(
            "input_context: give either input_context or shard_index/num_shards",
            field="shard_index")
    batch_kwargs["shard_index"] = int(input_context.input_pipeline_id)
    batch_kwargs["num_shards"] = int(input_context.num_input_pipelines)


def _make_client(target, client_options):
    """A nearprep.Client on the native receive path where it can be; a
    RuntimeWarning saying why when it falls back to grpcio (unless the
    caller chose native=False)."""
    import os
    from nearprep import native_available, native_missing_reason
    from nearprep.client import Client

    options = dict(client_options or {})
    client = Client(target, **options)
    if client.transport != "native" and options.get("native", None) is not False:
        if not native_available():
            why = native_missing_reason()
        elif os.environ.get("NEARPREP_NATIVE", "").strip().lower() in ("0", "false", "no",
                                                                         "off"):
            why = "$NEARPREP_NATIVE is 0"
        else:
            why = "the native path takes plaintext channels without channel_options only"
        warnings.warn(f"nearprep.tf: receiving through grpcio (several times the trainer CPU "
                      f"per image of the native path): {why}", RuntimeWarning, stacklevel=3)
    return client


def _known_batches(client, dataset_name, request):
    """Batches per epoch of the request's shard when known in advance (see
    the module docstring, "Length"), else None."""
    enum = request.DESCRIPTOR.file.enum_types_by_name["ErrorPolicy"]
    if request.error_policy != enum.values_by_name["ERROR_POLICY_FAIL_STREAM"].number:
        return None   # skipped samples can shorten an epoch
    if len(request.sample_ids):
        return batches_per_epoch(len(request.sample_ids), request.batch_size)
    info = client.dataset(dataset_name)
    if info.num_partitions:
        return None   # a fleet dataset: num_samples counts every partition
    return batches_per_epoch(info.num_samples, request.batch_size, request.shard_index,
                             request.num_shards, request.drop_remainder)


def dataset(target, dataset, batch_size=32, *, epochs=1, start_epoch=0,
            prefetch=None, client_options=None, input_context=None, validate=True,
            client=None, **batch_kwargs):
    """tf.data.Dataset of (images, labels); see the module docstring.

    target          "host:port" or a list (nearprep.Client's target)
    epochs          epochs per iteration (None: forever); iteration i of
                    the dataset streams epochs start_epoch + i * epochs ...
    start_epoch     the first iteration's first epoch
    prefetch        tf.data prefetch after the adapter (None: AUTOTUNE, 0: none)
    client_options  keyword arguments of nearprep.Client (prefetch,
                    reconnect_deadline, tls, native, ...)
    input_context   tf.distribute.InputContext: shard by input pipeline
    validate        fetch the first batch now, so a bad request raises here
                    (and read the dataset's size for the cardinality)
    client          a nearprep.Client to use instead of making one
    batch_kwargs    Client.batches() arguments (height, width, dtype, layout,
                    seed, shuffle, shard_index, num_shards, drop_remainder,
                    error_policy, augmentations, ...); epoch / start_batch /
                    start_position / resume_token / max_batches are the
                    adapter's."""
    import tensorflow as tf  # noqa: only here

    for key in ("epoch", "start_batch", "start_position", "resume_token", "max_batches"):
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
        client = _make_client(target, client_options)
    # Client-side checks (types, names) before anything else.
    request = client.request(dataset, batch_size=batch_size, **batch_kwargs)
    spec = signature_spec(
        batch_size, batch_kwargs.get("height", 224), batch_kwargs.get("width", 224),
        batch_kwargs.get("dtype", "float32"), batch_kwargs.get("layout", "NHWC"),
        batch_kwargs.get("drop_remainder", False))
    reader = _Reader(_client_stream(client, dataset, dict(batch_size=batch_size,
                                                          **batch_kwargs)))
    cardinality = None
    if validate and epochs != 0:
        # The daemon's checks (dataset name, values, limits) and reachability,
        # now: the first batch is kept for the first iterator.
        it = reader._open(start_epoch, 0, "")
        try:
            first = next(it)
        except StopIteration:
            pass   # an empty shard: nothing to keep
        else:
            reader.prime(start_epoch, 0, _Peeked(first, it))
        if epochs is not None:
            per_epoch = _known_batches(client, dataset, request)
            if per_epoch is not None:
                cardinality = per_epoch * epochs
    elif epochs == 0:
        cardinality = 0
    ds, iterations = _build(tf, reader, spec, epochs, start_epoch, prefetch, cardinality)
    ds._nearprep_reader = reader   # keeps the streams alive with the dataset
    ds._nearprep_client = client
    ds._nearprep_iterations = iterations
    return ds


def fleet_dataset(fleet_factory, *, epochs=1, start_epoch=0, prefetch=None,
                  height=224, width=224, dtype="float32", layout="NHWC"):
    """tf.data.Dataset of a fleet dataset: this trainer's FleetBatch of each
    global batch, as (images, labels) with batch dimension None.
    fleet_factory() returns the nearprep.fleet.FleetClient to read with
    (called once, now); height/width/dtype/layout must be those it was made
    with. Iterations continue with the next epochs and the position (epoch,
    global batch) is checkpointable as for dataset(); the length is not
    asserted (failed samples drop out)."""
    import tensorflow as tf  # noqa: only here

    fleet = fleet_factory()

    def open_fn(epoch, start_batch, token):
        def items():
            for fb in fleet.epoch(epoch, start_batch=start_batch):
                images = fb.images
                if images.size == 0:   # every sample of this slice failed
                    images = images.reshape((0,) + tuple(spec[0][0][1:]))
                yield images, fb.labels, fb.batch, ""
        return items()

    spec = signature_spec(1, height, width, dtype, layout, drop_remainder=False)
    reader = _Reader(open_fn)
    ds, iterations = _build(tf, reader, spec, epochs, start_epoch, prefetch)
    ds._nearprep_reader = reader
    ds._nearprep_fleet = fleet
    ds._nearprep_iterations = iterations
    return ds
