"""nearprep.tf in the training loops users write (issue 35), on CPU with
small models, small images and a real nearprepd:

- Keras model.fit over 3 epochs: 3 different, complete epochs (each the
  daemon's stream of that epoch, every sample once), a progress total, no
  "ran out of data" warning, an LR schedule and ModelCheckpoint;
- the snippets of docs/python.md "Training loops (TensorFlow)", run as
  written (only their `TARGET, ... = ...` line replaced): Keras fit, a
  custom loop resumed after a stop, MultiWorkerMirroredStrategy with 2
  worker processes on loopback (TF_CONFIG), whose samples per epoch are
  disjoint and together complete;
- the native receive path in fresh processes that import TensorFlow first.

What each loop saw is recorded by wrapping nearprep.tf.dataset (the
wrapper maps a recorder over the dataset it returns) and compared batch by
batch with grpcio Clients reading the same epochs.

Runs in the venv with tensorflow-cpu (ctest: tf_training); skips elsewhere.
"""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.pop("NEARPREP_NATIVE", None)
tf = pytest.importorskip("tensorflow")

import nearprep  # noqa: E402
import nearprep.tf as ntf  # noqa: E402
from conftest import ROOT  # noqa: E402
from test_tf_adapter import synth_root  # noqa: E402,F401  (the same 200 synthetic JPEGs)

DOCS = os.path.join(ROOT, "docs", "python.md")
PARAMS = re.compile(r"^TARGET, DATASET, SIZE, CLASSES, BATCH, EPOCHS = .*$", re.M)
# dataset() keywords that are the adapter's, not Client.batches()'s.
ADAPTER_ONLY = ("epochs", "start_epoch", "prefetch", "client_options", "input_context",
                "validate", "client")


@pytest.fixture(scope="module")
def daemon(daemon_factory, synth_root):
    return daemon_factory({"sample": synth_root}, "tf_training").start()


def batch_digest(images, labels):
    return hashlib.sha256(np.ascontiguousarray(images).tobytes() +
                          np.asarray(labels, np.int64).tobytes()).hexdigest()


def reference(target, name, epoch, kwargs):
    """[(digest, sample ids)] of one epoch as a grpcio Client reads it with
    the keywords the adapter was given."""
    kw = {k: v for k, v in kwargs.items() if k not in ADAPTER_ONLY}
    ctx = kwargs.get("input_context")
    if ctx is not None:
        kw.update(shard_index=ctx[0], num_shards=ctx[1])
    with nearprep.Client(target, native=False) as c:
        return [(batch_digest(b.images, b.labels), b.sample_ids.tolist())
                for b in c.batches(name, epoch=epoch, **kw)]


class Recorder:
    """Wraps nearprep.tf.dataset: records each batch the dataset delivers
    (its digest, in delivery order) and the keywords it was made with."""

    def __init__(self):
        self.batches = []
        self.calls = []
        self._dataset = ntf.dataset

    def dataset(self, target, name, *args, **kwargs):
        assert not args, "the snippets pass batch_size by keyword"
        ds = self._dataset(target, name, **kwargs)
        ctx = kwargs.get("input_context")
        call = dict(kwargs)
        if ctx is not None:
            call["input_context"] = (ctx.input_pipeline_id, ctx.num_input_pipelines)
        self.calls.append((target, name, call))

        def record(images, labels):
            self.batches.append(batch_digest(images, labels))
            return np.int64(0)

        def tap(x, y):
            n = tf.numpy_function(record, [x, y], tf.int64, stateful=True)
            with tf.control_dependencies([n]):
                return tf.identity(x), tf.identity(y)

        return ds.map(tap)


def expect_epochs(target, call, epochs):
    """The batch digests of `epochs` in order, and each epoch's sample ids."""
    _, name, kwargs = call
    digests, ids = [], []
    for e in epochs:
        ref = reference(target, name, e, kwargs)
        digests += [d for d, _ in ref]
        ids.append(sorted(i for _, s in ref for i in s))
    return digests, ids


def snippet(name, **params):
    """The docs' snippet marked `<!-- tested: name -->`, with its parameter
    line replaced by `params` (TARGET, DATASET, SIZE, CLASSES, BATCH,
    EPOCHS)."""
    text = open(DOCS).read()
    blocks = re.findall(r"<!-- tested: " + re.escape(name) + r" -->\n```python\n(.*?)\n```",
                        text, re.S)
    assert len(blocks) == 1, f"docs/python.md: one snippet marked {name}"
    code = blocks[0]
    assert len(PARAMS.findall(code)) == 1, f"snippet {name}: one parameter line"
    line = ("TARGET, DATASET, SIZE, CLASSES, BATCH, EPOCHS = " +
            ", ".join(repr(params[k]) for k in ("TARGET", "DATASET", "SIZE", "CLASSES",
                                                 "BATCH", "EPOCHS")))
    return PARAMS.sub(line, code)


def test_every_tested_snippet_is_run_here():
    # A new snippet in the section must be marked and run by a test here.
    text = open(DOCS).read()
    section = text[text.index("### Training loops (TensorFlow)"):text.index("\n## PyTorch")]
    marked = re.findall(r"<!-- tested: (\w+) -->\n```python", section)
    assert section.count("```python") == len(marked) == 3
    here = open(__file__).read()
    for name in marked:
        assert f'snippet("{name}"' in here, name


# --- Keras fit -------------------------------------------------------------------

class _Params(tf.keras.callbacks.Callback):
    """What Keras's progress bar is given, and the LR at each epoch's end."""

    def __init__(self):
        super().__init__()
        self.steps, self.lr = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.steps.append(self.params.get("steps"))

    def on_epoch_end(self, epoch, logs=None):
        self.lr.append(float(self.model.optimizer.learning_rate))


def _tiny_model(size, classes):
    model = tf.keras.Sequential([
        tf.keras.Input((size, size, 3)),
        tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(classes)])
    return model


def test_keras_fit_three_epochs(daemon, tmp_path, monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(ntf, "dataset", rec.dataset)
    kw = dict(batch_size=50, height=16, width=16, shuffle=True, seed=11, flip_probability=0.5,
              brightness_max_delta=0.1, error_policy="fail_stream")
    ds = ntf.dataset(daemon.target, "sample", **kw)
    assert int(ds.cardinality()) == 4 and len(ds) == 4
    model = _tiny_model(16, 4)
    model.compile(tf.keras.optimizers.SGD(0.1),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    params = _Params()
    callbacks = [params,
                 tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 / 2 ** epoch),
                 tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "m-{epoch}.weights.h5"),
                                                    save_weights_only=True)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = model.fit(ds, epochs=3, callbacks=callbacks, verbose=0)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "ran out of data" in m], messages
    assert params.steps == [4, 4, 4], "the progress total"
    assert np.allclose(params.lr, [0.1, 0.05, 0.025])
    assert sorted(os.listdir(tmp_path)) == [f"m-{e}.weights.h5" for e in (1, 2, 3)]
    assert len(hist.history["loss"]) == 3 and np.all(np.isfinite(hist.history["loss"]))
    # Keras epoch e = nearprep epoch e, every sample once, three different epochs.
    digests, ids = expect_epochs(daemon.target, rec.calls[0], (0, 1, 2))
    assert rec.batches == digests
    assert all(i == list(range(200)) for i in ids)
    assert len(set(rec.batches)) == 12
    assert int(model.optimizer.iterations) == 12

    # The same loop with the length unknown (error_policy "skip"): Keras
    # warns once (what the check above would see on the old adapter).
    ds = ntf.dataset(daemon.target, "sample", **dict(kw, error_policy="skip"))
    assert int(ds.cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
    params = _Params()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(ds, epochs=2, callbacks=[params], verbose=0)
    assert [str(w.message) for w in caught if "ran out of data" in str(w.message)]
    assert params.steps[0] is None


def test_docs_keras_fit(daemon, tmp_path, monkeypatch, capfd):
    rec = Recorder()
    monkeypatch.setattr(ntf, "dataset", rec.dataset)
    monkeypatch.chdir(tmp_path)
    code = snippet("tf_keras_fit", TARGET=daemon.target, DATASET="sample", SIZE=16,
                   CLASSES=4, BATCH=50, EPOCHS=3)
    scope = {"__name__": "__main__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "docs/python.md:tf_keras_fit", "exec"), scope)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capfd.readouterr().out)   # without colours
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    # The progress bar's total, every epoch ("4/4"), never "Unknown".
    assert out.count("Epoch ") == 3 and "Unknown" not in out
    assert len(re.findall(r"\b4/4\b", out)) >= 3, out[-2000:]
    assert sorted(os.listdir("checkpoints")) == [f"epoch-00{e}.keras" for e in (1, 2, 3)]
    # The LR schedule ran over all 12 steps.
    assert int(scope["model"].optimizer.iterations) == 12
    digests, ids = expect_epochs(daemon.target, rec.calls[0], (0, 1, 2))
    assert rec.batches == digests
    assert all(i == list(range(200)) for i in ids)


def test_docs_custom_loop_resumes_after_a_stop(daemon, tmp_path, monkeypatch, capfd):
    rec = Recorder()
    monkeypatch.setattr(ntf, "dataset", rec.dataset)
    monkeypatch.chdir(tmp_path)
    params = dict(TARGET=daemon.target, DATASET="sample", SIZE=16, CLASSES=4, BATCH=64)
    # First run: 2 epochs. Second run (a restart): up to 3 epochs, so only
    # epoch 2, from the checkpoint.
    exec(compile(snippet("tf_custom_loop", EPOCHS=2, **params), "tf_custom_loop", "exec"),
         {"__name__": "__main__"})
    first = list(rec.batches)
    scope = {"__name__": "__main__"}
    exec(compile(snippet("tf_custom_loop", EPOCHS=3, **params), "tf_custom_loop", "exec"),
         scope)
    out = capfd.readouterr().out
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("epoch ")] == [
        "epoch 0", "epoch 1", "epoch 2"]
    assert int(scope["done"]) == 3
    assert len(rec.calls) == 2 and rec.calls[1][2]["start_epoch"] == 2
    digests, ids = expect_epochs(daemon.target, rec.calls[0], (0, 1, 2))
    assert first == digests[:8] and rec.batches == digests
    assert all(i == list(range(200)) for i in ids)
    assert len(set(rec.batches)) == 12


# --- MultiWorkerMirroredStrategy -------------------------------------------------

WORKER = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf          # TensorFlow first, then the native path
    import nearprep.tf as ntf
    sys.path.insert(0, sys.argv[2])
    from test_tf_training import Recorder
    rec = Recorder()
    ntf.dataset = rec.dataset
    code = open(sys.argv[1]).read()
    exec(compile(code, "tf_multi_worker", "exec"), {"__name__": "__main__"})
    print("RESULT " + json.dumps({"batches": rec.batches, "calls": rec.calls}), flush=True)
""")


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run_workers(code_path, n, timeout):
    ports = _free_ports(n)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(n):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, code_path, os.path.dirname(__file__)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def test_docs_multi_worker_mirrored_strategy(daemon, tmp_path):
    # 2 workers x 1 replica, global batch 20: each worker's shard is 100
    # samples = 10 batches of 10 per epoch, 2 epochs.
    code = snippet("tf_multi_worker", TARGET=daemon.target, DATASET="sample", SIZE=16,
                   CLASSES=4, BATCH=20, EPOCHS=2)
    path = tmp_path / "worker.py"
    path.write_text(code)
    results = _run_workers(str(path), 2, timeout=150)   # ~16 s here
    for rc, out, err in results:
        assert rc == 0, err[-3000:]
    seen = [json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])
            for _, out, _ in results]
    per_epoch = [[], []]
    for w, res in enumerate(seen):
        assert len(res["calls"]) == 1
        target, name, call = res["calls"][0]
        assert call["input_context"] == [w, 2]
        digests, ids = expect_epochs(daemon.target, (target, name, dict(
            call, input_context=tuple(call["input_context"]))), (0, 1))
        # This worker: its shard of epoch 0, then of epoch 1, batch by batch.
        assert res["batches"] == digests and len(digests) == 20
        for e in (0, 1):
            per_epoch[e].append(ids[e])
    for e in (0, 1):
        a, b = per_epoch[e]
        assert len(a) == len(b) == 100
        assert not set(a) & set(b), "the workers' samples are disjoint"
        assert sorted(a + b) == list(range(200)), "and together every sample once"
    assert seen[0]["batches"][:10] != seen[0]["batches"][10:]


# --- the native receive path beside TensorFlow -----------------------------------

NATIVE_PROCESS = textwrap.dedent("""
    import hashlib, json, os, sys, warnings
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf          # first: its own gRPC and protobuf are loaded
    warnings.simplefilter("error", RuntimeWarning)   # a fallback to grpcio warns
    import nearprep.tf as ntf
    from nearprep import client
    made = []                        # the transport of every Client made
    init = client.Client.__init__
    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self.transport)
    client.Client.__init__ = recording_init
    ds = ntf.dataset(sys.argv[1], "sample", batch_size=64, height=16, width=16,
                     dtype="uint8", seed=5, shuffle=True, flip_probability=0.5,
                     brightness_max_delta=0.2)
    out = [made]
    for _ in range(2):
        out.append([hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()
                    for x, y in ds])
    print("RESULT " + json.dumps(out), flush=True)
""")


def test_native_path_beside_tensorflow_in_fresh_processes(daemon):
    if not nearprep.native_available():
        if os.environ.get("NEARPREP_EXPECT_NATIVE") == "1":
            pytest.fail("nearprep._native was built but does not import")
        pytest.skip(f"nearprep._native not available: {nearprep.native_missing_reason()}")
    kw = dict(batch_size=64, height=16, width=16, dtype="uint8", seed=5, shuffle=True,
              flip_probability=0.5, brightness_max_delta=0.2)
    with nearprep.Client(daemon.target, native=False) as c:
        want = [[hashlib.sha256(b.images.tobytes() + b.labels.tobytes()).hexdigest()
                 for b in c.batches("sample", epoch=e, **kw)] for e in (0, 1)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for attempt in range(5):
        # ~7 s each here (importing TensorFlow is most of it); 5 x 35 s at
        # worst, under a third of the ctest TIMEOUT.
        p = subprocess.run([sys.executable, "-c", NATIVE_PROCESS, daemon.target],
                           capture_output=True, text=True, env=env, timeout=35)
        assert p.returncode == 0, f"process {attempt}: rc {p.returncode}: {p.stderr[-3000:]}"
        got = json.loads(next(ln for ln in p.stdout.splitlines()
                              if ln.startswith("RESULT "))[7:])
        assert got == [["native"]] + want, f"process {attempt}"
