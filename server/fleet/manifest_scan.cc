// See manifest_scan.h.
#include "server/fleet/manifest_scan.h"

#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/records/crc32c.h"
#include "server/storage/posix_storage.h"
#include "server/storage/sample_listing.h"

namespace nearprep::fleet {

absl::StatusOr<uint32_t> FileCrc32c(const std::string& path, uint64_t* bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<uint8_t> buf(size_t{4} << 20);
  uint32_t crc = 0;
  *bytes = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    crc = records::Crc32cExtend(crc, buf.data(), n);
    *bytes += n;
  }
  if (std::ferror(f.get())) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return crc;
}

absl::StatusOr<Manifest> ScanManifest(const ScanOptions& o) {
  absl::StatusOr<std::unique_ptr<PosixStorage>> storage = PosixStorage::Create(o.root);
  if (!storage.ok()) return storage.status();
  ListingOptions lo;
  lo.name = "manifest";
  lo.format = o.format;
  lo.shard_pattern = o.shard_pattern;
  lo.image_key = o.image_key;
  lo.label_key = o.label_key;
  absl::StatusOr<SampleListing> listing = ListSamples(**storage, lo);
  if (!listing.ok()) return listing.status();
  if (o.refused) *o.refused = listing->refused;
  std::map<std::string, uint64_t> records;
  for (const ListedSample& s : listing->samples) ++records[s.file];
  if (o.digests != nullptr) {
    o.digests->assign(listing->samples.size() * kSampleDigestBytes, '\0');
    std::unique_ptr<RandomAccessFile> file;
    std::string open_name;
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i < listing->samples.size(); ++i) {
      const ListedSample& s = listing->samples[i];
      if (!s.error.empty()) continue;  // all-zero: served as an error anyway
      if (s.file != open_name) {
        OpenOptions oo;
        absl::StatusOr<std::unique_ptr<RandomAccessFile>> f = (*storage)->Open(s.file, oo);
        if (!f.ok()) return f.status();
        file = std::move(f).value();
        open_name = s.file;
      }
      bytes.resize(s.size);
      size_t got = 0;
      if (absl::Status st = file->Read(s.offset, s.size, bytes.data(), &got); !st.ok()) {
        return st;
      }
      if (got != s.size) {
        return absl::DataLossError(absl::StrCat(s.file, ": sample ", s.key,
                                                " is cut short (the shard shrank)"));
      }
      Sha256(bytes.data(), bytes.size(),
             reinterpret_cast<uint8_t*>(o.digests->data()) + i * kSampleDigestBytes);
    }
  }
  std::vector<ManifestShard> shards;
  for (const auto& [name, n] : records) {
    ManifestShard s;
    s.name = name;
    s.records = n;
    absl::StatusOr<uint32_t> crc = FileCrc32c(o.root + "/" + name, &s.bytes);
    if (!crc.ok()) return crc.status();
    s.crc32c = *crc;
    shards.push_back(std::move(s));
  }
  return BuildManifest(o.format, std::move(shards), o.partitions);
}

}  // namespace nearprep::fleet
