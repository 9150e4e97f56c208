"""Stall accounting from the trainer's chair.

For every batch a BatchStream records how long the caller was blocked inside
next() waiting for it ("wait": a data stall, the GPU would be idle) and how
long the caller spent between receiving the previous batch and asking for
this one ("compute": the training step). The server's per-batch stage
timings split the data side further into fetch (file reads) and prep
(decode + transform) worker time, the fetch-stall / prep-stall view of the
input-pipeline analysis in docs/python.md.

Which stage bounded the supply: each batch's wait is attributed like
`nearprep load` does (cli/stall_report.h, docs/operations.md):
the part of the wait during which the finished batch sat in the daemon's
queue (min(queue_wait, wait)) to "queue/network", the rest to read / decode /
transform in proportion to their worker time in that batch. The stage with
the most attributed wait is `stall_bound`; below a 5% stall fraction the
trainer is "none (compute-bound)".

Thread-safety: a Stats object is updated by one stream's consumer thread and
by its reader threads under a lock; snapshot() and summary() may be called
from any thread.
"""

import threading
import time

import numpy as np


STALL_STAGES = ("read", "decode", "transform", "queue/network")
STALL_NEGLIGIBLE = 0.05


def attribute_wait(wait_s, read_us, decode_us, transform_us, queue_wait_us):
    """One batch's wait split over STALL_STAGES (seconds, a tuple)."""
    if wait_s <= 0:
        return (0.0, 0.0, 0.0, 0.0)
    queued = min(queue_wait_us / 1e6, wait_s)
    rest = wait_s - queued
    work = read_us + decode_us + transform_us
    if rest <= 0:
        return (0.0, 0.0, 0.0, queued)
    if work <= 0:
        return (0.0, 0.0, 0.0, wait_s)
    return (rest * read_us / work, rest * decode_us / work,
            rest * transform_us / work, queued)


class Stats:
    def __init__(self):
        self._lock = threading.Lock()
        self.batches = 0
        self.images = 0
        self.bytes = 0
        self.reconnects = 0
        self.failovers = 0
        self.respeculations = 0
        self.skipped_samples = 0
        self.wait_s = []        # per batch: time blocked in next()
        self.compute_s = []     # per batch: caller time since the previous batch
        self.server_read_us = 0
        self.server_decode_us = 0
        self.server_transform_us = 0
        self.server_queue_wait_us = 0
        self.stall_by_stage_s = [0.0] * len(STALL_STAGES)
        self.started = None
        self.finished = None

    def add_batch(self, batch, wait_s, compute_s):
        t = batch.header.timings
        with self._lock:
            now = time.monotonic()
            if self.started is None:
                self.started = now - wait_s
            self.finished = now
            self.batches += 1
            self.images += len(batch)
            self.bytes += batch.nbytes
            self.skipped_samples += len(batch.header.errors)
            self.wait_s.append(wait_s)
            if compute_s is not None:
                self.compute_s.append(compute_s)
            self.server_read_us += t.read_us
            self.server_decode_us += t.decode_us
            self.server_transform_us += t.transform_us
            self.server_queue_wait_us += t.queue_wait_us
            for i, w in enumerate(attribute_wait(wait_s, t.read_us, t.decode_us,
                                                 t.transform_us, t.queue_wait_us)):
                self.stall_by_stage_s[i] += w

    def count(self, name, n=1):
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def merge(self, other):
        """Adds another Stats into this one (Client.stats() over streams)."""
        snap = other.snapshot(raw=True)
        with self._lock:
            for k in ("batches", "images", "bytes", "reconnects", "failovers",
                      "respeculations", "skipped_samples", "server_read_us",
                      "server_decode_us", "server_transform_us",
                      "server_queue_wait_us"):
                setattr(self, k, getattr(self, k) + snap[k])
            for i, w in enumerate(snap["stall_by_stage_s"]):
                self.stall_by_stage_s[i] += w
            self.wait_s.extend(snap["wait_s"])
            self.compute_s.extend(snap["compute_s"])
            if snap["started"] is not None:
                self.started = snap["started"] if self.started is None else min(
                    self.started, snap["started"])
                self.finished = snap["finished"] if self.finished is None else max(
                    self.finished, snap["finished"])

    def snapshot(self, raw=False):
        """A dict of the figures (raw=True: including the per-batch lists)."""
        with self._lock:
            wait = np.array(self.wait_s, dtype=np.float64)
            comp = np.array(self.compute_s, dtype=np.float64)
            d = dict(batches=self.batches, images=self.images, bytes=self.bytes,
                     reconnects=self.reconnects, failovers=self.failovers,
                     respeculations=self.respeculations,
                     skipped_samples=self.skipped_samples,
                     server_read_us=self.server_read_us,
                     server_decode_us=self.server_decode_us,
                     server_transform_us=self.server_transform_us,
                     server_queue_wait_us=self.server_queue_wait_us,
                     stall_by_stage_s=list(self.stall_by_stage_s),
                     started=self.started, finished=self.finished)
            if raw:
                d["wait_s"] = list(self.wait_s)
                d["compute_s"] = list(self.compute_s)
                return d
        elapsed = (d["finished"] - d["started"]) if d["started"] is not None else 0.0
        total_wait = float(wait.sum())
        total_comp = float(comp.sum())
        d.update(
            elapsed_s=elapsed,
            images_per_s=d["images"] / elapsed if elapsed > 0 else 0.0,
            mb_per_s=d["bytes"] / 1e6 / elapsed if elapsed > 0 else 0.0,
            wait_total_s=total_wait,
            compute_total_s=total_comp,
            wait_mean_ms=float(wait.mean() * 1e3) if wait.size else 0.0,
            wait_p50_ms=float(np.percentile(wait, 50) * 1e3) if wait.size else 0.0,
            wait_p95_ms=float(np.percentile(wait, 95) * 1e3) if wait.size else 0.0,
            wait_max_ms=float(wait.max() * 1e3) if wait.size else 0.0,
            compute_mean_ms=float(comp.mean() * 1e3) if comp.size else 0.0,
            # Share of the caller's time spent waiting for data (first batch
            # included): 0 means the input pipeline never stalled training.
            stall_fraction=(total_wait / (total_wait + total_comp)
                            if total_wait + total_comp > 0 else 0.0),
        )
        server = d["server_read_us"] + d["server_decode_us"] + d["server_transform_us"]
        d["server_fetch_share"] = d["server_read_us"] / server if server else 0.0
        d["server_prep_share"] = 1.0 - d["server_fetch_share"] if server else 0.0
        by = d["stall_by_stage_s"]
        d["stall_by_stage"] = dict(zip(STALL_STAGES, by))
        if max(by) <= 0 or d["stall_fraction"] < STALL_NEGLIGIBLE:
            d["stall_bound"] = "none (compute-bound)"
        else:
            d["stall_bound"] = STALL_STAGES[by.index(max(by))]
        return d

    def summary(self):
        s = self.snapshot()
        return (
            f"{s['batches']} batches, {s['images']} images in {s['elapsed_s']:.2f} s "
            f"({s['images_per_s']:.1f} images/s, {s['mb_per_s']:.1f} MB/s); "
            f"waited {s['wait_total_s']:.2f} s for data vs {s['compute_total_s']:.2f} s "
            f"between batches (stall {100 * s['stall_fraction']:.1f}%; wait per batch "
            f"mean {s['wait_mean_ms']:.1f} ms, p95 {s['wait_p95_ms']:.1f} ms, max "
            f"{s['wait_max_ms']:.1f} ms; bound: {s['stall_bound']}); server worker time: fetch "
            f"{100 * s['server_fetch_share']:.0f}% / prep {100 * s['server_prep_share']:.0f}%; "
            f"reconnects {s['reconnects']}, failovers {s['failovers']}, "
            f"skipped samples {s['skipped_samples']}")

    def __repr__(self):
        return f"Stats({self.summary()})"
