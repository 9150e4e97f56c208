#include "cli/load_verify.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "server/data/epoch_plan.h"

namespace nearprep {

std::vector<uint64_t> ExpectedShard(uint64_t num_samples, uint64_t seed,
                                    uint64_t epoch, bool shuffle,
                                    uint32_t shard_index,
                                    uint32_t num_shards) {
  return ShardSamples(EpochOrder(num_samples, seed, epoch, shuffle),
                      shard_index, std::max<uint32_t>(1, num_shards));
}

VerifyResult VerifyDelivery(const std::vector<uint64_t>& shard,
                            const EpochDelivery& d, bool whole_shard) {
  VerifyResult r;
  const uint64_t prefix =
      whole_shard ? shard.size()
                  : std::min<uint64_t>(d.end_position, shard.size());
  r.expected = prefix;
  // Shard position of every expected id.
  std::unordered_map<uint64_t, uint64_t> position;
  position.reserve(prefix);
  for (uint64_t p = 0; p < prefix; ++p) position.emplace(shard[p], p);

  std::unordered_map<uint64_t, int> seen;
  seen.reserve(prefix);
  std::string first_unexpected, first_duplicate, first_out_of_order;
  auto count = [&](uint64_t id) {
    ++r.delivered;
    const int n = ++seen[id];
    if (n == 2) {
      ++r.duplicated;
      if (first_duplicate.empty()) first_duplicate = absl::StrCat(id);
    }
    if (n == 1 && position.find(id) == position.end()) {
      ++r.unexpected;
      if (first_unexpected.empty()) first_unexpected = absl::StrCat(id);
    }
  };
  int64_t last_position = -1;
  for (uint64_t id : d.received) {
    count(id);
    auto it = position.find(id);
    if (it == position.end()) continue;
    const int64_t p = static_cast<int64_t>(it->second);
    if (p < last_position) {
      ++r.out_of_order;
      if (first_out_of_order.empty()) {
        first_out_of_order = absl::StrCat(id, " (position ", p, " after ",
                                          last_position, ")");
      }
    }
    last_position = std::max(last_position, p);
  }
  for (uint64_t id : d.skipped) count(id);

  std::string first_missing;
  for (uint64_t p = 0; p < prefix; ++p) {
    if (seen.find(shard[p]) == seen.end()) {
      ++r.missing;
      if (first_missing.empty()) {
        first_missing = absl::StrCat(shard[p], " (position ", p, ")");
      }
    }
  }
  r.ok = r.missing == 0 && r.duplicated == 0 && r.unexpected == 0 &&
         r.out_of_order == 0;
  if (!r.ok) {
    std::string sep;
    auto add = [&](uint64_t n, const char* what, const std::string& first) {
      if (n == 0) return;
      absl::StrAppend(&r.detail, sep, n, " ", what, " (first: ", first, ")");
      sep = "; ";
    };
    add(r.missing, "missing", first_missing);
    add(r.duplicated, "duplicated", first_duplicate);
    add(r.unexpected, "not in the shard", first_unexpected);
    add(r.out_of_order, "out of shard order", first_out_of_order);
  }
  return r;
}

}  // namespace nearprep
