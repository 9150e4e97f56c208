#!/usr/bin/env python3
"""Server CPU of one explicit-id request (StreamBatchesRequest.sample_ids),
per request and per sample: the defaults of bench/fleet/simulate.py.

    PYTHONPATH=client/python:build/python NEARPREP_PROTO_PATH=build/python \\
      /usr/bin/python3 bench/fleet/measure_service.py \\
        --nearprepd build/server/daemon/nearprepd \\
        [--root /work/shared/datasets/imagenet-sample-200] [--samples 256]

Starts one nearprepd (image_folder dataset `--root`), sends requests of n
sample ids (n = 1, 4, 16, 64; one at a time, ids spread over the dataset,
a new epoch per request so no decoded bytes are reused), 224 x 224
random_resized crop, uint8, and reads the daemon's CPU (utime + stime,
/proc/PID/stat) before and after each size's requests. Prints the CPU per
request and per sample for each n and the least-squares fit
cpu(n) = per_request + n * per_sample.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from nearprep.client import Client

TICK = os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nearprepd", required=True)
    ap.add_argument("--root", default="/work/shared/datasets/imagenet-sample-200")
    ap.add_argument("--samples", type=int, default=256, help="samples per request size")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sizes", default="1,4,16,64")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="np-measure-")
    cfg = os.path.join(tmp, "nearprepd.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: 127.0.0.1\nlog_level: warn\ndatasets:\n"
                f"  - name: ds\n    format: image_folder\n    root: {a.root}\n")
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "log"), "wb")
    proc = subprocess.Popen([a.nearprepd, "--config", cfg, "--port", "0", "--port-file",
                             port_file, "--workers", str(a.workers)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("nearprepd did not start: " + open(log.name).read()[-2000:])
            time.sleep(0.05)
        target = f"127.0.0.1:{int(open(port_file).read())}"
        c = Client(target, native=False, rpc_timeout=120)
        info = [d for d in c.datasets() if d.name == "ds"][0]
        n_total = info.num_samples
        rows = []
        epoch = 0
        for n in [int(x) for x in a.sizes.split(",")]:
            reqs = max(1, a.samples // n)
            # warm-up request (connection, first decode paths)
            req = c.request("ds", batch_size=n, height=224, width=224, crop="random_resized",
                            dtype="uint8", seed=1, epoch=10_000 + n, error_policy="skip")
            req.sample_ids.extend(range(n))
            sum(len(b.labels) for b in c.batches(request=req))
            cpu0, wall0 = daemon_cpu(proc.pid), time.monotonic()
            got = 0
            for i in range(reqs):
                epoch += 1
                req = c.request("ds", batch_size=n, height=224, width=224,
                                crop="random_resized", dtype="uint8", seed=1, epoch=epoch,
                                error_policy="skip")
                first = (i * n * 7) % n_total
                req.sample_ids.extend(sorted({(first + j) % n_total for j in range(n)}))
                got += sum(len(b.labels) for b in c.batches(request=req))
            cpu = daemon_cpu(proc.pid) - cpu0
            wall = time.monotonic() - wall0
            rows.append((n, reqs, got, cpu / reqs, cpu / got, wall / reqs))
            print(f"n={n:3d}: {reqs} requests, {got} samples: server CPU {cpu / reqs * 1e3:.2f} ms"
                  f"/request, {cpu / got * 1e3:.2f} ms/sample; wall {wall / reqs * 1e3:.1f} "
                  "ms/request", flush=True)
        ns = np.array([r[0] for r in rows], dtype=float)
        per = np.array([r[3] for r in rows])
        w = np.array([r[1] for r in rows], dtype=float)  # more requests: less tick noise
        A = np.stack([np.ones_like(ns), ns], axis=1) * np.sqrt(w)[:, None]
        (pr, ps), *_ = np.linalg.lstsq(A, per * np.sqrt(w), rcond=None)
        print(f"fit: per_request {pr * 1e6:.0f} us, per_sample {ps * 1e6:.0f} us "
              f"(--per-request {pr:.6f} --per-sample {ps:.6f})")
        c.close()
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
