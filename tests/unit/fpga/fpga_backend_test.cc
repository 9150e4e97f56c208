// FpgaBackend on XRT's noop shim: the real host code (device open, xclbin
// load, bo allocation incl. p2p, sync, arguments, run/wait, error handling)
// runs end to end against the generated test xclbin. The shim completes runs
// without executing anything, so the run hook executes the C-simulation
// kernel on the mapped buffers. Checked: bytes and parameters equal the CPU
// backend's (generated dataset incl. a progressive file -> counted CPU
// fallback, and the 200 real images), injected device errors mid-stream
// fall back to the CPU with no sample lost, and the shared conformance suite.
//
// Environment: XCL_EMULATION_MODE=noop and XILINX_XRT=<build>/xrt_root are
// set by ctest (and, if missing, by this file before XRT is first used).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"
#include "server/backend/cpu_backend.h"
#include "server/daemon/backend_choice.h"
#include "server/data/dataset.h"
#include "server/data/sample_source.h"
#include "server/fpga/fpga_backend.h"
#include "server/fpga/fpga_factory.h"
#include "server/records/tfrecord.h"
#include "tests/unit/backend/backend_conformance.h"
#include "tests/unit/backend/test_images.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

// Runs before main(), hence before XRT reads its environment.
const bool kEnvReady = [] {
  ::setenv("XCL_EMULATION_MODE", "noop", 0);
  ::setenv("XILINX_XRT", NEARPREP_XRT_ROOT, 0);
  return true;
}();

// The hook that makes the noop shim behave like a device: the C-simulation
// kernel on the run's mapped buffers.
absl::Status RunKernel(const FpgaRunView& v) {
  nearprep_preprocess(reinterpret_cast<const WideWord*>(v.jpeg), v.desc, v.cfg,
                      reinterpret_cast<WideWord*>(v.out), v.status, v.num_images);
  return absl::OkStatus();
}

FpgaBackendConfig TestConfig() {
  FpgaBackendConfig c;
  c.xclbin = NEARPREP_TEST_XCLBIN;
  c.buffer_sets = 3;
  c.jpeg_bytes_per_run = 4u << 20;
  c.hook = RunKernel;
  return c;
}

std::shared_ptr<FpgaBackend> MakeFpga(const FpgaBackendConfig& c) {
  auto b = FpgaBackend::Create(c);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : nullptr;
}

struct Result {
  absl::Status status;
  SampleParams params;
  std::vector<uint8_t> bytes;
};

std::vector<Result> ProcessAll(Backend& b, const WorkContext& ctx,
                               size_t chunk) {
  const size_t n = ctx.source->dataset().size();
  const size_t bytes = ctx.output.SampleBytes(ctx.spec);
  std::vector<uint8_t> buf(n * bytes, 0x5A);
  std::vector<SampleWork> works(n);
  for (size_t i = 0; i < n; ++i) {
    works[i].sample_id = i;
    works[i].out = buf.data() + i * bytes;
  }
  for (size_t i = 0; i < n; i += chunk) {
    b.Process(ctx, works.data() + i, std::min(chunk, n - i));
  }
  std::vector<Result> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].status = works[i].status;
    out[i].params = works[i].params;
    if (works[i].status.ok()) {
      out[i].bytes.assign(works[i].out, works[i].out + bytes);
    }
  }
  return out;
}

// Number of samples whose result differs from the reference.
int CountDifferences(const Dataset& ds, const std::vector<Result>& want,
                     const std::vector<Result>& got) {
  int diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same =
        want[i].status.ok() == got[i].status.ok() &&
        want[i].bytes == got[i].bytes &&
        (!want[i].status.ok() ||
         conformance_internal::SameParams(want[i].params, got[i].params));
    if (!same) {
      ++diff;
      ADD_FAILURE() << ds.samples()[i].path << ": cpu " << want[i].status
                    << " fpga " << got[i].status;
    }
  }
  return diff;
}

WorkContext AugmentingContext(const Dataset* ds) {
  WorkContext ctx;
  ctx.source = std::make_shared<const SampleSource>(*ds);
  ctx.seed = 99;
  ctx.epoch = 3;
  ctx.spec.height = 40;
  ctx.spec.width = 36;
  ctx.spec.crop = CropMode::kRandomResized;
  ctx.spec.flip_probability = 0.5f;
  ctx.spec.brightness_max_delta = 0.2f;
  ctx.spec.saturation_enabled = true;
  ctx.spec.saturation_lower = 0.6f;
  ctx.spec.saturation_upper = 1.4f;
  return ctx;
}

class FpgaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kEnvReady);
    testing_internal::WriteConformanceDataset(dir_.path());
    // More good files so that a chunk spans several runs.
    for (int i = 0; i < 10; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "c/%02d.jpg", i);
      testing_internal::WriteFile(
          std::filesystem::path(dir_.path()) / name,
          testing_internal::MakeTestJpeg(30 + 7 * i, 50 - 3 * i,
                                         i % 3 == 0 ? TJSAMP_420 : TJSAMP_444,
                                         70 + i, false, i));
    }
    DatasetConfig config;
    config.name = "fpga";
    config.root = dir_.path();
    auto ds = Dataset::Open(config);
    ASSERT_TRUE(ds.ok()) << ds.status();
    dataset_ = std::move(ds).value();
    ASSERT_EQ(dataset_->size(), 22u);
  }

  testing_common::TempDir dir_;
  std::unique_ptr<Dataset> dataset_;
  CpuBackend cpu_;
};

TEST_F(FpgaBackendTest, GeneratedXclbinIsAnAxlfWithTheFourSections) {
  std::ifstream f(NEARPREP_TEST_XCLBIN, std::ios::binary);
  ASSERT_TRUE(f.good()) << NEARPREP_TEST_XCLBIN;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  ASSERT_GE(bytes.size(), 496u);
  EXPECT_EQ(std::string(bytes.data()), "xclbin2");
  uint32_t sections = 0;
  // axlf: magic 8, signature length 4, reserved 28, key block 256, unique
  // id 8, then axlf_header whose m_numSections sits at offset 144.
  std::memcpy(&sections, bytes.data() + 304 + 144, 4);
  EXPECT_EQ(sections, 4u);
  const std::string text(bytes.begin(), bytes.end());
  for (const auto& a : nf::kKernelArgs) {
    EXPECT_NE(text.find(std::string("name=\"") + a.name + "\""), std::string::npos)
        << a.name;
  }
  EXPECT_NE(text.find("bank0"), std::string::npos);
}

TEST_F(FpgaBackendTest, CreateFailsCleanlyOnMissingOrBadXclbin) {
  FpgaBackendConfig c = TestConfig();
  c.xclbin = dir_.path() + "/missing.xclbin";
  auto missing = FpgaBackend::Create(c);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  c.xclbin = dir_.path() + "/a/05_bad_text.jpg";  // not an xclbin
  auto bad = FpgaBackend::Create(c);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("xclbin"), std::string::npos)
      << bad.status();
  FpgaOptions o;
  o.xclbin = "";
  std::string why;
  EXPECT_FALSE(CreateFpgaBackend(o, &why).ok());
  o.xclbin = NEARPREP_TEST_XCLBIN;
  auto ok = CreateFpgaBackend(o, &why);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->name(), "fpga");
  EXPECT_NE(why.find("p2p"), std::string::npos) << why;
}

TEST_F(FpgaBackendTest, RefusesAnXclbinWhoseArgumentsDoNotMatchTheKernelAbi) {
  // Generated with `nearprep_xclbin_gen --omit-arg status`: a kernel whose
  // fifth argument is num_images. Its host would write num_images into the
  // status pointer's registers; it is refused at creation.
  FpgaBackendConfig c = TestConfig();
  c.xclbin = NEARPREP_TEST_XCLBIN_BAD_ARGS;
  auto bad = FpgaBackend::Create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find("does not match the kernel ABI"), std::string::npos) << msg;
  EXPECT_NE(msg.find(NEARPREP_TEST_XCLBIN_BAD_ARGS), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 arguments, the ABI has 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 4 is 'num_images' (scalar, 4 bytes), expected 'status' "
                     "(global memory pointer, 8 bytes)"),
            std::string::npos)
      << msg;
  // The factory says so too.
  FpgaOptions o;
  o.xclbin = NEARPREP_TEST_XCLBIN_BAD_ARGS;
  std::string why;
  auto f = CreateFpgaBackend(o, &why);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("does not match the kernel ABI"), std::string::npos)
      << f.status();
  // The matching xclbin of the same build loads.
  c.xclbin = NEARPREP_TEST_XCLBIN;
  EXPECT_TRUE(FpgaBackend::Create(c).ok());
}

TEST_F(FpgaBackendTest, QueuedRunsShareNoBuffer) {
  // The kernel's top is ap_ctrl_chain + DATAFLOW: run k+1 is started (and
  // may begin inside the compute unit) before run k is waited for, so the
  // two must not share any buffer.
  FpgaBackendConfig c = TestConfig();
  c.max_images_per_run = 2;
  c.jpeg_bytes_per_run = 8192;
  struct RunBuffers {
    const void* p[5];
  };
  std::vector<RunBuffers> runs;
  c.hook = [&runs](const FpgaRunView& v) {
    runs.push_back(RunBuffers{{v.jpeg, v.desc, v.cfg, v.out, v.status}});
    return RunKernel(v);
  };
  auto fpga = MakeFpga(c);
  ASSERT_NE(fpga, nullptr);
  const WorkContext ctx = AugmentingContext(dataset_.get());
  const auto want = ProcessAll(cpu_, ctx, 1);
  const auto got = ProcessAll(*fpga, ctx, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  ASSERT_GE(runs.size(), 6u);
  const char* names[5] = {"jpeg", "desc", "cfg", "out", "status"};
  for (size_t k = 0; k + 1 < runs.size(); ++k) {
    for (int a = 0; a < 5; ++a) {
      for (int b = 0; b < 5; ++b) {
        EXPECT_NE(runs[k].p[a], runs[k + 1].p[b])
            << "runs " << k << " and " << k + 1 << " share a buffer (" << names[a] << ", "
            << names[b] << ")";
      }
    }
  }
}

TEST_F(FpgaBackendTest, TwoComputeUnitsBothGetRunsAndMatchOneComputeUnit) {
  // The two-CU test xclbin (connectivity.cfg: nk=nearprep_preprocess:2):
  // the backend opens both CUs, its buffer sets alternate between them and
  // a call's staged and running sets go to the least busy CU, so a chunk's
  // runs spread over both. Bytes, parameters and statuses are the one-CU
  // backend's (and the CPU's) whichever CU ran an image.
  auto configure = [](FpgaBackendConfig c, std::vector<int>* per_cu) {
    c.max_images_per_run = 3;
    c.jpeg_bytes_per_run = 8192;
    c.buffer_sets = 4;
    c.hook = [per_cu](const FpgaRunView& v) {
      if (v.compute_unit < 0 || v.compute_unit >= static_cast<int>(per_cu->size())) {
        return absl::InternalError("run on an unknown compute unit");
      }
      ++(*per_cu)[static_cast<size_t>(v.compute_unit)];
      return RunKernel(v);
    };
    return c;
  };
  std::vector<int> one_cu(kMaxComputeUnits, 0), two_cu(kMaxComputeUnits, 0);
  auto single = MakeFpga(configure(TestConfig(), &one_cu));
  FpgaBackendConfig c2 = configure(TestConfig(), &two_cu);
  c2.xclbin = NEARPREP_TEST_XCLBIN_2CU;
  auto dual = MakeFpga(c2);
  ASSERT_NE(single, nullptr);
  ASSERT_NE(dual, nullptr);
  EXPECT_EQ(single->compute_units(), std::vector<std::string>{"nearprep_preprocess_1"});
  EXPECT_EQ(dual->compute_units(),
            (std::vector<std::string>{"nearprep_preprocess_1", "nearprep_preprocess_2"}));
  EXPECT_NE(dual->detail().find("compute units nearprep_preprocess_1 nearprep_preprocess_2"),
            std::string::npos)
      << dual->detail();
  const WorkContext ctx = AugmentingContext(dataset_.get());
  const auto want = ProcessAll(cpu_, ctx, 1);
  const auto got1 = ProcessAll(*single, ctx, dataset_->size());
  const auto got2 = ProcessAll(*dual, ctx, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want, got1), 0);
  EXPECT_EQ(CountDifferences(*dataset_, got1, got2), 0);
  const FpgaStats& s1 = single->fpga_stats();
  const FpgaStats& s2 = dual->fpga_stats();
  EXPECT_EQ(s2.Get(FpgaCounter::kDeviceImages), 16u);
  EXPECT_EQ(s1.Get(FpgaCounter::kDeviceImages), 16u);
  // >= 16 device images / 3 per run on each backend; both CUs worked.
  EXPECT_GE(s2.Get(FpgaCounter::kRuns), 6u);
  EXPECT_GT(s2.Get(FpgaCounter::kRunsCu0), 0u);
  EXPECT_GT(s2.Get(FpgaCounter::kRunsCu1), 0u);
  EXPECT_EQ(s2.Get(FpgaCounter::kRunsCu0) + s2.Get(FpgaCounter::kRunsCu1),
            s2.Get(FpgaCounter::kRuns));
  EXPECT_GT(two_cu[0], 0);
  EXPECT_GT(two_cu[1], 0);
  EXPECT_EQ(static_cast<uint64_t>(two_cu[1]), s2.Get(FpgaCounter::kRunsCu1));
  // A call alternates between the CUs: neither takes more than half + 1.
  EXPECT_LE(std::abs(two_cu[0] - two_cu[1]), 1) << two_cu[0] << " / " << two_cu[1];
  EXPECT_EQ(s1.Get(FpgaCounter::kRunsCu1), 0u);
  EXPECT_EQ(one_cu[1], 0);
  EXPECT_EQ(s1.Get(FpgaCounter::kRunsCu0), s1.Get(FpgaCounter::kRuns));

  // max_compute_units = 1 drives only the first CU of the two-CU xclbin.
  std::vector<int> limited_cu(kMaxComputeUnits, 0);
  FpgaBackendConfig c3 = configure(TestConfig(), &limited_cu);
  c3.xclbin = NEARPREP_TEST_XCLBIN_2CU;
  c3.max_compute_units = 1;
  auto limited = MakeFpga(c3);
  ASSERT_NE(limited, nullptr);
  EXPECT_EQ(limited->compute_units().size(), 1u);
  const auto got3 = ProcessAll(*limited, ctx, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, got1, got3), 0);
  EXPECT_GT(limited_cu[0], 0);
  EXPECT_EQ(limited_cu[1], 0);
}

TEST_F(FpgaBackendTest, CpuFallbackKeepsTheRequestFidelity) {
  // The kernel computes TF_COMPAT only; other fidelities are unsupported on
  // the device and served by the CPU with the request's own fidelity, so the
  // bytes equal the CPU backend's for that fidelity.
  auto fpga = MakeFpga(TestConfig());
  ASSERT_NE(fpga, nullptr);
  WorkContext fast = AugmentingContext(dataset_.get());
  fast.spec.fidelity = Fidelity::kFast;
  fast.spec.height = fast.spec.width = 16;  // downscaling: FAST decodes at a reduced scale
  WorkContext tf = fast;
  tf.spec.fidelity = Fidelity::kTfCompat;
  const auto want_fast = ProcessAll(cpu_, fast, 1);
  const auto want_tf = ProcessAll(cpu_, tf, 1);
  int fast_differs = 0;
  for (size_t i = 0; i < want_fast.size(); ++i) fast_differs += want_fast[i].bytes != want_tf[i].bytes;
  ASSERT_GT(fast_differs, 0) << "FAST and TF_COMPAT agree here: the test could not fail";
  // The capability query says so, naming the field, before anything runs.
  const Capability cap = fpga->Supports(fast);
  EXPECT_FALSE(cap.supported);
  EXPECT_EQ(cap.reason.rfind("transform.fidelity: ", 0), 0u) << cap.reason;
  EXPECT_TRUE(fpga->Supports(tf).supported) << fpga->Supports(tf).reason;
  const auto got = ProcessAll(*fpga, fast, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want_fast, got), 0);
  EXPECT_NE(fpga->detail().find("last request not on the device: " + cap.reason),
            std::string::npos)
      << fpga->detail();
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kDeviceImages), 0u);
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kFallbackUnsupported), dataset_->size());
  EXPECT_EQ(fpga->fpga_stats().fallbacks(), dataset_->size());
  // TF_COMPAT requests still run on the device.
  const auto got_tf = ProcessAll(*fpga, tf, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want_tf, got_tf), 0);
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kDeviceImages), 16u);
}

TEST_F(FpgaBackendTest, TorchvisionIsServedByTheCpuPath) {
  // FIDELITY_TORCHVISION (PIL's ISLOW decode and resize) is not on the
  // device: every sample is an unsupported fallback with the CPU's bytes,
  // which differ from TF_COMPAT's (so the comparison can fail).
  auto fpga = MakeFpga(TestConfig());
  ASSERT_NE(fpga, nullptr);
  WorkContext tv = AugmentingContext(dataset_.get());
  tv.spec.brightness_max_delta = 0.0f;  // Not in torchvision's recipe.
  tv.spec.saturation_enabled = false;
  tv.spec.fidelity = Fidelity::kTorchvision;
  WorkContext tf = tv;
  tf.spec.fidelity = Fidelity::kTfCompat;
  const auto want = ProcessAll(cpu_, tv, 1);
  const auto want_tf = ProcessAll(cpu_, tf, 1);
  int ok = 0, differs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ok += want[i].status.ok();
    differs += want[i].status.ok() && want[i].bytes != want_tf[i].bytes;
  }
  ASSERT_GT(ok, 0);
  ASSERT_GT(differs, 0) << "TORCHVISION and TF_COMPAT agree: the test could not fail";
  const auto got = ProcessAll(*fpga, tv, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kDeviceImages), 0u);
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kFallbackUnsupported), dataset_->size());
}

TEST_F(FpgaBackendTest, FactoryPicksFpgaForAutoOnlyWhenTheXclbinLoads) {
  BackendOptions o;
  o.kind = "auto";
  o.fpga.xclbin = NEARPREP_TEST_XCLBIN;
  std::string why;
  {
    auto b = CreateBackend(o, &why);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->name(), "fpga") << why;
  }
  o.fpga.xclbin = dir_.path() + "/missing.xclbin";
  auto cpu = CreateBackend(o, &why);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
  EXPECT_NE(why.find("missing.xclbin"), std::string::npos) << why;
  o.kind = "fpga";
  EXPECT_FALSE(CreateBackend(o, &why).ok());
}

TEST_F(FpgaBackendTest, MatchesCpuBytesAndCountsFallbacks) {
  auto fpga = MakeFpga(TestConfig());
  ASSERT_NE(fpga, nullptr);
  EXPECT_TRUE(fpga->p2p_buffers());
  const WorkContext ctx = AugmentingContext(dataset_.get());
  const auto want = ProcessAll(cpu_, ctx, 1);
  const uint64_t reads_before = dataset_->store().read_counters().reads.load();
  const auto got = ProcessAll(*fpga, ctx, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  // Each file is read once: the CPU fallback is served from the bytes
  // already staged in the run's input buffer. A read is the dataset's
  // (buffered) or an O_DIRECT read straight into the device buffer (P2P,
  // counted by the backend): see below for which one the noop shim allows.
  EXPECT_EQ(dataset_->store().read_counters().reads.load() - reads_before +
                fpga->fpga_stats().Get(FpgaCounter::kP2pReads),
            dataset_->size());
  int good = 0;
  for (const auto& r : want) good += r.status.ok();
  EXPECT_EQ(good, 18);  // 22 files, 4 broken
  const FpgaStats& st = fpga->fpga_stats();
  // Two progressive files are unsupported by the kernel; the truncated file
  // is corrupt; the three other broken files fail on the host.
  EXPECT_EQ(st.Get(FpgaCounter::kFallbackUnsupported), 2u);
  EXPECT_EQ(st.Get(FpgaCounter::kFallbackCorrupt), 1u);
  EXPECT_EQ(st.Get(FpgaCounter::kFallbackHost), 3u);
  EXPECT_EQ(st.Get(FpgaCounter::kDeviceImages), 16u);
  EXPECT_EQ(fpga->fpga_stats().fallbacks(), 22u - 16u);
  EXPECT_EQ(st.Get(FpgaCounter::kDeviceErrors), 0u);
  // The noop shim's buffers are host memory from its allocator: usually not
  // 4 KiB aligned, so O_DIRECT is refused (EINVAL) and the bytes travel the
  // buffered path, but a clean-clone run got aligned buffers and direct
  // reads (each buffer decides for itself). Either way the bytes arrive.
  EXPECT_GT(fpga->fpga_stats().Get(FpgaCounter::kP2pReadBytes) +
                fpga->fpga_stats().Get(FpgaCounter::kBufferedReadBytes),
            0u);
  EXPECT_GE(st.Get(FpgaCounter::kRuns), 1u);
  EXPECT_NE(fpga->detail().find("device_images 16"), std::string::npos)
      << fpga->detail();
  // The generic interface reports the same counters by name.
  uint64_t fallbacks = 0;
  for (const BackendStat& s : fpga->stats()) {
    if (s.name == "fallbacks") fallbacks = s.value;
  }
  EXPECT_EQ(fallbacks, 22u - 16u);
}

TEST_F(FpgaBackendTest, SmallBuffersSplitAChunkIntoManyDoubleBufferedRuns) {
  FpgaBackendConfig c = TestConfig();
  c.max_images_per_run = 3;
  c.jpeg_bytes_per_run = 8192;  // two small JPEGs at most
  auto fpga = MakeFpga(c);
  ASSERT_NE(fpga, nullptr);
  WorkContext ctx = AugmentingContext(dataset_.get());
  ctx.output.dtype = DType::kUint8;
  ctx.output.layout = Layout::kNCHW;
  const auto want = ProcessAll(cpu_, ctx, 1);
  const auto got = ProcessAll(*fpga, ctx, dataset_->size());
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  EXPECT_GE(fpga->fpga_stats().Get(FpgaCounter::kRuns), 7u);  // >= 16 device images / 3
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kDeviceImages), 16u);
}

TEST_F(FpgaBackendTest, InjectedDeviceErrorMidStreamFallsBackWithNoSampleLost) {
  for (const bool throws : {false, true}) {
    SCOPED_TRACE(throws ? "hook throws" : "hook reports failure");
    FpgaBackendConfig c = TestConfig();
    c.max_images_per_run = 4;
    int calls = 0;
    c.hook = [&calls, throws](const FpgaRunView& v) -> absl::Status {
      if (calls++ == 1) {  // the second run of the stream dies
        if (throws) throw std::runtime_error("injected: DMA engine hung");
        return absl::DataLossError("injected: ECC error");
      }
      return RunKernel(v);
    };
    auto fpga = MakeFpga(c);
    ASSERT_NE(fpga, nullptr);
    const WorkContext ctx = AugmentingContext(dataset_.get());
    const auto want = ProcessAll(cpu_, ctx, 1);
    const auto got = ProcessAll(*fpga, ctx, 11);
    EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
    const FpgaStats& st = fpga->fpga_stats();
    EXPECT_EQ(st.Get(FpgaCounter::kDeviceErrors), 1u);
    EXPECT_GE(st.Get(FpgaCounter::kFallbackDeviceError), 1u);
    EXPECT_LE(st.Get(FpgaCounter::kFallbackDeviceError), 4u);
    // 19 images reach a run (18 good + the truncated one); the lost run's
    // images are counted once, as device errors.
    EXPECT_EQ(st.Get(FpgaCounter::kDeviceImages) + st.Get(FpgaCounter::kFallbackDeviceError) +
                  st.Get(FpgaCounter::kFallbackUnsupported) + st.Get(FpgaCounter::kFallbackCorrupt),
              19u);
    EXPECT_LT(st.Get(FpgaCounter::kDeviceImages), 16u);
    EXPECT_GT(calls, 2);  // the device is used again after the error
  }
}

TEST_F(FpgaBackendTest, AFailedRunIsServedFromItsStagedBytesWithNoSecondRead) {
  // Every run fails: each staged image goes to the one fallback with the
  // bytes in the run's input buffer and the parameters drawn at staging.
  // The output is the CPU backend's and no file is read twice.
  FpgaBackendConfig c = TestConfig();
  c.max_images_per_run = 5;
  int runs = 0;
  c.hook = [&runs](const FpgaRunView&) -> absl::Status {
    ++runs;
    return absl::DataLossError("injected: every run fails");
  };
  auto fpga = MakeFpga(c);
  ASSERT_NE(fpga, nullptr);
  const WorkContext ctx = AugmentingContext(dataset_.get());
  const auto want = ProcessAll(cpu_, ctx, 1);
  const uint64_t reads_before = dataset_->store().read_counters().reads.load();
  const uint64_t bytes_before = dataset_->store().read_counters().bytes.load();
  const auto got = ProcessAll(*fpga, ctx, 11);
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  const FpgaStats& st = fpga->fpga_stats();
  // Each file read once: by the dataset's reader, or with O_DIRECT into a
  // p2p buffer when the shim's mapping happens to be 4 KiB aligned.
  EXPECT_EQ(dataset_->store().read_counters().reads.load() - reads_before +
                st.Get(FpgaCounter::kP2pReads),
            dataset_->size());
  uint64_t file_bytes = 0;
  for (const Sample& s : dataset_->samples()) {
    file_bytes += std::filesystem::file_size(std::filesystem::path(dir_.path()) / s.path);
  }
  EXPECT_EQ(dataset_->store().read_counters().bytes.load() - bytes_before +
                st.Get(FpgaCounter::kP2pReadBytes),
            file_bytes);
  EXPECT_GE(runs, 4);  // 19 staged images, at most 5 a run
  EXPECT_EQ(st.Get(FpgaCounter::kDeviceErrors), static_cast<uint64_t>(runs));
  EXPECT_EQ(st.Get(FpgaCounter::kDeviceImages), 0u);
  // 18 good images and the truncated one were staged; three files failed
  // on the host (header) and were served from the bytes read for them.
  EXPECT_EQ(st.Get(FpgaCounter::kFallbackDeviceError), 19u);
  EXPECT_EQ(st.Get(FpgaCounter::kFallbackHost), 3u);
  EXPECT_EQ(st.fallbacks(), dataset_->size());
}

TEST_F(FpgaBackendTest, WithoutTheHookEveryImageIsNotRunAndServedByTheCpu) {
  FpgaBackendConfig c = TestConfig();
  c.hook = nullptr;
  auto fpga = MakeFpga(c);
  ASSERT_NE(fpga, nullptr);
  const WorkContext ctx = AugmentingContext(dataset_.get());
  const auto want = ProcessAll(cpu_, ctx, 1);
  const auto got = ProcessAll(*fpga, ctx, 5);
  EXPECT_EQ(CountDifferences(*dataset_, want, got), 0);
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kDeviceImages), 0u);
  // The 18 good images and the truncated one reach a run.
  EXPECT_EQ(fpga->fpga_stats().Get(FpgaCounter::kFallbackNotRun), 19u);
  EXPECT_EQ(fpga->fpga_stats().fallbacks(), 22u);
}

TEST(FpgaBackendRealImagesTest, MatchesCpuOnTheSharedImages) {
  const char* env = std::getenv("NEARPREP_SAMPLE_IMAGES_DIR");
  const std::string root = env != nullptr && *env != '\0'
                               ? std::string(env)
                               : NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200";
  if (!std::filesystem::exists(root)) {
    GTEST_SKIP() << root << " is absent";
  }
  DatasetConfig config;
  config.name = "imagenet-sample-200";
  config.root = root;
  auto ds = Dataset::Open(config);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_GT((*ds)->size(), 0u);
  FpgaBackendConfig c = TestConfig();
  auto fpga = MakeFpga(c);
  ASSERT_NE(fpga, nullptr);
  WorkContext ctx = AugmentingContext(ds->get());
  ctx.spec.height = ctx.spec.width = 224;
  ctx.spec.normalize = true;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (int i = 0; i < 3; ++i) {
    ctx.spec.mean[i] = mean[i];
    ctx.spec.std[i] = sd[i];
  }
  ctx.output.dtype = DType::kBFloat16;
  CpuBackend cpu;
  const auto want = ProcessAll(cpu, ctx, 1);
  const auto got = ProcessAll(*fpga, ctx, 32);
  EXPECT_EQ(CountDifferences(**ds, want, got), 0);
  const uint64_t on_device = fpga->fpga_stats().Get(FpgaCounter::kDeviceImages);
  EXPECT_EQ(on_device + fpga->fpga_stats().fallbacks(), (*ds)->size());
  EXPECT_GT(on_device, (*ds)->size() * 9 / 10);
  std::printf("real images: %llu of %zu on the device (C-sim), %llu CPU fallbacks\n",
              static_cast<unsigned long long>(on_device), (*ds)->size(),
              static_cast<unsigned long long>(fpga->fpga_stats().fallbacks()));
}

// A TFRecord dataset read in blocks (a block-shuffle stream's source): the
// backend reads each block of records with one large read into the run's
// input buffer and gives the kernel the offset and size of every image
// inside it (issue 8: the SmartSSD's P2P path needs large reads).
TEST(FpgaBackendRecordsTest, BlockReadsFillTheInputBufferAndMatchTheCpu) {
  ASSERT_TRUE(kEnvReady);
  testing_common::TempDir dir;
  constexpr int kPerShard = 20, kShards = 2, kBad = 27;
  for (int sh = 0; sh < kShards; ++sh) {
    std::string shard;
    for (int i = sh * kPerShard; i < (sh + 1) * kPerShard; ++i) {
      const std::vector<uint8_t> jpeg = testing_internal::MakeTestJpeg(
          24 + 5 * (i % 9), 60 - 3 * (i % 7), i % 3 == 0 ? TJSAMP_420 : TJSAMP_444, 75 + i % 20,
          false, i);
      tfexample::Example ex;
      auto& f = *ex.mutable_features()->mutable_feature();
      f["image/encoded"].mutable_bytes_list()->add_value(
          std::string(jpeg.begin(), jpeg.end()));
      f["image/class/label"].mutable_int64_list()->add_value(i % 5);
      const size_t at = shard.size();
      records::AppendTfRecord(ex.SerializeAsString(), &shard);
      if (i == kBad) shard[at + 12 + (shard.size() - at - 16) / 2] ^= 0x40;  // bad CRC
    }
    testing_internal::WriteFile(std::filesystem::path(dir.path()) /
                                    ("train-0000" + std::to_string(sh) + ".tfrecord"),
                                std::vector<uint8_t>(shard.begin(), shard.end()));
  }
  DatasetConfig config;
  config.name = "rec";
  config.format = "tfrecord";
  config.root = dir.path();
  auto ds = Dataset::Open(config);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), static_cast<size_t>(kShards * kPerShard));
  WorkContext ctx = AugmentingContext(ds->get());
  SampleSourceOptions blocks;
  blocks.block_samples = 8;
  ctx.source = std::make_shared<const SampleSource>(**ds, blocks);
  CpuBackend cpu;
  const auto want = ProcessAll(cpu, ctx, 1);
  ASSERT_FALSE(want[kBad].status.ok());  // the damaged record: DATA_LOSS
  EXPECT_EQ(want[kBad].status.code(), absl::StatusCode::kDataLoss) << want[kBad].status;
  const ReadCounters& rc = (*ds)->store().read_counters();
  const uint64_t reads0 = rc.reads.load(), bytes0 = rc.bytes.load();
  auto fpga = MakeFpga(TestConfig());
  ASSERT_NE(fpga, nullptr);
  const auto got = ProcessAll(*fpga, ctx, (*ds)->size());
  EXPECT_EQ(CountDifferences(**ds, want, got), 0);
  EXPECT_EQ(got[kBad].status.code(), absl::StatusCode::kDataLoss) << got[kBad].status;
  const uint64_t reads = rc.reads.load() - reads0, bytes = rc.bytes.load() - bytes0;
  const FpgaStats& st = fpga->fpga_stats();
  // Blocks of 8 ids, each part within one shard: [0,8) [8,16) [16,20)
  // [20,24) [24,32) [32,40) - six reads for forty samples, plus one when a
  // block is split between two runs (32 images per run: [32,40) is read
  // again for the second run).
  EXPECT_GE(reads, 6u);
  EXPECT_LE(reads, 6u + st.Get(FpgaCounter::kRuns) - 1);
  EXPECT_EQ(st.Get(FpgaCounter::kBlockReads), reads);
  EXPECT_GE(st.Get(FpgaCounter::kBlockReadBytes), bytes);  // 4 KiB-rounded, past the end of a shard
  EXPECT_GE(bytes / reads, 4 * 600u);  // several records per read
  EXPECT_EQ(st.Get(FpgaCounter::kBlockSamples), static_cast<uint64_t>(kShards * kPerShard - 1));
  EXPECT_EQ(st.Get(FpgaCounter::kDeviceImages), static_cast<uint64_t>(kShards * kPerShard - 1));
  EXPECT_EQ(st.fallbacks(), 0u);
  std::printf("tfrecord blocks: %llu reads, %llu bytes (%.0f bytes/read) for %zu samples\n",
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(bytes),
              static_cast<double>(bytes) / static_cast<double>(reads), (*ds)->size());
  // A source without blocks (global shuffle): one read per sample, no block
  // reads.
  WorkContext one = ctx;
  one.source = std::make_shared<const SampleSource>(**ds);
  auto fpga2 = MakeFpga(TestConfig());
  ASSERT_NE(fpga2, nullptr);
  const uint64_t reads1 = rc.reads.load();
  const auto got2 = ProcessAll(*fpga2, one, (*ds)->size());
  EXPECT_EQ(CountDifferences(**ds, ProcessAll(cpu, one, 1), got2), 0);
  EXPECT_EQ(fpga2->fpga_stats().Get(FpgaCounter::kBlockReads), 0u);
  EXPECT_GE(rc.reads.load() - reads1, static_cast<uint64_t>(kShards * kPerShard - 1));
}

INSTANTIATE_TEST_SUITE_P(
    Fpga, BackendConformanceTest,
    ::testing::ValuesIn(OnEveryStorage(BackendUnderTest{
        "fpga", [] { return std::shared_ptr<Backend>(MakeFpga(TestConfig())); }})),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace nearprep
