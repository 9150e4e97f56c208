#include "server/pipeline/stream_handle.h"

#include <future>
#include <utility>

namespace nearprep {

StreamHandle::StreamHandle(std::shared_ptr<Scheduler> scheduler,
                           std::shared_ptr<Scheduler::Stream> stream)
    : scheduler_(std::move(scheduler)), stream_(std::move(stream)) {}

StreamHandle::~StreamHandle() { Cancel(); }

void StreamHandle::Next(NextCallback done) {
  scheduler_->Next(*stream_, std::move(done));
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
