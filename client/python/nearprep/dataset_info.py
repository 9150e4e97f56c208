"""What Client.datasets() and Client.dataset() return: a small Python object
per served dataset, with a one-line repr, over the daemon's
nearprep.v1.DatasetInfo message.

    >>> client.datasets()
    [DatasetInfo(name='imagenet', format='image_folder', samples=1281167, classes=1000)]

Every field of the message reads as an attribute (name, format,
num_samples, num_classes, class_names, class_name_bytes, num_refused,
num_shards, total_bytes, block_samples, manifest_hash, num_partitions,
partitions_held, placement_version, partitions_assigned; docs/protocol.md),
with the message's own types; `.proto` is the message itself.

Thread-safety: immutable once made; share freely.
"""


class DatasetInfo:
    """One served dataset (see the module docstring)."""

    def __init__(self, proto):
        object.__setattr__(self, "proto", proto)

    def __getattr__(self, name):
        # Only reached for names this class does not define: the message's
        # fields (and its methods, e.g. SerializeToString).
        if name.startswith("__") or name == "proto":
            raise AttributeError(name)
        try:
            return getattr(self.proto, name)
        except AttributeError:
            raise AttributeError(
                f"DatasetInfo has no attribute {name!r} (fields: "
                f"{', '.join(f.name for f in self.proto.DESCRIPTOR.fields)})") from None

    def __setattr__(self, name, value):
        raise AttributeError("DatasetInfo is read-only (change .proto, a copy, instead)")

    def __dir__(self):
        return sorted(set(super().__dir__()) |
                      {f.name for f in self.proto.DESCRIPTOR.fields})

    def __eq__(self, other):
        if isinstance(other, DatasetInfo):
            return self.proto == other.proto
        return NotImplemented

    def __hash__(self):
        return hash(self.proto.SerializeToString(deterministic=True))

    def __reduce__(self):
        return (DatasetInfo, (self.proto,))

    def __repr__(self):
        p = self.proto
        parts = [f"name={p.name!r}", f"format={p.format!r}",
                 f"samples={p.num_samples}", f"classes={p.num_classes}"]
        if p.num_partitions:
            held = len(p.partitions_held)
            parts.append(f"partitions={held}/{p.num_partitions} held")
        if p.num_refused:
            parts.append(f"refused={p.num_refused}")
        return f"DatasetInfo({', '.join(parts)})"

    __str__ = __repr__


class DatasetList(list):
    """A list of DatasetInfo whose repr puts one dataset on each line."""

    def __repr__(self):
        if len(self) < 2:
            return super().__repr__()
        return "[" + ",\n ".join(repr(d) for d in self) + "]"

    __str__ = __repr__
