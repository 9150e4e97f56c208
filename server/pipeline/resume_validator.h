// Resume without a position token: where does batch k of a shard begin?
//
// Under ErrorPolicy::kSkip batch k is the k-th group of batch_size
// *successful* samples, so its first shard position depends on which earlier
// samples fail. A client that resumes with start_batch = k but no
// start_position (the token it would have got as next_position) makes the
// stream find that position first:
//   1. needed = k * batch_size successes must precede the start.
//   2. The validator hands out chunks of the positions [0, end) whose result
//      is unknown; the backend runs them into scratch memory.
//   3. As results arrive it counts, in shard order, the known prefix; the
//      position after the needed-th success is where the run starts. If the
//      window [0, end) holds too few successes, end grows by the missing
//      count (each further position adds at most one success).
//   4. The shard's end reached first: the stream is empty (start past the
//      end).
// Results are cached per dataset and decode settings (ValidityCache), so a
// second resume of the same shard costs nothing but lookups.
//
// Thread-safety: neither class is thread-safe. The scheduler calls them with
// its mutex held (the cache's vectors are shared by every stream of a key).
#ifndef NEARPREP_SERVER_PIPELINE_RESUME_VALIDATOR_H_
#define NEARPREP_SERVER_PIPELINE_RESUME_VALIDATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/backend/backend.h"
#include "server/data/epoch_order_cache.h"
#include "server/pipeline/pipeline.h"

namespace nearprep {

// What is known of one sample: an int8_t per sample id.
enum Validity : int8_t { kUnknown = -1, kInFlight = -2, kBad = 0, kGood = 1 };

// Validation results by (dataset, decode settings); at most kMaxKeys keys:
// when full, the first key in key order is dropped (not the oldest: the
// keys are held in a std::map).
class ValidityCache {
 public:
  // Validation cache: results kept for this many (dataset, settings) keys.
  static constexpr size_t kMaxKeys = 32;

  // The shared vector (one entry per sample id of the dataset) for the
  // settings of `request`; created kUnknown on first use.
  std::shared_ptr<std::vector<int8_t>> Get(const StreamRequest& request);

 private:
  std::map<std::string, std::shared_ptr<std::vector<int8_t>>> entries_;
};

// The validation phase of one stream.
class ResumeValidator {
 public:
  // `shard`: sample ids by shard position (outlives the validator).
  // `needed`: successes that precede the start. `cache` from ValidityCache.
  ResumeValidator(const ShardView* shard, uint64_t needed,
                  std::shared_ptr<std::vector<int8_t>> cache);

  // Whether positions with unknown results remain to be handed out.
  bool CanDispatch() const { return next_ < end_; }
  // Appends up to `max_n` samples whose result is unknown to `works` and
  // marks them in flight (their `out` is left for the caller to set).
  void TakeChunk(size_t max_n, std::vector<SampleWork>* works);
  // Records the results of a chunk from TakeChunk (also in the cache).
  void Complete(const std::vector<SampleWork>& works);
  // Counts what is known; the start position once it is decided (the
  // shard's size when the shard holds fewer than `needed` successes).
  std::optional<uint64_t> Advance();

 private:
  const ShardView& shard_;
  std::vector<int8_t> known_;  // by sample id: this stream's view
  std::shared_ptr<std::vector<int8_t>> cache_;
  const uint64_t needed_;
  uint64_t next_ = 0;       // next position to hand out
  uint64_t end_ = 0;        // validate positions [0, end_)
  uint64_t count_pos_ = 0;  // positions counted so far
  uint64_t count_ok_ = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_RESUME_VALIDATOR_H_
