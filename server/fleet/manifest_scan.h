// Builds a fleet manifest (manifest.h) over the record shards of a folder:
// the shards the tfrecord/tar listing serves (server/storage/
// sample_listing.h: same pattern, same refusals), each with its record count
// as listed (known-bad records included: they keep their sample ids) and
// the CRC-32C of the whole file. `nearprep manifest` runs it.
//
// Thread-safety: reentrant.
#ifndef NEARPREP_SERVER_FLEET_MANIFEST_SCAN_H_
#define NEARPREP_SERVER_FLEET_MANIFEST_SCAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/fleet/manifest.h"

namespace nearprep::fleet {

struct ScanOptions {
  std::string root;
  std::string format = "tfrecord";  // or tar
  std::string shard_pattern = "*";
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  uint32_t partitions = kDefaultPartitions;
  uint64_t* refused = nullptr;  // optional out: shards/tails refused
  // Optional out: the per-sample digests (manifest.h): one SHA-256 per
  // sample id of its image bytes (all-zero for a sample listed as bad),
  // N x 32 bytes. Reads every sample once more.
  std::string* digests = nullptr;
};

absl::StatusOr<Manifest> ScanManifest(const ScanOptions& options);

// CRC-32C of a whole file (read in 4 MiB pieces).
absl::StatusOr<uint32_t> FileCrc32c(const std::string& path, uint64_t* bytes);

}  // namespace nearprep::fleet

#endif  // NEARPREP_SERVER_FLEET_MANIFEST_SCAN_H_
