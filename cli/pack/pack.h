// `nearprep pack`: writes a dataset as record shards (TFRecord of
// tf.train.Example, or WebDataset-style tar), with their indexes.
//
// Sources:
//  - an image folder or file list (the daemon's own listing, server/data):
//    samples are written in sample-id order (sorted relative paths), so the
//    packed dataset's sample ids (global over sorted shards, then record
//    order) equal the source's, and so do labels: a stream over either gives
//    the same bytes for the same ids and draws.
//  - TFRecord files (--from-tfrecord): GZIP/ZLIB-compressed or foreign
//    uncompressed files are rewritten uncompressed (records copied
//    byte for byte after their CRCs are checked), which the daemon needs for
//    random access.
// Output: PREFIX-SSSSS-of-NNNNN.tfrecord | .tar in `out_dir`, each at most
// about `shard_bytes` (a shard holds at least one sample), and beside each
// its index FILE.nearprep-index (server/records/shard_index.h). Shard bytes
// are deterministic: the same input gives the same files (tar members have
// mtime 0, uid/gid 0, mode 0644).
//
// TFRecord features written: image/encoded, image/format ("JPEG"),
// image/filename (the relative path), image/class/label (the label as
// listed, no offset). Tar members: KEY.jpg and KEY.cls, where KEY is the
// relative path without its extension and with dots in the file name
// replaced by '_' (a WebDataset key ends at the first dot).
//
// Thread-safety: Pack is a blocking call; one at a time per out_dir.
#ifndef NEARPREP_CLIENT_CPP_PACK_PACK_H_
#define NEARPREP_CLIENT_CPP_PACK_PACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nearprep {

struct PackOptions {
  // Source: a dataset root (image_folder, or file_list with list_file), or
  // TFRecord files.
  std::string source_root;
  std::string source_format = "image_folder";  // or "file_list"
  std::string list_file;
  std::vector<std::string> from_tfrecord;

  std::string out_dir;
  std::string format = "tfrecord";  // or "tar"
  std::string prefix = "data";
  uint64_t shard_bytes = uint64_t{256} << 20;
  // Called after each sample (done, total; total 0 when unknown).
  std::function<void(uint64_t, uint64_t, uint64_t bytes)> progress;
};

struct PackResult {
  std::vector<std::string> shards;  // File names, in order.
  uint64_t samples = 0;
  uint64_t skipped = 0;  // Unreadable source samples (logged, not written).
  uint64_t bytes = 0;    // Shard bytes written.
};

absl::StatusOr<PackResult> Pack(const PackOptions& options);

// One ustar/pax member (header + data + padding) appended to *out, with
// deterministic metadata. Exposed for tests.
void AppendTarMember(const std::string& name, const std::string& data,
                     std::string* out);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_PACK_PACK_H_
