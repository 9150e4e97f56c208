"""Start a nearprepd for a benchmark: one YAML dataset, port 0, wait for the
port file; a larger image folder made of hard links to a small one; and the
/proc readings of a serving process (CPU seconds, peak RSS); a small packed
fleet dataset with its manifest. Shared by the bench/python scripts,
bench/peers and bench/scaling (standard library only,
so any interpreter can import it)."""

import os
import shutil
import subprocess
import time


def start_daemon(nearprepd, workdir, root, *, name="bench", fmt="image_folder",
                 manifest=None, workers=0, core=None, tag="", timeout_s=60.0,
                 extra_args=()):
    """Returns (Popen, "127.0.0.1:PORT"). Raises RuntimeError when the daemon
    exits or does not listen within timeout_s (its stderr is in the message).

    workers=0 keeps the daemon's default; core pins it with taskset;
    extra_args are appended to the daemon's command line."""
    d = os.path.join(workdir, f"nearprepd{('-' + tag) if tag else ''}")
    os.makedirs(d, exist_ok=True)
    config, port_file, log = (os.path.join(d, n) for n in ("nearprepd.yaml", "port", "log"))
    if os.path.exists(port_file):
        os.remove(port_file)  # a previous daemon's: never take its port for ours
    with open(config, "w") as f:
        f.write(f"listen: 127.0.0.1\nlog_level: warn\ndatasets:\n"
                f"  - name: {name}\n    format: {fmt}\n    root: {root}\n")
        if manifest:
            f.write(f"    manifest: {manifest}\n")
    cmd = [nearprepd, "--config", config, "--port", "0", "--port-file", port_file]
    if workers:
        cmd += ["--workers", str(workers)]
    cmd += list(extra_args)
    if core is not None:
        cmd = ["taskset", "-c", str(core)] + cmd
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            port = open(port_file).read().strip()
            if port:
                return proc, f"127.0.0.1:{int(port)}"
        if proc.poll() is not None:
            raise RuntimeError(f"nearprepd exited with {proc.returncode}: "
                               f"{open(log).read()[-1000:]}")
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"nearprepd did not listen within {timeout_s} s")


def make_fleet_dataset(cli, workdir, *, classes, per_class, partitions,
                       shard_size="100KiB"):
    """`nearprep mkdataset` (classes x per_class images) under workdir/src,
    packed into TFRecord shards under workdir/shards, and a manifest with
    `partitions` partitions. Returns (shards_dir, manifest_path)."""
    src, shards = os.path.join(workdir, "src"), os.path.join(workdir, "shards")
    manifest = os.path.join(workdir, "ds.nearprep-manifest")
    for args in (["mkdataset", "--out", src, "--classes", str(classes),
                  "--per-class", str(per_class)],
                 ["pack", "--source", src, "--out", shards, "--format", "tfrecord",
                  "--shard-size", shard_size],
                 ["manifest", "--root", shards, "--format", "tfrecord", "--partitions",
                  str(partitions), "--out", manifest]):
        subprocess.run([cli, *args], check=True, capture_output=True)
    return shards, manifest


def replicate_image_folder(root, copies, out):
    """An image folder at `out` with `copies` copies of every file of `root`
    (hard links where the file system allows, else copies), in the same class
    folders (file k of a copy is named c{k}_NAME): `copies` times the
    samples, the same labels. Returns `out`."""
    for d, _, names in os.walk(root):
        dst_dir = os.path.join(out, os.path.relpath(d, root))
        os.makedirs(dst_dir, exist_ok=True)
        for name in names:
            for k in range(copies):
                dst = os.path.join(dst_dir, f"c{k}_{name}")
                try:
                    os.link(os.path.join(d, name), dst)
                except OSError:
                    shutil.copyfile(os.path.join(d, name), dst)
    return out


def proc_cpu_s(pid):
    """user + system CPU seconds of pid (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_hwm_mib(pid):
    """Peak resident set (VmHWM) of pid in MiB, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None
