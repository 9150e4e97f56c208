// The Pipeline wires the parts: Scheduler (worker pool, scheduler.h),
// StreamAssembler (batch formation, stream_assembler.h), ResumeValidator
// (resume_validator.h) and StreamHandle (the consumer's end,
// stream_handle.h).
#include "server/pipeline/pipeline.h"

#include <algorithm>
#include <cassert>
#include <memory>
#include <thread>
#include <utility>

#include "server/data/sample_source.h"
#include "server/pipeline/scheduler.h"
#include "server/pipeline/stream_handle.h"

namespace nearprep {
namespace {

PipelineOptions Resolve(PipelineOptions o) {
  if (o.workers <= 0) {
    o.workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  o.prefetch_depth = std::max(1, o.prefetch_depth);
  o.chunk_size = std::max(1, o.chunk_size);
  return o;
}

}  // namespace

TensorGeometry OutputGeometry(const StreamRequest& request, uint64_t n) {
  const uint64_t h = static_cast<uint64_t>(request.context.spec.height);
  const uint64_t w = static_cast<uint64_t>(request.context.spec.width);
  return request.context.output.layout == Layout::kNCHW
             ? TensorGeometry::Nchw(n, 3, h, w)
             : TensorGeometry::Nhwc(n, h, w, 3);
}

BatchMemory BatchMemoryOf(const StreamRequest& request) {
  BatchMemory m;
  m.sample_bytes = request.context.output.SampleBytes(request.context.spec);
  m.tensor_bytes = uint64_t{request.batch_size} * m.sample_bytes;
  if (request.compression != TensorCompression::kNone) {
    m.compressed_bytes =
        CompressedBound(OutputGeometry(request, request.batch_size));
  }
  return m;
}

uint64_t BatchMemoryBytes(const StreamRequest& request) {
  return BatchMemoryOf(request).total();
}

Pipeline::Pipeline(const PipelineOptions& options,
                   std::shared_ptr<Backend> backend)
    : scheduler_(std::make_shared<Scheduler>(Resolve(options),
                                             std::move(backend))) {
  scheduler_->StartWorkers();
}

Pipeline::~Pipeline() { scheduler_->Shutdown(); }

namespace {

// The request with its stream's SampleSource: made here, once per stream,
// over the caller's source's store and dataset, with the strategy this
// request's order calls for.
StreamRequest WithSampleSource(const StreamRequest& request) {
  StreamRequest r = request;
  SampleSourceOptions o;
  o.block_samples = r.block_shuffle ? r.block.block_samples : 0;
  o.plan_block_samples = r.sample_ids.empty() ? 0 : r.plan_block_samples;
  o.seed = r.context.seed;
  o.epoch = r.context.epoch;
  const SampleSource& given = *r.context.source;
  r.context.source = std::make_shared<const SampleSource>(given.store(), given.dataset(), o);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchStream>> Pipeline::OpenStream(
    const StreamRequest& request) {
  // Preconditions (see StreamRequest); request_validation.cc enforces them.
  assert(request.context.source != nullptr);
  assert(request.batch_size > 0);
  assert(request.shard_index < request.num_shards);
  assert(request.context.spec.height > 0 && request.context.spec.width > 0);
  assert(BatchMemoryBytes(request) <= request.memory_limit_bytes);
  assert(request.compression == TensorCompression::kNone ||
         request.context.output.dtype == DType::kUint8);
  const StreamRequest with_source = WithSampleSource(request);
  auto stream = std::make_shared<Scheduler::Stream>(
      with_source, scheduler_->options().prefetch_depth, &scheduler_->counters());
  scheduler_->Add(stream);
  return std::unique_ptr<BatchStream>(
      new StreamHandle(scheduler_, std::move(stream), with_source));
}

const PipelineCounters& Pipeline::counters() const {
  return scheduler_->counters();
}

size_t Pipeline::RunnableStreams() const {
  return scheduler_->RunnableStreams();
}

size_t Pipeline::ProducingStreams() const {
  return scheduler_->ProducingStreams();
}

Backend& Pipeline::backend() { return scheduler_->backend(); }

int Pipeline::workers() const { return scheduler_->options().workers; }

const PipelineOptions& Pipeline::options() const {
  return scheduler_->options();
}

}  // namespace nearprep
