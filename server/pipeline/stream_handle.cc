#include "server/pipeline/stream_handle.h"

#include <future>
#include <utility>

namespace nearprep {

StreamHandle::StreamHandle(std::shared_ptr<Scheduler> scheduler,
                           std::shared_ptr<Scheduler::Stream> stream)
    : scheduler_(std::move(scheduler)), stream_(std::move(stream)) {}

StreamHandle::~StreamHandle() { Cancel(); }

BatchStream::Next StreamHandle::Poll(std::function<void()> on_ready) {
  return scheduler_->Poll(*stream_, std::move(on_ready));
}

absl::StatusOr<std::shared_ptr<const BatchData>> StreamHandle::NextBlocking() {
  while (true) {
    auto ready = std::make_shared<std::promise<void>>();
    Next next = Poll([ready] { ready->set_value(); });
    switch (next.kind) {
      case Next::kBatch:
        return next.batch;
      case Next::kEnd:
        return std::shared_ptr<const BatchData>();
      case Next::kError:
        return next.status;
      case Next::kPending:
        ready->get_future().wait();
        break;
    }
  }
}

void StreamHandle::Cancel() { scheduler_->Cancel(*stream_); }

}  // namespace nearprep
