// FpgaBackend: creation (device, xclbin, kernel, buffer pool), teardown,
// statistics and Process(), which hands the chunk to the device loop
// (fpga_run.cc) and serves what is left on the CPU. The only code in
// nearprep that includes XRT headers is in this folder; see fpga_backend.h
// for the data path and the fallback rules.
#include "server/fpga/fpga_backend.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include <experimental/xrt_xclbin.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nearprep_kernel_abi.h"
#include "server/backend/cpu_backend.h"
#include "server/fpga/fpga_device.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

}  // namespace

namespace {

// Why the xclbin's nearprep_preprocess arguments do not match the kernel ABI
// table (nearprep_kernel_abi.h: name, position, pointer or scalar, size), or
// "" when they match. A mismatching xclbin (another kernel version, a
// different build) would have the host write descriptors into the wrong
// registers; it is refused at start-up instead.
std::string KernelArgMismatch(const xrt::xclbin& xb) {
  xrt::xclbin::kernel k;
  try {
    k = xb.get_kernel(nf::kKernelName);
  } catch (const std::exception&) {
  }
  if (!k) return absl::StrCat("the xclbin has no kernel ", nf::kKernelName);
  const std::vector<xrt::xclbin::arg> args = k.get_args();
  auto describe = [](const std::string& name, bool pointer, uint64_t size) {
    return absl::StrCat("'", name, "' (", pointer ? "global memory pointer" : "scalar", ", ",
                        size, " bytes)");
  };
  std::vector<std::string> diffs;
  if (args.size() != static_cast<size_t>(nf::kNumArgs)) {
    diffs.push_back(absl::StrCat(args.size(), " arguments, the ABI has ", nf::kNumArgs));
  }
  for (int i = 0; i < nf::kNumArgs; ++i) {
    const nf::KernelArg& want = nf::kKernelArgs[i];
    const std::string expected = describe(want.name, want.kind == 1, want.size);
    const xrt::xclbin::arg* got = nullptr;
    for (const xrt::xclbin::arg& a : args) {
      if (a.get_index() == static_cast<size_t>(i)) got = &a;
    }
    if (got == nullptr) {
      diffs.push_back(absl::StrCat("argument ", i, " missing, expected ", expected));
      continue;
    }
    const std::string type = got->get_host_type();
    const bool pointer = !type.empty() && type.back() == '*';
    const std::string actual = describe(got->get_name(), pointer, got->get_size());
    if (actual != expected) {
      diffs.push_back(absl::StrCat("argument ", i, " is ", actual, ", expected ", expected));
    }
  }
  return absl::StrJoin(diffs, "; ");
}

}  // namespace

absl::StatusOr<std::shared_ptr<FpgaBackend>> FpgaBackend::Create(
    const FpgaBackendConfig& config) {
  if (config.xclbin.empty()) {
    return absl::InvalidArgumentError("fpga: no xclbin given (--xclbin PATH)");
  }
  if (::access(config.xclbin.c_str(), R_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("fpga: xclbin ", config.xclbin, ": ", std::strerror(errno)));
  }
  if (config.max_images_per_run < 1 || config.buffer_sets < 1 ||
      config.jpeg_bytes_per_run < kAlign || config.out_bytes_per_run < 1 ||
      config.scratch_bytes < kAlign || config.run_timeout_ms < 1) {
    return absl::InvalidArgumentError("fpga: invalid backend configuration");
  }
  std::shared_ptr<FpgaBackend> b(new FpgaBackend());
  b->impl_ = std::make_unique<Impl>();
  Impl& m = *b->impl_;
  m.config = config;
  m.stats = &b->stats_;
  std::string step = "open device";
  try {
    m.device = xrt::device(static_cast<unsigned int>(config.device_index));
    try {
      m.device_name = m.device.get_info<xrt::info::device::name>();
    } catch (const std::exception&) {
      m.device_name = "unnamed";  // e.g. the noop shim has no such query
    }
    step = "read xclbin";
    const xrt::xclbin xb(config.xclbin);
    const std::string mismatch = KernelArgMismatch(xb);
    if (!mismatch.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fpga: xclbin ", config.xclbin,
          " does not match the kernel ABI of this build "
          "(fpga_kernels/include/nearprep_kernel_abi.h): ",
          mismatch, "; rebuild the xclbin from this source tree"));
    }
    step = "load xclbin";
    m.uuid = m.device.load_xclbin(xb);
    step = absl::StrCat("find kernel ", nf::kKernelName);
    m.kernel = xrt::kernel(m.device, m.uuid, nf::kKernelName);
    step = "allocate buffers";
    MutexLock lock(&m.mu);  // nobody else yet; for the annotations
    for (int i = 0; i < config.buffer_sets; ++i) {
      m.sets.push_back(m.NewSet());
      m.free_sets.push_back(m.sets.back().get());
    }
    m.live = config.buffer_sets;
    m.p2p = m.sets.front()->p2p;
  } catch (const std::exception& e) {
    const std::string msg =
        absl::StrCat("fpga: ", step, " (device ", config.device_index,
                     ", xclbin ", config.xclbin, "): ", e.what());
    if (step == "open device") return absl::UnavailableError(msg);
    if (step == "allocate buffers") return absl::ResourceExhaustedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  return b;
}

FpgaBackend::~FpgaBackend() {
  if (impl_ == nullptr) return;
  try {
    spdlog::info("fpga backend: final statistics: {}", detail());
    impl_->sets.clear();  // runs and bos before the kernel and device
    impl_->kernel = xrt::kernel();
    impl_.reset();
  } catch (const std::exception& e) {
    spdlog::warn("fpga backend: teardown: {}", e.what());
  }
}

bool FpgaBackend::p2p_buffers() const { return impl_->p2p; }

std::vector<BackendStat> FpgaBackend::stats() const {
  const auto r = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return {{"fallbacks", r(stats_.fallbacks)},
          {"p2p_read_bytes", r(stats_.p2p_read_bytes)},
          {"buffered_read_bytes", r(stats_.buffered_read_bytes)},
          {"runs", r(stats_.runs)},
          {"device_images", r(stats_.device_images)},
          {"device_errors", r(stats_.device_errors)},
          {"block_reads", r(stats_.block_reads)},
          {"block_read_bytes", r(stats_.block_read_bytes)},
          // Read counts by path (the metrics' p2p vs buffered reads): files
          // read with O_DIRECT into p2p buffers; files and record blocks
          // read through host memory.
          {"p2p_reads", r(stats_.direct_reads)},
          {"buffered_reads",
           r(stats_.buffered_files) + r(stats_.block_reads)}};
}

std::string FpgaBackend::detail() const {
  const auto r = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return absl::StrCat(
      impl_->config.detail_note, impl_->config.detail_note.empty() ? "" : "; ",
      "fpga: device ", impl_->config.device_index, " (", impl_->device_name,
      "), xclbin ", impl_->config.xclbin, " (", impl_->uuid.to_string(),
      "), kernel ", nf::kKernelName, ", input buffers ",
      impl_->p2p ? "p2p" : "host-synced", "; runs ", r(stats_.runs),
      ", device images ", r(stats_.device_images), ", device errors ",
      r(stats_.device_errors), ", CPU fallbacks ", r(stats_.fallbacks),
      " (unsupported ", r(stats_.fallback_unsupported), ", corrupt ",
      r(stats_.fallback_corrupt), ", too large ", r(stats_.fallback_too_large),
      ", not run ", r(stats_.fallback_not_run), ", host ",
      r(stats_.fallback_host), ", device error ",
      r(stats_.fallback_device_error), "); P2P bytes ",
      r(stats_.p2p_read_bytes), ", buffered bytes ",
      r(stats_.buffered_read_bytes), "; record blocks ", r(stats_.block_reads), " (",
      r(stats_.block_read_bytes), " bytes, ", r(stats_.block_samples), " samples)");
}

void FpgaBackend::Process(const WorkContext& ctx, SampleWork* samples,
                          size_t n) {
  if (n == 0) return;
  // The CPU path keeps the request's fidelity.
  const WorkContext& cpu_ctx = ctx;
  std::vector<size_t> fallback;
  if (ctx.source == nullptr || ctx.spec.height <= 0 || ctx.spec.width <= 0) {
    for (size_t i = 0; i < n; ++i) fallback.push_back(i);
    stats_.fallback_host.fetch_add(n, std::memory_order_relaxed);
  } else if (ctx.spec.fidelity != Fidelity::kTfCompat) {
    // The kernel computes TF_COMPAT arithmetic only: any other fidelity
    // (FAST, TORCHVISION) is unsupported on the device and served by the CPU
    // with that fidelity, so a sample's bytes never depend on where it ran.
    for (size_t i = 0; i < n; ++i) fallback.push_back(i);
    stats_.fallback_unsupported.fetch_add(n, std::memory_order_relaxed);
  } else {
    try {
      impl_->RunChunk(ctx, cpu_ctx, samples, n, &fallback);
    } catch (const std::exception& e) {
      // Not expected (XRT calls are guarded inside); never lose the chunk.
      impl_->Warn(absl::StrCat("unexpected: ", e.what()));
      fallback.clear();
      for (size_t i = 0; i < n; ++i) fallback.push_back(i);
      stats_.fallback_device_error.fetch_add(n, std::memory_order_relaxed);
    }
  }
  if (fallback.empty()) return;
  // Samples the device loop did not take (no usable buffer set, a file too
  // big for a run's buffer, an unexpected failure): read and served by the
  // CPU path.
  thread_local std::vector<uint8_t> buf;
  for (size_t i : fallback) {
    ProcessSampleOnCpu(cpu_ctx, nullptr, &buf, &samples[i]);
  }
  stats_.fallbacks.fetch_add(fallback.size(), std::memory_order_relaxed);
  if (buf.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf);
}

}  // namespace nearprep
