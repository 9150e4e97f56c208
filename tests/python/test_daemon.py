"""The Python client against a real nearprepd on loopback (port 0)."""

import collections
import os
import threading
import time

import numpy as np
import pytest

import nearprep
from nearprep import reference as R
from conftest import sample_files

AUG = dict(flip_probability=0.5, brightness_max_delta=32.0 / 255.0,
           saturation=(0.5, 1.5), include_params=True)


def test_datasets_and_info(daemon, sample_dir):
    c = nearprep.Client(daemon.target)
    ds = c.dataset("sample")
    files, _ = sample_files(sample_dir)
    assert ds.num_samples == len(files) == 200
    assert list(ds.class_names) == sorted(os.listdir(sample_dir))
    info = c.info()
    assert info.version and info.limits.max_batch_size > 0


def _check_epoch_bit_exact(client, decoded, labels, dtype, layout="NHWC", size=(224, 224),
                           **extra):
    req = client.request("sample", batch_size=25, seed=1234, epoch=1, shuffle=True,
                         height=size[0], width=size[1], dtype=dtype, layout=layout,
                         **AUG, **extra)
    seen = []
    mismatches = []
    for b in client.batches(request=req):
        assert b.dtype == dtype and b.layout == layout
        assert len(b.params) == len(b)
        for k, sid in enumerate(b.sample_ids):
            sid = int(sid)
            seen.append(sid)
            assert b.labels[k] == labels[sid]
            want = R.expected_sample(decoded[sid], req, b.params[k])
            got = b.images[k]
            if want.tobytes() != got.tobytes():
                diff = np.abs(want.astype(np.float64) - got.astype(np.float64)).max()
                mismatches.append((sid, float(diff)))
    assert sorted(seen) == list(range(200)), "each sample exactly once"
    assert seen != list(range(200)), "shuffled"
    assert not mismatches, f"{len(mismatches)} samples differ (id, max diff): {mismatches[:5]}"
    return req


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_all_200_images_bit_exact_with_reference(daemon, decoded, sample_dir, dtype, transport):
    _, labels = sample_files(sample_dir)
    c = nearprep.Client(daemon.target)
    _check_epoch_bit_exact(c, decoded, labels, dtype)
    # The draws really vary: some flipped, some not; deltas of both signs.
    params = [p for b in c.batches("sample", batch_size=50, seed=1234, epoch=1,
                                   shuffle=True, height=8, width=8, **AUG)
              for p in b.params]
    assert 0 < sum(p.flipped for p in params) < len(params)
    assert min(p.brightness_delta for p in params) < 0 < max(p.brightness_delta for p in params)
    assert len({p.saturation_factor for p in params}) > 100


@pytest.mark.parametrize("dtype, layout, extra", [
    ("float16", "NCHW", {}),
    ("bfloat16", "NHWC", dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))),
    ("float32", "NHWC", dict(crop="random_resized")),
    ("uint8", "NCHW", dict(crop="center", clip=False)),
])
def test_other_formats_bit_exact(daemon, decoded, dtype, layout, extra, transport):
    c = nearprep.Client(daemon.target)
    req = c.request("sample", batch_size=16, seed=5, shuffle=True, max_batches=2,
                    height=96, width=80, dtype=dtype, layout=layout, **AUG, **extra)
    n = 0
    for b in c.batches(request=req):
        for k, sid in enumerate(b.sample_ids):
            want = R.expected_sample(decoded[int(sid)], req, b.params[k])
            assert want.tobytes() == b.images[k].tobytes(), f"sample {sid}"
            n += 1
    assert n == 32


def test_bad_arguments_from_the_server(daemon, transport):
    c = nearprep.Client(daemon.target)
    with pytest.raises(nearprep.DatasetNotFoundError) as exc:
        list(c.batches("no-such-dataset", batch_size=4))
    assert "no-such-dataset" in str(exc.value)
    # Not checked client-side: the daemon names the field.
    req = c.request("sample", batch_size=4, crop="center")
    req.transform.center_fraction = 2.0
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        list(c.batches(request=req))
    assert exc.value.field == "transform.center_fraction", str(exc.value)
    limit = c.info().limits.max_batch_size
    with pytest.raises(nearprep.NearprepError) as exc:
        list(c.batches("sample", batch_size=limit + 1))
    assert "batch_size" in str(exc.value)


# Requests the Python client used to refuse with rules of its own (some of
# them not the daemon's); now they reach the daemon, whose INVALID_ARGUMENT
# names the request field.
@pytest.mark.parametrize("kwargs, field", [
    (dict(height=0), "transform.height"),
    (dict(flip_probability=1.5), "transform.flip_probability"),
    (dict(saturation=(1.5, 0.5)), "transform.saturation_upper"),
    (dict(scale=(0.0, 0.5)), "transform.scale_min"),
    (dict(mean=(0.5, 0.5), std=(1, 1)), "transform.mean"),
    (dict(mean=(0, 0, 0), std=(1, 0, 1)), "transform.std[1]"),
    (dict(shard_index=2, num_shards=2), "shard_index"),
])
def test_value_rules_come_from_the_daemon(daemon, kwargs, field):
    c = nearprep.Client(daemon.target)
    with pytest.raises(nearprep.InvalidArgumentError) as exc:
        list(c.batches("sample", batch_size=4, max_batches=1, **kwargs))
    assert exc.value.field == field, str(exc.value)
    assert exc.value.code == "INVALID_ARGUMENT" and field + ":" in str(exc.value)


def test_daemon_accepts_what_the_client_used_to_refuse(daemon):
    # mean without std (std defaults to 1) and a ratio above the client's old
    # 1e6 cap are valid requests for the daemon.
    c = nearprep.Client(daemon.target)
    args = dict(batch_size=4, max_batches=1, height=32, width=32)
    mean = (0.5, 0.4, 0.3)
    alone = [b.images.tobytes() for b in c.batches("sample", mean=mean, **args)]
    both = [b.images.tobytes() for b in c.batches("sample", mean=mean, std=(1, 1, 1),
                                                   **args)]
    assert alone and alone == both
    wide = list(c.batches("sample", crop="random_resized", ratio=(0.5, 2e6), **args))
    assert len(wide) == 1 and len(wide[0]) == 4


def _stream_ids(stream):
    return [(b.index, tuple(int(s) for s in b.sample_ids), b.images.tobytes()) for b in stream]


def test_resume_after_sigkill_and_restart(daemon_factory, sample_dir, transport):
    d = daemon_factory({"sample": sample_dir}, "restart").start()
    args = dict(batch_size=10, seed=9, shuffle=True, height=64, width=64, dtype="uint8", **AUG)
    c = nearprep.Client(d.target, initial_backoff=0.05, max_backoff=0.5,
                        reconnect_deadline=30, prefetch=1)
    want = _stream_ids(c.batches("sample", **args))
    stream = c.batches("sample", **args)
    got = []
    for b in stream:
        got.append((b.index, tuple(int(s) for s in b.sample_ids), b.images.tobytes()))
        if len(got) == 3:
            d.kill()
            threading.Timer(0.5, d.start).start()  # same port
    assert [g[:2] for g in got] == [w[:2] for w in want]
    assert got == want
    assert stream.stats.reconnects >= 1
    c.close()  # an open channel delays the daemon's SIGTERM drain
    d.stop()


def test_two_targets_split_and_survive_one_failing(daemon_factory, daemon, sample_dir, transport):
    other = daemon_factory({"sample": sample_dir}, "second").start()
    args = dict(batch_size=8, seed=3, shuffle=True, height=48, width=48, dtype="uint8", **AUG)
    want = _stream_ids(nearprep.Client(daemon.target).batches("sample", **args))
    assert len(want) == 25
    c = nearprep.Client([daemon.target, other.target], chunk_batches=3,
                        initial_backoff=0.05, reconnect_deadline=20)
    served = collections.Counter()
    got = []
    for b in c.batches("sample", **args):
        served[b.target] += 1
        got.append((b.index, tuple(int(s) for s in b.sample_ids), b.images.tobytes()))
    assert got == want
    assert served[daemon.target] > 0 and served[other.target] > 0
    # Now one dies mid-epoch and stays dead.
    stream = c.batches("sample", **args)
    got = []
    for b in stream:
        got.append((b.index, tuple(int(s) for s in b.sample_ids), b.images.tobytes()))
        if len(got) == 5:
            other.kill()
    assert got == want
    assert stream.stats.reconnects + stream.stats.failovers >= 1


def test_skipped_samples_with_two_targets(daemon_factory, sample_dir, tmp_path, transport):
    root = tmp_path / "mixed"
    files, _ = sample_files(sample_dir)
    for i, f in enumerate(files[:40]):
        dst = root / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = open(os.path.join(sample_dir, f), "rb").read()
        if i in (5, 6, 17):
            data = data[: len(data) // 3]  # truncated: a per-sample error
        dst.write_bytes(data)
    a = daemon_factory({"mixed": str(root)}, "mixed-a").start()
    b = daemon_factory({"mixed": str(root)}, "mixed-b").start()
    args = dict(batch_size=4, height=32, width=32, dtype="uint8")
    with nearprep.Client(a.target) as single:
        want = _stream_ids(single.batches("mixed", **args))
    with nearprep.Client([a.target, b.target], chunk_batches=2) as c:
        got = _stream_ids(c.batches("mixed", **args))
        skipped = c.stats().skipped_samples
    assert got == want
    assert sum(len(x[1]) for x in got) == 37
    assert skipped == 3
    a.stop()
    b.stop()


def test_stats_account_waiting_and_compute(daemon, transport):
    c = nearprep.Client(daemon.target)
    stream = c.batches("sample", batch_size=20, height=32, width=32, max_batches=4)
    for b in stream:
        time.sleep(0.05)  # "training step"
    s = stream.stats.snapshot()
    assert s["batches"] == 4 and s["images"] == 80
    assert s["compute_total_s"] >= 0.14
    assert 0.0 < s["stall_fraction"] < 1.0
    assert s["server_decode_us"] > 0
    assert s["stall_bound"] in ("read", "decode", "transform", "queue/network",
                                "none (compute-bound)")
    assert c.stats().batches >= 4


def test_torch_two_workers_cover_epoch_once(daemon, sample_dir):
    torch = pytest.importorskip("torch")
    import nearprep.torch as nt
    _, labels = sample_files(sample_dir)
    ds = nt.IterableDataset(daemon.target, "sample", batch_size=16, height=32, width=32,
                            layout="NCHW", shuffle=True, seed=11, return_batch=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    ids = []
    for item in loader:
        assert item["images"].shape[1:] == (3, 32, 32)
        assert item["images"].dtype == torch.float32
        for sid, label in zip(item["sample_ids"].tolist(), item["labels"].tolist()):
            assert label == labels[sid]
            ids.append(sid)
    assert sorted(ids) == list(range(200))
    # DDP-style ranks (in-process here; the worker split is shown above).
    ranks = []
    for rank in range(2):
        ds = nt.IterableDataset(daemon.target, "sample", batch_size=16, height=8, width=8,
                                shard_index=rank, num_shards=2, dtype="bfloat16",
                                return_batch=True)
        ranks.append([s for it in ds for s in it["sample_ids"].tolist()])
    assert not set(ranks[0]) & set(ranks[1])
    assert sorted(ranks[0] + ranks[1]) == list(range(200))


def test_torch_in_process_bfloat16(daemon):
    torch = pytest.importorskip("torch")
    import nearprep.torch as nt
    ds = nt.IterableDataset(daemon.target, "sample", batch_size=8, height=16, width=16,
                            dtype="bfloat16", max_batches=1)
    images, labels = next(iter(ds))
    assert images.dtype == torch.bfloat16 and images.shape == (8, 16, 16, 3)
    assert labels.dtype == torch.int64
    assert float(images.float().max()) <= 1.0


def test_start_batch_equals_tail_of_full_stream(daemon, transport):
    args = dict(batch_size=16, seed=21, shuffle=True, height=24, width=24, dtype="uint8",
                **AUG)
    with nearprep.Client(daemon.target) as c:
        full = [(b.index, b.next_position, b.sample_ids.tolist(), b.images.tobytes())
                for b in c.batches("sample", **args)]
        token = full[6][1]
        with_token = [(b.index, b.next_position, b.sample_ids.tolist(), b.images.tobytes())
                      for b in c.batches("sample", start_batch=7, start_position=token, **args)]
        recomputed = [(b.index, b.next_position, b.sample_ids.tolist(), b.images.tobytes())
                      for b in c.batches("sample", start_batch=7, max_batches=2, **args)]
    assert len(full) == 13
    assert with_token == full[7:]
    assert recomputed == full[7:9]


@pytest.mark.parametrize("compression", ["delta_zstd", "gradient_zstd"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_compressed_uint8_equals_uncompressed(daemon, transport, layout, compression):
    """Same draws, same tensors: the compressed stream decodes (native path:
    in C++; grpcio path: nearprep.codec) to the uncompressed stream's bytes,
    and costs fewer wire bytes (the daemon's bytes_sent counter)."""
    c = nearprep.Client(daemon.target)
    assert {1, 2} <= set(c.info().compressions)
    kw = dict(batch_size=16, seed=7, epoch=3, shuffle=True, max_batches=3,
              height=61, width=47, dtype="uint8", layout=layout,
              crop="random_resized", **AUG)

    def settled_counters(batches):
        # The daemon counts a batch when gRPC reports its write done, which
        # can come after the client has read it.
        deadline = time.monotonic() + 10
        while True:
            k = c.info().counters
            if k.batches_sent >= batches or time.monotonic() > deadline:
                return k

    k0 = settled_counters(0)
    plain = list(c.batches("sample", **kw))
    sent1 = settled_counters(k0.batches_sent + 3).bytes_sent
    packed = list(c.batches("sample", compression=compression, **kw))
    sent2 = settled_counters(k0.batches_sent + 6).bytes_sent
    sent0 = k0.bytes_sent
    assert len(plain) == len(packed) == 3
    for a, b in zip(plain, packed):
        assert list(a.sample_ids) == list(b.sample_ids)
        assert a.images.shape == b.images.shape and b.images.dtype == np.uint8
        assert a.images.tobytes() == b.images.tobytes()
        assert b.header.tensor.compression == 0
    assert 0 < sent2 - sent1 < 0.9 * (sent1 - sent0)


def test_resume_token_resumes_its_own_stream_and_refuses_others(daemon_factory, sample_dir,
                                                                tmp_path):
    """Issue 23 item 8: Batch.resume_token is bound to (dataset and its
    listing, seed, epoch, shuffle, batch size, shard). Sent back, it resumes
    exactly after its batch (skipped samples included); a token of another
    stream is INVALID_ARGUMENT naming the field that differs."""
    root = tmp_path / "mixed"
    files, _ = sample_files(sample_dir)
    for i, f in enumerate(files[:40]):
        dst = root / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = open(os.path.join(sample_dir, f), "rb").read()
        if i in (3, 11, 17, 30):
            data = data[: len(data) // 3]  # a per-sample error: later batches shift
        dst.write_bytes(data)
    d = daemon_factory({"mixed": str(root), "sample": sample_dir}, "tokens").start()
    args = dict(batch_size=4, seed=5, epoch=1, shuffle=True, height=32, width=32,
                dtype="uint8")
    with nearprep.Client(d.target) as c:
        full = _stream_ids(c.batches("mixed", **args))
        batches = list(c.batches("mixed", **args, max_batches=3))
        token = batches[2].resume_token
        assert token.startswith("nearprep-resume-1;dataset=mixed;")
        assert token.endswith(f";batch=3;position={batches[2].next_position}")
        assert _stream_ids(c.batches("mixed", resume_token=token, **args)) == full[3:]
        for change, field in [(dict(seed=6), "seed"), (dict(epoch=2), "epoch"),
                              (dict(batch_size=5), "batch_size"),
                              (dict(shuffle=False), "shuffle"),
                              (dict(shuffle_mode="block"), "shuffle"),
                              (dict(num_shards=2), "shard")]:
            with pytest.raises(nearprep.InvalidArgumentError) as e:
                list(c.batches("mixed", resume_token=token, **{**args, **change}))
            assert e.value.field == "resume_token", e.value
            assert f"another stream: {field} is" in str(e.value), e.value
        with pytest.raises(nearprep.InvalidArgumentError) as e:
            list(c.batches("sample", resume_token=token, **args))
        assert "another stream: dataset is" in str(e.value), e.value
    # The same name, other samples (a file removed): another listing.
    os.unlink(root / files[0])
    d2 = daemon_factory({"mixed": str(root)}, "tokens-listing").start()
    with nearprep.Client(d2.target) as c:
        with pytest.raises(nearprep.InvalidArgumentError) as e:
            list(c.batches("mixed", resume_token=token, **args))
        assert "another stream: listing" in str(e.value), e.value
    d.stop()
    d2.stop()
