// The pipeline: one worker pool shared by all streams; each stream turns its
// epoch plan into batches with a bounded prefetch window.
//
// Flow of one stream
//   1. The shard's sample ids come from the epoch plan (server/data).
//   2. Samples are dispatched in shard order, in chunks, to the shared
//      worker pool; each sample writes straight into its provisional slot of
//      a batch buffer (the buffer that is later sent: written once).
//   3. The assembler consumes results in shard order. A failed sample under
//      ErrorPolicy::kSkip is recorded and the following samples move back
//      one slot (a memmove; only on this rare path), so batch k is always
//      the k-th group of batch_size successful samples.
//   4. At most `prefetch_depth` batches per stream are in flight or waiting;
//      the consumer's pace (gRPC backpressure) bounds everything else.
//
// Memory bound: streams x prefetch_depth x batch bytes; the depth of a
// stream is lowered so that its batches fit StreamRequest::memory_limit_bytes.
// The bound counts batches being filled or waiting for the consumer and,
// with StreamRequest::account_until_released (the daemon sets it), batches
// the consumer has taken until every copy of their BatchData is gone (gRPC
// holds a sent batch until its bytes are written out): the window moves on
// release, not on take. Without it, a taken batch belongs to the consumer
// and only the batches not yet taken are counted. A released buffer returns
// to the stream's pool for reuse. Copies
// of the tensor: none here — the backend writes each sample into the batch
// buffer; a sample moves (memmove) only when an earlier sample of the stream
// failed under kSkip.
//
// Details of batch formation (server/pipeline/stream_assembler.h)
//  - Errors are reported in the batch being filled when the failed sample is
//    met in shard order. If the shard ends with failed samples and no
//    partial batch, a final batch with num_samples == 0 carries their errors
//    (not sent when drop_remainder).
//  - next_position: the shard position after the last sample consumed by
//    the batch (its failures included); pass it back as start_position with
//    start_batch = batch_index + 1 to resume without recomputation.
//  - start_batch > 0 with start_position == 0 under kSkip: the shift is
//    recomputed by running the backend over the earlier samples (into
//    scratch memory, results cached per dataset and decode settings:
//    server/pipeline/resume_validator.h); under kFailStream the start is
//    start_batch * batch_size.
//  - max_batches: dispatch stops at max_batches * batch_size samples.
//  - Stage times: sums of the backend's per-sample times (failed samples of
//    the batch included); queue_wait_us: time from the batch's completion to
//    the consumer taking it (Next / NextBlocking).
//  - Cancel (or destroying the BatchStream) makes Next / NextBlocking answer
//    CANCELLED; a pending Next is still answered once, on a pipeline
//    thread. Destroying the Pipeline cancels its streams; the handles stay
//    safe to call.
//  - Scheduling (server/pipeline/scheduler.h): workers pick streams
//    round-robin, one chunk at a time.
//
// Thread-safety: Pipeline and BatchStream are thread-safe. Next's callback
// may run on a pipeline worker thread and must not block.
#ifndef NEARPREP_SERVER_PIPELINE_PIPELINE_H_
#define NEARPREP_SERVER_PIPELINE_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor_codec.h"
#include "server/backend/backend.h"
#include "server/spec/types.h"
#include "server/data/block_shuffle.h"
#include "server/data/dataset.h"
#include "server/metrics/histogram.h"

namespace nearprep {

// A validated request (server/service/request_validation.cc checks every
// field and limit; the pipeline does not check again).
//
// Preconditions of Pipeline::OpenStream (asserted in debug builds):
//   context.source != nullptr, batch_size > 0,
//   shard_index < num_shards, context.spec.height and width > 0,
//   BatchMemoryBytes(request) <= memory_limit_bytes; compression is kNone
//   or the dtype is uint8.
struct StreamRequest {
  // What every sample of the stream shares (its data, transform, output,
  // decode limits, seed, epoch); handed to the backend as is. The caller's
  // context.source names the data (any source over the dataset, e.g.
  // SampleSource(dataset)); OpenStream replaces it with the stream's own
  // source over the same store and dataset, made for this request's order
  // (block_shuffle / plan_block_samples).
  WorkContext context;
  uint32_t batch_size = 32;
  bool shuffle = false;
  // With shuffle: the block shuffle (server/data/block_shuffle.h) with
  // these resolved parameters instead of the global one.
  bool block_shuffle = false;
  BlockShuffleParams block;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint64_t start_batch = 0;
  uint64_t start_position = 0;  // 0 with start_batch > 0: recompute.
  // Non-empty: each batch carries a resume token (BatchData::resume_token)
  // made of this binding (server/pipeline/resume_token.h: ResumeBinding).
  std::string resume_binding;
  uint64_t max_batches = 0;     // 0: to the end of the shard.
  bool drop_remainder = false;
  ErrorPolicy error_policy = ErrorPolicy::kSkip;
  bool include_params = false;
  // Bytes of batches one stream may hold (being filled or waiting for the
  // consumer): the prefetch depth is lowered to fit. The daemon copies its
  // limit (ServiceLimits::per_stream_memory_bytes) in.
  uint64_t memory_limit_bytes = uint64_t{1} << 30;
  // Non-empty: the explicit mode (fleet datasets): the stream serves
  // exactly these ids in this order instead of a shard of the epoch order.
  std::vector<uint64_t> sample_ids;
  // With sample_ids: > 0 when they follow a fleet plan whose blocks are
  // this many consecutive offsets of a partition (the stream's
  // SampleSource then reads each such block once; sample_source.h).
  uint64_t plan_block_samples = 0;
  // Lossless compression of each batch's tensor (common/tensor_codec.h;
  // uint8 only). Applied when the consumer takes a batch (StreamHandle::Next
  // runs it on the thread that answers Next, with no pipeline lock held):
  // the batch is compressed into a buffer of the stream's own small pool and
  // its uncompressed buffer returns at once. Each batch then counts
  // BatchMemoryBytes() against memory_limit_bytes.
  TensorCompression compression = TensorCompression::kNone;
  int compression_level = kDefaultCompressionLevel;
  // Count a batch the consumer has taken against the prefetch window (and so
  // against memory_limit_bytes) until its BatchData and every copy of it are
  // destroyed, not only until it is taken. The daemon sets it: its consumer
  // (gRPC) holds a batch after taking it until the bytes are written. A
  // consumer that keeps batches then stalls its own stream after
  // prefetch_depth of them, so in-process consumers that collect batches
  // leave it false.
  bool account_until_released = false;
  // Who asked (the daemon: the gRPC peer), named in the stream's log lines
  // (per-sample errors: stream_assembler.h). Empty: not named.
  std::string origin;
};

// The geometry of an n-image tensor of the request's output.
TensorGeometry OutputGeometry(const StreamRequest& request, uint64_t n);

// The memory of one batch of the request, computed in one place for every
// user: request_validation's per_stream_memory_bytes checks, the stream's
// prefetch depth (DepthFor), its batch buffer pool and its compressed-copy
// pool. Labels, sample ids and the serialized header are small per-batch
// vectors outside this count (as they always were).
struct BatchMemory {
  // One sample's tensor slot: height * width * 3 * DTypeSize(dtype)
  // (OutputSpec::SampleBytes; the layout does not change it).
  uint64_t sample_bytes = 0;
  // batch_size * sample_bytes: one batch buffer of the stream's pool.
  uint64_t tensor_bytes = 0;
  // With a compression, the bound of the compressed copy's buffer
  // (CompressedBound of the batch's geometry); 0 without one.
  uint64_t compressed_bytes = 0;
  // What one batch may hold: tensor_bytes + compressed_bytes.
  uint64_t total() const { return tensor_bytes + compressed_bytes; }
};
// Reads batch_size, context.spec (height, width), context.output and
// compression only.
BatchMemory BatchMemoryOf(const StreamRequest& request);

// BatchMemoryOf(request).total().
uint64_t BatchMemoryBytes(const StreamRequest& request);

struct SampleErrorInfo {
  uint64_t sample_id = 0;
  std::string path;
  absl::Status status;
};

// A finished batch. `tensor` points into memory owned by the BatchData (and
// kept alive by whoever holds the shared_ptr: the gRPC slice, a test).
struct BatchData {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  uint64_t next_position = 0;
  // With StreamRequest::resume_binding: the token for resuming at
  // batch_index + 1 (ResumeToken).
  std::string resume_token;
  uint32_t num_samples = 0;
  std::vector<int64_t> labels;
  std::vector<uint64_t> sample_ids;
  std::vector<SampleParams> params;  // Filled when include_params.
  std::vector<SampleErrorInfo> errors;
  // With MixUp / CutMix (TransformSpec::mixup_alpha, cutmix_alpha): the
  // batch's draw and each image's partner label (StreamHandle applies it).
  BatchMixParams mix;
  std::vector<int64_t> mix_labels;
  StageTimes times;  // Sums over the batch's samples.
  uint64_t queue_wait_us = 0;
  // [n, h, w, 3] for NHWC, [n, 3, h, w] for NCHW.
  std::vector<uint64_t> shape;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNHWC;
  const uint8_t* tensor = nullptr;
  size_t tensor_bytes = 0;
  // kNone: `tensor` holds the elements. Otherwise it holds the compressed
  // payload of uncompressed_bytes bytes of elements.
  TensorCompression compression = TensorCompression::kNone;
  uint64_t uncompressed_bytes = 0;
  // With StreamRequest::account_until_released: destroyed with the last copy
  // of the batch, which then stops counting against its stream's window.
  // Copies of a BatchData (a compressed copy, say) share it. Declared before
  // `storage` so that it is destroyed after it: the buffer is back in the
  // stream's pool before the window lets a worker ask for another one
  // (else the pool would allocate a prefetch_depth + 1st buffer).
  std::shared_ptr<void> release_token;
  std::shared_ptr<void> storage;  // Owns the tensor memory.
};

// The consumer's end of a stream.
class BatchStream {
 public:
  // The next batch; nullptr at the end of the stream; or the error that
  // ended it (CANCELLED after Cancel).
  using NextResult = absl::StatusOr<std::shared_ptr<const BatchData>>;
  using NextCallback = absl::AnyInvocable<void(NextResult) &&>;

  virtual ~BatchStream() = default;
  // Asks for the next result; `done` is called exactly once with it. When
  // the result is already there, `done` runs inline, before Next returns;
  // otherwise later, on a pipeline thread, with no pipeline lock held (it
  // may call Next again). At most one Next may be pending at a time.
  virtual void Next(NextCallback done) = 0;
  // Blocking convenience over Next.
  NextResult NextBlocking();
  // Stops dispatching; in-flight work finishes and is dropped; a pending
  // Next is answered with CANCELLED (on a pipeline thread, not inside
  // Cancel, unless the Pipeline is gone). Idempotent.
  virtual void Cancel() = 0;
};

struct PipelineOptions {
  int workers = 0;  // 0: hardware_concurrency.
  int prefetch_depth = 4;
  // Samples per backend call.
  int chunk_size = 4;
};

// The pipeline's live counters (monotonic unless marked gauge). Read by
// GetServerInfo and by the daemon's metrics collector; updated lock-free.
struct PipelineCounters {
  std::atomic<uint64_t> batches_produced{0};
  std::atomic<uint64_t> samples_ok{0};
  std::atomic<uint64_t> samples_failed{0};
  std::atomic<uint64_t> decode_errors{0};  // INVALID_ARGUMENT / DATA_LOSS
  std::atomic<uint64_t> limit_errors{0};   // RESOURCE_EXHAUSTED
  std::atomic<uint64_t> io_errors{0};      // NOT_FOUND, PERMISSION_DENIED, ...
  // Per-sample stage times as the backend reports them (StageTimes), for
  // every sample assembled into a stream (failed ones included; not the
  // samples a resume re-runs for validation), in seconds.
  metrics::Histogram read_seconds{metrics::LatencyBuckets()};
  metrics::Histogram decode_seconds{metrics::LatencyBuckets()};
  metrics::Histogram transform_seconds{metrics::LatencyBuckets()};
  // Per sample: encoded bytes read (SampleWork::read_bytes, when known).
  metrics::Histogram read_size_bytes{metrics::SizeBuckets()};
  // Per batch: from its completion to the consumer taking it
  // (BatchData::queue_wait_us), in seconds.
  metrics::Histogram queue_wait_seconds{metrics::LatencyBuckets()};
  // Per Next: how long the consumer waited for the pipeline to produce its
  // next result (0 when one was ready), in seconds. Its rate over the number
  // of active streams is the fraction of time streams stalled on the daemon.
  metrics::Histogram next_wait_seconds{metrics::LatencyBuckets()};
  // Gauge: finished batches waiting for their consumer, all streams.
  std::atomic<int64_t> ready_batches{0};
  // The worker pool: gauge of workers inside the backend now, and the total
  // time workers spent there (busy fraction = rate / workers).
  std::atomic<int64_t> busy_workers{0};
  std::atomic<uint64_t> busy_nanos{0};
};

class Scheduler;

class Pipeline {
 public:
  Pipeline(const PipelineOptions& options, std::shared_ptr<Backend> backend);
  ~Pipeline();  // Cancels streams, joins workers.
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Starts a stream. `request` must meet the preconditions listed at
  // StreamRequest. A start past the end of the shard is not an error (the
  // stream is simply empty). Returns a status for sources that can fail to
  // open; none does today.
  absl::StatusOr<std::unique_ptr<BatchStream>> OpenStream(
      const StreamRequest& request);

  const PipelineCounters& counters() const;
  // Streams with work a worker could take now (the pool's queue depth).
  size_t RunnableStreams() const;
  // Streams known to the pool (being produced; a stream whose batches are
  // all produced leaves it while its consumer may still be reading).
  size_t ProducingStreams() const;
  Backend& backend();
  int workers() const;
  const PipelineOptions& options() const;

 private:
  // Shared with the stream handles, which may outlive the Pipeline.
  std::shared_ptr<Scheduler> scheduler_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_PIPELINE_H_
