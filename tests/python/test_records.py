"""server/records against independent oracles: Python's tarfile (member data
offsets for ustar, GNU and pax archives, long and non-ASCII names) and a
TFRecord writer written here from the format's definition (length, masked
CRC-32C of the length, data, masked CRC-32C of the data).

The C++ side is driven through nearprep_records_dump ($NEARPREP_RECORDS_DUMP).
"""

import io
import os
import struct
import subprocess
import tarfile

import pytest

DUMP = os.environ.get("NEARPREP_RECORDS_DUMP")
pytestmark = pytest.mark.skipif(not DUMP, reason="nearprep_records_dump not built")


def crc32c(data: bytes) -> int:
    """Bitwise CRC-32C (reflected 0x82F63B78), straight from the definition."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payloads):
    out = b""
    for p in payloads:
        length = struct.pack("<Q", len(p))
        out += length + struct.pack("<I", masked(crc32c(length)))
        out += p + struct.pack("<I", masked(crc32c(p)))
    return out


def dump(kind, path):
    r = subprocess.run([DUMP, kind, str(path)], capture_output=True, text=True,
                       errors="surrogateescape", check=True)
    return r.stdout.splitlines()


def test_crc32c_reference_is_right():
    assert crc32c(b"123456789") == 0xE3069283


def test_tfrecord_offsets_and_crcs(tmp_path):
    payloads = [bytes([i % 251]) * (i * 101 + 3) for i in range(40)]
    path = tmp_path / "a.tfrecord"
    path.write_bytes(tfrecord(payloads))
    lines = dump("tfrecord", path)
    records = [l.split() for l in lines if l.startswith("record ")]
    assert len(records) == len(payloads)
    off = 0
    for rec, p in zip(records, payloads):
        assert int(rec[1]) == off and int(rec[2]) == len(p) and rec[3] == "1"
        off += len(p) + 16
    assert lines[-1] == "damage OK"


def test_tfrecord_damage(tmp_path):
    payloads = [b"x" * 100, b"y" * 200, b"z" * 300]
    data = bytearray(tfrecord(payloads))
    data[116 + 12 + 5] ^= 0xFF  # the second record's data
    path = tmp_path / "d.tfrecord"
    path.write_bytes(bytes(data[:-10]))  # and the last record truncated
    lines = dump("tfrecord", path)
    records = [l.split() for l in lines if l.startswith("record ")]
    assert [r[3] for r in records] == ["1", "0"]
    assert lines[-1].startswith("damage DATA_LOSS 332 ")


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_member_offsets_match_tarfile(tmp_path, fmt):
    names = ["train/n01/a.jpg", "train/n01/a.cls", "train/n01/a.json",
             "x" * 90 + "/" + "k" * 60 + ".jpg", "x" * 90 + "/" + "k" * 60 + ".cls",
             "caf\u00e9/b.JPEG", "caf\u00e9/b.cls", "noimage.cls", "c.jpeg"]
    if fmt == tarfile.USTAR_FORMAT:
        names = [n for n in names if len(n.encode()) < 100 and n.isascii()]
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w", format=fmt) as t:
        d = tarfile.TarInfo("train")
        d.type = tarfile.DIRTYPE
        t.addfile(d)
        for i, n in enumerate(names):
            body = (b"%d\n" % (i * 3)) if n.endswith(".cls") else bytes([i]) * (700 + i * 513)
            ti = tarfile.TarInfo(n)
            ti.size = len(body)
            t.addfile(ti, io.BytesIO(body))
    with tarfile.open(path) as t:
        oracle = [(m.name, m.offset_data, m.size, m.isreg()) for m in t.getmembers()]
    lines = dump("tar", path)
    members = [l.split(" ") for l in lines if l.startswith("member ")]
    got = [(" ".join(m[1:-3]).rstrip("/"), int(m[-3]), int(m[-2]), m[-1] == "1") for m in members]
    assert got == oracle
    samples = {l.split(" ")[1]: l.split(" ") for l in lines if l.startswith("sample ")}
    # WebDataset grouping: key = path up to the first dot of the base name.
    by_name = {m[0]: m for m in oracle}
    for n in names:
        if n.endswith((".jpg", ".JPEG", ".jpeg")):
            key = n.rsplit("/", 1)[0] + "/" + n.rsplit("/", 1)[-1].split(".")[0] if "/" in n else n.split(".")[0]
            s = samples[key]
            assert int(s[2]) == by_name[n][1] and int(s[3]) == by_name[n][2]
            cls = key + ".cls"
            if cls in by_name:
                assert s[4] == str(names.index(cls) * 3)
                # Where the .cls is (index version 3 keeps it for the
                # read-time label check): tarfile's data offset and size.
                assert (int(s[6]), int(s[7])) == (by_name[cls][1], by_name[cls][2])
            else:
                assert s[4] == "-" and s[6:8] == ["-", "-"]
    assert "without_image 1" in lines
    assert lines[-1] == "damage OK"


def test_truncated_tar_is_served_up_to_the_damage(tmp_path):
    path = tmp_path / "t.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(5):
            ti = tarfile.TarInfo(f"s{i}.jpg")
            ti.size = 3000
            t.addfile(ti, io.BytesIO(b"j" * 3000))
    data = path.read_bytes()
    path.write_bytes(data[: 3 * 3584 + 512 + 100])  # inside member 3's data
    lines = dump("tar", path)
    members = [l for l in lines if l.startswith("member ")]
    assert len(members) == 3
    assert lines[-1].startswith("damage DATA_LOSS ")


def test_compressed_tar_is_refused(tmp_path):
    path = tmp_path / "c.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        ti = tarfile.TarInfo("a.jpg")
        ti.size = 3
        t.addfile(ti, io.BytesIO(b"abc"))
    lines = dump("tar", path)
    assert lines[-1].startswith("damage INVALID_ARGUMENT 0 ")
    assert "uncompressed" in lines[-1]
