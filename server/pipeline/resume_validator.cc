#include "server/pipeline/resume_validator.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nearprep {
namespace {

// What a sample's validity depends on besides its bytes: the dataset, the
// decode limit, and, for FAST (which decodes only the crop), the draws.
std::string ValidityKey(const StreamRequest& r) {
  const WorkContext& c = r.context;
  const Dataset& dataset = c.source->dataset();
  std::string key = absl::StrCat(reinterpret_cast<uintptr_t>(&dataset), "/",
                                 dataset.size(), "/",
                                 c.limits.max_decoded_values, "/",
                                 static_cast<int>(c.spec.fidelity));
  if (c.spec.fidelity != Fidelity::kTfCompat) {
    absl::StrAppend(&key, "/", c.seed, "/", c.epoch, "/",
                    static_cast<int>(c.spec.crop), "/", c.spec.height, "x",
                    c.spec.width, "/", c.spec.scale_min, ",", c.spec.scale_max,
                    ",", c.spec.ratio_min, ",", c.spec.ratio_max, ",",
                    c.spec.center_fraction, ",", c.spec.resize_shorter);
  }
  return key;
}

}  // namespace

std::shared_ptr<std::vector<int8_t>> ValidityCache::Get(
    const StreamRequest& request) {
  const std::string key = ValidityKey(request);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxKeys) entries_.erase(entries_.begin());
    it = entries_
             .emplace(key, std::make_shared<std::vector<int8_t>>(
                               request.context.source->dataset().size(), kUnknown))
             .first;
  }
  return it->second;
}

ResumeValidator::ResumeValidator(const ShardView* shard,
                                 uint64_t needed,
                                 std::shared_ptr<std::vector<int8_t>> cache)
    : shard_(*shard),
      known_(*cache),
      cache_(std::move(cache)),
      needed_(needed),
      end_(std::min<uint64_t>(needed, shard->size())) {}

void ResumeValidator::TakeChunk(size_t max_n, std::vector<SampleWork>* works) {
  while (next_ < end_ && works->size() < max_n) {
    const uint64_t id = shard_[next_++];
    if (known_[id] != kUnknown) continue;
    known_[id] = kInFlight;
    SampleWork w;
    w.sample_id = id;
    works->push_back(w);
  }
}

void ResumeValidator::Complete(const std::vector<SampleWork>& works) {
  for (const SampleWork& w : works) {
    const int8_t v = w.status.ok() ? kGood : kBad;
    known_[w.sample_id] = v;
    if (w.sample_id < cache_->size()) (*cache_)[w.sample_id] = v;
  }
}

std::optional<uint64_t> ResumeValidator::Advance() {
  const uint64_t shard_end = shard_.size();
  while (true) {
    while (next_ < end_ && known_[shard_[next_]] >= 0) ++next_;
    // Count the prefix whose results are known.
    while (count_pos_ < end_) {
      const int8_t v = known_[shard_[count_pos_]];
      if (v < 0) break;
      ++count_pos_;
      if (v == kGood && ++count_ok_ == needed_) return count_pos_;
    }
    if (count_pos_ < end_) return std::nullopt;  // waiting for results
    if (end_ >= shard_end) return shard_end;     // start past the end
    end_ = std::min<uint64_t>(shard_end, end_ + (needed_ - count_ok_));
  }
}

}  // namespace nearprep
