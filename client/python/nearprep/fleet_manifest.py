"""A fleet dataset's manifest (docs/protocol.md, "The manifest (the dataset
version)"): the shards, their partitions and record counts, and the hash
that names the dataset version. The C++ twin is server/fleet/manifest.h;
tests/python/test_fleet_plan.py compares the two through `nearprep manifest`.

- C partitions, each a run of whole shards consecutive in sorted shard
  order; sample ids are global (shards in order, records in file order).
- The hash (SHA-256 of the file's exact bytes) is the dataset version.

Thread-safety: a Manifest is not changed after parse_manifest returns.
"""

import bisect
import hashlib
import re
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["ManifestError", "ManifestShard", "Manifest", "parse_manifest", "load_manifest",
           "serialize_manifest", "name_bytes"]


class ManifestError(ValueError):
    pass


@dataclass
class ManifestShard:
    name: str
    partition: int
    records: int
    bytes: int
    crc32c: int
    first_sample: int = 0


@dataclass
class Manifest:
    format: str
    num_partitions: int
    num_samples: int
    shards: List[ManifestShard]
    partition_start: List[int]  # C + 1 sample ids
    partition_shard: List[int]  # C + 1 shard indexes
    hash: str
    # Per-sample digests (docs/protocol.md "Per-sample digests"): the
    # SHA-256 (hex) of the digest file and its name beside the manifest;
    # empty without.
    digests_sha256: str = ""
    digests_file: str = ""

    def partition_size(self, p: int) -> int:
        return self.partition_start[p + 1] - self.partition_start[p]

    def partition_of(self, sample_id: int) -> int:
        return bisect.bisect_right(self.partition_start, sample_id) - 1


_DIGITS = re.compile(r"[0-9]+\Z")  # ASCII only (str.isdigit() takes other scripts' digits)
_MAX_PARTITIONS = 1 << 24


def _number(text: str) -> Optional[int]:
    return int(text) if _DIGITS.match(text) else None


def name_bytes(name: str) -> bytes:
    """A shard name's bytes as they are in the manifest (and on disk):
    names are bytes, held as str with each byte that is not UTF-8 as a
    lone surrogate (Python's surrogateescape, as os.fsdecode does)."""
    return name.encode("utf-8", "surrogateescape")


def serialize_manifest(m: Manifest) -> bytes:
    """The canonical text of `m` (what `nearprep manifest` writes)."""
    out = [f"nearprep-manifest 1\nformat {m.format}\npartitions {m.num_partitions}\n"
           f"samples {m.num_samples}\n".encode()]
    if m.digests_sha256:
        out.append(f"digests sha256 {m.digests_sha256} ".encode()
                   + name_bytes(m.digests_file) + b"\n")
    for s in m.shards:
        out.append(f"shard {s.partition} {s.records} {s.bytes} {s.crc32c:08x} ".encode()
                   + name_bytes(s.name) + b"\n")
    return b"".join(out)


def parse_manifest(data: bytes) -> Manifest:
    """Parses the text form (docs/protocol.md); ManifestError naming the line.
    As the C++ parser: refuses anything `nearprep manifest` would not have
    written (one final newline, no blank line, single spaces, canonical
    numbers); a name is any bytes but whitespace."""
    if isinstance(data, str):
        data = data.encode()
    if not data.endswith(b"\n"):
        raise ManifestError("manifest: empty or not newline-terminated")
    lines = data[:-1].decode("utf-8", "surrogateescape").split("\n")

    def header(i, key, most):
        f = lines[i].split(" ") if i < len(lines) else []
        v = _number(f[1]) if len(f) == 2 and f[0] == key else None
        if v is None or v > most:
            raise ManifestError(f"manifest line {i + 1}: expected '{key} NUMBER'")
        return v

    if lines[0] != "nearprep-manifest 1":
        raise ManifestError("manifest line 1: expected 'nearprep-manifest 1'")
    f = lines[1].split(" ") if len(lines) > 1 else []
    if len(f) != 2 or f[0] != "format" or f[1] not in ("tfrecord", "tar"):
        raise ManifestError("manifest line 2: expected 'format tfrecord' or 'format tar'")
    fmt = f[1]
    c = header(2, "partitions", _MAX_PARTITIONS)
    if c == 0:
        raise ManifestError("manifest line 3: partitions must be >= 1")
    n = header(3, "samples", (1 << 64) - 1)
    digests_sha256, digests_file, first = "", "", 4
    if len(lines) > 4 and lines[4].startswith("digests "):
        f = lines[4].split(" ")
        if (len(f) != 4 or f[1] != "sha256" or len(f[2]) != 64
                or not all(ch in "0123456789abcdef" for ch in f[2]) or not f[3]
                or "/" in f[3]):
            raise ManifestError("manifest line 5: expected 'digests sha256 HEX64 NAME' "
                                "(NAME a file beside the manifest)")
        digests_sha256, digests_file, first = f[2], f[3], 5
    shards = []
    for i in range(first, len(lines)):
        f = lines[i].split(" ")
        nums = [_number(x) for x in f[1:4]] if len(f) == 6 else [None]
        crc = f[4] if len(f) == 6 else ""
        if (f[0] != "shard" or None in nums or nums[0] >= c or len(crc) != 8
                or not all(ch in "0123456789abcdef" for ch in crc) or not f[5]):
            raise ManifestError(f"manifest line {i + 1}: expected "
                                "'shard PARTITION RECORDS BYTES CRC32C NAME'")
        shards.append(ManifestShard(f[5], nums[0], nums[1], nums[2], int(crc, 16)))
    if not shards:
        raise ManifestError("manifest: no shards")
    starts, first_shard = [0] * (c + 1), [0] * (c + 1)
    nxt, expect = 0, 0
    for i, s in enumerate(shards):
        if i > 0 and name_bytes(s.name) <= name_bytes(shards[i - 1].name):
            raise ManifestError(f"manifest line {i + first + 1}: shards must be listed once each, "
                                "sorted by name")
        if s.partition not in (expect, expect + 1) or (i == 0 and s.partition != 0):
            raise ManifestError(f"manifest: shard {s.name}: partitions must be "
                                "consecutive runs 0, 1, ...")
        if i > 0 and s.partition == expect + 1:
            expect += 1
            starts[expect], first_shard[expect] = nxt, i
        s.first_sample = nxt
        nxt += s.records
    if expect + 1 != c or nxt != n:
        raise ManifestError("manifest: partitions/samples disagree with the shards")
    starts[c], first_shard[c] = nxt, len(shards)
    m = Manifest(fmt, c, n, shards, starts, first_shard, hashlib.sha256(data).hexdigest(),
                 digests_sha256, digests_file)
    if serialize_manifest(m) != data:
        raise ManifestError("manifest: not in canonical form (write it with `nearprep manifest`)")
    return m


def load_manifest(path: str) -> Manifest:
    with open(path, "rb") as f:
        return parse_manifest(f.read())
