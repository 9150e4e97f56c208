// FpgaBackend: creation (device, xclbin, kernel, buffer pool), teardown,
// statistics and Process(), which hands the chunk to the device loop
// (fpga_run.cc) and serves what is left on the CPU. The only code in
// nearprep that includes XRT headers is in this folder; see fpga_backend.h
// for the data path and the fallback rules.
#include "server/fpga/fpga_backend.h"

#include <unistd.h>

#include <algorithm>
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
#include "server/fpga/fpga_capability.h"
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

// The instance names of the kernel's compute units ("nearprep_preprocess_1",
// ...): the IP names of the xclbin's IP_LAYOUT are "kernel:instance".
std::vector<std::string> CuNames(const xrt::xclbin& xb) {
  std::vector<std::string> out;
  try {
    for (const xrt::xclbin::ip& ip : xb.get_kernel(nf::kKernelName).get_cus()) {
      std::string name = ip.get_name();
      const size_t colon = name.find(':');
      if (colon != std::string::npos) name = name.substr(colon + 1);
      out.push_back(name);
    }
  } catch (const std::exception&) {
  }
  return out;
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
      config.run_timeout_ms < 1 || config.max_compute_units < 1) {
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
    // The compute units of the kernel (connectivity.cfg: nk=...:2), the
    // first ones by name; each opened on its own ("kernel:{cu}") so a run
    // starts on the CU its buffer set belongs to.
    std::vector<std::string> names = CuNames(xb);
    std::sort(names.begin(), names.end());
    const size_t units = static_cast<size_t>(
        std::min(config.max_compute_units, kMaxComputeUnits));
    if (names.size() > units) names.resize(units);
    if (names.empty()) {
      m.cus.emplace_back(m.device, m.uuid, nf::kKernelName);
      m.cu_names.push_back(nf::kKernelName);
    }
    for (const std::string& cu : names) {
      step = absl::StrCat("open compute unit ", cu);
      m.cus.emplace_back(m.device, m.uuid, absl::StrCat(nf::kKernelName, ":{", cu, "}"));
      m.cu_names.push_back(cu);
    }
    step = "allocate buffers";
    MutexLock lock(&m.mu);  // nobody else yet; for the annotations
    m.cu_busy.assign(m.cus.size(), 0);
    for (int i = 0; i < config.buffer_sets; ++i) {
      m.sets.push_back(m.NewSet(i % static_cast<int>(m.cus.size())));
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
    impl_->cus.clear();
    impl_.reset();
  } catch (const std::exception& e) {
    spdlog::warn("fpga backend: teardown: {}", e.what());
  }
}

bool FpgaBackend::p2p_buffers() const { return impl_->p2p; }

std::vector<std::string> FpgaBackend::compute_units() const { return impl_->cu_names; }

std::vector<BackendStat> FpgaBackend::stats() const {
  std::vector<BackendStat> out;
  out.reserve(kNumFpgaCounters + 1);
  for (int i = 0; i < kNumFpgaCounters; ++i) {
    out.push_back({kFpgaCounterNames[i], stats_.Get(static_cast<FpgaCounter>(i))});
  }
  out.push_back({"fallbacks", stats_.fallbacks()});
  return out;
}

Capability FpgaBackend::Supports(const WorkContext& ctx) const {
  return FpgaSupports(ctx);
}

std::string FpgaBackend::detail() const {
  std::string refused;
  {
    MutexLock lock(&impl_->refusal_mu);
    if (!impl_->last_refusal.empty()) {
      refused = absl::StrCat("; last request not on the device: ", impl_->last_refusal);
    }
  }
  std::string counters;
  for (const BackendStat& s : stats()) {
    absl::StrAppend(&counters, counters.empty() ? "" : ", ", s.name, " ", s.value);
  }
  return absl::StrCat(
      impl_->config.detail_note, impl_->config.detail_note.empty() ? "" : "; ",
      "fpga: device ", impl_->config.device_index, " (", impl_->device_name,
      "), xclbin ", impl_->config.xclbin, " (", impl_->uuid.to_string(),
      "), kernel ", nf::kKernelName, ", compute units ",
      absl::StrJoin(impl_->cu_names, " "), ", input buffers ",
      impl_->p2p ? "p2p" : "host-synced", "; ", counters, refused);
}

void FpgaBackend::Impl::Fallback(const WorkContext& ctx, FpgaCounter why,
                                 const Staged* staged, SampleWork* sample) {
  stats->Add(why);
  if (staged != nullptr) {
    PreprocessSampleBytes(ctx, staged->data, static_cast<size_t>(staged->size),
                          staged->read_us, sample, staged->params);
    return;
  }
  thread_local std::vector<uint8_t> buf;
  ProcessSampleOnCpu(ctx, &buf, sample);
  if (buf.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf);
}

void FpgaBackend::Process(const WorkContext& ctx, SampleWork* samples,
                          size_t n) {
  if (n == 0) return;
  std::vector<Impl::Deferred> deferred;
  auto defer_all = [&](FpgaCounter why) {
    deferred.clear();
    for (size_t i = 0; i < n; ++i) deferred.push_back({i, why});
  };
  if (ctx.source == nullptr || ctx.spec.height <= 0 || ctx.spec.width <= 0) {
    defer_all(FpgaCounter::kFallbackHost);
  } else if (Capability cap = Supports(ctx); !cap.supported) {
    // A field the kernel does not compute (e.g. a fidelity other than
    // TF_COMPAT): the CPU serves the request as asked, so a sample's bytes
    // never depend on where it ran.
    defer_all(FpgaCounter::kFallbackUnsupported);
    MutexLock lock(&impl_->refusal_mu);
    if (impl_->last_refusal != cap.reason) {
      impl_->Warn(absl::StrCat("request served by the CPU: ", cap.reason));
      impl_->last_refusal = std::move(cap.reason);
    }
  } else {
    try {
      impl_->RunChunk(ctx, samples, n, &deferred);
    } catch (const std::exception& e) {
      // Not expected (XRT calls are guarded inside); never lose the chunk.
      impl_->Warn(absl::StrCat("unexpected: ", e.what()));
      defer_all(FpgaCounter::kFallbackDeviceError);
    }
  }
  for (const Impl::Deferred& d : deferred) {
    impl_->Fallback(ctx, d.why, nullptr, &samples[d.index]);
  }
}

}  // namespace nearprep
