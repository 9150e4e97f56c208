#include "server/pipeline/stream_handle.h"

#include <future>
#include <utility>

#include "server/pipeline/buffer_pool.h"

namespace nearprep {

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
  if (!packer_) {
    scheduler_->Next(*stream_, std::move(done));
    return;
  }
  scheduler_->Next(*stream_, [packer = packer_, done = std::move(done)](
                                 NextResult r) mutable {
    if (r.ok() && *r != nullptr) r = packer->Pack(std::move(*r));
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
