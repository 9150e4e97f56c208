// See manifest.h.
#include "server/fleet/manifest.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/match.h"

namespace nearprep::fleet {
namespace {

absl::Status Bad(size_t line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("manifest line ", line, ": ", what));
}

bool HasSpace(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isspace(static_cast<unsigned char>(c));
  });
}

// Fills partition_start / partition_shard / first_sample from the shards.
absl::Status Derive(Manifest* m) {
  m->partition_start.assign(m->num_partitions + 1, 0);
  m->partition_shard.assign(m->num_partitions + 1, 0);
  uint64_t next = 0;
  uint32_t expect = 0;
  for (size_t i = 0; i < m->shards.size(); ++i) {
    ManifestShard& s = m->shards[i];
    if (s.partition != expect && s.partition != expect + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest: shard ", s.name, " is in partition ", s.partition,
          "; partitions must be consecutive runs 0, 1, ... of at least one "
          "shard each"));
    }
    if (i == 0 && s.partition != 0) {
      return absl::InvalidArgumentError("manifest: the first shard must be in partition 0");
    }
    if (i > 0 && s.partition == expect + 1) {
      ++expect;
      m->partition_start[expect] = next;
      m->partition_shard[expect] = static_cast<uint32_t>(i);
    }
    s.first_sample = next;
    next += s.records;
  }
  if (!m->shards.empty() && expect + 1 != m->num_partitions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: partitions says ", m->num_partitions, " but the shards use ",
        expect + 1));
  }
  m->partition_start[m->num_partitions] = next;
  m->partition_shard[m->num_partitions] = static_cast<uint32_t>(m->shards.size());
  if (next != m->num_samples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: samples says ", m->num_samples, " but the shards hold ",
        next));
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t Manifest::PartitionOf(uint64_t id) const {
  auto it = std::upper_bound(partition_start.begin(), partition_start.end(), id);
  return static_cast<uint32_t>(it - partition_start.begin()) - 1;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         digest);
  std::string hex;
  for (unsigned char c : digest) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

std::string SampleDigestsHeader(uint64_t n) {
  return absl::StrCat("nearprep-digests 1 sha256 ", n, "\n");
}

void Sha256(const uint8_t* data, size_t n, uint8_t* out) { SHA256(data, n, out); }

absl::StatusOr<std::string> ParseSampleDigests(absl::string_view file,
                                               uint64_t num_samples) {
  const std::string header = SampleDigestsHeader(num_samples);
  if (!absl::StartsWith(file, header)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest file: expected the header '", absl::StripSuffix(header, "\n"),
        "' (a digest file for this manifest's ", num_samples, " samples)"));
  }
  if (file.size() - header.size() != num_samples * kSampleDigestBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest file: ", file.size() - header.size(), " bytes of digests, expected ",
        num_samples * kSampleDigestBytes, " (", num_samples, " x 32)"));
  }
  return std::string(file.substr(header.size()));
}

std::vector<uint32_t> BalancePartitions(const std::vector<uint64_t>& records,
                                        uint32_t partitions) {
  const size_t n = records.size();
  std::vector<uint32_t> out(n, 0);
  if (n == 0) return out;
  const uint64_t c = std::clamp<uint64_t>(partitions, 1, n);
  std::vector<uint64_t> prefix(n + 1, 0);  // prefix[j]: records of shards < j
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + records[i];
  const uint64_t total = prefix[n];
  std::vector<size_t> bound(c + 1, 0);  // partition k = shards [bound[k], bound[k+1])
  bound[c] = n;
  for (uint64_t k = 1; k < c; ++k) {
    // target k*N/C as a rational: compare |prefix*C - k*N|.
    const size_t lo = bound[k - 1] + 1;
    const size_t hi = n - (c - k);  // leave one shard per later partition
    size_t best = lo;
    unsigned __int128 best_d = ~static_cast<unsigned __int128>(0);
    for (size_t j = lo; j <= hi; ++j) {
      const unsigned __int128 a = static_cast<unsigned __int128>(prefix[j]) * c;
      const unsigned __int128 b = static_cast<unsigned __int128>(total) * k;
      const unsigned __int128 d = a > b ? a - b : b - a;
      if (d < best_d) {
        best_d = d;
        best = j;
      } else if (a > b) {
        break;  // prefix only grows from here
      }
    }
    bound[k] = best;
  }
  for (uint64_t k = 0; k < c; ++k) {
    for (size_t j = bound[k]; j < bound[k + 1]; ++j) out[j] = static_cast<uint32_t>(k);
  }
  return out;
}

absl::StatusOr<Manifest> BuildManifest(const std::string& format,
                                       std::vector<ManifestShard> shards,
                                       uint32_t partitions) {
  if (shards.empty()) {
    return absl::InvalidArgumentError("manifest: no shards");
  }
  if (format != "tfrecord" && format != "tar") {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: format must be tfrecord or tar, got '", format, "'"));
  }
  std::sort(shards.begin(), shards.end(),
            [](const ManifestShard& a, const ManifestShard& b) { return a.name < b.name; });
  std::vector<uint64_t> records;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].name.empty() || HasSpace(shards[i].name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest: shard name '", shards[i].name, "' is empty or has whitespace"));
    }
    if (i > 0 && shards[i].name == shards[i - 1].name) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: shard ", shards[i].name, " listed twice"));
    }
    records.push_back(shards[i].records);
  }
  std::vector<uint32_t> part = BalancePartitions(records, partitions);
  Manifest m;
  m.format = format;
  m.num_partitions = part.back() + 1;
  for (size_t i = 0; i < shards.size(); ++i) {
    shards[i].partition = part[i];
    m.num_samples += shards[i].records;
  }
  m.shards = std::move(shards);
  absl::Status s = Derive(&m);
  if (!s.ok()) return s;
  m.hash = Sha256Hex(SerializeManifest(m));
  return m;
}

std::string SerializeManifest(const Manifest& m) {
  std::string out = absl::StrCat("nearprep-manifest 1\nformat ", m.format,
                                 "\npartitions ", m.num_partitions,
                                 "\nsamples ", m.num_samples, "\n");
  if (!m.digests_sha256.empty()) {
    absl::StrAppend(&out, "digests sha256 ", m.digests_sha256, " ", m.digests_file, "\n");
  }
  for (const ManifestShard& s : m.shards) {
    absl::StrAppendFormat(&out, "shard %u %u %u %08x %s\n", s.partition,
                          s.records, s.bytes, s.crc32c, s.name);
  }
  return out;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text) {
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("manifest: empty or not newline-terminated");
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  Manifest m;
  const auto header = [&](size_t i, absl::string_view key, uint64_t max,
                          uint64_t* v) -> absl::Status {
    if (i >= lines.size()) return Bad(i + 1, absl::StrCat("missing '", key, "'"));
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    if (f.size() != 2 || f[0] != key || !absl::SimpleAtoi(f[1], v) || *v > max) {
      return Bad(i + 1, absl::StrCat("expected '", key, " NUMBER', got '", lines[i], "'"));
    }
    return absl::OkStatus();
  };
  if (lines[0] != "nearprep-manifest 1") {
    return Bad(1, absl::StrCat("expected 'nearprep-manifest 1', got '", lines[0], "'"));
  }
  {
    std::vector<absl::string_view> f = absl::StrSplit(lines.size() > 1 ? lines[1] : "", ' ');
    if (f.size() != 2 || f[0] != "format" || (f[1] != "tfrecord" && f[1] != "tar")) {
      return Bad(2, "expected 'format tfrecord' or 'format tar'");
    }
    m.format = std::string(f[1]);
  }
  uint64_t c = 0;
  if (auto s = header(2, "partitions", uint64_t{1} << 24, &c); !s.ok()) return s;
  if (c == 0) return Bad(3, "partitions must be >= 1");
  m.num_partitions = static_cast<uint32_t>(c);
  if (auto s = header(3, "samples", ~uint64_t{0}, &m.num_samples); !s.ok()) return s;
  size_t first = 4;
  if (lines.size() > 4 && absl::StartsWith(lines[4], "digests ")) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[4], ' ');
    if (f.size() != 4 || f[1] != "sha256" || f[2].size() != 64 ||
        f[2].find_first_not_of("0123456789abcdef") != absl::string_view::npos ||
        f[3].empty() || f[3].find('/') != absl::string_view::npos) {
      return Bad(5, "expected 'digests sha256 HEX64 NAME' (NAME a file beside the manifest)");
    }
    m.digests_sha256 = std::string(f[2]);
    m.digests_file = std::string(f[3]);
    first = 5;
  }
  for (size_t i = first; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    ManifestShard s;
    uint64_t part = 0;
    uint32_t crc = 0;
    if (f.size() != 6 || f[0] != "shard" || !absl::SimpleAtoi(f[1], &part) ||
        part >= m.num_partitions || !absl::SimpleAtoi(f[2], &s.records) ||
        !absl::SimpleAtoi(f[3], &s.bytes) || f[4].size() != 8 ||
        !absl::SimpleHexAtoi(f[4], &crc) || f[5].empty()) {
      return Bad(i + 1, absl::StrCat(
                            "expected 'shard PARTITION RECORDS BYTES CRC32C NAME', got '",
                            lines[i], "'"));
    }
    s.partition = static_cast<uint32_t>(part);
    s.crc32c = crc;
    s.name = std::string(f[5]);
    if (!m.shards.empty() && !(m.shards.back().name < s.name)) {
      return Bad(i + 1, "shards must be listed once each, sorted by name");
    }
    m.shards.push_back(std::move(s));
  }
  if (m.shards.empty()) return Bad(lines.size(), "no shards");
  absl::Status s = Derive(&m);
  if (!s.ok()) return s;
  m.hash = Sha256Hex(text);
  if (SerializeManifest(m) != text) {
    return absl::InvalidArgumentError(
        "manifest: not in canonical form (write it with `nearprep manifest`)");
  }
  return m;
}

}  // namespace nearprep::fleet
