// StreamHandle: the BatchStream a Pipeline hands out; it forwards to the
// scheduler that runs the stream, and cancels the stream when destroyed.
//
// Thread-safety: thread-safe (the scheduler serialises). The handle keeps the
// scheduler alive, so it stays safe to call after the Pipeline is gone.
#ifndef NEARPREP_SERVER_PIPELINE_STREAM_HANDLE_H_
#define NEARPREP_SERVER_PIPELINE_STREAM_HANDLE_H_

#include <memory>

#include "server/pipeline/pipeline.h"
#include "server/pipeline/scheduler.h"

namespace nearprep {

class StreamHandle : public BatchStream {
 public:
  StreamHandle(std::shared_ptr<Scheduler> scheduler,
               std::shared_ptr<Scheduler::Stream> stream);
  ~StreamHandle() override;

  void Next(NextCallback done) override;
  void Cancel() override;

 private:
  const std::shared_ptr<Scheduler> scheduler_;
  const std::shared_ptr<Scheduler::Stream> stream_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_STREAM_HANDLE_H_
