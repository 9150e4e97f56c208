// FpgaBackend: the Backend (server/backend/backend.h) that runs the
// nearprep_preprocess kernel (fpga_kernels/) through XRT's native C++ API,
// for a Samsung SmartSSD or any XRT device with a matching xclbin.
//
// Per Process() call:
//  1. Staging. The chunk is cut into runs of up to max_images_per_run
//     images. Each image's JPEG bytes are placed at a 4 KiB aligned offset of
//     the run's input buffer. P2P path: the input buffer is allocated with
//     xrt::bo::flags::p2p and the sample is opened through the stream's
//     source with O_DIRECT (SampleSource::OpenSample: the same O_NOFOLLOW walk
//     as every read) and read straight into its mapping, so the NVMe DMA
//     lands in FPGA memory. Buffered path (no p2p bo, mapping or file offset
//     not aligned, O_DIRECT refused): SampleSource::ReadInto host memory,
//     copied into the mapping, then bo.sync(to device).
//     The p2p_* / buffered_* counters (FpgaCounter) count each path.
//  2. Parameters are resolved on the host: ReadJpegHeader (dimensions) +
//     DrawSampleParams (crop box, flip, brightness, saturation), written to
//     the kernel's descriptor table (nearprep_kernel_abi.h).
//  3. Double buffering: while run k executes on the device, run k+1 is
//     staged into a second buffer set; its run is queued before run k is
//     waited for, so the compute unit never idles between runs of a chunk.
//  4. After a run: status records and tensors are synced back; each OK image
//     whose decoded size matches the host header is copied to its slot.
//  5. One CPU fallback (Impl::Fallback: the CPU backend's per-sample path
//     with the request's fidelity), counted per reason (FpgaCounter
//     kFallback*): a request the device path does not compute (Supports()),
//     images the kernel reports unsupported / corrupt / too large / not run,
//     images whose header the host cannot use, images that do not fit a
//     run's buffers, and the whole run when the device fails (XRT
//     exception, run state other than COMPLETED, timeout). An image already
//     staged hands over its staged bytes and the parameters drawn for it
//     (PreprocessSampleBytes with them): no file is read twice, nothing is
//     drawn twice. Nothing is lost: every sample ends with the same bytes
//     and status the CPU backend would give it.
//
// TF_COMPAT fidelity is bit-exact with the CPU backend. What the device path
// computes is one table (fpga_capability.h): any other fidelity (FAST,
// TORCHVISION), say, is unsupported on the device and served by the CPU path
// with the request's fidelity, so output stays a pure function of
// (ctx, sample_id).
//
// The xclbin's kernel arguments are checked against the ABI table
// (nearprep_kernel_abi.h) at creation; a mismatching xclbin is refused with
// FAILED_PRECONDITION naming the arguments that differ; every run's cfg
// carries kAbiVersion, which the kernel checks. Every run has its own
// buffers (queued runs may overlap inside the compute unit: the kernel's top
// is ap_ctrl_chain + DATAFLOW). The kernel keeps every image on chip between
// its stages: there is no DDR scratch buffer (ABI version 2 removed the
// unused `scratch` argument).
//
// XRT's noop shim (XCL_EMULATION_MODE=noop) completes runs without executing
// anything; the RunHook below lets tests execute the C-simulation kernel on
// the mapped buffers so that the real host code is tested end to end.
// Without a hook, on the noop shim every image comes back NOT_RUN and is
// served by the CPU fallback (correct output, no acceleration).
//
// Thread-safety: Process() may be called concurrently; buffer sets are
// taken from a pool (each call holds at most two). The hook is called with a
// lock held (one compute unit: runs execute one at a time). Never throws:
// every XRT exception is caught here and becomes a fallback or a Status.
// This file and fpga_factory.h are the interface of server/fpga/; XRT headers
// stay in the .cc files and the internal fpga_device.h.
#ifndef NEARPREP_SERVER_FPGA_FPGA_BACKEND_H_
#define NEARPREP_SERVER_FPGA_FPGA_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/backend/backend.h"

namespace nearprep {

// The mapped buffers of one completed run, as the kernel saw them.
struct FpgaRunView {
  const uint8_t* jpeg = nullptr;
  const uint32_t* desc = nullptr;
  const uint32_t* cfg = nullptr;
  uint8_t* out = nullptr;
  uint32_t* status = nullptr;
  uint32_t num_images = 0;
  uint64_t run_index = 0;      // 0, 1, 2, ... over the backend's lifetime
  int compute_unit = 0;        // index of the compute unit the run was started on
};

// Called after each run reports completion and before its results are read.
// A non-OK return (or an exception) is treated as a device error for that
// run: its images go to the CPU fallback.
using FpgaRunHook = std::function<absl::Status(const FpgaRunView&)>;

struct FpgaBackendConfig {
  std::string xclbin;            // path of the xclbin to load
  int device_index = 0;
  int max_images_per_run = 32;
  uint64_t jpeg_bytes_per_run = uint64_t{32} << 20;
  uint64_t out_bytes_per_run = uint64_t{64} << 20;  // bounds images/run for big outputs
  int buffer_sets = 4;           // pool size; each Process() call uses <= 2
  // Compute units of the xclbin driven (the first ones by name, at most
  // kMaxComputeUnits): buffer set i belongs to CU i % units, and a call
  // takes the free set of the least busy CU (fpga_device.h).
  int max_compute_units = 2;
  bool use_p2p = true;           // allocate the input bo with flags::p2p
  bool use_o_direct = true;      // pread with O_DIRECT on the P2P path
  int run_timeout_ms = 10000;
  FpgaRunHook hook;              // tests / development only
  // Shown first in detail() (e.g. that the hook simulates the kernel).
  std::string detail_note;
};

// The backend's counters (monotonic), one per event or fallback reason.
// FpgaStats holds one atomic per FpgaCounter; stats() and detail() list them
// all by their names (kFpgaCounterNames), so a counter added here is reported
// without further code.
enum class FpgaCounter : int {
  kRuns = 0,           // runs started on the device
  kDeviceImages,       // images finished on the device
  kDeviceErrors,       // runs lost to device errors
  kRunsCu0,            // runs started on compute unit 0 / 1 (kMaxComputeUnits)
  kRunsCu1,
  kP2pReads,           // files read with O_DIRECT into p2p buffers
  kP2pReadBytes,       // bytes landed by them
  kBufferedReads,      // files and record blocks read through host memory
  kBufferedReadBytes,  // bytes read into host memory (blocks included)
  // Record datasets read in blocks (a block-shuffle stream's SampleSource): one read of a whole block of
  // records into a run's input buffer, its samples staged in place.
  kBlockReads,
  kBlockReadBytes,
  kBlockSamples,       // samples staged from them
  // Samples served by the CPU fallback, by reason; "fallbacks" is their sum.
  kFallbackUnsupported,  // the request (Supports() says no) or the image (kernel UNSUPPORTED)
  kFallbackCorrupt,      // kernel CORRUPT, or OK with a size other than the header's
  kFallbackTooLarge,     // kernel TOO_LARGE
  kFallbackNotRun,       // kernel left NOT_RUN (e.g. the noop shim without a hook)
  kFallbackHost,         // header, read or capacity problem on the host
  kFallbackDeviceError,  // the run failed, or no buffer set was usable
  kNumCounters
};
inline constexpr int kNumFpgaCounters = static_cast<int>(FpgaCounter::kNumCounters);
// Compute units one backend drives (connectivity.cfg: nk=...:2); one
// kRunsCu* counter each.
inline constexpr int kMaxComputeUnits = 2;
static_assert(static_cast<int>(FpgaCounter::kRunsCu1) - static_cast<int>(FpgaCounter::kRunsCu0) ==
                  kMaxComputeUnits - 1,
              "one kRunsCu counter per compute unit");
inline constexpr FpgaCounter kFirstFallbackCounter = FpgaCounter::kFallbackUnsupported;
inline constexpr const char* kFpgaCounterNames[] = {
    "runs",          "device_images",        "device_errors",    "runs_cu0", "runs_cu1",
    "p2p_reads",
    "p2p_read_bytes", "buffered_reads",      "buffered_read_bytes", "block_reads",
    "block_read_bytes", "block_samples",     "fallback_unsupported", "fallback_corrupt",
    "fallback_too_large", "fallback_not_run", "fallback_host",   "fallback_device_error",
};
static_assert(sizeof(kFpgaCounterNames) / sizeof(kFpgaCounterNames[0]) == kNumFpgaCounters,
              "one name per FpgaCounter");

class FpgaStats {
 public:
  void Add(FpgaCounter c, uint64_t n = 1) {
    v_[static_cast<int>(c)].fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Get(FpgaCounter c) const {
    return v_[static_cast<int>(c)].load(std::memory_order_relaxed);
  }
  // Samples served on the CPU: the sum of the fallback reasons.
  uint64_t fallbacks() const {
    uint64_t sum = 0;
    for (int i = static_cast<int>(kFirstFallbackCounter); i < kNumFpgaCounters; ++i) {
      sum += v_[i].load(std::memory_order_relaxed);
    }
    return sum;
  }

 private:
  std::atomic<uint64_t> v_[kNumFpgaCounters] = {};
};

class FpgaBackend : public Backend {
 public:
  // Opens the device, loads the xclbin, finds the kernel and allocates the
  // buffer pool. UNAVAILABLE when XRT finds no device, NOT_FOUND for a
  // missing xclbin, FAILED_PRECONDITION when the xclbin has no
  // nearprep_preprocess kernel; the message says which step failed.
  static absl::StatusOr<std::shared_ptr<FpgaBackend>> Create(
      const FpgaBackendConfig& config);
  ~FpgaBackend() override;

  std::string name() const override { return "fpga"; }
  std::string detail() const override;
  void Process(const WorkContext& ctx, SampleWork* samples, size_t n) override;
  // FpgaSupports (fpga_capability.h): derived from the table of the spec
  // fields the device path computes. Process() sends an unsupported
  // request's samples to the CPU fallback (kFallbackUnsupported), and
  // detail() names the last refusal.
  Capability Supports(const WorkContext& ctx) const override;

  // Every FpgaCounter by its name, then "fallbacks" (their fallback sum).
  std::vector<BackendStat> stats() const override;

  const FpgaStats& fpga_stats() const { return stats_; }
  // Whether the input buffers were allocated with flags::p2p.
  bool p2p_buffers() const;
  // The compute units driven ("nearprep_preprocess_1", ...), in index order.
  std::vector<std::string> compute_units() const;

  class Impl;  // XRT state (fpga_device.h)

 private:
  FpgaBackend() = default;
  std::unique_ptr<Impl> impl_;
  FpgaStats stats_;
};

// Development hooks (fpga_simulation.cc), used by CreateFpgaBackend for
// FpgaOptions::simulate_kernel / inject_error_run.
//  - simulate_kernel: executes the C-simulation kernel (nearprep_fpga_csim)
//    on the run's mapped buffers.
//  - inject_error_run >= 0: the run with that run_index reports a device
//    error (UNAVAILABLE) instead of results.
// Returns an empty function when neither is asked for.
FpgaRunHook MakeDevelopmentHook(bool simulate_kernel, int64_t inject_error_run);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_BACKEND_H_
