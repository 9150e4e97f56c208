// StreamRegistry: the gRPC-free half of StreamBatches. It admits streams
// (draining, max_concurrent_streams), opens them in the pipeline, keeps the
// set of live streams and their counters, and stops them all when the daemon
// shuts down. The gRPC adapter (preprocessor_service.cc) only converts the
// request, forwards it here and writes what the stream yields.
//
// Life of a stream
//   Open(request)    admitted and opened, or refused with a status:
//                      UNAVAILABLE         the daemon is draining;
//                      RESOURCE_EXHAUSTED  max_concurrent_streams live;
//                      the pipeline's error otherwise.
//   entry->stream()  the consumer calls Next until the end or an error.
//   entry->Stop(s)   (client gone, write failed, StopAll) cancels the
//                    pipeline stream; the consumer ends with stop_status()
//                    rather than with the pipeline's CANCELLED.
//   Close(entry)     the consumer is done; the stream stops counting.
//
// Draining: after BeginDrain, Open refuses new streams; draining() is what a
// health check reports; WaitUntilEmpty waits for the live ones to end.
//
// Thread-safety: thread-safe.
#ifndef NEARPREP_SERVER_SERVICE_STREAM_REGISTRY_H_
#define NEARPREP_SERVER_SERVICE_STREAM_REGISTRY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/pipeline/pipeline.h"

namespace nearprep {

class StreamRegistry {
 public:
  // One admitted stream.
  class Entry {
   public:
    explicit Entry(std::unique_ptr<BatchStream> stream)
        : stream_(std::move(stream)) {}

    BatchStream& stream() { return *stream_; }
    // Ends the stream with `status` (not OK); the first Stop wins. Cancels
    // the pipeline stream, so a pending Next is answered soon.
    void Stop(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
    // Whether Stop was called (cheap: one atomic load).
    bool stopped() const {
      return stopped_.load(std::memory_order_acquire);
    }
    // The status given to the first Stop; OK when none.
    absl::Status stop_status() const ABSL_LOCKS_EXCLUDED(mu_);

   private:
    const std::unique_ptr<BatchStream> stream_;
    mutable Mutex mu_;
    absl::Status stop_status_ ABSL_GUARDED_BY(mu_);
    std::atomic<bool> stopped_{false};
  };

  struct Counters {
    std::atomic<uint64_t> streams_started{0};
    std::atomic<uint64_t> streams_active{0};
  };

  // `pipeline` outlives the registry.
  StreamRegistry(Pipeline* pipeline, uint32_t max_concurrent_streams);

  // See "Life of a stream".
  absl::StatusOr<std::shared_ptr<Entry>> Open(const StreamRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Close(const std::shared_ptr<Entry>& entry) ABSL_LOCKS_EXCLUDED(mu_);

  void BeginDrain() ABSL_LOCKS_EXCLUDED(mu_);
  bool draining() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no stream is live or `deadline` passes; true when none is
  // left.
  bool WaitUntilEmpty(std::chrono::steady_clock::time_point deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stops every live stream with `status`.
  void StopAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const Counters& counters() const { return counters_; }

 private:
  Pipeline* const pipeline_;
  const uint32_t max_concurrent_streams_;
  Counters counters_;

  mutable Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Admitted streams (a slot is reserved before the pipeline opens it).
  size_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar empty_;  // signalled when admitted_ drops to 0 (WaitUntilEmpty)
  std::set<std::shared_ptr<Entry>> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_STREAM_REGISTRY_H_
