"""Client.datasets() / Client.dataset(): small objects with a one-line repr
(issue 20, item 11), the message reachable as .proto, every field an
attribute as before."""

import pickle
import subprocess
import sys

import pytest

import nearprep
from conftest import sample_files


def test_print_datasets_is_one_short_line_per_dataset(daemon, sample_dir):
    """What docs/python.md's first command prints: before, ~410 lines of
    protobuf text (every class name); now one line naming the dataset,
    its format, samples and classes (as with the old output, through a new
    interpreter, the way the docs show it)."""
    out = subprocess.run(
        [sys.executable, "-c",
         f"import nearprep; print(nearprep.Client({daemon.target!r}).datasets())"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    classes = len(set(sample_files(sample_dir)[1]))
    assert out == ("[DatasetInfo(name='sample', format='image_folder', samples=200, "
                   f"classes={classes})]\n"), out


def test_fields_read_as_before(daemon, sample_dir):
    files, labels = sample_files(sample_dir)
    c = nearprep.Client(daemon.target)
    [d] = c.datasets()
    assert isinstance(d, nearprep.DatasetInfo)
    assert d == c.dataset("sample")
    assert d.name == "sample" and d.format == "image_folder"
    assert d.num_samples == len(files) == 200
    assert d.num_classes == len(set(labels))
    assert list(d.class_names) == sorted({f.split("/")[0] for f in files})
    assert [b.decode() for b in d.class_name_bytes] == list(d.class_names)
    assert d.num_refused == 0 and d.num_partitions == 0 and list(d.partitions_held) == []
    # The message itself, and its methods through the object.
    assert type(d.proto).__name__ == "DatasetInfo"
    assert d.proto.num_samples == 200
    assert d.SerializeToString() == d.proto.SerializeToString()
    assert "num_samples" in dir(d) and "partitions_held" in dir(d)
    with pytest.raises(AttributeError, match="num_samples"):
        d.samples  # noqa: B018 - an unknown name lists the fields
    with pytest.raises(AttributeError, match="read-only"):
        d.name = "other"
    assert pickle.loads(pickle.dumps(d)) == d


def test_repr_of_a_fleet_dataset_and_of_several():
    from nearprep import _stubs
    pb2, _ = _stubs.load()
    fleet = nearprep.DatasetInfo(pb2.DatasetInfo(
        name="imagenet", format="tfrecord", num_samples=1281167, num_classes=1000,
        class_names=[f"n{i:08d}" for i in range(1000)], num_partitions=256,
        partitions_held=list(range(0, 256, 4)), num_refused=2))
    assert repr(fleet) == ("DatasetInfo(name='imagenet', format='tfrecord', "
                           "samples=1281167, classes=1000, partitions=64/256 held, "
                           "refused=2)")
    from nearprep.dataset_info import DatasetList
    two = DatasetList([fleet, nearprep.DatasetInfo(pb2.DatasetInfo(name="val"))])
    assert str(two).splitlines() == [
        "[DatasetInfo(name='imagenet', format='tfrecord', samples=1281167, classes=1000, "
        "partitions=64/256 held, refused=2),",
        " DatasetInfo(name='val', format='', samples=0, classes=0)]"]
    assert isinstance(two, list) and two[1].name == "val"
