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
//     FpgaStats::p2p_read_bytes / buffered_read_bytes count the bytes of
//     each path.
//  2. Parameters are resolved on the host: ReadJpegHeader (dimensions) +
//     DrawSampleParams (crop box, flip, brightness, saturation), written to
//     the kernel's descriptor table (nearprep_kernel_abi.h).
//  3. Double buffering: while run k executes on the device, run k+1 is
//     staged into a second buffer set; its run is queued before run k is
//     waited for, so the compute unit never idles between runs of a chunk.
//  4. After a run: status records and tensors are synced back; each OK image
//     whose decoded size matches the host header is copied to its slot.
//  5. CPU fallback (the CPU backend's per-sample path, same parameters;
//     counted in FpgaStats::fallbacks): images the kernel reports
//     unsupported / corrupt / too large / not run, images whose header the
//     host cannot use, images that do not fit a run's buffers, and the whole
//     run when the device fails (XRT exception, run state other than
//     COMPLETED, timeout). An image already read is served from the bytes
//     staged in the run's input buffer (PreprocessSampleBytes), so no file
//     is read twice. Nothing is lost: every sample ends with the same bytes
//     and status the CPU backend would give it.
//
// TF_COMPAT fidelity is bit-exact with the CPU backend. The kernel computes
// TF_COMPAT only: a request of any other fidelity (FAST, TORCHVISION) is
// unsupported on the device and served by the CPU path with the request's
// fidelity (counted as unsupported fallbacks), so output stays a pure
// function of (ctx, sample_id).
//
// The xclbin's kernel arguments are checked against the ABI table
// (nearprep_kernel_abi.h) at creation; a mismatching xclbin is refused with
// FAILED_PRECONDITION naming the arguments that differ. Every run has its
// own buffers, scratch included (queued runs may overlap inside the compute
// unit: the kernel's top is ap_ctrl_chain + DATAFLOW).
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
  uint8_t* scratch = nullptr;  // null when the scratch bo is device-only
  uint32_t num_images = 0;
  uint64_t run_index = 0;      // 0, 1, 2, ... over the backend's lifetime
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
  uint64_t scratch_bytes = uint64_t{64} << 20;      // shared by all runs (one CU)
  int buffer_sets = 4;           // pool size; each Process() call uses <= 2
  bool use_p2p = true;           // allocate the input bo with flags::p2p
  bool use_o_direct = true;      // pread with O_DIRECT on the P2P path
  bool scratch_device_only = true;  // no host backing for scratch
  int run_timeout_ms = 10000;
  FpgaRunHook hook;              // tests / development only
  // Shown first in detail() (e.g. that the hook simulates the kernel).
  std::string detail_note;
};

// The backend's statistics (monotonic).
struct FpgaStats {
  std::atomic<uint64_t> fallbacks{0};            // samples served on the CPU
  std::atomic<uint64_t> p2p_read_bytes{0};       // bytes landed by P2P reads
  std::atomic<uint64_t> buffered_read_bytes{0};  // bytes read into host memory
  std::atomic<uint64_t> runs{0};
  std::atomic<uint64_t> device_images{0};    // images finished on the device
  std::atomic<uint64_t> device_errors{0};    // runs lost to device errors
  std::atomic<uint64_t> direct_reads{0};     // files read with O_DIRECT (count)
  std::atomic<uint64_t> buffered_files{0};   // files read buffered (count)
  // Record datasets read in blocks (a block-shuffle stream's SampleSource):
  // one read of a whole block of records into a run's input buffer, its
  // samples staged in place.
  std::atomic<uint64_t> block_reads{0};
  std::atomic<uint64_t> block_read_bytes{0};
  std::atomic<uint64_t> block_samples{0};    // samples staged from them
  std::atomic<uint64_t> fallback_unsupported{0};
  std::atomic<uint64_t> fallback_corrupt{0};
  std::atomic<uint64_t> fallback_too_large{0};
  std::atomic<uint64_t> fallback_not_run{0};
  std::atomic<uint64_t> fallback_host{0};    // header/read/capacity on the host
  std::atomic<uint64_t> fallback_device_error{0};
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

  // fallbacks, p2p_read_bytes, buffered_read_bytes, runs, device_images,
  // device_errors, block_reads, block_read_bytes, p2p_reads, buffered_reads.
  std::vector<BackendStat> stats() const override;

  const FpgaStats& fpga_stats() const { return stats_; }
  // Whether the input buffers were allocated with flags::p2p.
  bool p2p_buffers() const;

  class Impl;  // XRT state (fpga_device.h)

 private:
  FpgaBackend() = default;
  std::unique_ptr<Impl> impl_;
  FpgaStats stats_;
};

// Development hooks (fpga_simulation.cc), used by CreateFpgaBackend for
// FpgaOptions::simulate_kernel / inject_error_run.
//  - simulate_kernel: executes the C-simulation kernel (nearprep_fpga_csim)
//    on the run's mapped buffers; needs config.scratch_device_only = false.
//  - inject_error_run >= 0: the run with that run_index reports a device
//    error (UNAVAILABLE) instead of results.
// Returns an empty function when neither is asked for.
FpgaRunHook MakeDevelopmentHook(bool simulate_kernel, int64_t inject_error_run);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_BACKEND_H_
