"""nearprep.tf (the tf.data adapter) run with TensorFlow against a real
nearprepd: element_spec and bytes for every dtype and layout, drop_remainder,
tf.data transformations, checkpoint / restore of the position in a new
process, tf.distribute sharding under MirroredStrategy, Keras model.fit,
errors, and a fleet dataset as a source.

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
# nearprep._native (Debian's gRPC C++) segfaults opening a stream in a process
# that has loaded TensorFlow (its own gRPC/protobuf): the adapter defaults to
# grpcio (tested here with $NEARPREP_NATIVE unset); direct Clients say so.
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
    ds = ntf.dataset(daemon.target, "sample", batch_size=64, drop_remainder=True, **SMALL)
    want = client_batches(daemon, drop_remainder=True, **SMALL)
    assert [tf_bytes(x) for x, _ in ds.take(2)] == [w for w, _ in want[:2]]
    assert [tf_bytes(x) for x, _ in ds.repeat(2)] == [w for w, _ in want] * 2
    doubled = ds.map(lambda x, y: (x * 2.0, y + 1), num_parallel_calls=2)
    first = next(iter(doubled))
    ref = np.frombuffer(want[0][0], np.float32).reshape(64, 32, 24, 3)
    assert np.array_equal(first[0].numpy(), ref * 2) and first[0].shape[0] == 64
    singles = list(ds.unbatch().prefetch(3))
    assert len(singles) == 192 and singles[0][0].shape == (32, 24, 3)
    assert singles[0][0].numpy().tobytes() == ref[0].tobytes()
    assert singles[65][1].numpy() == want[1][1][1]
    # Two iterators of one dataset, interleaved: each its own stream.
    a, b = iter(ds), iter(ds)
    seq = [tf_bytes(next(a)[0]), tf_bytes(next(b)[0]), tf_bytes(next(a)[0])]
    assert seq == [want[0][0], want[0][0], want[1][0]]
    # Inside a tf.function (graph mode).
    @tf.function
    def total(d):
        s = tf.constant(0, tf.int64)
        for _, y in d:
            s += tf.shape(y, out_type=tf.int64)[0]
        return s
    assert int(total(ds)) == 192


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
        # Checkpointable position here too.
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
