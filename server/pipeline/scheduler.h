// Scheduler: the worker pool shared by every stream of a Pipeline.
//
// One mutex (mu_) guards the list of streams, each stream's StreamAssembler
// and consumer callbacks, the validity cache and the task queue; the backend
// runs outside it. A worker picks the next stream with dispatchable work
// round-robin, takes a chunk of up to chunk_size consecutive shard positions,
// runs the backend on it unlocked, then completes the chunk under the lock
// and calls the consumers' callbacks after unlocking.
//
// Consumer callbacks never run inside a caller's Cancel: while workers run
// they are queued as tasks for a worker; after Shutdown (no workers left)
// they run inline.
//
// Thread-safety: thread-safe. Streams hold a shared_ptr to the scheduler, so
// it outlives the Pipeline that made it while any stream handle exists.
#ifndef NEARPREP_SERVER_PIPELINE_SCHEDULER_H_
#define NEARPREP_SERVER_PIPELINE_SCHEDULER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "common/mutex.h"
#include "server/backend/backend.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/resume_validator.h"
#include "server/pipeline/stream_assembler.h"

namespace nearprep {

class Scheduler : public std::enable_shared_from_this<Scheduler> {
 public:
  // A stream known to the scheduler.
  class Stream {
   public:
    Stream(const StreamRequest& request, int prefetch_depth,
           PipelineCounters* counters)
        : guarded_(request, prefetch_depth, counters) {}

    // What the backend gets for every chunk; immutable, so readable
    // without the lock.
    const WorkContext& context() const {
      return guarded_.assembler.request().context;
    }
    // Its batch memory (BatchMemoryOf the request): immutable likewise.
    const BatchMemory& memory() const { return guarded_.assembler.memory(); }

   private:
    friend class Scheduler;
    // Guarded by the scheduler's mu_: reached only through
    // Scheduler::Locked(), which requires it.
    struct Guarded {
      Guarded(const StreamRequest& request, int prefetch_depth,
              PipelineCounters* counters)
          : assembler(request, prefetch_depth, counters) {}
      StreamAssembler assembler;
      BatchStream::NextCallback pending;  // a Next waiting for a result
      std::chrono::steady_clock::time_point pending_since;
      bool retired = false;  // removed from Scheduler::streams_
    };
    Guarded guarded_;
  };

  // `options` is already resolved (workers, depth and chunk size >= 1).
  // Create with std::make_shared (streams that account batches until
  // release reach the scheduler through a weak_ptr).
  Scheduler(const PipelineOptions& options, std::shared_ptr<Backend> backend);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Starts options().workers threads.
  void StartWorkers() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels every stream and joins the workers. Call once.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Starts `stream` (its run or its resume validation) and lets workers
  // pick it.
  void Add(const std::shared_ptr<Stream>& stream) ABSL_LOCKS_EXCLUDED(mu_);
  // See BatchStream::Next.
  void Next(Stream& stream, BatchStream::NextCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // See BatchStream::Cancel.
  void Cancel(Stream& stream) ABSL_LOCKS_EXCLUDED(mu_);

  // See Pipeline::RunnableStreams / ProducingStreams.
  size_t RunnableStreams() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t ProducingStreams() const ABSL_LOCKS_EXCLUDED(mu_);

  const PipelineOptions& options() const { return options_; }
  Backend& backend() const { return *backend_; }
  PipelineCounters& counters() { return counters_; }

 private:
  using Callback = absl::AnyInvocable<void() &&>;
  using Callbacks = std::vector<Callback>;

  // The guarded state of `s`.
  Stream::Guarded& Locked(Stream& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return s.guarded_;
  }
  const Stream::Guarded& Locked(const Stream& s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return s.guarded_;
  }
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // A taken batch was released (account_until_released): its stream's
  // window moved, so wake the workers. Called on the releasing thread;
  // no BatchData with a release token is ever destroyed under mu_.
  void OnBatchReleased() ABSL_LOCKS_EXCLUDED(mu_);
  // The next stream with dispatchable work, round-robin; nullptr if none.
  std::shared_ptr<Stream> PickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After `s` changed: retires it when it is over, and answers its pending
  // Next (into `fire`) when a result is there.
  void SettleLocked(Stream& s, Callbacks* fire)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireLocked(Stream& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunCallbacks(Callbacks* fire);

  const PipelineOptions options_;
  const std::shared_ptr<Backend> backend_;
  PipelineCounters counters_;

  mutable Mutex mu_;
  CondVar work_cv_;
  std::vector<std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  size_t rr_ ABSL_GUARDED_BY(mu_) = 0;
  // Consumer callbacks for a worker to run.
  std::deque<Callback> tasks_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int running_workers_ ABSL_GUARDED_BY(mu_) = 0;
  ValidityCache validity_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // StartWorkers / Shutdown only
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_SCHEDULER_H_
