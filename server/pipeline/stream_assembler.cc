#include "server/pipeline/stream_assembler.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/data/epoch_order_cache.h"
#include "server/data/epoch_plan.h"
#include "server/pipeline/resume_token.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace {

uint64_t MicrosBetween(StreamAssembler::Clock::time_point a,
                       StreamAssembler::Clock::time_point b) {
  return b <= a ? 0
               : static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::microseconds>(b - a)
                         .count());
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

void CountFailure(PipelineCounters& c, const absl::Status& s) {
  c.samples_failed.fetch_add(1, std::memory_order_relaxed);
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kDataLoss:
      c.decode_errors.fetch_add(1, std::memory_order_relaxed);
      break;
    case absl::StatusCode::kResourceExhausted:
      c.limit_errors.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      c.io_errors.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

uint64_t DepthFor(const StreamRequest& r, const BatchMemory& memory,
                  int prefetch_depth) {
  return std::max<uint64_t>(
      1, std::min<uint64_t>(static_cast<uint64_t>(std::max(1, prefetch_depth)),
                            r.memory_limit_bytes /
                                std::max<uint64_t>(1, memory.total())));
}

// The stream's ids: the explicit ones, or its shard of the epoch order
// shared with every stream of the same order (SharedEpochOrders).
ShardView ShardOf(const StreamRequest& r) {
  if (!r.sample_ids.empty()) {
    return ShardView(
        std::make_shared<const std::vector<uint64_t>>(r.sample_ids), 0, 1);
  }
  EpochOrderKey key;
  key.num_samples = r.context.source->dataset().size();
  key.seed = r.context.seed;
  key.epoch = r.context.epoch;
  key.shuffle = r.shuffle;
  key.block_shuffle = r.block_shuffle;
  key.block = r.block;
  return ShardView(SharedEpochOrders().Get(key), r.shard_index, r.num_shards);
}

}  // namespace

StreamAssembler::StreamAssembler(const StreamRequest& request,
                                 int prefetch_depth,
                                 PipelineCounters* counters)
    : req_(request),
      counters_(counters),
      shard_(ShardOf(request)),
      batch_(request.batch_size),
      memory_(BatchMemoryOf(request)),
      sample_bytes_(memory_.sample_bytes),
      depth_(DepthFor(request, memory_, prefetch_depth)),
      pool_(std::make_shared<BufferPool>(memory_.tensor_bytes, depth_ + 1)),
      end_pos_(shard_.size()) {
  cur_ = NewBatchMeta();
  uint64_t limit = 0;
  if (req_.max_batches > 0 && !MulOverflows(req_.max_batches, batch_, &limit)) {
    limit_slots_ = limit;
  }
  if (MulOverflows(req_.start_batch, batch_, &start_slots_)) {
    start_slots_ = kNoLimit;
  }
}

StreamAssembler::~StreamAssembler() {
  LogUnloggedSampleErrors();
  counters_->ready_batches.fetch_sub(static_cast<int64_t>(ready_.size()),
                                     std::memory_order_relaxed);
  for (auto& [b, p] : buffers_) pool_->Release(p);
}

bool StreamAssembler::NeedsValidation() const {
  return req_.start_position == 0 && req_.start_batch > 0 &&
         req_.error_policy == ErrorPolicy::kSkip;
}

void StreamAssembler::Start(std::shared_ptr<std::vector<int8_t>> validity) {
  if (req_.start_position > 0) {
    StartRun(req_.start_position);
  } else if (!NeedsValidation()) {
    StartRun(start_slots_);
  } else {
    validator_.emplace(&shard_, start_slots_, std::move(validity));
    AdvanceValidation();
  }
}

void StreamAssembler::StartRun(uint64_t start_pos) {
  validator_.reset();
  next_pos_ = assemble_pos_ = std::min<uint64_t>(start_pos, end_pos_);
  Assemble();  // finishes an empty stream
}

void StreamAssembler::AdvanceValidation() {
  if (!validator_ || Terminal()) return;
  if (std::optional<uint64_t> start = validator_->Advance()) StartRun(*start);
}

bool StreamAssembler::CanDispatch() {
  if (Terminal()) return false;
  if (validator_) return validator_->CanDispatch();
  if (next_pos_ >= end_pos_) return false;
  if (results_.empty() && next_prov_ > write_slot_) next_prov_ = write_slot_;
  return next_prov_ < WindowEnd(Consumed());
}

bool StreamAssembler::HasDispatchableWork() const {
  if (Terminal()) return false;
  if (validator_) return validator_->CanDispatch();
  if (next_pos_ >= end_pos_) return false;
  const uint64_t prov =
      results_.empty() && next_prov_ > write_slot_ ? write_slot_ : next_prov_;
  return prov < WindowEnd(Consumed());
}

uint64_t StreamAssembler::WindowEnd(uint64_t consumed) const {
  // First batch first: until the stream's first batch has been consumed
  // (with account_until_released: sent), the window is that batch alone, so
  // the workers do not decode the rest of the window while the first batch
  // is serialised and sent on the same cores (time to first batch grew with
  // the depth: 0.23-0.27 s at depth 1, 0.58-1.19 s at 4 on 2 cores).
  const uint64_t depth = consumed == 0 ? 1 : depth_;
  return std::min((depth + consumed) * batch_, limit_slots_);
}

bool StreamAssembler::TakeValidationChunk(size_t max_n, Chunk* chunk) {
  chunk->validation = true;
  validator_->TakeChunk(max_n, &chunk->works);
  if (chunk->works.empty()) {
    AdvanceValidation();
    return false;
  }
  chunk->scratch.resize(chunk->works.size() * sample_bytes_);
  for (size_t i = 0; i < chunk->works.size(); ++i) {
    chunk->works[i].out = chunk->scratch.data() + i * sample_bytes_;
  }
  return true;
}

bool StreamAssembler::TakeChunk(size_t max_n, Chunk* chunk) {
  chunk->works.clear();
  if (validator_) return TakeValidationChunk(max_n, chunk);
  chunk->validation = false;
  const uint64_t window_end = WindowEnd(Consumed());
  const uint64_t n = std::min<uint64_t>(
      {max_n, end_pos_ - next_pos_, window_end - next_prov_});
  chunk->first_pos = next_pos_;
  chunk->works.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    SampleWork& w = chunk->works[i];
    w.sample_id = shard_[next_pos_ + i];
    w.out = SlotPtr(next_prov_ + i);
    if (w.out == nullptr) {
      Fail(absl::ResourceExhaustedError("out of memory for batch buffers"));
      return false;
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    Result r;
    r.prov_slot = next_prov_ + i;
    results_.push_back(std::move(r));
  }
  next_pos_ += n;
  next_prov_ += n;
  run_inflight_ += n;
  return n > 0;
}

void StreamAssembler::CompleteChunk(Chunk* chunk) {
  if (chunk->validation) {
    if (Terminal() || !validator_) return;
    validator_->Complete(chunk->works);
    AdvanceValidation();
    return;
  }
  run_inflight_ -= chunk->works.size();
  if (Terminal()) {
    MaybeReleaseBuffers();
    return;
  }
  // results_.front() is at assemble_pos_; this chunk starts at first_pos.
  const uint64_t offset = chunk->first_pos - assemble_pos_;
  for (size_t i = 0; i < chunk->works.size(); ++i) {
    Result& r = results_[offset + i];
    SampleWork& w = chunk->works[i];
    r.done = true;
    r.status = std::move(w.status);
    r.params = w.params;
    r.times = w.times;
    r.read_bytes = w.read_bytes;
  }
  Assemble();
}

bool StreamAssembler::HasResult() const {
  return cancelled_ || !ready_.empty() || !error_.ok() || finished_;
}

BatchStream::NextResult StreamAssembler::Take(Clock::time_point now) {
  if (cancelled_) return absl::CancelledError("stream cancelled");
  if (!ready_.empty()) {
    ReadyBatch rb = std::move(ready_.front());
    ready_.pop_front();
    rb.data->queue_wait_us = MicrosBetween(rb.done_at, now);
    counters_->ready_batches.fetch_sub(1, std::memory_order_relaxed);
    counters_->queue_wait_seconds.Observe(
        static_cast<double>(rb.data->queue_wait_us) / 1e6);
    ++taken_;
    if (req_.account_until_released) {
      // The token's deleter runs when the last copy of the batch goes.
      Released* r = released_.get();
      rb.data->release_token = std::shared_ptr<void>(
          static_cast<void*>(r), [keep = released_](void*) {
            keep->count.fetch_add(1, std::memory_order_release);
            if (keep->notify) keep->notify();
          });
    }
    return std::shared_ptr<const BatchData>(std::move(rb.data));
  }
  if (!error_.ok()) return error_;
  return std::shared_ptr<const BatchData>();  // finished_
}

uint64_t StreamAssembler::Consumed() const {
  if (!req_.account_until_released) return taken_;
  return released_->count.load(std::memory_order_acquire);
}

void StreamAssembler::SetReleaseNotifier(std::function<void()> notify) {
  released_->notify = std::move(notify);
}

void StreamAssembler::Cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  counters_->ready_batches.fetch_sub(static_cast<int64_t>(ready_.size()),
                                     std::memory_order_relaxed);
  ready_.clear();
  results_.clear();
  MaybeReleaseBuffers();
}

// Once a stream is over and no worker writes into its buffers any more, the
// buffers of unfinished batches go back to the pool.
void StreamAssembler::MaybeReleaseBuffers() {
  if (!Terminal() || run_inflight_ > 0) return;
  for (auto& [b, p] : buffers_) pool_->Release(p);
  buffers_.clear();
}

void StreamAssembler::Fail(absl::Status status) {
  if (Terminal()) return;
  error_ = std::move(status);
  // Nothing partial is delivered after an error.
  results_.clear();
  MaybeReleaseBuffers();
}

void StreamAssembler::Finish() {
  if (Terminal()) return;
  finished_ = true;
  results_.clear();
  MaybeReleaseBuffers();
}

// Address of slot `slot`; allocates its batch buffer on first use. nullptr
// when memory is exhausted.
uint8_t* StreamAssembler::SlotPtr(uint64_t slot) {
  const uint64_t b = slot / batch_;
  auto it = buffers_.find(b);
  if (it == buffers_.end()) {
    uint8_t* p = pool_->Acquire();
    if (p == nullptr) return nullptr;
    it = buffers_.emplace(b, p).first;
  }
  return it->second + (slot % batch_) * sample_bytes_;
}

std::shared_ptr<BatchData> StreamAssembler::NewBatchMeta() const {
  auto bd = std::make_shared<BatchData>();
  bd->labels.reserve(batch_);
  bd->sample_ids.reserve(batch_);
  if (req_.include_params) bd->params.reserve(batch_);
  return bd;
}

// Emits the head batch with `n` samples.
void StreamAssembler::Emit(uint32_t n) {
  std::shared_ptr<BatchData> bd = std::move(cur_);
  cur_ = NewBatchMeta();
  const uint64_t head = emitted_;
  uint8_t* buf = nullptr;
  auto it = buffers_.find(head);
  if (it != buffers_.end()) {
    buf = it->second;
    buffers_.erase(it);
  }
  const WorkContext& c = req_.context;
  bd->epoch = c.epoch;
  bd->batch_index = req_.start_batch + head;
  bd->next_position = assemble_pos_;
  if (!req_.resume_binding.empty()) {
    bd->resume_token =
        ResumeToken(req_.resume_binding, bd->batch_index + 1, assemble_pos_);
  }
  bd->num_samples = n;
  const uint64_t h = static_cast<uint64_t>(c.spec.height);
  const uint64_t w = static_cast<uint64_t>(c.spec.width);
  if (c.output.layout == Layout::kNCHW) {
    bd->shape = {n, 3, h, w};
  } else {
    bd->shape = {n, h, w, 3};
  }
  bd->dtype = c.output.dtype;  // compression: StreamHandle::Next
  bd->layout = c.output.layout;
  if (n > 0 && buf != nullptr) {
    bd->tensor = buf;
    bd->tensor_bytes = static_cast<size_t>(n) * sample_bytes_;
    bd->storage = pool_->Wrap(buf);
  } else {
    pool_->Release(buf);
  }
  ++emitted_;
  counters_->batches_produced.fetch_add(1, std::memory_order_relaxed);
  ready_.push_back(ReadyBatch{std::move(bd), Clock::now()});
  counters_->ready_batches.fetch_add(1, std::memory_order_relaxed);
}

void StreamAssembler::LogSampleError(uint64_t id, const std::string& path,
                                     const absl::Status& status) {
  const std::string& dataset = req_.context.source->dataset().name();
  const std::string from =
      req_.origin.empty() ? std::string() : " (stream from " + req_.origin + ")";
  const Clock::time_point now = Clock::now();
  if (errors_logged_ < kLoggedSampleErrors) {
    ++errors_logged_;
    spdlog::warn("dataset '{}': sample {} '{}' skipped: {}{}", dataset, id,
                 path, status.ToString(), from);
    if (errors_logged_ == kLoggedSampleErrors) {
      spdlog::warn("dataset '{}': {} per-sample errors logged{}; the "
                   "stream's next ones are counted, once a minute",
                   dataset, kLoggedSampleErrors, from);
      errors_summary_at_ = now;
    }
    return;
  }
  ++errors_unlogged_;
  if (now - errors_summary_at_ >= std::chrono::minutes(1)) {
    LogUnloggedSampleErrors();
    errors_summary_at_ = now;
  }
}

void StreamAssembler::LogUnloggedSampleErrors() {
  if (errors_unlogged_ == 0) return;
  spdlog::warn("dataset '{}': {} more per-sample errors{} (not logged one "
               "by one; Batch.errors lists each)",
               req_.context.source->dataset().name(), errors_unlogged_,
               req_.origin.empty() ? std::string()
                                   : " (stream from " + req_.origin + ")");
  errors_unlogged_ = 0;
}

void StreamAssembler::Assemble() {
  const auto& samples = req_.context.source->dataset().samples();
  while (!Terminal() && !results_.empty() && results_.front().done) {
    Result r = std::move(results_.front());
    results_.pop_front();
    const uint64_t pos = assemble_pos_++;
    const uint64_t id = shard_[pos];
    BatchData& cur = *cur_;
    cur.times.read_us += r.times.read_us;
    cur.times.decode_us += r.times.decode_us;
    cur.times.transform_us += r.times.transform_us;
    counters_->read_seconds.Observe(static_cast<double>(r.times.read_us) / 1e6);
    counters_->decode_seconds.Observe(
        static_cast<double>(r.times.decode_us) / 1e6);
    counters_->transform_seconds.Observe(
        static_cast<double>(r.times.transform_us) / 1e6);
    if (r.read_bytes > 0) {
      counters_->read_size_bytes.Observe(static_cast<double>(r.read_bytes));
    }
    if (!r.status.ok()) {
      CountFailure(*counters_, r.status);
      const std::string& path = id < samples.size() ? samples[id].path : "";
      LogSampleError(id, path, r.status);
      if (req_.error_policy == ErrorPolicy::kFailStream) {
        Fail(absl::DataLossError(absl::StrCat(
            "sample ", id, " '", path, "' failed (error_policy=FAIL): ",
            r.status.ToString())));
        return;
      }
      cur.errors.push_back(SampleErrorInfo{id, path, std::move(r.status)});
      continue;
    }
    counters_->samples_ok.fetch_add(1, std::memory_order_relaxed);
    const uint64_t final_slot = write_slot_;
    if (r.prov_slot != final_slot) {
      uint8_t* dst = SlotPtr(final_slot);
      uint8_t* src = SlotPtr(r.prov_slot);
      if (dst == nullptr || src == nullptr) {
        Fail(absl::ResourceExhaustedError("out of memory for batch buffers"));
        return;
      }
      std::memmove(dst, src, sample_bytes_);
    }
    cur.labels.push_back(id < samples.size() ? samples[id].label : 0);
    cur.sample_ids.push_back(id);
    if (req_.include_params) cur.params.push_back(r.params);
    ++write_slot_;
    if (write_slot_ % batch_ == 0) {
      Emit(static_cast<uint32_t>(batch_));
      if (limit_slots_ != kNoLimit && write_slot_ >= limit_slots_) {
        Finish();
        return;
      }
    }
  }
  if (!Terminal() && !validator_ && results_.empty() &&
      next_pos_ >= end_pos_) {
    const uint32_t rest = static_cast<uint32_t>(write_slot_ % batch_);
    if (!req_.drop_remainder && (rest > 0 || !cur_->errors.empty())) {
      Emit(rest);
    }
    Finish();
  }
}

}  // namespace nearprep
