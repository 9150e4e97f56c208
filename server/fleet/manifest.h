// Fleet dataset manifests (issue 14): an immutable description of a record
// dataset split into C partitions, so that storage nodes can each hold some
// partitions and every trainer computes the same global epoch plan
// (global_plan.h). docs/protocol.md ("Fleet datasets") is the normative
// description of the text form; client/python/nearprep/fleet_manifest.py parses it.
//
// A partition is an ordered run of whole shards, consecutive in sorted shard
// order; partitions are balanced by sample count. Sample ids are global:
// shards in manifest (= sorted name) order, then records in file order, the
// same ids a daemon holding every shard gives without a manifest.
//
// Text form (UTF-8, '\n'-terminated lines, fields separated by one space):
//   nearprep-manifest 1
//   format FORMAT                  tfrecord | tar
//   partitions C
//   samples N
//   digests sha256 HEX64 NAME      optional: per-sample digests (below)
//   shard PARTITION RECORDS BYTES CRC32C NAME     one per shard, name order
// CRC32C is the CRC-32C of the whole shard file, 8 lower-case hex digits.
// The manifest hash (the dataset version) is the SHA-256 of the exact bytes
// of the text form, in lower-case hex.
//
// Per-sample digests (`nearprep manifest --digests`): the file NAME beside
// the manifest (no '/') holds one SHA-256 per sample id, of the sample's
// image bytes as the daemon reads them (a TFRecord record's image feature,
// a tar image member, a whole file); HEX64 is the SHA-256 of that file, so
// the manifest hash covers every sample's bytes. Binary form:
//   "nearprep-digests 1 sha256 N\n" then N x 32 bytes, in sample id order
// (all-zero for a sample listed as bad when the manifest was made). A daemon
// serving the manifest checks each sample it reads against it
// (docs/protocol.md "Per-sample digests").
//
// Thread-safety: pure functions and plain values.
#ifndef NEARPREP_SERVER_FLEET_MANIFEST_H_
#define NEARPREP_SERVER_FLEET_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nearprep::fleet {

inline constexpr uint32_t kDefaultPartitions = 256;

struct ManifestShard {
  std::string name;
  uint32_t partition = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  uint64_t first_sample = 0;  // derived: global id of its first record
};

struct Manifest {
  std::string format;
  uint32_t num_partitions = 0;
  uint64_t num_samples = 0;
  std::vector<ManifestShard> shards;  // sorted by name
  // Derived: partition p holds sample ids [partition_start[p],
  // partition_start[p + 1]) and shards [partition_shard[p],
  // partition_shard[p + 1]); both have num_partitions + 1 entries.
  std::vector<uint64_t> partition_start;
  std::vector<uint32_t> partition_shard;
  std::string hash;  // SHA-256 (hex) of Serialize()
  // Per-sample digests: the digest file's SHA-256 (hex) and name, beside the
  // manifest; both empty without.
  std::string digests_sha256;
  std::string digests_file;

  uint64_t PartitionSize(uint32_t p) const {
    return partition_start[p + 1] - partition_start[p];
  }
  // The partition holding global sample id `id` (< num_samples).
  uint32_t PartitionOf(uint64_t id) const;
};

// Splits shards with these record counts into `partitions` contiguous runs
// of at least one shard, balanced by records: the boundary before partition
// k is the shard boundary whose running count is nearest k * N / C (ties:
// the earlier one), kept strictly increasing. Returns each shard's
// partition. `partitions` is capped by the shard count (and raised to 1).
std::vector<uint32_t> BalancePartitions(const std::vector<uint64_t>& records,
                                        uint32_t partitions);

// A manifest over `shards` (name, records, bytes, crc32c set; any order:
// sorted here) with min(partitions, shards) partitions. INVALID_ARGUMENT
// for no shards, duplicate names or names with whitespace.
absl::StatusOr<Manifest> BuildManifest(const std::string& format,
                                       std::vector<ManifestShard> shards,
                                       uint32_t partitions);

// The text form above.
std::string SerializeManifest(const Manifest& m);
// Parses and checks the text form (fills the derived fields and the hash).
// INVALID_ARGUMENT naming the line on any deviation.
absl::StatusOr<Manifest> ParseManifest(absl::string_view text);

// SHA-256 of `data`, lower-case hex.
std::string Sha256Hex(absl::string_view data);

inline constexpr size_t kSampleDigestBytes = 32;
// The digest file's text header for `n` samples (before the n x 32 bytes).
std::string SampleDigestsHeader(uint64_t n);
// The SHA-256 of [data, data + n) into out[0..32).
void Sha256(const uint8_t* data, size_t n, uint8_t* out);
// Parses a digest file for a manifest of `num_samples` samples: the n x 32
// bytes after the header. INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<std::string> ParseSampleDigests(absl::string_view file,
                                               uint64_t num_samples);

}  // namespace nearprep::fleet

#endif  // NEARPREP_SERVER_FLEET_MANIFEST_H_
