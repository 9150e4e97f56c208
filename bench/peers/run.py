#!/usr/bin/env python3
"""nearprep side by side with what users run instead (issue 22): tf.data in
process, tf.data service, NVIDIA DALI (CPU only), the PyTorch DataLoader +
torchvision, and nearprepd + the native Python client, on the same images,
the same cores and the same output.

    python3 bench/peers/run.py [--build build] [--quick] [--rows tfdata,nearprep]
        [--server-cores 1] [--trainer-core 0] [--repeats 3] [--seconds 30]
        [--json out.json]

Every row runs in a subprocess of its own pinned with taskset: the "server"
cores (--server-cores) preprocess, the "trainer" core (--trainer-core)
consumes. In-process rows (tf.data, DALI) have no server: they run on the
trainer core alone ("1c") or on the trainer and server cores ("Nc"). Rows
are interleaved over --repeats rounds and the median of each column is
reported; the machine's load is printed at the start, per run and at the
end.

Interpreters (each row degrades on its own, printing why, when its
interpreter or package is missing):
  tf.data, tf.data service, nearprep, the fidelity oracle: <build>/venv
      (scripts/python_venv.sh: tensorflow-cpu and the nearprep wheel)
  DALI: <build>/peers-venv (scripts/peers_venv.sh, bench/peers/requirements.txt)
  DataLoader + torchvision: Debian's /usr/bin/python3 (python3-torch, -torchvision)

Each peer is set up as its own documentation advises (issue 32): tf.data
and the tf.data service read one repeat()ed dataset through one iterator
(ceil(N / batch) batches an epoch; the service: repeat() before
distribute(), one job, compression=None), DALI decodes with
use_fast_idct=True and scales with brightness_contrast, the DataLoader keeps
persistent workers. Every row gets each batch's images as a numpy view
without a copy and copies them once into a staging buffer (Meter.touch), as
a trainer hands a batch to its accelerator.

nearprep-tf_compat-f32[-rrc]-cached is the nearprep row with the daemon's
decoded-image cache on (decoded_cache.bytes = --decoded-cache-mib, all of it
allowed to one dataset): the first epoch decodes and admits every image,
the steady epochs are served from the cache (the worker prints the hits and
misses from ServerInfo.decoded_cache).

Columns (steady state = whole epochs after the first, repeated until at
least --epochs epochs and --seconds seconds; the first epoch is timed
apart: time to first batch, from building the pipeline / opening the stream
to the first batch in hand):
  img/s, img/s per server core (in-process rows: per core used), first
  batch s, trainer CPU ms/image (user+system of the trainer process over the
  steady epochs), server CPU ms/image (/proc/PID/stat of the serving
  processes: nearprepd, the tf.data service process, DataLoader workers),
  total CPU ms/image (trainer + server), CPU/wall (trainer + server CPU
  seconds per second of the steady window: the cores the row kept busy),
  wire bytes/image (nearprep: the daemon's bytes_sent counter; tf.data
  service: the loopback interface's byte counter over the window, which
  counts other processes' loopback traffic too), peak RSS of the serving
  processes (VmHWM; in-process rows: the process itself), and fidelity
  against TensorFlow's own ops (see FIDELITY below).

--quick: the 200 images once per epoch, one steady epoch (about 400 images
a row), no time floor, one repeat, 32 fidelity samples; then every
available row must have run and its fidelity must match the claims in
docs/benchmarks.md (between the "peers-fidelity-claims" markers). Exit
status 1 when not. Not a timing test.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "python"))
from bench_daemon import proc_cpu_s, proc_hwm_mib  # noqa: E402 (any interpreter)
DEFAULT_DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "datasets",
                                             "imagenet-sample-200"))
DEBIAN_PY = "/usr/bin/python3"
BRIGHTNESS = 32.0 / 255.0
SATURATION = (0.5, 1.5)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZE = 224
CLAIMS_BEGIN, CLAIMS_END = "<!-- peers-fidelity-claims -->", "<!-- /peers-fidelity-claims -->"

# ---------------------------------------------------------------------------
# Small /proc helpers (any process, any interpreter).


def lo_bytes():
    """Bytes received on the loopback interface so far (all processes)."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "lo":
                    return int(rest.split()[0])
    except OSError:
        pass
    return None


def self_cpu_s():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def self_hwm_mib():
    return proc_hwm_mib(os.getpid())


def load_str():
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f} on {os.cpu_count()} cores"


# ---------------------------------------------------------------------------
# Worker mode: one row's measured run inside this (pinned) process.


class Meter:
    """Times the first epoch and then the steady epochs of a batch iterator
    factory (whole epochs until both --epochs and --seconds are reached),
    and the CPU of this process and of the serving pids."""

    def __init__(self, spec, server_pids=lambda: []):
        self.spec = spec
        self.server_pids = server_pids
        self.out = {}
        self._stage = {}

    def touch(self, images):
        """What every row does with a batch, the same way: `images` is a
        numpy view of the batch's images that the row got without a copy
        (np.asarray of the framework's tensor / buffer); it is copied once
        into a preallocated staging buffer, as a trainer hands a batch to
        its accelerator. Returns the number of images."""
        import numpy as np
        key = (images.shape, images.dtype.str)
        buf = self._stage.get(key)
        if buf is None:
            buf = self._stage[key] = np.empty(images.shape, images.dtype)
        np.copyto(buf, images)
        return images.shape[0]

    def run(self, epoch_iter, view):
        """epoch_iter(e) yields epoch e's batches; view(batch) -> a numpy
        view (no copy) of the batch's images, which touch() consumes."""
        spec = self.spec
        t0 = time.monotonic()
        first = None
        n0 = 0
        for b in epoch_iter(0):
            n0 += self.touch(view(b))
            if first is None:
                first = time.monotonic() - t0
        t1 = time.monotonic()
        self.out.update(first_batch_s=first, first_epoch_s=t1 - t0, first_epoch_images=n0)
        pids = list(self.server_pids())
        s_cpu0 = [proc_cpu_s(p) for p in pids]
        cpu0, lo0, w0 = self_cpu_s(), lo_bytes(), self.wire_bytes()
        t1 = time.monotonic()
        n = 0
        e = 0
        while e < spec["epochs"] or time.monotonic() - t1 < spec["seconds"]:
            e += 1
            for b in epoch_iter(e):
                n += self.touch(view(b))
        t2 = time.monotonic()
        cpu1, lo1, w1 = self_cpu_s(), lo_bytes(), self.wire_bytes()
        s_cpu1 = [proc_cpu_s(p) for p in pids]
        secs = t2 - t1
        trainer_s = cpu1 - cpu0
        self.out.update(images=n, seconds=secs, steady_epochs=e, images_per_s=n / secs,
                        trainer_cpu_ms=1000.0 * trainer_s / n)
        server_s = 0.0
        if pids and all(v is not None for v in s_cpu0 + s_cpu1):
            server_s = sum(b - a for a, b in zip(s_cpu0, s_cpu1))
            self.out["server_cpu_ms"] = 1000.0 * server_s / n
            self.out["server_rss_mib"] = sum(proc_hwm_mib(p) or 0.0 for p in pids)
        if not pids or "server_cpu_ms" in self.out:
            # Everything this row ran: the trainer process and its servers.
            self.out["total_cpu_ms"] = 1000.0 * (trainer_s + server_s) / n
            self.out["cpu_per_wall"] = (trainer_s + server_s) / secs
        if w0 is not None and w1 is not None:
            self.out["wire_bytes"] = (w1 - w0) / n
        elif spec.get("wire") == "lo" and lo0 is not None and lo1 is not None:
            self.out["wire_bytes"] = (lo1 - lo0) / n
            self.out["wire_note"] = "loopback counter (all processes)"
        if not pids:
            self.out["server_rss_mib"] = self_hwm_mib()
        return self.out

    def wire_bytes(self):
        return None


def tf_map_fn(tf, crop, augment=True):
    """The seed's TF pipeline on one (path, label)."""
    def load(path, label):
        x = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        x = tf.image.convert_image_dtype(x, tf.float32)
        if crop == "random_resized":
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                tf.shape(x), tf.zeros([0, 0, 4], tf.float32), area_range=(0.08, 1.0),
                aspect_ratio_range=(3 / 4, 4 / 3), max_attempts=10,
                use_image_if_no_bounding_boxes=True)
            x = tf.slice(x, begin, size)
        x = tf.image.resize(x, [SIZE, SIZE])
        if augment:
            x = tf.image.random_flip_left_right(x)
            x = tf.image.random_brightness(x, max_delta=BRIGHTNESS)
            x = tf.image.random_saturation(x, lower=SATURATION[0], upper=SATURATION[1])
            x = tf.clip_by_value(x, 0.0, 1.0)
        return x, label
    return load


def tf_dataset(tf, files, labels, crop):
    """The tf.data input pipeline as its guide writes it: shuffle each
    epoch, then repeat() (one iterator over every epoch: no iterator is
    closed and reopened at an epoch boundary), map in parallel, batch,
    prefetch. The consumer takes ceil(N / batch) batches per epoch (the
    last one wraps into the next epoch; those samples count)."""
    ds = tf.data.Dataset.from_tensor_slices((files, labels))
    ds = ds.shuffle(len(files), seed=1, reshuffle_each_iteration=True).repeat()
    ds = ds.map(tf_map_fn(tf, crop), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(spec_batch(), drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def one_iterator_epochs(make_ds, per_epoch):
    """epoch_iter for a repeated dataset: one iterator, per_epoch batches
    of it per epoch."""
    state = {}

    def epochs(e):
        if "it" not in state:
            state["it"] = iter(make_ds())
        it = state["it"]
        for _ in range(per_epoch):
            yield next(it)
    return epochs


_SPEC = {}


def spec_batch():
    return _SPEC["batch_size"]


def list_files(root):
    """(paths, labels) of an image folder, sorted (nearprep's sample order)."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for i, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith((".jpg", ".jpeg")):
                files.append(os.path.join(root, c, f))
                labels.append(i)
    order = sorted(range(len(files)), key=lambda k: os.path.relpath(files[k], root))
    return [files[k] for k in order], [labels[k] for k in order]


def worker_tfdata(spec):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    files, labels = list_files(spec["data"])
    meter = Meter(spec)
    per_epoch = math.ceil(len(files) / spec["batch_size"])
    epochs = one_iterator_epochs(lambda: tf_dataset(tf, files, labels, spec["crop"]), per_epoch)
    # np.asarray of an eager CPU tensor is a view (Tensor.numpy() copies).
    return meter.run(epochs, lambda b: np.asarray(b[0]))


def serve_tfservice(portfile):
    """The tf.data service: a dispatcher and one worker in this process."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    svc = tf.data.experimental.service
    d = svc.DispatchServer(svc.DispatcherConfig(port=0))
    addr = d.target.split("://")[1]
    w = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=addr))
    with open(portfile + ".tmp", "w") as f:
        f.write(d.target)
    os.rename(portfile + ".tmp", portfile)
    while d and w:  # both servers live as long as this process
        time.sleep(3600)


def worker_tfservice(spec):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    files, labels = list_files(spec["data"])
    meter = Meter(spec, lambda: [spec["server_pid"]])
    spec["wire"] = "lo"
    per_epoch = math.ceil(len(files) / spec["batch_size"])

    def make():
        # repeat() before distribute: one job for every epoch (not one per
        # epoch); no compression: snappy costs CPU on both sides to save a
        # few % of the bytes on loopback (tf.data service's guide: disable
        # it when the network is not the bottleneck).
        ds = tf_dataset(tf, files, labels, spec["crop"])
        return ds.apply(tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=spec["target"], compression=None))
    return meter.run(one_iterator_epochs(make, per_epoch), lambda b: np.asarray(b[0]))


def dali_pipeline(spec, files, labels, augment=True, stages=False):
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import math as dali_math, pipeline_def

    @pipeline_def(batch_size=spec["batch_size"], num_threads=spec["threads"],
                  device_id=None, seed=1, prefetch_queue_depth=2)
    def pipe():
        jpegs, lab = fn.readers.file(files=files, labels=labels, random_shuffle=augment,
                                     name="reader", seed=1)
        # use_fast_idct: libjpeg-turbo's fast integer IDCT, the one
        # tf.io.decode_jpeg uses by default (dct_method "" = INTEGER_FAST).
        dec = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB,
                                use_fast_idct=True)
        if spec["crop"] == "random_resized" and augment:
            rs = fn.random_resized_crop(dec, size=[SIZE, SIZE], random_area=[0.08, 1.0],
                                        random_aspect_ratio=[3 / 4, 4 / 3],
                                        interp_type=types.INTERP_LINEAR, antialias=False,
                                        dtype=types.FLOAT)
        else:
            rs = fn.resize(dec, resize_x=SIZE, resize_y=SIZE, interp_type=types.INTERP_LINEAR,
                           antialias=False, dtype=types.FLOAT)
        # One op scales to [0, 1] (as convert_image_dtype) and adds the
        # random brightness delta (brightness_shift is in units of the
        # float type's range, 1): out = shift + in / 255.
        if augment:
            img = fn.brightness_contrast(rs, brightness=1.0 / 255.0,
                                         brightness_shift=fn.random.uniform(
                                             range=[-BRIGHTNESS, BRIGHTNESS]),
                                         dtype=types.FLOAT)
            img = fn.hsv(img, saturation=fn.random.uniform(range=list(SATURATION)),
                         dtype=types.FLOAT)
        else:
            img = fn.brightness_contrast(rs, brightness=1.0 / 255.0, dtype=types.FLOAT)
        img = fn.crop_mirror_normalize(img, mirror=fn.random.coin_flip() if augment else 0,
                                       dtype=types.FLOAT, output_layout="HWC")
        if augment:
            img = dali_math.clamp(img, 0.0, 1.0)
        if stages:
            res = fn.brightness_contrast(rs, brightness=1.0 / 255.0, dtype=types.FLOAT)
            sat = fn.hsv(res, saturation=1.3, dtype=types.FLOAT)
            bri = fn.brightness_contrast(rs, brightness=1.0 / 255.0, brightness_shift=0.1,
                                         dtype=types.FLOAT)
            return img, lab, dec, res, sat, bri
        return img, lab
    p = pipe()
    p.build()
    return p


def dali_view(out):
    """A numpy view of a DALI batch's images: the dense TensorList as one
    tensor (no copy), through the buffer protocol (as_array() copies)."""
    import numpy as np
    return np.asarray(out[0].as_tensor())


def worker_dali(spec):
    import numpy as np
    files, labels = list_files(spec["data"])
    meter = Meter(spec)
    state = {}
    per_epoch = math.ceil(len(files) / spec["batch_size"])

    def epochs(e):
        # ceil(samples / batch) batches: the reader wraps into the next epoch
        # to fill the last one, and those samples count (they were made).
        if "p" not in state:
            state["p"] = dali_pipeline(spec, files, labels)
        p = state["p"]
        for _ in range(per_epoch):
            yield p.run()
    out = meter.run(epochs, dali_view)
    # Fidelity capture (outside the timed window): the pipeline with the
    # augmentation off, and each op's output for a fixed parameter, on the
    # original images (the checker compares them with TF's ops).
    ofiles = list_files(spec["orig"])[0][:spec["fidelity_samples"]]
    fspec = dict(spec, batch_size=len(ofiles))
    p = dali_pipeline(fspec, ofiles, [0] * len(ofiles), augment=False, stages=True)
    img, _, dec, res, sat, bri = p.run()
    cap = {"files": np.array([os.path.relpath(f, spec["orig"]) for f in ofiles]),
           "images": img.as_array(), "resized": res.as_array(), "sat": sat.as_array(),
           "bri": bri.as_array(), "sat_factor": 1.3, "bri_shift": 0.1}
    for k in range(len(ofiles)):
        cap[f"dec{k}"] = np.array(dec.at(k))
    np.savez(spec["capture"], **cap)
    return out


def torch_transform(augment, dtype="float32"):
    import torch
    import torchvision.transforms as T
    B = T.InterpolationMode.BILINEAR
    if augment:  # torchvision's ImageNet train preset (classification references)
        t = [T.RandomResizedCrop(SIZE, interpolation=B), T.RandomHorizontalFlip(),
             T.PILToTensor()]
        if dtype == "float32":
            t += [T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
        return T.Compose(t)
    t = [T.Resize((SIZE, SIZE), interpolation=B), T.PILToTensor()]
    if dtype == "float32":
        t.append(T.ConvertImageDtype(torch.float))
    return T.Compose(t)


class _Pin:
    def __init__(self, cores):
        self.cores = cores

    def __call__(self, worker_id):
        os.sched_setaffinity(0, self.cores)


def worker_torch(spec):
    import numpy as np
    import torch
    import torchvision
    torch.set_num_threads(1)
    dtype = spec.get("dtype", "float32")
    ds = torchvision.datasets.ImageFolder(spec["data"], transform=torch_transform(True, dtype))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=spec["batch_size"], shuffle=True, num_workers=spec["workers"],
        persistent_workers=True, worker_init_fn=_Pin(set(spec["server_cores"])),
        prefetch_factor=2)

    def pids():
        it = loader._iterator
        return [w.pid for w in it._workers] if it is not None else []

    meter = Meter(spec, pids)

    def epochs(e):
        return iter(loader)
    # Tensor.numpy() is a view (the workers' shared memory).
    out = meter.run(epochs, lambda b: b[0].numpy())
    # Fidelity capture: the transform with the augmentation off (Resize to
    # 224x224, bilinear; PILToTensor; float or uint8), as NHWC.
    files, _ = list_files(spec["orig"])
    files = files[:spec["fidelity_samples"]]
    from torchvision.datasets.folder import default_loader
    t = torch_transform(False, dtype)
    imgs = np.stack([t(default_loader(f)).numpy().transpose(1, 2, 0) for f in files])
    np.savez(spec["capture"], files=np.array([os.path.relpath(f, spec["orig"]) for f in files]),
             images=imgs)
    return out


def nearprep_kwargs(spec):
    if spec["fidelity"] == "torchvision":
        kw = {"fidelity": "torchvision", "height": SIZE, "width": SIZE,
              "crop": "random_resized", "scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3),
              "flip_probability": 0.5, "layout": "NCHW"}
        kw.update({"dtype": "uint8"} if spec["dtype"] == "uint8" else
                  {"dtype": spec["dtype"], "mean": MEAN, "std": STD})
        return kw
    kw = {"fidelity": spec["fidelity"], "height": SIZE, "width": SIZE,
          "flip_probability": 0.5, "brightness_max_delta": BRIGHTNESS,
          "saturation": SATURATION, "dtype": spec["dtype"], "layout": "NHWC"}
    if spec["crop"] != "none":
        kw["crop"] = spec["crop"]
    return kw


def worker_nearprep(spec):
    import numpy as np
    import nearprep
    client = nearprep.Client(spec["target"])
    kw = nearprep_kwargs(spec)
    meter = Meter(spec, lambda: [spec["server_pid"]])
    meter.wire_bytes = lambda: client.info().counters.bytes_sent

    def epochs(e):
        return client.batches("rep", batch_size=spec["batch_size"], shuffle=True, seed=1,
                              epoch=e, **kw)
    out = meter.run(epochs, lambda b: np.asarray(b.images))  # a view of the message
    out["transport"] = client.transport
    for d in client.info().decoded_cache:  # the -cached rows (ServerInfo.decoded_cache)
        if d.dataset == "rep":
            out.update(cache_hits=d.hits, cache_misses=d.misses, cache_bytes=d.bytes)
    # Fidelity capture: the original images with the draws the daemon reports.
    files, _ = list_files(spec["orig"])
    rel = [os.path.relpath(f, spec["orig"]) for f in files]
    n = spec["fidelity_samples"]
    imgs, ids, par = [], [], []
    for b in client.batches("orig", batch_size=min(n, 64), shuffle=True, seed=7, epoch=0,
                            include_params=True, **kw):
        for k, sid in enumerate(b.sample_ids):
            if len(ids) < n:
                p = b.params[k]
                imgs.append(np.array(b.images[k]))
                ids.append(int(sid))
                par.append([int(p.flipped), p.brightness_delta, p.saturation_factor,
                            p.crop.y, p.crop.x, p.crop.height, p.crop.width,
                            p.source_height, p.source_width])
        if len(ids) >= n:
            break
    client.close()
    np.savez(spec["capture"], files=np.array([rel[i] for i in ids]), images=np.stack(imgs),
             params=np.array(par, dtype=np.float64), kw=json.dumps(kw))
    return out


WORKERS = {"tfdata": worker_tfdata, "tfservice": worker_tfservice, "dali": worker_dali,
           "torch": worker_torch, "nearprep": worker_nearprep}


def worker_main(spec_json):
    spec = json.loads(spec_json)
    _SPEC.update(spec)
    out = WORKERS[spec["kind"]](spec)
    sys.stdout.write("\nRESULT " + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown of TF / DALI / torch threads


# ---------------------------------------------------------------------------
# Fidelity checkers (run with the oracle's interpreter).


def _params(row):
    from types import SimpleNamespace as NS
    return NS(flipped=bool(row[0]), brightness_delta=float(row[1]),
              saturation_factor=float(row[2]),
              crop=NS(y=int(row[3]), x=int(row[4]), height=int(row[5]), width=int(row[6])),
              source_height=int(row[7]), source_width=int(row[8]))


def _diff(want, got, scale=1.0):
    import numpy as np
    a = want.astype(np.float64) / scale
    b = got.astype(np.float64) / scale
    return float(np.abs(a - b).max()), want.tobytes() == got.tobytes()


def check_tf(kind, capture, orig):
    """TensorFlow as the oracle of a capture: nearprep's served samples with
    their reported draws (test_tf_oracle.tf_pipeline), or DALI's / torch's
    augmentation-off output against TF's decode + convert + resize."""
    import numpy as np
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    cap = np.load(capture, allow_pickle=False)
    files = [str(f) for f in cap["files"]]
    dec = {}

    def decode(rel):
        if rel not in dec:
            dec[rel] = tf.io.decode_jpeg(tf.io.read_file(os.path.join(orig, rel)), channels=3)
        return dec[rel]

    def tf_plain(rel):
        x = tf.image.convert_image_dtype(decode(rel), tf.float32)
        return tf.image.resize(x, [SIZE, SIZE]).numpy()

    result = {"n": len(files)}
    if kind == "nearprep":
        sys.path[:0] = [os.path.join(ROOT, "tests", "python"),
                        os.path.join(ROOT, "tests", "python", "tf")]
        from test_tf_oracle import tf_pipeline
        kw = json.loads(str(cap["kw"]))
        scale = 255.0 if kw["dtype"] == "uint8" else 1.0
        worst, same = 0.0, 0
        for k, rel in enumerate(files):
            want = tf_pipeline(decode(rel), kw, _params(cap["params"][k]))
            d, eq = _diff(want, cap["images"][k], scale)
            worst, same = max(worst, d), same + eq
        result.update(max_abs_diff=worst, identical=same)
        return result
    images = cap["images"]
    worst, same = 0.0, 0
    for k, rel in enumerate(files):
        got = images[k]
        if got.dtype == np.uint8:  # compared in [0, 1] units
            got = got.astype(np.float64) / 255.0
        d, eq = _diff(tf_plain(rel), got)
        worst, same = max(worst, d), same + eq
    result.update(max_abs_diff=worst, identical=same)
    if kind == "dali":
        # Each op against TF's op on the same input (DALI's own previous stage).
        ops = {}
        w, s = 0, 0
        for k, rel in enumerate(files):
            d, eq = _diff(decode(rel).numpy(), cap[f"dec{k}"], 255.0)
            w, s = max(w, d), s + eq
        ops["decoders.image vs decode_jpeg"] = (w, s)
        w, s = 0, 0
        for k in range(len(files)):
            src = tf.constant(cap[f"dec{k}"].astype(np.float32))
            want = tf.image.resize(src, [SIZE, SIZE]).numpy() * np.float32(1 / 255)
            d, eq = _diff(want, cap["resized"][k])
            w, s = max(w, d), s + eq
        ops["resize (linear, no antialias) + brightness_contrast(brightness=1/255) vs "
            "image.resize"] = (w, s)
        w, s = 0, 0
        for k in range(len(files)):
            x = tf.constant(cap["resized"][k])
            want = tf.image.adjust_saturation(x, np.float32(cap["sat_factor"])).numpy()
            d, eq = _diff(want, cap["sat"][k])
            w, s = max(w, d), s + eq
        ops["hsv(saturation) vs adjust_saturation"] = (w, s)
        w, s = 0, 0
        for k in range(len(files)):
            x = tf.constant(cap["resized"][k])
            want = tf.image.adjust_brightness(x, np.float32(cap["bri_shift"])).numpy()
            d, eq = _diff(want, cap["bri"][k])
            w, s = max(w, d), s + eq
        ops["brightness_contrast(brightness=1/255, brightness_shift) vs "
            "adjust_brightness"] = (w, s)
        result["ops"] = {k: {"max_abs_diff": v[0], "identical": v[1]} for k, v in ops.items()}
    return result


def check_torchvision(capture, orig):
    """torchvision (Debian's) as the oracle of nearprep's TORCHVISION rows,
    with the crop box and flip the daemon reports
    (test_torchvision_daemon.oracle)."""
    import numpy as np
    sys.path[:0] = [os.path.join(ROOT, "tests", "python")]
    from test_torchvision_daemon import oracle
    cap = np.load(capture, allow_pickle=False)
    kw = json.loads(str(cap["kw"]))
    scale = 255.0 if kw["dtype"] == "uint8" else 1.0
    worst, same = 0.0, 0
    files = [str(f) for f in cap["files"]]
    for k, rel in enumerate(files):
        want = oracle(os.path.join(orig, rel), kw, _params(cap["params"][k]))
        d, eq = _diff(want, cap["images"][k], scale)
        worst, same = max(worst, d), same + eq
    return {"n": len(files), "max_abs_diff": worst, "identical": same}


def checker_main(args):
    """--check JSON: [[kind, capture], ...], one oracle process for all."""
    out = []
    for kind, capture in json.loads(args.check):
        try:
            if kind == "torchvision":
                out.append(check_torchvision(capture, args.orig))
            else:
                out.append(check_tf(kind, capture, args.orig))
        except Exception as e:  # noqa: BLE001 (reported per row)
            out.append({"error": f"{type(e).__name__}: {e}"})
    sys.stdout.write("\nRESULT " + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------
# The orchestrator.


class Row:
    def __init__(self, name, kind, python, cores_desc, ncores, oracle, **spec):
        self.name, self.kind, self.python = name, kind, python
        self.cores_desc, self.ncores, self.oracle = cores_desc, ncores, oracle
        self.spec = spec
        self.unavailable = None
        self.runs = []
        self.fidelity = None
        self.errors = []


def parse_cores(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def make_rows(args):
    S, T = args.server_cores_list, args.trainer_core
    all_cores = sorted(set([T] + S))
    nall = len(all_cores)
    venv = os.path.join(args.build, "venv", "bin", "python")
    dvenv = os.path.join(args.build, "peers-venv", "bin", "python")
    rows = []
    for crop in args.crops:
        sfx = "" if crop == "none" else "-rrc"
        rows += [
            Row(f"tfdata-1c{sfx}", "tfdata", venv, f"{T} (in process)", 1, "self",
                cores=[T], crop=crop),
            Row(f"tfdata-{nall}c{sfx}", "tfdata", venv, f"{','.join(map(str, all_cores))} "
                "(in process)", nall, "self", cores=all_cores, crop=crop),
            Row(f"tfservice{sfx}", "tfservice", venv, f"{args.server_cores} + {T}", len(S),
                "self", cores=[T], crop=crop),
            Row(f"dali-1t{sfx}", "dali", dvenv, f"{T} (in process)", 1, "tf",
                cores=[T], threads=1, crop=crop),
            Row(f"dali-{nall}t{sfx}", "dali", dvenv, f"{','.join(map(str, all_cores))} "
                "(in process)", nall, "tf", cores=all_cores, threads=nall, crop=crop),
        ]
        if crop == "none":
            for fid, dt in (("tf_compat", "float32"), ("tf_compat", "uint8"), ("fast", "float32")):
                rows.append(Row(f"nearprep-{fid}-{'f32' if dt == 'float32' else 'u8'}",
                                "nearprep", venv, f"{args.server_cores} + {T}", len(S), "tf",
                                cores=[T], fidelity=fid, dtype=dt, crop=crop))
        else:
            rows.append(Row(f"nearprep-tf_compat-f32{sfx}", "nearprep", venv,
                            f"{args.server_cores} + {T}", len(S), "tf", cores=[T],
                            fidelity="tf_compat", dtype="float32", crop=crop))
        # The same with the decoded-image cache (issue 32): the first epoch
        # decodes and admits, the steady epochs are served from the cache.
        rows.append(Row(f"nearprep-tf_compat-f32{sfx}-cached", "nearprep", venv,
                        f"{args.server_cores} + {T}", len(S), "tf", cores=[T],
                        fidelity="tf_compat", dtype="float32", crop=crop,
                        decoded_cache_mib=args.decoded_cache_mib))
    # The torchvision recipe (ImageNet train preset: random resized crop);
    # -u8: the preset up to PILToTensor (uint8 NCHW), nearprep's uint8 rows'
    # counterpart.
    for w in sorted({1, 2, len(S)}):
        rows.append(Row(f"torch-{w}w", "torch", DEBIAN_PY, f"{args.server_cores} + {T}",
                        len(S), "tf", cores=[T], workers=w, crop="random_resized"))
    rows.append(Row("torch-1w-u8", "torch", DEBIAN_PY, f"{args.server_cores} + {T}",
                    len(S), "tf", cores=[T], workers=1, crop="random_resized", dtype="uint8"))
    for dt in ("float32", "uint8"):
        rows.append(Row(f"nearprep-torchvision-{'f32' if dt == 'float32' else 'u8'}",
                        "nearprep", venv, f"{args.server_cores} + {T}", len(S), "torchvision",
                        cores=[T], fidelity="torchvision", dtype=dt, crop="random_resized"))
    if args.rows:
        want = [w.strip() for w in args.rows.split(",") if w.strip()]
        rows = [r for r in rows if any(r.name == w or r.name.startswith(w) for w in want)]
    return rows


def probe(python, code):
    """None when `python -c code` runs, else why not (one line)."""
    if not os.access(python, os.X_OK):
        return f"not installed ({python} missing)"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                           env=env)
    except subprocess.TimeoutExpired:
        return f"{python} -c '{code}' timed out"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        return f"not installed ({os.path.basename(os.path.dirname(os.path.dirname(python)))}: " \
               f"{last})"
    return None


PROBES = {
    "tfdata": "import tensorflow; tensorflow.data.experimental.service.DispatchServer",
    "tfservice": "import tensorflow; tensorflow.data.experimental.service.DispatchServer",
    "dali": "import nvidia.dali, nvidia.dali.fn",
    "torch": "import torch, torchvision, PIL",
    "nearprep": "import nearprep, sys; sys.exit(0 if nearprep.native_available() else 3)",
}


def run_proc(cmd, env, timeout):
    """(RESULT dict or None, tail of output)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return None, f"timed out after {timeout} s: {(e.stderr or '')[-400:]}"
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:]), ""
    return None, f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-800:]}"


class Servers:
    """Serving processes started per run (nearprepd, the tf.data service)."""

    def __init__(self, args, workdir):
        self.args, self.workdir = args, workdir

    def start_nearprepd(self, decoded_cache_mib=0):
        d = os.path.join(self.workdir, "np")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "nearprepd.yaml")
        port_file = os.path.join(d, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        with open(cfg, "w") as f:
            f.write("listen: 127.0.0.1\nlog_level: warn\ndatasets:\n"
                    f"  - name: rep\n    format: image_folder\n    root: {self.args.rep}\n"
                    f"  - name: orig\n    format: image_folder\n    root: {self.args.dataset_root}\n")
            if decoded_cache_mib:
                # One dataset may take the whole budget (rep's working set).
                b = int(decoded_cache_mib) << 20
                f.write(f"decoded_cache:\n  bytes: {b}\n  dataset_bytes: {b}\n")
        cmd = ["taskset", "-c", self.args.server_cores, self.args.nearprepd, "--config", cfg,
               "--port", "0", "--port-file", port_file,
               "--workers", str(len(self.args.server_cores_list))]
        log = open(os.path.join(d, "log"), "w")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        return proc, self._wait_port(proc, port_file, lambda s: f"127.0.0.1:{int(s)}", log.name)

    def start_tfservice(self, python, env):
        port_file = os.path.join(self.workdir, "tfservice.target")
        if os.path.exists(port_file):
            os.remove(port_file)
        log = open(os.path.join(self.workdir, "tfservice.log"), "w")
        proc = subprocess.Popen(["taskset", "-c", self.args.server_cores, python, __file__,
                                 "--serve-tfservice", port_file], stdout=log, stderr=log, env=env)
        return proc, self._wait_port(proc, port_file, lambda s: s, log.name)

    @staticmethod
    def _wait_port(proc, port_file, fmt, log, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(port_file):
                s = open(port_file).read().strip()
                if s:
                    return fmt(s)
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}: {open(log).read()[-600:]}")
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError("server did not start")


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_row(row, args, servers, capture):
    spec = dict(row.spec, kind=row.kind, data=args.rep, orig=args.dataset_root,
                batch_size=args.batch_size, epochs=args.epochs, seconds=args.seconds,
                capture=capture,
                fidelity_samples=args.fidelity_samples,
                server_cores=args.server_cores_list)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    if row.kind == "torch":
        env["PYTHONPATH"] = ""
    server = None
    try:
        if row.kind == "nearprep":
            server, spec["target"] = servers.start_nearprepd(
                row.spec.get("decoded_cache_mib", 0))
            spec["server_pid"] = server.pid
        elif row.kind == "tfservice":
            server, spec["target"] = servers.start_tfservice(row.python, env)
            spec["server_pid"] = server.pid
        cmd = ["taskset", "-c", ",".join(map(str, row.spec["cores"])), row.python, __file__,
               "--worker", json.dumps(spec)]
        return run_proc(cmd, env, args.row_timeout)
    except RuntimeError as e:
        return None, str(e)
    finally:
        stop(server)


def check_fidelity(rows, args, workdir):
    """Fills row.fidelity from each row's first capture: one TensorFlow
    process for the TF-oracle rows, one Debian python for torchvision's."""
    groups = {"tensorflow": [], "torchvision": []}
    shared = {}  # DALI's and torch's captures do not depend on the row's cores
    for r in rows:
        if not r.runs:
            continue
        if r.oracle == "self":
            r.fidelity = {"reference": True}
            continue
        if r.kind in ("dali", "torch"):
            key = (r.kind, r.spec.get("dtype", "float32"))
            if key in shared:
                shared[key][1].append(r)
                continue
            shared[key] = (r, [])
        cap = os.path.join(workdir, f"{r.name}.npz")
        if not os.path.exists(cap):
            r.fidelity = {"error": "no capture"}
            continue
        groups["torchvision" if r.oracle == "torchvision" else "tensorflow"].append((r, cap))
    for against, items in groups.items():
        if not items:
            continue
        if against == "torchvision":
            py = DEBIAN_PY
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [os.path.join(ROOT, "client", "python"), os.path.join(args.build, "python"),
                 os.path.join(ROOT, "tests", "python")]))
            todo = [["torchvision", cap] for _, cap in items]
        else:
            py = os.path.join(args.build, "venv", "bin", "python")
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", NEARPREP_NATIVE="0")
            todo = [[r.kind, cap] for r, cap in items]
        res, err = run_proc([py, __file__, "--check", json.dumps(todo), "--orig",
                             args.dataset_root], env, 1800)
        for k, (r, _) in enumerate(items):
            f = res[k] if res else {"error": err}
            if "error" not in f:
                f["against"] = against
            else:
                print(f"peers: {r.name}: fidelity check failed: {f['error']}", flush=True)
            r.fidelity = f
    for first, others in shared.values():
        for r in others:
            r.fidelity = first.fidelity


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def summarize(row):
    cols = ("images_per_s", "first_batch_s", "trainer_cpu_ms", "server_cpu_ms", "total_cpu_ms",
            "cpu_per_wall", "wire_bytes", "server_rss_mib", "seconds", "images")
    s = {c: med([r.get(c) for r in row.runs]) for c in cols}
    if s["images_per_s"] is not None:
        s["images_per_s_per_core"] = s["images_per_s"] / max(1, row.ncores)
    return s


def fidelity_text(row):
    f = row.fidelity
    if f is None:
        return "-"
    if f.get("reference"):
        return "TF itself"
    if "error" in f:
        return "check failed"
    ref = "TF" if f["against"] == "tensorflow" else "torchvision"
    mode = "aug off, " if row.kind in ("dali", "torch") else ""
    return f"{mode}max {f['max_abs_diff']:.3g}, {f['identical']}/{f['n']} identical vs {ref}"


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(rows, args):
    lines = ["| row | cores (server + trainer) | img/s | img/s per core | first batch s | "
             "trainer CPU ms/img | server CPU ms/img | total CPU ms/img | CPU/wall | "
             "wire bytes/img | serving peak RSS MiB | fidelity |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.unavailable or not r.runs:
            why = r.unavailable or ("; ".join(r.errors[-1:]) or "no run")
            lines.append(f"| {r.name} | {r.cores_desc} | {why.splitlines()[0][:160]} "
                         "| | | | | | | | | |")
            continue
        s = summarize(r)
        wire = s["wire_bytes"]
        wire_s = "-" if wire is None else (f"~{wire / 1e3:.0f} k" if r.kind == "tfservice"
                                           else f"{wire / 1e3:.0f} k")
        lines.append(
            f"| {r.name} | {r.cores_desc} | {fmt(s['images_per_s'], '.0f')} | "
            f"{fmt(s.get('images_per_s_per_core'), '.0f')} | {fmt(s['first_batch_s'], '.2f')} | "
            f"{fmt(s['trainer_cpu_ms'], '.2f')} | {fmt(s['server_cpu_ms'], '.2f')} | "
            f"{fmt(s['total_cpu_ms'], '.2f')} | {fmt(s['cpu_per_wall'], '.2f')} | {wire_s} | "
            f"{fmt(s['server_rss_mib'], '.0f')} | {fidelity_text(r)} |")
    return "\n".join(lines)


def read_claims(path):
    """{row name: claim} from docs/benchmarks.md's claims block:
    '| row | claim |' lines; a claim is conditions that must all hold:
    'exact' (every sample identical, max 0), 'max<=X' (max |diff| at most X,
    in [0, 1] units for uint8), 'differs' (some sample not identical),
    'reference' (the row is TF itself)."""
    claims = {}
    inside = False
    for line in open(path):
        if CLAIMS_BEGIN in line:
            inside = True
            continue
        if CLAIMS_END in line:
            break
        if inside and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            if len(cells) >= 2 and cells[0] not in ("row", ""):
                claims[cells[0]] = cells[1]
    return claims


def claim_holds(claim, f):
    """Every condition of the claim (space separated) holds for fidelity f."""
    conds = claim.replace(",", " ").split()
    if not conds:
        return False
    for c in conds:
        if c == "reference":
            ok = bool(f.get("reference"))
        elif "max_abs_diff" not in f:
            ok = False
        elif c == "exact":
            ok = f["identical"] == f["n"] and f["max_abs_diff"] == 0
        elif c.startswith("max<="):
            ok = f["max_abs_diff"] <= float(c[5:])
        elif c == "differs":
            ok = f["identical"] < f["n"]
        else:
            ok = False
        if not ok:
            return False
    return True


def prepare_data(args, workdir):
    """The replicated image folder: hard links (nearprepd refuses symlinks
    leaving the dataset root) in the same class folders, else copies."""
    import bench_daemon
    rep = os.path.join(workdir, "rep")
    bench_daemon.replicate_image_folder(args.dataset_root, args.copies, rep)
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dataset-root", default=os.environ.get("NEARPREP_SAMPLE_DATASET",
                                                             DEFAULT_DATA))
    ap.add_argument("--copies", type=int, default=10,
                    help="copies of each image per epoch (10 x 200 = 2000 samples)")
    ap.add_argument("--epochs", type=int, default=1,
                    help="at least this many steady epochs after the first")
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="steady epochs run until at least this long (whole epochs)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--server-cores", default=None,
                    help="cores of the serving side (taskset list; default: all but the "
                         "trainer core)")
    ap.add_argument("--trainer-core", type=int, default=0)
    ap.add_argument("--rows", default="", help="comma list of row names or prefixes")
    ap.add_argument("--crops", default="none", help="none,random_resized: pipeline variants "
                    "of the TF-family rows")
    ap.add_argument("--fidelity-samples", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="write every run and the medians here")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--row-timeout", type=int, default=600)
    ap.add_argument("--decoded-cache-mib", type=int, default=2048,
                    help="the -cached rows' decoded-image cache budget; above the working "
                         "set (--copies x 200 images x ~0.57 MiB decoded) every steady "
                         "epoch is served from it")
    # Internal modes.
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--serve-tfservice", help=argparse.SUPPRESS)
    ap.add_argument("--check", help=argparse.SUPPRESS)
    ap.add_argument("--orig", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker)
    if args.serve_tfservice:
        return serve_tfservice(args.serve_tfservice)
    if args.check:
        return checker_main(args)

    if args.quick:
        args.copies, args.epochs, args.repeats, args.fidelity_samples = 1, 1, 1, 32
        args.seconds = 0.0
    args.build = os.path.abspath(args.build)
    args.dataset_root = os.path.abspath(args.dataset_root)
    args.crops = [c for c in args.crops.split(",") if c]
    ncpu = os.cpu_count()
    if args.server_cores is None:
        others = [c for c in range(ncpu) if c != args.trainer_core]
        args.server_cores = ",".join(map(str, others or [args.trainer_core]))
    args.server_cores_list = parse_cores(args.server_cores)
    args.nearprepd = os.path.join(args.build, "server", "daemon", "nearprepd")
    if not os.path.isdir(args.dataset_root):
        print(f"peers: no dataset at {args.dataset_root} (--dataset-root)", file=sys.stderr)
        return 2
    if not shutil.which("taskset"):
        print("peers: taskset not found (util-linux)", file=sys.stderr)
        return 2

    rows = make_rows(args)
    print(f"peers: {len(rows)} rows; server cores {args.server_cores}, trainer core "
          f"{args.trainer_core}; {args.copies} x {args.dataset_root} per epoch, batch "
          f"{args.batch_size}, 1 + >= {args.epochs} epochs and >= {args.seconds:g} s, "
          f"{args.repeats} repeats; "
          f"{load_str()}", flush=True)
    probed = {}
    for r in rows:
        key = (r.python, PROBES[r.kind])
        if key not in probed:
            probed[key] = probe(*key)
        why = probed[key]
        if r.kind == "nearprep" and why is None and not os.access(args.nearprepd, os.X_OK):
            why = f"not built ({args.nearprepd} missing)"
        r.unavailable = why
        if why:
            print(f"peers: {r.name}: {why}", flush=True)

    workdir = tempfile.mkdtemp(prefix="nearprep-peers-")
    loads = [os.getloadavg()]
    t_start = time.monotonic()
    try:
        args.rep = prepare_data(args, workdir)
        servers = Servers(args, workdir)
        live = [r for r in rows if not r.unavailable]
        for rep in range(args.repeats):
            order = live if rep % 2 == 0 else list(reversed(live))
            for r in order:
                cap = os.path.join(workdir, f"{r.name}.npz" if not r.runs else "scratch.npz")
                t = time.monotonic()
                res, err = run_row(r, args, servers, cap)
                loads.append(os.getloadavg())
                if res is None:
                    r.errors.append(err)
                    print(f"peers: [{rep + 1}/{args.repeats}] {r.name}: FAILED {err}", flush=True)
                    continue
                res["load1"] = os.getloadavg()[0]
                r.runs.append(res)
                print(f"peers: [{rep + 1}/{args.repeats}] {r.name}: "
                      f"{res['images_per_s']:.0f} img/s, first batch {res['first_batch_s']:.2f} s, "
                      f"trainer {res['trainer_cpu_ms']:.2f} ms/img, "
                      f"server {fmt(res.get('server_cpu_ms'), '.2f')} ms/img, "
                      f"total {fmt(res.get('total_cpu_ms'), '.2f')} ms/img, "
                      f"CPU/wall {fmt(res.get('cpu_per_wall'), '.2f')} "
                      + (f"cache hits {res['cache_hits']} misses {res['cache_misses']} "
                         if "cache_hits" in res else "") +
                      f"({res['images']} images in {res['seconds']:.1f} s; "
                      f"{time.monotonic() - t:.0f} s, load {res['load1']:.2f})", flush=True)
        print(f"peers: fidelity checks ({load_str()})", flush=True)
        check_fidelity(rows, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    elapsed = time.monotonic() - t_start
    la = [l[0] for l in loads]
    print(f"\npeers: done in {elapsed:.0f} s; 1-min load during the runs: min {min(la):.2f} "
          f"median {statistics.median(la):.2f} max {max(la):.2f}; now {load_str()}\n")
    print(markdown(rows, args))
    for r in rows:
        if r.fidelity and "ops" in r.fidelity:
            print(f"\n{r.name}: each DALI op against TF's op on the same input "
                  f"({r.fidelity['n']} images; max |diff| in [0, 1] units):")
            for op, v in r.fidelity["ops"].items():
                print(f"  {op}: max {v['max_abs_diff']:.3g}, {v['identical']}/{r.fidelity['n']} "
                      "identical")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()
                                if isinstance(v, (str, int, float, list, type(None)))},
                       "load": loads, "elapsed_s": elapsed,
                       "rows": [{"name": r.name, "kind": r.kind, "cores": r.cores_desc,
                                 "unavailable": r.unavailable, "errors": r.errors,
                                 "runs": r.runs, "median": summarize(r) if r.runs else None,
                                 "fidelity": r.fidelity} for r in rows]}, f, indent=1)
    status = 0
    for r in rows:
        if not r.unavailable and not r.runs:
            print(f"peers: FAIL {r.name}: no run succeeded ({r.errors[-1][:300]})")
            status = 1
    if args.quick:
        claims = read_claims(args.docs)
        for r in rows:
            if r.unavailable or not r.runs:
                continue
            # The row's own name, else the longest claim key it starts with
            # ("tfdata" covers tfdata-1c and tfdata-16c).
            keys = [k for k in claims if r.name == k or r.name.startswith(k + "-")]
            claim = claims[max(keys, key=len)] if keys else None
            if claim is None:
                print(f"peers: FAIL {r.name}: no fidelity claim in {args.docs}")
                status = 1
            elif not r.fidelity or not claim_holds(claim, r.fidelity):
                print(f"peers: FAIL {r.name}: fidelity {fidelity_text(r)} does not match the "
                      f"docs' claim '{claim}'")
                status = 1
            else:
                print(f"peers: ok {r.name}: fidelity '{claim}' ({fidelity_text(r)})")
    return status


if __name__ == "__main__":
    sys.exit(main())
