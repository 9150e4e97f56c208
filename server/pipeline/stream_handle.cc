#include "server/pipeline/stream_handle.h"

#include <future>
#include <utility>
#include <vector>

#include "server/pipeline/batch_mix.h"
#include "server/pipeline/buffer_pool.h"

namespace nearprep {

// MixUp / CutMix on the finished batch, before any compression: on the
// thread that answers Next, with no pipeline lock held. The batch is not
// shared with anyone yet, so its buffer is mixed in place.
struct StreamHandle::Mixer {
  BatchMixSpec spec;
  WorkContext context;
  uint32_t shard_index = 0;

  std::shared_ptr<const BatchData> Mix(
      std::shared_ptr<const BatchData> in) const {
    auto out = std::make_shared<BatchData>(*in);
    in.reset();
    const uint32_t n = out->num_samples;
    if (n == 0) return out;
    out->mix = DrawBatchMix(spec, context.seed, context.epoch, shard_index,
                            out->batch_index, context.spec.height,
                            context.spec.width);
    out->mix_labels.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      out->mix_labels[i] = out->labels[(i + n - 1) % n];
    }
    if (out->tensor != nullptr) {
      thread_local std::vector<uint8_t> scratch;
      ApplyBatchMix(out->mix, context.output.dtype, context.output.layout,
                    static_cast<int>(n), context.spec.height,
                    context.spec.width, const_cast<uint8_t*>(out->tensor),
                    &scratch);
      if (scratch.capacity() > (size_t{64} << 20)) {
        std::vector<uint8_t>().swap(scratch);
      }
    }
    return out;
  }
};

struct StreamHandle::Packer {
  TensorCompression compression;
  int level;
  StreamRequest request;
  std::shared_ptr<BufferPool> pool;

  // The batch with its tensor compressed (metadata copied; the copy drops
  // its reference to the uncompressed buffer).
  BatchStream::NextResult Pack(std::shared_ptr<const BatchData> in) const {
    const uint64_t n = in->shape.empty() ? 0 : in->shape[0];
    const TensorGeometry g = OutputGeometry(request, n);
    if (in->tensor_bytes == 0 || in->tensor_bytes != g.total_bytes()) {
      return in;  // no images: nothing to compress
    }
    uint8_t* buf = pool->Acquire();
    if (buf == nullptr) {
      return absl::ResourceExhaustedError(
          "out of memory for compressed batch buffers");
    }
    absl::StatusOr<size_t> size = CompressTensor(
        g, compression, level, in->tensor, buf, pool->buffer_bytes());
    if (!size.ok()) {
      pool->Release(buf);
      return size.status();
    }
    auto out = std::make_shared<BatchData>(*in);
    in.reset();
    out->tensor = buf;
    out->tensor_bytes = *size;
    out->storage = pool->Wrap(buf);  // releases the uncompressed buffer
    out->compression = compression;
    out->uncompressed_bytes = g.total_bytes();
    return std::shared_ptr<const BatchData>(std::move(out));
  }
};

StreamHandle::StreamHandle(std::shared_ptr<Scheduler> scheduler,
                           std::shared_ptr<Scheduler::Stream> stream,
                           const StreamRequest& request)
    : scheduler_(std::move(scheduler)), stream_(std::move(stream)) {
  const TransformSpec& spec = request.context.spec;
  if (spec.mixup_alpha > 0.0f || spec.cutmix_alpha > 0.0f) {
    auto m = std::make_shared<Mixer>();
    m->spec.mixup_alpha = spec.mixup_alpha;
    m->spec.cutmix_alpha = spec.cutmix_alpha;
    m->context = request.context;
    m->shard_index = request.shard_index;
    mixer_ = std::move(m);
  }
  if (request.compression != TensorCompression::kNone) {
    auto p = std::make_shared<Packer>();
    p->compression = request.compression;
    p->level = request.compression_level;
    p->request = request;
    // The stream's own count of its compressed copy (held by its
    // assembler), not a second BatchMemoryOf.
    p->pool =
        std::make_shared<BufferPool>(stream_->memory().compressed_bytes, 2);
    packer_ = std::move(p);
  }
}

StreamHandle::~StreamHandle() { Cancel(); }

void StreamHandle::Next(NextCallback done) {
  if (!packer_ && !mixer_) {
    scheduler_->Next(*stream_, std::move(done));
    return;
  }
  scheduler_->Next(*stream_, [mixer = mixer_, packer = packer_,
                              done = std::move(done)](NextResult r) mutable {
    if (r.ok() && *r != nullptr && mixer) r = mixer->Mix(std::move(*r));
    if (r.ok() && *r != nullptr && packer) r = packer->Pack(std::move(*r));
    std::move(done)(std::move(r));
  });
}

BatchStream::NextResult BatchStream::NextBlocking() {
  // The promise's state is shared, so `done` may finish touching it after
  // the waiter has returned.
  auto promise = std::make_shared<std::promise<NextResult>>();
  std::future<NextResult> future = promise->get_future();
  Next([promise](NextResult r) { promise->set_value(std::move(r)); });
  return future.get();
}

void StreamHandle::Cancel() { scheduler_->Cancel(*stream_); }

}  // namespace nearprep
