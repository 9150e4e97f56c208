// The XRT state of FpgaBackend, shared by the files that implement it:
// fpga_staging.cc (buffer sets, reading samples into a run's input buffer),
// fpga_run.cc (launching runs, collecting results, double buffering) and
// fpga_backend.cc (creation, Process). Internal to server/fpga/; includes
// XRT headers, so only .cc files of this folder include it.
//
// Thread-safety: the buffer-set pool (mu, cv, free_sets, live) is guarded
// by mu; a BufferSet is used by the one Process() call that acquired it;
// hooks run under hook_mu (one at a time).
#ifndef NEARPREP_SERVER_FPGA_FPGA_DEVICE_H_
#define NEARPREP_SERVER_FPGA_FPGA_DEVICE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "server/backend/backend.h"
#include "server/data/sample_source.h"
#include "server/fpga/fpga_backend.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace fpga_internal {

using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kAlign = 4096;  // O_DIRECT / NVMe block alignment

inline uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

inline uint64_t MicrosSince(Clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0)
          .count());
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline uint32_t Lo(uint64_t v) { return static_cast<uint32_t>(v); }
inline uint32_t Hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

// One set of run buffers (input JPEGs, descriptors, config, output,
// status) with its xrt::run, plus the host-side record of what is staged.
// Every buffer a run touches is its set's own: the kernel's top is
// ap_ctrl_chain + DATAFLOW, so a queued run may start inside the compute
// unit while the one before it is still draining.
struct BufferSet {
  xrt::bo jpeg, desc, cfg, out, status;
  uint8_t* jpeg_map = nullptr;
  uint32_t* desc_map = nullptr;
  uint32_t* cfg_map = nullptr;
  uint8_t* out_map = nullptr;
  uint32_t* status_map = nullptr;
  uint64_t jpeg_capacity = 0;
  uint64_t out_capacity = 0;
  int max_images = 0;
  bool p2p = false;
  bool direct_ok = true;  // cleared after O_DIRECT was refused (EINVAL)
  bool broken = false;    // a run never finished: buffers may be in use
  int cu = 0;             // the compute unit its run starts on (Impl::cus)
  xrt::run run;

  // Per run.
  struct Entry {
    size_t index = 0;  // into the chunk
    uint64_t offset = 0, size = 0;  // the JPEG bytes in jpeg_map
    int height = 0, width = 0;
    SampleParams params;
    uint64_t read_us = 0;
  };
  std::vector<Entry> entries;
  // Blocks of records read whole into jpeg_map (SampleSource::ReadBlockInto,
  // block-shuffle streams): each sample's image bytes at base + offset.
  struct StagedBlock {
    uint64_t base = 0;
    std::vector<BlockSample> samples;
  };
  std::vector<StagedBlock> blocks;
  int per_run = 0;
  size_t slot_bytes = 0;
  uint64_t jpeg_used = 0;
  bool any_buffered = false;
  bool failed = false;
  std::string error;
  Clock::time_point started;

  void Reset(int images, size_t slot) {
    entries.clear();
    blocks.clear();
    per_run = images;
    slot_bytes = slot;
    jpeg_used = 0;
    any_buffered = false;
    failed = false;
    error.clear();
  }
};

}  // namespace fpga_internal

// The helpers above by their short names, for the .cc files of this folder
// (the only includers of this internal header).
using fpga_internal::AlignUp;
using fpga_internal::BufferSet;
using fpga_internal::Clock;
using fpga_internal::FloatBits;
using fpga_internal::Hi;
using fpga_internal::kAlign;
using fpga_internal::Lo;
using fpga_internal::MicrosSince;

class FpgaBackend::Impl {
 public:
  FpgaBackendConfig config;
  xrt::device device;
  xrt::uuid uuid;
  // One xrt::kernel per compute unit driven ("name:{cu}"), and the CUs'
  // names; bos are allocated in the memory banks of their set's CU.
  std::vector<xrt::kernel> cus;
  std::vector<std::string> cu_names;
  std::string device_name;
  bool p2p = false;

  FpgaStats* stats = nullptr;

  std::vector<std::unique_ptr<fpga_internal::BufferSet>> sets;
  Mutex mu;
  CondVar cv;
  std::vector<fpga_internal::BufferSet*> free_sets ABSL_GUARDED_BY(mu);
  int live ABSL_GUARDED_BY(mu) = 0;
  // Sets held (staging or running) per compute unit: Acquire() hands out a
  // free set of the least busy CU, so a call's two sets (one staged while
  // the other runs) and concurrent calls spread over the CUs.
  std::vector<int> cu_busy ABSL_GUARDED_BY(mu);

  Mutex hook_mu;  // the test/simulation hook handles one run at a time
  uint64_t run_counter ABSL_GUARDED_BY(hook_mu) = 0;
  std::atomic<uint64_t> warnings{0};
  // Why the last request the device path refused was refused (detail()).
  Mutex refusal_mu;
  std::string last_refusal ABSL_GUARDED_BY(refusal_mu);

  // Blocks until a set is free; null when every set is broken. Only call
  // while holding no other set.
  fpga_internal::BufferSet* Acquire() {
    MutexLock lock(&mu);
    while (free_sets.empty() && live != 0) cv.Wait(&mu);
    return TakeLeastBusy();
  }
  fpga_internal::BufferSet* TryAcquire() {
    MutexLock lock(&mu);
    return TakeLeastBusy();
  }
  // The free set whose CU holds the fewest sets (ties: the most recently
  // freed), or null.
  fpga_internal::BufferSet* TakeLeastBusy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (free_sets.empty()) return nullptr;
    size_t best = free_sets.size() - 1;
    for (size_t i = free_sets.size(); i-- > 0;) {
      if (cu_busy[static_cast<size_t>(free_sets[i]->cu)] <
          cu_busy[static_cast<size_t>(free_sets[best]->cu)]) {
        best = i;
      }
    }
    fpga_internal::BufferSet* s = free_sets[best];
    free_sets.erase(free_sets.begin() + static_cast<std::ptrdiff_t>(best));
    ++cu_busy[static_cast<size_t>(s->cu)];
    return s;
  }
  void Release(fpga_internal::BufferSet* s) {
    if (s == nullptr) return;
    {
      MutexLock lock(&mu);
      --cu_busy[static_cast<size_t>(s->cu)];
      if (s->broken) {
        --live;
      } else {
        free_sets.push_back(s);
      }
    }
    cv.SignalAll();
  }

  void Warn(const std::string& msg) {
    if (warnings.fetch_add(1, std::memory_order_relaxed) < 20) {
      spdlog::warn("fpga backend: {}", msg);
    }
  }

  // Makes sure the output bo of `s` holds `bytes` (rounded up).
  void EnsureOut(fpga_internal::BufferSet* s, uint64_t bytes);
  // A buffer set on compute unit `cu` (an index into cus).
  std::unique_ptr<fpga_internal::BufferSet> NewSet(int cu);

  // A sample the device path does not serve, before it is read (the whole
  // chunk of an unsupported request, the rest of a chunk after the buffer
  // sets ran out, a file too big for a run): served by Fallback() after the
  // device loop, which reads it.
  struct Deferred {
    size_t index = 0;  // into the chunk
    FpgaCounter why = FpgaCounter::kFallbackHost;
  };
  // What Stage did with a sample: staged it into the set; found the set
  // full (stage it again into the next one); deferred it (appended to the
  // caller's list, nothing read yet); or finished it (a read error, or
  // served by Fallback() from the bytes it read).
  enum class StageResult { kStaged, kFull, kDeferred, kDone };
  // Reads sample `index` of the chunk into `s` and fills its descriptor:
  // tries the block path, then the P2P path, then the buffered path (each
  // below), and describes the bytes the first one placed.
  StageResult Stage(fpga_internal::BufferSet* s, const WorkContext& ctx,
                    SampleWork* sample, size_t index,
                    std::vector<Deferred>* deferred);
  // What one staging path did: not taken (the next path tries), placed the
  // sample's bytes at [offset, offset + size) of the input buffer, or
  // finished the sample with `result` (kFull, kDeferred or kDone).
  struct Placed {
    enum class Kind { kNotTaken, kPlaced, kFinished } kind = Kind::kNotTaken;
    StageResult result = StageResult::kDone;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  // Block path (a record dataset whose stream reads blocks): the sample's
  // whole block is read once per run into the buffer with one aligned read
  // (SampleSource::ReadBlockInto) and each of its samples is staged in
  // place. Not taken for image folders or a block larger than a buffer.
  Placed StageFromBlock(fpga_internal::BufferSet* s, const SampleSource& source,
                        SampleWork* sample, Clock::time_point t0);
  // P2P path: O_DIRECT read straight into the (p2p) buffer mapping
  // (SampleSource::OpenSample). Not taken when anything is unusual.
  Placed StageDirect(fpga_internal::BufferSet* s, const SampleSource& source,
                     SampleWork* sample, size_t index, std::vector<Deferred>* deferred);
  // Buffered path: the source's read into host memory, copied into the
  // mapping; always taken.
  Placed StageBuffered(fpga_internal::BufferSet* s, const WorkContext& ctx,
                       SampleWork* sample, Clock::time_point t0);
  // The part of staging common to every path: the sample's bytes are at
  // [offset, offset + size) of the input buffer; reads the header, draws the
  // parameters and writes the descriptor (kStaged), or hands the bytes to
  // Fallback() when the host cannot use the header or crop box (kDone).
  StageResult Describe(fpga_internal::BufferSet* s, const WorkContext& ctx,
                       SampleWork* sample, size_t index, uint64_t offset,
                       uint64_t size, uint64_t read_us);
  // Writes the run configuration, syncs the inputs and starts the run.
  void Launch(fpga_internal::BufferSet* s, const WorkContext& ctx);
  // Waits for the run of `s` and reads its results into the chunk's
  // samples; images the device did not finish go to Fallback() with their
  // staged bytes and parameters.
  void Finish(fpga_internal::BufferSet* s, const WorkContext& ctx, SampleWork* samples);
  // The device part of Process(): stages, runs and collects the chunk;
  // samples not read yet that the device path cannot take are appended to
  // `deferred`.
  void RunChunk(const WorkContext& ctx, SampleWork* samples, size_t n,
                std::vector<Deferred>* deferred);

  // What Fallback() starts from: the sample's bytes as staged (in a run's
  // input buffer or a host buffer), when they were read, and its parameters
  // when they were drawn (null when the host could not use the header).
  struct Staged {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
    uint64_t read_us = 0;
    const SampleParams* params = nullptr;
  };
  // The one CPU fallback of the backend, for every reason: serves `sample`
  // with the CPU backend's per-sample path and the request's own fidelity,
  // counted under `why` (a kFallback* counter). From `staged` when given -
  // no second read, no second parameter draw -, else (nothing read yet) it
  // reads the sample itself. The sample ends with the bytes and status the
  // CPU backend would give it.
  void Fallback(const WorkContext& ctx, FpgaCounter why, const Staged* staged,
                SampleWork* sample);
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_DEVICE_H_
