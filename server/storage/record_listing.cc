// The record formats (sample_listing.h): tfrecord and tar shards.
#include <fnmatch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/records/shard_index.h"
#include "server/storage/listing_internal.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace listing_internal {
namespace {

constexpr char kIndexSuffix[] = ".nearprep-index";

// The name a shard's index has in the cache storage: the shard's path with
// '/' escaped, so every shard of every dataset has its own.
std::string CacheName(const ListingOptions& o, const std::string& shard) {
  std::string flat = o.name + "__" + shard;
  for (char& c : flat) {
    if (c == '/') c = '%';
  }
  return flat + kIndexSuffix;
}

records::RangeReader ReaderOf(const RandomAccessFile& file) {
  return [&file](uint64_t off, size_t n,
                 uint8_t* dst) -> absl::StatusOr<size_t> {
    size_t got = 0;
    absl::Status s = file.Read(off, n, dst, &got);
    if (!s.ok()) return s;
    return got;
  };
}

// The index of one shard: from the cache when it still matches, else
// scanned (and cached).
absl::StatusOr<records::ShardIndex> IndexOf(const Storage& storage,
                                            const ListingOptions& o,
                                            const std::string& shard,
                                            const FileInfo& info,
                                            SampleListing* listing) {
  records::IndexOptions io;
  io.format = o.format;
  io.image_key = o.image_key;
  io.label_key = o.label_key;
  const Storage& cache = o.index_cache ? *o.index_cache : storage;
  const std::string cache_name =
      o.index_cache ? CacheName(o, shard) : shard + kIndexSuffix;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      storage.Open(shard, OpenOptions{});
  if (!file.ok()) return file.status();
  std::string text;
  // A cached index is used only while it is bound to this shard; else it is
  // rebuilt (and the reason logged and counted).
  auto cache_file = [&]() -> absl::StatusOr<std::unique_ptr<RandomAccessFile>> {
    OpenOptions co;
    co.no_follow = false;
    return cache.Open(cache_name, co);
  }();
  // An index file far larger than any index of this shard could be is not
  // read (an entry line is under 200 bytes, plus messages for bad records).
  const uint64_t max_index_bytes = (uint64_t{1} << 20) + info.size * 16;
  if (cache_file.ok() && (*cache_file)->size() > max_index_bytes) {
    ++listing->indexes_rebuilt;
    spdlog::warn("dataset '{}': index of {} refused ({} bytes, more than an "
                 "index of this shard can be); rebuilding",
                 o.name, shard, (*cache_file)->size());
  } else if (cache_file.ok() &&
             ReadFileToString(cache, cache_name, &text).ok()) {
    absl::StatusOr<records::ShardIndex> cached = records::ParseShardIndex(text);
    std::string why;
    if (!cached.ok()) {
      why = std::string(cached.status().message());
    } else {
      why = records::IndexMismatch(*cached, info.size, info.mtime_ns, io);
      if (why.empty() && (*file)->size() != info.size) {
        why = "the shard changed while it was listed";
      }
      if (why.empty()) {
        absl::StatusOr<std::string> check =
            records::ShardCheck(info.size, ReaderOf(**file));
        if (!check.ok()) return check.status();
        if (*check != cached->shard_check) {
          why = absl::StrCat("shard bytes ", *check, ", index bound to ",
                             cached->shard_check);
        }
      }
    }
    if (why.empty()) {
      ++listing->indexes_cached;
      return cached;
    }
    ++listing->indexes_rebuilt;
    spdlog::warn("dataset '{}': cached index of {} not used ({}); rebuilding",
                 o.name, shard, why);
  }
  absl::StatusOr<records::ShardIndex> index;
  std::string dali;
  if (o.format == "tfrecord" && ReadFileToString(storage, shard + ".idx", &dali).ok()) {
    index = records::BuildTfRecordIndexFromDali(shard, info.size, info.mtime_ns,
                                                ReaderOf(**file), io, dali);
    if (!index.ok()) {
      spdlog::warn("dataset '{}': ignoring {}.idx: {}", o.name, shard,
                   std::string(index.status().message()));
    }
  }
  if (!index.ok() || dali.empty()) {
    index = records::BuildShardIndex(shard, info.size, info.mtime_ns,
                                     ReaderOf(**file), io);
  }
  if (!index.ok()) return index.status();
  listing->scan_bytes_read += index->scan_bytes_read;
  listing->scan_reads += index->scan_reads;
  const absl::Status w =
      cache.WriteFile(cache_name, records::SerializeShardIndex(*index));
  if (!w.ok()) {
    spdlog::info("dataset '{}': index of {} not cached ({})", o.name, shard,
                 std::string(w.message()));
  }
  return index;
}

}  // namespace

absl::Status ListRecordShards(const Storage& storage,
                              const ListingOptions& options,
                              Refusals* refusals, SampleListing* listing) {
  std::vector<std::string> names;
  absl::Status s = storage.ListDir("", &names);
  if (!s.ok()) {
    return absl::NotFoundError(absl::StrCat("dataset '", options.name,
                                            "': cannot list root ",
                                            storage.Describe(""), ": ",
                                            s.message()));
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (name.empty() || name[0] == '.' || IsNearprepOwnFile(name) ||
        ::fnmatch(options.shard_pattern.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    absl::StatusOr<FileInfo> info = storage.Lstat(name);
    if (!info.ok() || info->type != FileType::kRegular) {
      if (info.ok() && info->type != FileType::kDirectory) {
        refusals->Refuse(name, "not a regular file");
      }
      continue;
    }
    absl::StatusOr<records::ShardIndex> index =
        IndexOf(storage, options, name, *info, listing);
    if (!index.ok()) {
      refusals->Refuse(name, index.status().message());
      continue;
    }
    ++listing->num_shards;
    listing->shards[name] = *info;
    if (!index->damage.empty()) {
      refusals->Refuse(name, absl::StrCat("served up to offset ",
                                          index->damaged_at, "; the rest is "
                                          "refused: ", index->damage));
    }
    for (size_t r = 0; r < index->entries.size(); ++r) {
      const records::IndexEntry& e = index->entries[r];
      ListedSample sample;
      sample.key = absl::StrFormat("%s#%010d", name, r);
      sample.file = name;
      sample.whole_file = false;
      sample.offset = e.payload_offset;
      sample.size = e.payload_bytes;
      sample.label = e.has_label ? e.label + options.label_offset : -1;
      if (options.format == "tfrecord") {
        sample.record_offset = e.record_offset;
        sample.record_bytes = e.record_bytes;
        sample.has_data_crc = e.has_data_crc;
        sample.data_crc = e.data_crc;
      } else {
        sample.cls_offset = e.cls_offset;
        sample.cls_bytes = e.cls_bytes;
      }
      sample.error = e.error;
      if (sample.error.empty() && e.has_label) {
        listing->num_classes = std::max<uint32_t>(
            listing->num_classes,
            static_cast<uint32_t>(std::max<int64_t>(sample.label + 1, 0)));
      }
      listing->samples.push_back(std::move(sample));
    }
  }
  return absl::OkStatus();
}

}  // namespace listing_internal
}  // namespace nearprep
