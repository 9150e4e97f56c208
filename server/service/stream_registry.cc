#include "server/service/stream_registry.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nearprep {

void StreamRegistry::Entry::Stop(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (stopped_.load(std::memory_order_relaxed)) return;
    stop_status_ = status;
    stopped_.store(true, std::memory_order_release);
  }
  stream_->Cancel();
}

absl::Status StreamRegistry::Entry::stop_status() const {
  MutexLock lock(&mu_);
  return stop_status_;
}

StreamRegistry::StreamRegistry(Pipeline* pipeline,
                               uint32_t max_concurrent_streams)
    : pipeline_(pipeline), max_concurrent_streams_(max_concurrent_streams) {}

absl::StatusOr<std::shared_ptr<StreamRegistry::Entry>> StreamRegistry::Open(
    const StreamRequest& request) {
  {
    MutexLock lock(&mu_);
    if (draining_) {
      return absl::UnavailableError(
          "server is shutting down; resume on another daemon");
    }
    if (admitted_ >= max_concurrent_streams_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("streams: ", admitted_,
                       " active, at the server limit max_concurrent_streams = ",
                       max_concurrent_streams_));
    }
    ++admitted_;  // Reserves the slot.
  }
  absl::StatusOr<std::unique_ptr<BatchStream>> stream =
      pipeline_->OpenStream(request);
  MutexLock lock(&mu_);
  if (!stream.ok()) {
    if (--admitted_ == 0) empty_.SignalAll();
    return stream.status();
  }
  auto entry = std::make_shared<Entry>(std::move(*stream));
  live_.insert(entry);
  counters_.streams_started.fetch_add(1, std::memory_order_relaxed);
  counters_.streams_active.fetch_add(1, std::memory_order_relaxed);
  return entry;
}

void StreamRegistry::Close(const std::shared_ptr<Entry>& entry) {
  entry->stream().Cancel();  // Nothing more is computed for it.
  MutexLock lock(&mu_);
  if (live_.erase(entry) == 0) return;
  if (--admitted_ == 0) empty_.SignalAll();
  counters_.streams_active.fetch_sub(1, std::memory_order_relaxed);
}

void StreamRegistry::BeginDrain() {
  MutexLock lock(&mu_);
  draining_ = true;
}

bool StreamRegistry::draining() const {
  MutexLock lock(&mu_);
  return draining_;
}

bool StreamRegistry::WaitUntilEmpty(
    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  while (admitted_ != 0) {
    if (empty_.WaitUntil(&mu_, deadline)) return admitted_ == 0;
  }
  return true;
}

void StreamRegistry::StopAll(const absl::Status& status) {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    MutexLock lock(&mu_);
    entries.assign(live_.begin(), live_.end());
  }
  for (const auto& e : entries) e->Stop(status);
}

}  // namespace nearprep
