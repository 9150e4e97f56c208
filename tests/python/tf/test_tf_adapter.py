"""nearprep.tf (the tf.data adapter) run with TensorFlow against a real
nearprepd: element_spec and bytes for every dtype and layout, drop_remainder,
tf.data transformations, each iteration continuing with the next epochs,
the known cardinality, the native receive path by default, checkpoint /
restore of the position (on the bound resume token) in a new process,
tf.distribute sharding under MirroredStrategy, Keras model.fit, errors, and
a fleet dataset as a source. The training harnesses (Keras fit over epochs,
MultiWorkerMirroredStrategy, a custom loop, the docs' snippets) and the
native path in fresh processes are in test_tf_training.py.

Runs in the venv with tensorflow-cpu (ctest: tf_adapter); skips elsewhere.
"""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The adapter's default receive path is tested ($NEARPREP_NATIVE unset): the
# native module where it is built. The reference bytes come from grpcio
# Clients (native=False), so every comparison also checks native = grpcio.
os.environ.pop("NEARPREP_NATIVE", None)
tf = pytest.importorskip("tensorflow")

import nearprep  # noqa: E402
import nearprep.tf as ntf  # noqa: E402
from conftest import ROOT, fleet_daemon  # noqa: E402

SMALL = dict(height=32, width=24, seed=7, shuffle=True, flip_probability=0.5,
             brightness_max_delta=0.1, saturation=(0.5, 1.5))
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory):
    """200 synthetic JPEGs (nearprep mkdataset, 4 classes): quicker to decode
    than the ImageNet sample; 200 = 3 x 64 + 8."""
    cli = os.environ.get("NEARPREP_CLI")
    if not cli:
        pytest.skip("NEARPREP_CLI (the nearprep CLI, for mkdataset) not set")
    root = str(tmp_path_factory.mktemp("tf_synth") / "ds")
    subprocess.run([cli, "mkdataset", "--out", root, "--classes", "4", "--per-class", "50"],
                   check=True, capture_output=True)
    return root


@pytest.fixture(scope="module")
def daemon(daemon_factory, synth_root):
    return daemon_factory({"sample": synth_root}, "tf_synth").start()


def client_batches(daemon, epoch=0, batch_size=64, **kw):
    """[(images bytes, labels)] of one epoch through nearprep.Client."""
    with nearprep.Client(daemon.target, native=False) as c:
        return [(b.images.tobytes(), b.labels.copy())
                for b in c.batches("sample", batch_size=batch_size, epoch=epoch, **kw)]


def tf_bytes(images):
    x = images
    if x.dtype == tf.bfloat16:
        x = tf.bitcast(x, tf.uint16)
    return x.numpy().tobytes()


def digest(images, labels):
    return hashlib.sha256(tf_bytes(images) + labels.numpy().tobytes()).hexdigest()


# --- element_spec, bytes, drop_remainder -------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "uint8"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("drop", [False, True])
def test_element_spec(daemon, dtype, layout, drop):
    kw = dict(SMALL, dtype=dtype, layout=layout, drop_remainder=drop)
    ds = ntf.dataset(daemon.target, "sample", batch_size=64, validate=False, **kw)
    images_spec, labels_spec = ds.element_spec
    shape = [32, 24, 3] if layout == "NHWC" else [3, 32, 24]
    assert images_spec.dtype == getattr(tf, dtype)
    assert images_spec.shape.as_list() == [64 if drop else None] + shape
    assert labels_spec.dtype == tf.int64
    assert labels_spec.shape.as_list() == [64 if drop else None]


# Every dtype and layout once, drop_remainder both ways: the tensors (shape
# checked against element_spec by tf.ensure_shape) hold the client's bytes.
@pytest.mark.parametrize("dtype,layout,drop", [
    ("float32", "NHWC", False), ("float16", "NCHW", True),
    ("bfloat16", "NHWC", True), ("uint8", "NCHW", False)])
def test_bytes_equal_the_client(daemon, dtype, layout, drop):
    kw = dict(SMALL, dtype=dtype, layout=layout, drop_remainder=drop)
    ds = ntf.dataset(daemon.target, "sample", batch_size=64, **kw)
    got = [(tf_bytes(x), y.numpy()) for x, y in ds]
    want = client_batches(daemon, **kw)
    assert [len(y) for _, y in got] == ([64, 64, 64] if drop else [64, 64, 64, 8])
    assert len(got) == len(want)
    for (gi, gl), (wi, wl) in zip(got, want):
        assert gi == wi and np.array_equal(gl, wl)


def test_epochs_follow_each_other(daemon):
    ds = ntf.dataset(daemon.target, "sample", batch_size=100, epochs=3, start_epoch=2,
                     **SMALL)
    got = [tf_bytes(x) for x, _ in ds]
    want = [b for e in (2, 3, 4) for b, _ in client_batches(daemon, epoch=e, batch_size=100,
                                                            **SMALL)]
    assert got == want and len(got) == 6
    assert got[0] != got[2], "each epoch its own shuffle and draws"
    assert len(list(ntf.dataset(daemon.target, "sample", epochs=0, **SMALL))) == 0


def test_under_tf_data_transformations(daemon):
    kw = dict(batch_size=64, drop_remainder=True, **SMALL)
    want = client_batches(daemon, drop_remainder=True, **SMALL)

    def fresh():
        return ntf.dataset(daemon.target, "sample", **kw)

    assert [tf_bytes(x) for x, _ in fresh().take(2)] == [w for w, _ in want[:2]]
    # .repeat() re-iterates: the next epochs, as shuffle(reshuffle_each_iteration).
    want1 = client_batches(daemon, epoch=1, drop_remainder=True, **SMALL)
    assert [tf_bytes(x) for x, _ in fresh().repeat(2)] == ([w for w, _ in want] +
                                                           [w for w, _ in want1])
    doubled = fresh().map(lambda x, y: (x * 2.0, y + 1), num_parallel_calls=2)
    first = next(iter(doubled))
    ref = np.frombuffer(want[0][0], np.float32).reshape(64, 32, 24, 3)
    assert np.array_equal(first[0].numpy(), ref * 2) and first[0].shape[0] == 64
    singles = list(fresh().unbatch().prefetch(3))
    assert len(singles) == 192 and singles[0][0].shape == (32, 24, 3)
    assert singles[0][0].numpy().tobytes() == ref[0].tobytes()
    assert singles[65][1].numpy() == want[1][1][1]
    # Two iterators of one dataset, interleaved: each its own stream; both
    # are iteration 0 (neither has read its epoch to the end: 20 batches).
    ds = ntf.dataset(daemon.target, "sample", batch_size=10, **SMALL)
    want10 = client_batches(daemon, batch_size=10, **SMALL)
    a, b = iter(ds), iter(ds)
    seq = [tf_bytes(next(a)[0]), tf_bytes(next(b)[0]), tf_bytes(next(a)[0])]
    assert seq == [want10[0][0], want10[0][0], want10[1][0]]
    # Inside a tf.function (graph mode).
    @tf.function
    def total(d):
        s = tf.constant(0, tf.int64)
        for _, y in d:
            s += tf.shape(y, out_type=tf.int64)[0]
        return s
    assert int(total(fresh())) == 192


def epoch_ids(daemon, epoch, batch_size, **kw):
    """[labels] and [sample ids] of one epoch through a grpcio Client."""
    with nearprep.Client(daemon.target, native=False) as c:
        batches = list(c.batches("sample", batch_size=batch_size, epoch=epoch, **kw))
    return [b.labels.tolist() for b in batches], [b.sample_ids.tolist() for b in batches]


def test_each_iteration_continues_with_the_next_epochs(daemon):
    # Issue 35: re-iterating (Keras fit re-iterates once per Keras epoch)
    # must give the next epoch, not epoch start_epoch again.
    kw = dict(SMALL, height=16, width=16, dtype="uint8")
    ds = ntf.dataset(daemon.target, "sample", batch_size=64, start_epoch=3, **kw)
    got = [[tf_bytes(x) for x, _ in ds] for _ in range(3)]
    labels = [[y.numpy().tolist() for _, y in ds] for _ in range(2)]
    for i, epoch in enumerate((3, 4, 5)):
        assert got[i] == [b for b, _ in client_batches(daemon, epoch=epoch, **kw)]
    for i, epoch in enumerate((6, 7)):
        assert labels[i] == epoch_ids(daemon, epoch, 64, **kw)[0]
    assert len({tuple(g) for g in got}) == 3, "three different epochs"
    assert ds._nearprep_iterations.next == 5
    # epochs=2: each iteration two epochs further.
    ds2 = ntf.dataset(daemon.target, "sample", batch_size=100, epochs=2, **kw)
    assert len(list(ds2)) == 4
    second = [y.numpy().tolist() for _, y in ds2]
    assert second == (epoch_ids(daemon, 2, 100, **kw)[0] + epoch_ids(daemon, 3, 100, **kw)[0])


@pytest.mark.parametrize("drop,shard,epochs,want", [
    (False, None, 1, 4), (True, None, 1, 3), (False, None, 3, 12),
    (False, (1, 3), 1, 2), (True, (1, 3), 2, 2), (False, (2, 7), 1, 1)])
def test_cardinality_known_under_fail_stream(daemon, drop, shard, epochs, want):
    # 200 samples: 3 x 64 + 8; shard 1 of 3 holds 66 (2 batches, or 1 full);
    # shard 2 of 7 holds 28.
    kw = dict(SMALL, height=8, width=8, dtype="uint8", drop_remainder=drop,
              error_policy="fail_stream")
    if shard:
        kw.update(shard_index=shard[0], num_shards=shard[1])
    ds = ntf.dataset(daemon.target, "sample", batch_size=64, epochs=epochs, **kw)
    assert int(ds.cardinality()) == want
    assert len(ds) == want
    assert sum(1 for _ in ds) == want
    # Each iteration: the same length (iteration 1 here).
    assert sum(1 for _ in ds.map(lambda x, y: y)) == want


def test_cardinality_unknown_where_samples_can_be_skipped(daemon):
    kw = dict(SMALL, height=8, width=8, dtype="uint8")
    unknown = int(tf.data.UNKNOWN_CARDINALITY)
    # error_policy "skip" (the default): a bad file shortens the epoch.
    assert int(ntf.dataset(daemon.target, "sample", **kw).cardinality()) == unknown
    # Not validated: the dataset's size is not read.
    assert int(ntf.dataset(daemon.target, "sample", validate=False, error_policy="fail_stream",
                           **kw).cardinality()) == unknown
    assert int(ntf.dataset(daemon.target, "sample", epochs=None, error_policy="fail_stream",
                           **kw).cardinality()) == unknown
    assert int(ntf.dataset(daemon.target, "sample", epochs=0, **kw).cardinality()) == 0


def test_native_receive_path_by_default(daemon, monkeypatch):
    import warnings
    kw = dict(SMALL, batch_size=64)
    if not nearprep.native_available():
        with pytest.warns(RuntimeWarning, match="grpcio"):
            ds = ntf.dataset(daemon.target, "sample", **kw)
        assert ds._nearprep_client.transport == "grpcio"
        pytest.skip(f"nearprep._native not available: {nearprep.native_missing_reason()}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ds = ntf.dataset(daemon.target, "sample", **kw)
        assert ds._nearprep_client.transport == "native"
        assert [tf_bytes(x) for x, _ in ds] == [b for b, _ in client_batches(daemon, **SMALL)]
        # grpcio on request: silently.
        ds = ntf.dataset(daemon.target, "sample", client_options=dict(native=False), **kw)
        assert ds._nearprep_client.transport == "grpcio"
    # grpcio when told by the environment: said, never silent.
    monkeypatch.setenv("NEARPREP_NATIVE", "0")
    with pytest.warns(RuntimeWarning, match="NEARPREP_NATIVE"):
        ds = ntf.dataset(daemon.target, "sample", **kw)
    assert ds._nearprep_client.transport == "grpcio"


# --- checkpoints ---------------------------------------------------------------

RESTORE_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    import nearprep.tf as ntf
    target, path, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    ds = ntf.dataset(target, "sample", validate=False, **kw)
    it = iter(ds)
    tf.train.Checkpoint(ds=it).restore(path).assert_consumed()
    out = []
    for x, y in it:
        if x.dtype == tf.bfloat16:
            x = tf.bitcast(x, tf.uint16)
        out.append(hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest())
    print(json.dumps(out))
""")


@pytest.mark.parametrize("k,dtype", [(1, "float32"), (2, "bfloat16"), (4, "uint8"),
                                     (6, "float16")])
def test_checkpoint_restored_in_a_new_process(daemon, tmp_path, k, dtype):
    # 2 epochs of 4 batches (200 = 3 x 64 + 8): k = 1, 2 mid-epoch, 4 just at
    # the boundary, 6 in the second epoch; the rest crosses the boundary for
    # k < 4. Samples are skipped nowhere here, so the position token is also
    # checked by a request with a bad-file dataset below.
    kw = dict(SMALL, batch_size=64, epochs=2, dtype=dtype, layout="NCHW")
    ds = ntf.dataset(daemon.target, "sample", **kw)
    straight = [digest(x, y) for x, y in ds]
    assert len(straight) == 8
    it = iter(ntf.dataset(daemon.target, "sample", **kw))
    for _ in range(k):
        next(it)
    path = tf.train.Checkpoint(ds=it).save(str(tmp_path / "ckpt"))
    # The iterator in this process goes on unaffected by the save.
    assert [digest(x, y) for x, y in it] == straight[k:]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", RESTORE_SCRIPT, daemon.target, path,
                          json.dumps(kw)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == straight[k:]


@pytest.fixture(scope="module")
def bad_files_daemon(daemon_factory, tmp_path_factory):
    cli = os.environ.get("NEARPREP_CLI")
    if not cli:
        pytest.skip("NEARPREP_CLI not set")
    root = str(tmp_path_factory.mktemp("tf_bad") / "ds")
    subprocess.run([cli, "mkdataset", "--out", root, "--classes", "3", "--per-class", "20",
                    "--with-bad-files"], check=True, capture_output=True)
    return daemon_factory({"sample": root}, "tf_bad").start()


def test_checkpoint_position_token_with_skipped_samples(bad_files_daemon, tmp_path):
    # Skipped (bad) files shift later batches: the restored stream must
    # start at the saved position token, not at k * batch_size.
    kw = dict(batch_size=7, epochs=2, height=16, width=16, seed=3, shuffle=True,
              dtype="uint8")
    straight = [digest(x, y) for x, y in ntf.dataset(bad_files_daemon.target, "sample", **kw)]
    with nearprep.Client(bad_files_daemon.target, native=False) as c:
        errors = sum(len(b.errors) for b in c.batches("sample", batch_size=7, seed=3,
                                                       shuffle=True, height=16, width=16))
    assert errors > 0, "the dataset must have bad files"
    for k in (3, len(straight) // 2 + 1):
        it = iter(ntf.dataset(bad_files_daemon.target, "sample", **kw))
        for _ in range(k):
            next(it)
        path = tf.train.Checkpoint(ds=it).save(str(tmp_path / f"ckpt{k}"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-c", RESTORE_SCRIPT, bad_files_daemon.target,
                              path, json.dumps(kw)], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == straight[k:]


def test_checkpoint_is_bound_to_its_stream(daemon, tmp_path):
    # The scan state is Batch.resume_token (bound to dataset, seed, epoch,
    # shuffle, batch size, shard): restored into a dataset of another seed
    # the daemon refuses it, naming the field, instead of continuing at a
    # raw position of another stream (one sample lost or repeated).
    # No prefetch of ours (20 batches, 1 read): the restored iterator opens
    # a stream with a saved token.
    kw = dict(SMALL, batch_size=10, height=8, width=8, dtype="uint8", prefetch=0)
    it = iter(ntf.dataset(daemon.target, "sample", **kw))
    next(it)
    path = tf.train.Checkpoint(ds=it).save(str(tmp_path / "ckpt"))
    other = iter(ntf.dataset(daemon.target, "sample", validate=False, **dict(kw, seed=8)))
    tf.train.Checkpoint(ds=other).restore(path).assert_consumed()
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        for _ in other:   # (tf.data may have read a batch ahead before the save)
            pass
    assert "seed" in e.value.message and "resume_token" in e.value.message
    # The same parameters: accepted, the rest of the epoch.
    same = iter(ntf.dataset(daemon.target, "sample", validate=False, **kw))
    tf.train.Checkpoint(ds=same).restore(path).assert_consumed()
    want = client_batches(daemon, batch_size=10, **dict(SMALL, height=8, width=8,
                                                        dtype="uint8"))
    assert [tf_bytes(x) for x, _ in same] == [b for b, _ in want[1:]]


def test_restored_iterator_moves_the_iteration_count(daemon, tmp_path):
    # Iteration 1 (epochs 2 and 3 with epochs=2) saved mid-way, restored
    # into a new dataset object: the next iterator of that dataset is
    # iteration 2 (epochs 4, 5), not 0.
    kw = dict(SMALL, batch_size=20, epochs=2, height=8, width=8, dtype="uint8")
    ds = ntf.dataset(daemon.target, "sample", **kw)
    assert len(list(ds)) == 20
    it = iter(ds)
    next(it), next(it)
    path = tf.train.Checkpoint(ds=it).save(str(tmp_path / "ckpt"))
    ds2 = ntf.dataset(daemon.target, "sample", validate=False, **kw)
    it2 = iter(ds2)
    tf.train.Checkpoint(ds=it2).restore(path).assert_consumed()
    rest = [y.numpy().tolist() for _, y in it2]
    labels = [y.numpy().tolist() for _, y in ds2]
    small = dict(SMALL, height=8, width=8, dtype="uint8")
    assert rest == (epoch_ids(daemon, 2, 20, **small)[0][2:] +
                    epoch_ids(daemon, 3, 20, **small)[0])
    assert labels == epoch_ids(daemon, 4, 20, **small)[0] + epoch_ids(daemon, 5, 20, **small)[0]


# --- tf.distribute -------------------------------------------------------------

DISTRIBUTE_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import nearprep.tf as ntf
    target, mode = sys.argv[1], sys.argv[2]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    GLOBAL = 20
    contexts = []

    def dataset_fn(ctx):
        contexts.append((ctx.input_pipeline_id, ctx.num_input_pipelines))
        return ntf.dataset(target, "sample", batch_size=ctx.get_per_replica_batch_size(GLOBAL),
                           input_context=ctx, height=16, width=16, dtype="uint8",
                           seed=5, shuffle=True, brightness_max_delta=0.2, epochs=2)

    options = None
    if mode == "per_replica":
        options = tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False)
    dist = strategy.distribute_datasets_from_function(dataset_fn, options)
    seen = [[], []]
    for step, (x, y) in enumerate(dist):
        for r, (xi, yi) in enumerate(zip(strategy.experimental_local_results(x),
                                         strategy.experimental_local_results(y))):
            for img in xi.numpy():
                seen[r].append(hashlib.sha256(img.tobytes()).hexdigest())
    print(json.dumps({"contexts": contexts, "seen": seen}))
""")


@pytest.mark.parametrize("mode", ["per_worker", "per_replica"])
def test_distribute_every_sample_once_per_epoch(daemon, mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", DISTRIBUTE_SCRIPT, daemon.target, mode],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "per_replica":
        assert sorted(map(tuple, res["contexts"])) == [(0, 2), (1, 2)]
    else:
        assert res["contexts"] == [[0, 1]]
    seen = res["seen"]
    assert seen[0] and seen[1], "both replicas got data"
    # The expected images of each epoch, by hash (200 distinct images).
    with nearprep.Client(daemon.target, native=False) as c:
        for epoch in (0, 1):
            want = [hashlib.sha256(img.tobytes()).hexdigest()
                    for b in c.batches("sample", batch_size=50, epoch=epoch, height=16,
                                       width=16, dtype="uint8", seed=5, shuffle=True,
                                       brightness_max_delta=0.2)
                    for img in b.images]
            assert len(set(want)) == 200
            if epoch == 0:
                e0 = set(want)
            else:
                e1 = set(want)
    assert not e0 & e1, "the epochs' draws differ"
    allseen = seen[0] + seen[1]
    assert len(allseen) == 400
    assert sorted(h for h in allseen if h in e0) == sorted(e0)
    assert sorted(h for h in allseen if h in e1) == sorted(e1)


# --- Keras -------------------------------------------------------------------

class _Count(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def _model():
    model = tf.keras.Sequential([
        tf.keras.Input((32, 24, 3)),
        tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(5)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_keras_fit_with_and_without_steps_per_epoch(daemon):
    model = _model()
    ds = ntf.dataset(daemon.target, "sample", batch_size=50, epochs=None, **SMALL)
    count = _Count()
    hist = model.fit(ds, epochs=2, steps_per_epoch=3, callbacks=[count], verbose=0)
    assert count.batches == 6 and len(hist.history["loss"]) == 2
    assert all(np.isfinite(hist.history["loss"]))
    ds1 = ntf.dataset(daemon.target, "sample", batch_size=64, epochs=1, **SMALL)
    count = _Count()
    hist = model.fit(ds1, epochs=1, callbacks=[count], verbose=0)
    assert count.batches == 4 and np.isfinite(hist.history["loss"][0])


# --- errors -----------------------------------------------------------------

def test_errors_are_exceptions_with_the_grpc_message(daemon, daemon_factory, synth_root):
    t0 = time.monotonic()
    with pytest.raises(nearprep.DatasetNotFoundError) as e:
        ntf.dataset(daemon.target, "no-such-dataset", **SMALL)
    assert "no-such-dataset" in str(e.value)
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        ntf.dataset(daemon.target, "sample", height=0)
    assert e.value.field == "transform.height"
    with pytest.raises(nearprep.InvalidArgumentError) as e:
        ntf.dataset(daemon.target, "sample", dtype="float64")
    assert e.value.field == "output.dtype"
    # Not validated up front: the same errors while iterating, as TF errors
    # carrying nearprep's message; never a silent end of data.
    ds = ntf.dataset(daemon.target, "no-such-dataset", validate=False, **SMALL)
    with pytest.raises(tf.errors.OpError) as e:
        list(ds)
    assert "no-such-dataset" in e.value.message and "NOT_FOUND" in e.value.message
    ds = ntf.dataset(daemon.target, "sample", validate=False, height=0)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    assert "transform.height" in e.value.message
    # A daemon that is not there.
    down = daemon_factory({"sample": synth_root}, "tf_down").start()
    target = down.target
    down.kill()
    with pytest.raises(nearprep.UnavailableError):
        ntf.dataset(target, "sample", client_options=dict(reconnect_deadline=1.0), **SMALL)
    ds = ntf.dataset(target, "sample", validate=False,
                     client_options=dict(reconnect_deadline=1.0), **SMALL)
    with pytest.raises(tf.errors.OpError) as e:
        list(ds)
    assert "UNAVAILABLE" in e.value.message
    assert time.monotonic() - t0 < 60


def test_daemon_killed_mid_epoch_is_an_error_not_an_end(daemon_factory, synth_root):
    d = daemon_factory({"sample": synth_root}, "tf_kill").start()
    # Endless epochs of large batches: what is buffered in the sockets when
    # the daemon dies cannot be the whole of it.
    ds = ntf.dataset(d.target, "sample", batch_size=10, prefetch=0, epochs=None,
                     client_options=dict(reconnect_deadline=1.0, prefetch=1),
                     **dict(SMALL, height=224, width=224))
    it = iter(ds)
    next(it)
    d.kill()
    with pytest.raises(tf.errors.OpError) as e:
        for _ in range(100):
            next(it)
    assert "UNAVAILABLE" in e.value.message


# --- fleet --------------------------------------------------------------------

def test_fleet_client_as_a_tf_data_source(tmp_path):
    cli = os.environ.get("NEARPREP_CLI")
    if not cli:
        pytest.skip("NEARPREP_CLI not set")
    from nearprep.fleet import FleetClient

    def run(*args):
        subprocess.run([cli, *args], check=True, capture_output=True)

    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    run("mkdataset", "--out", src, "--classes", "3", "--per-class", "20")
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord",
        "--shard-size", "64KiB")
    manifest = str(tmp_path / "m.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", "4",
        "--out", manifest)
    d = fleet_daemon(tmp_path, "fleet1", shards, manifest=manifest).start()
    try:
        kw = dict(manifest=manifest, seed=9, global_batch=8, trainers=2, rank=1,
                  height=20, width=20, dtype="uint8", crop="random_resized")
        kw["native"] = False
        with FleetClient([d.target], "ds", **kw) as fc:
            want = [(fb.images.tobytes(), fb.labels.tolist()) for e in (0, 1)
                    for fb in fc.epoch(e)]
        ds = ntf.fleet_dataset(lambda: FleetClient([d.target], "ds", **kw), epochs=2,
                               height=20, width=20, dtype="uint8")
        assert ds.element_spec[0].shape.as_list() == [None, 20, 20, 3]
        got = [(x.numpy().tobytes(), y.numpy().tolist()) for x, y in ds]
        assert got == want and len(got) >= 14
        # The next iteration: the next epochs.
        with FleetClient([d.target], "ds", **kw) as fc:
            want23 = [(fb.images.tobytes(), fb.labels.tolist()) for e in (2, 3)
                      for fb in fc.epoch(e)]
        assert [(x.numpy().tobytes(), y.numpy().tolist()) for x, y in ds] == want23
        # Checkpointable position here too.
        ds = ntf.fleet_dataset(lambda: FleetClient([d.target], "ds", **kw), epochs=2,
                               height=20, width=20, dtype="uint8")
        it = iter(ds)
        next(it), next(it)
        path = tf.train.Checkpoint(ds=it).save(str(tmp_path / "fleet_ckpt"))
        ds2 = ntf.fleet_dataset(lambda: FleetClient([d.target], "ds", **kw), epochs=2,
                                height=20, width=20, dtype="uint8")
        it2 = iter(ds2)
        tf.train.Checkpoint(ds=it2).restore(path)
        assert [(x.numpy().tobytes(), y.numpy().tolist()) for x, y in it2] == want[2:]
    finally:
        d.stop()
