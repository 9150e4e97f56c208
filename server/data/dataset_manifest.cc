// Fleet datasets: a record dataset placed by a manifest (dataset.h,
// server/fleet/manifest.h). The daemon's local listing (the shards present
// in its root) is rearranged into the manifest's global sample ids: every
// manifest shard in manifest order, the local shard's samples where it is
// present and matches (record count, size, and CRC-32C when manifest_check
// is "crc32c"), placeholders that fail with FAILED_PRECONDITION otherwise.
// A partition is held when all of its shards are. Requests name global ids;
// the service refuses ids outside the held partitions before any read.
// With a placement (server/fleet/placement.h) the daemon also knows what it
// should hold: it checks the document against the manifest and its node
// name at start, and logs the difference; the files decide what is served.
#include <algorithm>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/data/dataset.h"
#include "server/fleet/manifest.h"
#include "server/fleet/manifest_scan.h"
#include "server/fleet/placement.h"
#include "spdlog/spdlog.h"

namespace nearprep {

bool Dataset::Holds(uint64_t id) const {
  if (id >= samples_.size()) return false;
  if (!manifest_) return true;
  return held_mask_[manifest_->PartitionOf(id)];
}

absl::Status Dataset::ApplyManifest(const Storage& storage, SampleListing* listing,
                                    std::string* sample_digests) {
  const DatasetConfig& c = config_;
  const auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", c.name, "': manifest ", c.manifest, ": ", what));
  };
  if (c.format != "tfrecord" && c.format != "tar") {
    return fail("manifests are for the record formats (tfrecord, tar)");
  }
  if (c.manifest_check != "size" && c.manifest_check != "crc32c") {
    return fail(absl::StrCat("manifest_check must be size or crc32c, got '",
                             c.manifest_check, "'"));
  }
  std::string text;
  if (absl::Status s = ReadFileToString(storage, c.manifest, &text); !s.ok()) {
    return fail(s.message());
  }
  absl::StatusOr<fleet::Manifest> m = fleet::ParseManifest(text);
  if (!m.ok()) return fail(m.status().message());
  if (m->format != c.format) {
    return fail(absl::StrCat("is for format ", m->format, ", the dataset is ", c.format));
  }
  if (absl::Status s = ApplyPlacement(storage, *m); !s.ok()) return s;
  if (!m->digests_sha256.empty()) {
    // Per-sample digests: a file beside the manifest, bound to it by its
    // SHA-256 (which the manifest hash covers).
    const size_t slash = c.manifest.rfind('/');
    const std::string path =
        (slash == std::string::npos ? "" : c.manifest.substr(0, slash + 1)) + m->digests_file;
    std::string file;
    if (absl::Status s = ReadFileToString(storage, path, &file); !s.ok()) {
      return fail(absl::StrCat("its digest file ", path, ": ", s.message()));
    }
    if (fleet::Sha256Hex(file) != m->digests_sha256) {
      return fail(absl::StrCat("its digest file ", path,
                               " is not the one the manifest names (SHA-256 differs)"));
    }
    absl::StatusOr<std::string> digests = fleet::ParseSampleDigests(file, m->num_samples);
    if (!digests.ok()) return fail(absl::StrCat(path, ": ", digests.status().message()));
    *sample_digests = std::move(digests).value();
  }
  // Local shards: file -> [first, end) in listing->samples (contiguous).
  std::map<std::string, std::pair<size_t, size_t>> local;
  for (size_t i = 0; i < listing->samples.size(); ++i) {
    auto [it, fresh] = local.emplace(listing->samples[i].file, std::make_pair(i, i + 1));
    if (!fresh) it->second.second = i + 1;
  }
  std::vector<ListedSample> out;
  out.reserve(m->num_samples);
  std::vector<bool> shard_ok(m->shards.size(), false);
  uint64_t held_bytes = 0, held_shards = 0;
  for (size_t si = 0; si < m->shards.size(); ++si) {
    const fleet::ManifestShard& ms = m->shards[si];
    auto it = local.find(ms.name);
    std::string why = "not present";
    if (it != local.end()) {
      const uint64_t n = it->second.second - it->second.first;
      absl::StatusOr<FileInfo> info = storage.Stat(ms.name);
      if (n != ms.records) {
        why = absl::StrCat("has ", n, " records, the manifest says ", ms.records);
      } else if (!info.ok() || info->size != ms.bytes) {
        why = absl::StrCat("has ", info.ok() ? info->size : 0,
                           " bytes, the manifest says ", ms.bytes);
      } else if (c.manifest_check == "crc32c") {
        uint64_t bytes = 0;
        absl::StatusOr<uint32_t> crc =
            fleet::FileCrc32c(storage.Describe(ms.name), &bytes);
        if (!crc.ok()) {
          why = std::string(crc.status().message());
        } else if (*crc != ms.crc32c) {
          why = absl::StrFormat("CRC-32C %08x, the manifest says %08x", *crc, ms.crc32c);
        } else {
          why.clear();
        }
      } else {
        why.clear();
      }
    }
    if (why.empty()) {
      shard_ok[si] = true;
      ++held_shards;
      for (size_t i = it->second.first; i < it->second.second; ++i) {
        held_bytes += listing->samples[i].size;
        out.push_back(std::move(listing->samples[i]));
      }
      continue;
    }
    if (it != local.end()) {
      spdlog::warn("dataset '{}': shard {} not served: {}", c.name, ms.name, why);
    }
    for (uint64_t r = 0; r < ms.records; ++r) {
      ListedSample p;
      p.key = absl::StrFormat("%s#%010d", ms.name, r);
      p.file = ms.name;
      p.whole_file = false;
      p.label = -1;
      p.error = absl::StrCat("shard ", ms.name, " (partition ", ms.partition,
                             ") is not held by this daemon: ", why);
      out.push_back(std::move(p));
    }
  }
  held_mask_.assign(m->num_partitions, false);
  held_.clear();
  for (uint32_t p = 0; p < m->num_partitions; ++p) {
    bool all = true;
    for (uint32_t s = m->partition_shard[p]; s < m->partition_shard[p + 1]; ++s) {
      all = all && shard_ok[s];
    }
    held_mask_[p] = all;
    if (all) held_.push_back(p);
  }
  listing->samples = std::move(out);
  listing->num_shards = held_shards;
  listing->total_bytes = held_bytes;
  spdlog::info("dataset '{}': manifest {} ({} partitions): holds {} partitions",
               c.name, m->hash.substr(0, 12), m->num_partitions, held_.size());
  if (placement_) {
    std::vector<uint32_t> missing = partitions_missing(), extra;
    std::set_difference(held_.begin(), held_.end(), assigned_.begin(), assigned_.end(),
                        std::back_inserter(extra));
    if (!missing.empty()) {
      spdlog::warn("dataset '{}': placement {} version {} assigns node {} partitions not "
                   "held here (not served until their shards are complete): [{}]",
                   c.name, c.placement, placement_->version, c.node,
                   absl::StrJoin(missing, ","));
    }
    if (!extra.empty()) {
      spdlog::warn("dataset '{}': placement {} version {} does not assign node {} partitions "
                   "held here (still served): [{}]",
                   c.name, c.placement, placement_->version, c.node, absl::StrJoin(extra, ","));
    }
  }
  manifest_ = std::make_shared<const fleet::Manifest>(std::move(m).value());
  return absl::OkStatus();
}

std::vector<uint32_t> Dataset::partitions_missing() const {
  std::vector<uint32_t> out;
  std::set_difference(assigned_.begin(), assigned_.end(), held_.begin(), held_.end(),
                      std::back_inserter(out));
  return out;
}

absl::Status Dataset::ApplyPlacement(const Storage& storage, const fleet::Manifest& m) {
  const DatasetConfig& c = config_;
  if (c.placement.empty() && c.node.empty()) return absl::OkStatus();
  const auto fail = [&](absl::string_view key, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", c.name, "': ", key, ": ", what));
  };
  if (c.placement.empty()) return fail("placement", "required with node");
  if (c.node.empty()) return fail("node", "required with placement");
  std::string text;
  if (absl::Status s = ReadFileToString(storage, c.placement, &text); !s.ok()) {
    return fail("placement", absl::StrCat(c.placement, ": ", s.message()));
  }
  absl::StatusOr<fleet::Placement> p = fleet::ParsePlacement(text);
  if (!p.ok()) return fail("placement", absl::StrCat(c.placement, ": ", p.status().message()));
  if (p->manifest_hash != m.hash || p->num_partitions != m.num_partitions) {
    return fail("placement",
                absl::StrCat(c.placement, " is for manifest ", p->manifest_hash, " (",
                             p->num_partitions, " partitions), the dataset's manifest ",
                             c.manifest, " is ", m.hash, " (", m.num_partitions,
                             " partitions)"));
  }
  const std::vector<uint32_t>* mine = p->PartitionsOf(c.node);
  if (mine == nullptr) {
    std::vector<std::string> names;
    for (const auto& [n, _] : p->nodes) names.push_back(n);
    return fail("node", absl::StrCat("'", c.node, "' is not in placement ", c.placement,
                                     " (version ", p->version, "; nodes: ",
                                     absl::StrJoin(names, ", "), ")"));
  }
  assigned_ = *mine;
  placement_ = std::make_shared<const fleet::Placement>(std::move(p).value());
  return absl::OkStatus();
}

}  // namespace nearprep
