// StreamAssembler: how one stream turns backend results into batches. No
// threads and no locks: the scheduler (server/pipeline/scheduler.h) calls it
// under its mutex, and unit tests drive it directly, completing chunks in any
// order.
//
// Protocol
//   Start()                once, after construction.
//   CanDispatch()          is there work to hand out now?
//   TakeChunk(max_n, &c)   up to max_n consecutive shard positions; each
//                          sample's `out` points into its batch buffer (or
//                          into c.scratch while validating a resume).
//   (the backend fills c.works; the caller holds no lock meanwhile)
//   CompleteChunk(&c)      results in; batches are assembled in shard order.
//   HasResult(), Take(now) the consumer takes the next batch / end / error.
//   Cancel()               the consumer went away.
//
// Slots. Slots are counted from the stream's first batch: slot s is sample
// s % B of batch s / B (B = batch_size). Each dispatched sample gets the next
// *provisional* slot and writes straight into that batch buffer. The
// assembler walks results in shard order; the i-th successful sample belongs
// in slot i (its final slot, always <= its provisional one). Without failures
// both are equal and nothing moves; after a failure the later samples are
// moved back (memmove) as they are assembled. Provisional slots never run
// ahead of the prefetch window ((depth + batches consumed) * B, consumed =
// taken, or released with StreamRequest::account_until_released; the first
// batch alone until it has been consumed, so it is not slowed down by the
// rest of the window being decoded on the same cores) nor past
// max_batches * B; when failures leave the window short and nothing is in
// flight, provisional numbering restarts at the first free final slot. The
// bytes of each sample are the backend's, so the output does not depend on
// worker count, chunk size or completion order.
//
// Resume without a position token (start_batch > 0, start_position == 0,
// skip policy): the stream first runs a ResumeValidator
// (server/pipeline/resume_validator.h) and starts the run where it says.
//
// Thread-safety: not thread-safe; one caller at a time.
#ifndef NEARPREP_SERVER_PIPELINE_STREAM_ASSEMBLER_H_
#define NEARPREP_SERVER_PIPELINE_STREAM_ASSEMBLER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/backend.h"
#include "server/data/epoch_order_cache.h"
#include "server/pipeline/buffer_pool.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/resume_validator.h"

namespace nearprep {

// Samples handed to the backend in one call.
struct Chunk {
  bool validation = false;  // outputs go to `scratch`, not to batches
  uint64_t first_pos = 0;   // shard position of works[0] (run chunks)
  std::vector<SampleWork> works;
  std::vector<uint8_t> scratch;
};

class StreamAssembler {
 public:
  using Clock = std::chrono::steady_clock;
  // Per-sample errors logged one by one per stream (then counted).
  static constexpr uint64_t kLoggedSampleErrors = 10;

  // `request` meets the preconditions of Pipeline::OpenStream. The depth is
  // prefetch_depth lowered to fit request.memory_limit_bytes (at least 1).
  // `counters` outlives the assembler.
  StreamAssembler(const StreamRequest& request, int prefetch_depth,
                  PipelineCounters* counters);
  ~StreamAssembler();
  StreamAssembler(const StreamAssembler&) = delete;
  StreamAssembler& operator=(const StreamAssembler&) = delete;

  const StreamRequest& request() const { return req_; }
  // BatchMemoryOf(request()), computed once at construction.
  const BatchMemory& memory() const { return memory_; }
  uint64_t depth() const { return depth_; }

  // Whether Start needs a validity vector (a resume without token under
  // kSkip).
  bool NeedsValidation() const;
  // Starts the run, or the validation with `validity` (from ValidityCache;
  // nullptr when !NeedsValidation()). An empty stream ends here.
  void Start(std::shared_ptr<std::vector<int8_t>> validity);

  // Whether a chunk can be taken now; restarts provisional numbering when
  // failures left the window short and nothing is pending.
  bool CanDispatch();
  // What CanDispatch would answer, without its side effect (for the
  // metrics' queue depth).
  bool HasDispatchableWork() const;
  // Fills `chunk` with up to `max_n` samples (CanDispatch() was true).
  // Returns false when nothing was taken (validation found only known
  // results, or the stream failed while preparing it).
  bool TakeChunk(size_t max_n, Chunk* chunk);
  // Hands back a chunk from TakeChunk with its results.
  void CompleteChunk(Chunk* chunk);

  // Whether Take has a result for the consumer.
  bool HasResult() const;
  // The next batch (its queue_wait_us measured up to `now`), nullptr at the
  // end, or the error. Requires HasResult(). Taking a batch moves the
  // prefetch window.
  BatchStream::NextResult Take(Clock::time_point now);
  // Drops everything not yet taken; Take answers CANCELLED from now on.
  // Idempotent.
  void Cancel();

  // With request().account_until_released: `notify` runs after a taken
  // batch (all its copies) is released and the window has moved, on the
  // releasing thread, with no lock held by the assembler (the scheduler
  // wakes its workers). Set it before Start(); it must not destroy the
  // assembler.
  void SetReleaseNotifier(std::function<void()> notify);

  // No more batches will be produced (finished, failed or cancelled).
  bool Terminal() const { return finished_ || cancelled_ || !error_.ok(); }

 private:
  struct Result {  // one dispatched, not yet assembled shard position
    bool done = false;
    uint64_t prov_slot = 0;
    absl::Status status;
    SampleParams params;
    StageTimes times;
    uint64_t read_bytes = 0;
  };
  struct ReadyBatch {
    std::shared_ptr<BatchData> data;
    Clock::time_point done_at;
  };
  static constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
  // Shared with the release tokens of taken batches, which may outlive the
  // assembler.
  struct Released {
    std::atomic<uint64_t> count{0};
    std::function<void()> notify;  // set before the first Take
  };

  // Batches that no longer count against the window: released ones with
  // account_until_released, else taken ones.
  uint64_t Consumed() const;
  // End of the dispatch window in slots, given Consumed(): the prefetch
  // window, or the first batch alone until it has been consumed.
  uint64_t WindowEnd(uint64_t consumed) const;

  void StartRun(uint64_t start_pos);
  void AdvanceValidation();
  bool TakeValidationChunk(size_t max_n, Chunk* chunk);
  void Assemble();
  void Emit(uint32_t n);
  void Fail(absl::Status status);
  void Finish();
  // Logs a per-sample error at warning level: the first
  // kLoggedSampleErrors of the stream each, then a count of the others at
  // most once a minute and once when the stream ends.
  void LogSampleError(uint64_t id, const std::string& path,
                      const absl::Status& status);
  void LogUnloggedSampleErrors();
  void MaybeReleaseBuffers();
  uint8_t* SlotPtr(uint64_t slot);
  std::shared_ptr<BatchData> NewBatchMeta() const;

  const StreamRequest req_;
  PipelineCounters* const counters_;
  // Sample id by shard position: a view of the epoch order shared by the
  // streams of the same (size, seed, epoch, mode) (epoch_order_cache.h), or
  // of the explicit ids.
  const ShardView shard_;
  const uint64_t batch_;               // B
  const BatchMemory memory_;           // BatchMemoryOf(req_)
  const size_t sample_bytes_;          // memory_.sample_bytes
  const uint64_t depth_;
  const std::shared_ptr<BufferPool> pool_;
  uint64_t start_slots_ = 0;  // start_batch * B (kNoLimit on overflow)
  uint64_t limit_slots_ = kNoLimit;

  // Validation (resume without token); empty once the run has started.
  std::optional<ResumeValidator> validator_;

  // Run.
  const uint64_t end_pos_;
  uint64_t next_pos_ = 0;      // next position to dispatch
  uint64_t assemble_pos_ = 0;  // position of results_.front()
  std::deque<Result> results_;
  uint64_t next_prov_ = 0;
  uint64_t write_slot_ = 0;
  uint64_t run_inflight_ = 0;              // samples inside the backend
  std::map<uint64_t, uint8_t*> buffers_;  // batch (relative) -> buffer
  uint64_t emitted_ = 0;
  uint64_t taken_ = 0;
  const std::shared_ptr<Released> released_ = std::make_shared<Released>();
  std::deque<ReadyBatch> ready_;
  std::shared_ptr<BatchData> cur_;

  // Per-sample error log (LogSampleError).
  uint64_t errors_logged_ = 0;
  uint64_t errors_unlogged_ = 0;
  Clock::time_point errors_summary_at_;

  bool finished_ = false;  // every batch was produced
  bool cancelled_ = false;
  absl::Status error_;  // delivered after the ready batches
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_STREAM_ASSEMBLER_H_
