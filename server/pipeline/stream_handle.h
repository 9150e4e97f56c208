// StreamHandle: the BatchStream a Pipeline hands out; it forwards to the
// scheduler that runs the stream, and cancels the stream when destroyed.
// With a compression (StreamRequest::compression) it compresses each batch
// as it is handed to the consumer, inside Next's callback: on the thread
// that answers Next (a worker, or the caller when the batch was ready), with
// no pipeline lock held, into a buffer of a small pool of its own (two
// cached: the batch being sent and the next one); the uncompressed buffer
// goes back to the stream's pool as soon as the compressed copy exists. A
// compression failure (zstd error, out of memory) ends the stream with that
// status.
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
               std::shared_ptr<Scheduler::Stream> stream,
               const StreamRequest& request);
  ~StreamHandle() override;

  void Next(NextCallback done) override;
  void Cancel() override;

  struct Mixer;   // MixUp / CutMix (stream_handle.cc)
  struct Packer;  // the compression step (stream_handle.cc)

 private:
  const std::shared_ptr<Scheduler> scheduler_;
  const std::shared_ptr<Scheduler::Stream> stream_;
  // Null without a compression; shared with pending callbacks, which may
  // run after the handle is gone.
  std::shared_ptr<const Mixer> mixer_;
  std::shared_ptr<const Packer> packer_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_STREAM_HANDLE_H_
