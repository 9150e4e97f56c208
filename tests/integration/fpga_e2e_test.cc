// End to end over gRPC: nearprepd --backend fpga on XRT's noop shim (with
// --fpga-simulate-kernel, so the C-simulation kernel runs on the mapped
// buffers after each device run) streams exactly the bytes that nearprepd
// --backend cpu streams for the same requests; a device error injected
// mid-stream (--fpga-inject-error-run) falls back to the CPU with no batch
// lost; --backend auto / fpga with a missing xclbin behave as documented.
//
// ctest sets XCL_EMULATION_MODE=noop and XILINX_XRT (tests/integration/
// CMakeLists.txt); the daemons inherit them.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;
using testing_util::Canonical;
using testing_util::Connect;
using testing_util::ReadAll;
using testing_util::StreamResult;
using testing_util::TempDir;

// $NEARPREP_SAMPLE_IMAGES_DIR when set (a worktree not beside shared/).
const std::string kRealImages = [] {  // NOLINT(runtime/string)
  const char* env = std::getenv("NEARPREP_SAMPLE_IMAGES_DIR");
  return env != nullptr && *env != '\0'
             ? std::string(env)
             : std::string(NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200");
}();

// A nearprepd child process whose stderr goes to a file.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { Stop(); }

  // Starts nearprepd with `args` and waits until it listens. Returns false
  // (exit_code() then says how it ended) if it exited first.
  bool Start(const std::vector<std::string>& args, const std::string& dir,
             const std::string& tag) {
    port_file_ = dir + "/" + tag + ".port";
    log_file_ = dir + "/" + tag + ".log";
    std::vector<std::string> all = {NEARPREPD_PATH, "--port", "0",
                                    "--port-file", port_file_, "--listen",
                                    "127.0.0.1", "--log-level", "warn",
                                    "--workers", "2"};
    all.insert(all.end(), args.begin(), args.end());
    pid_ = testing_util::SpawnAndWaitForPort(all, port_file_, log_file_,
                                             &port_, &exit_code_);
    if (pid_ <= 0) return false;
    stub_ = v1::Preprocessor::NewStub(Connect(port_));
    return true;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  v1::ServerInfo Info() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetServerInfoRequest req;
    v1::ServerInfo info;
    const grpc::Status st = stub_->GetServerInfo(&ctx, req, &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return info;
  }

  StreamResult Stream(const v1::StreamBatchesRequest& r) {
    // The kernels run as C simulation on the host's CPU: 128 real images
    // took over 30 s under load (3 CPU burners beside ctest -j2).
    return ReadAll(stub_.get(), r, std::chrono::seconds(150));
  }

  std::string Log() const {
    std::ifstream in(log_file_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int exit_code() const { return exit_code_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::string port_file_, log_file_;
  std::unique_ptr<v1::Preprocessor::Stub> stub_;
};

// The requests both backends must answer identically: float32 and uint8,
// NHWC and NCHW, random resized crop with flip / brightness / saturation,
// and a centre crop.
std::vector<v1::StreamBatchesRequest> Requests(const std::string& dataset,
                                               uint32_t batch_size, uint32_t h,
                                               uint32_t w) {
  std::vector<v1::StreamBatchesRequest> out;
  v1::StreamBatchesRequest base = testing_util::BasicRequest(dataset, batch_size);
  base.mutable_transform()->set_height(h);
  base.mutable_transform()->set_width(w);
  {
    v1::StreamBatchesRequest r = base;
    r.mutable_output()->set_dtype(v1::DTYPE_FLOAT32);
    out.push_back(r);
  }
  {
    v1::StreamBatchesRequest r = base;
    r.set_seed(99);
    r.set_epoch(5);
    r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
    r.mutable_output()->set_layout(v1::LAYOUT_NCHW);
    r.mutable_transform()->set_flip_probability(1.0f);
    out.push_back(r);
  }
  {
    v1::StreamBatchesRequest r = base;
    r.set_shuffle(false);
    r.mutable_output()->set_dtype(v1::DTYPE_FLOAT32);
    v1::Transform* t = r.mutable_transform();
    t->set_crop(v1::CROP_MODE_CENTER);
    t->set_center_fraction(0.875f);
    t->set_flip_probability(0.0f);
    t->set_brightness_max_delta(0.0f);
    t->set_saturation_lower(0.0f);
    t->set_saturation_upper(0.0f);
    out.push_back(r);
  }
  return out;
}

// Asserts that two streams carry the same batches: tensor bytes, labels,
// ids, params and errors (everything but the timings).
void ExpectSameStream(const StreamResult& cpu, const StreamResult& fpga,
                      const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status.error_message();
  ASSERT_TRUE(fpga.status.ok()) << fpga.status.error_message();
  ASSERT_GT(cpu.batches.size(), 0u);
  ASSERT_EQ(cpu.batches.size(), fpga.batches.size());
  for (size_t i = 0; i < cpu.batches.size(); ++i) {
    const v1::Batch& a = cpu.batches[i];
    const v1::Batch& b = fpga.batches[i];
    ASSERT_EQ(a.batch_index(), b.batch_index()) << "batch " << i;
    ASSERT_EQ(a.sample_ids_size(), b.sample_ids_size()) << "batch " << i;
    for (int k = 0; k < a.sample_ids_size(); ++k) {
      ASSERT_EQ(a.sample_ids(k), b.sample_ids(k)) << "batch " << i;
      ASSERT_EQ(a.labels(k), b.labels(k)) << "batch " << i;
    }
    ASSERT_EQ(a.errors_size(), b.errors_size()) << "batch " << i;
    ASSERT_EQ(a.tensor().data().size(), b.tensor().data().size());
    EXPECT_TRUE(a.tensor().data() == b.tensor().data())
        << "tensor bytes differ in batch " << i;
    EXPECT_EQ(Canonical(a), Canonical(b)) << "batch " << i;
  }
}

uint64_t Processed(const v1::ServerInfo& info) {
  return info.counters().samples_ok() + info.counters().samples_failed();
}

class FpgaEndToEndTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("fpga_e2e");
    data_ = dir_->path() + "/data";
    // 3 classes x 10 synthetic JPEGs (baseline 4:2:0 / 4:2:2 / 4:4:4 / gray,
    // some progressive) plus the bad files (corrupt, truncated, not a JPEG).
    MkDatasetOptions o;
    o.output_dir = data_;
    o.num_classes = 3;
    o.images_per_class = 10;
    o.seed = 7;
    o.min_side = 24;
    o.max_side = 80;
    o.with_bad_files = true;
    MkDatasetSummary summary;
    const absl::Status st = MakeSyntheticDataset(o, &summary);
    ASSERT_TRUE(st.ok()) << st;
    // The same folder as a file list of its baseline JPEGs only: every
    // sample of it is one the kernel finishes.
    baseline_list_ = dir_->path() + "/baseline.txt";
    std::ofstream out(baseline_list_);
    num_baseline_ = 0;
    for (const MkDatasetSummary::Image& im : summary.images) {
      if (im.progressive) continue;
      out << im.path << " " << im.label << "\n";
      ++num_baseline_;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  std::vector<std::string> Args(const std::string& backend) const {
    std::vector<std::string> a = {"--dataset", "syn=" + data_, "--backend",
                                  backend};
    if (backend != "cpu") {
      a.insert(a.end(), {"--xclbin", NEARPREP_TEST_XCLBIN});
    }
    return a;
  }

  static TempDir* dir_;
  static std::string data_;
  static std::string baseline_list_;
  static size_t num_baseline_;
};

TempDir* FpgaEndToEndTest::dir_ = nullptr;
std::string FpgaEndToEndTest::data_;
std::string FpgaEndToEndTest::baseline_list_;
size_t FpgaEndToEndTest::num_baseline_ = 0;

TEST_F(FpgaEndToEndTest, SimulatedDeviceStreamsTheSameBytesAsCpu) {
  Daemon cpu, fpga;
  ASSERT_TRUE(cpu.Start(Args("cpu"), dir_->path(), "cpu")) << cpu.Log();
  std::vector<std::string> fa = Args("fpga");
  fa.push_back("--fpga-simulate-kernel");
  ASSERT_TRUE(fpga.Start(fa, dir_->path(), "fpga")) << fpga.Log();

  const v1::ServerInfo before = fpga.Info();
  EXPECT_EQ(before.backend(), "fpga");
  EXPECT_NE(before.backend_detail().find("SIMULATED KERNEL"), std::string::npos)
      << before.backend_detail();
  EXPECT_NE(before.backend_detail().find(NEARPREP_TEST_XCLBIN), std::string::npos)
      << before.backend_detail();
  EXPECT_NE(fpga.Log().find("SIMULATED KERNEL"), std::string::npos)
      << "the simulation must be logged loudly:\n" << fpga.Log();

  uint64_t errors = 0;
  for (const v1::StreamBatchesRequest& r : Requests("syn", 7, 20, 16)) {
    const StreamResult a = cpu.Stream(r);
    const StreamResult b = fpga.Stream(r);
    ExpectSameStream(a, b, r.ShortDebugString());
    for (const v1::Batch& batch : a.batches) errors += batch.errors_size();
  }
  EXPECT_GT(errors, 0u) << "the bad files must give per-sample errors";

  const v1::ServerInfo info = fpga.Info();
  const v1::ServerInfo cinfo = cpu.Info();
  EXPECT_EQ(cinfo.backend(), "cpu");
  EXPECT_EQ(cinfo.counters().backend_fallbacks(), 0u);
  EXPECT_EQ(Processed(info), Processed(cinfo));
  // Progressive and bad files are served by the CPU fallback; every other
  // sample was finished by the (simulated) device.
  EXPECT_GT(info.counters().backend_fallbacks(), 0u);
  EXPECT_LT(info.counters().backend_fallbacks(), Processed(info));
  const uint64_t device_images =
      Processed(info) - info.counters().backend_fallbacks();
  EXPECT_GT(device_images, Processed(info) / 2);
  // backend_detail is built at call time, so it carries the live count.
  EXPECT_NE(info.backend_detail().find(
                absl::StrCat("device_images ", device_images, ",")),
            std::string::npos)
      << info.backend_detail();
  // The JPEG bytes went through the FPGA input buffers (the noop shim's
  // buffers are not 4 KiB aligned, so the buffered path).
  EXPECT_GT(info.counters().p2p_reads() + info.counters().buffered_reads(), 0u);
  EXPECT_EQ(cinfo.counters().p2p_reads() + cinfo.counters().buffered_reads(),
            0u);

  // A request the kernel does not compute (FIDELITY_FAST): the same bytes
  // as the CPU daemon, every sample a fallback, and ServerInfo says why.
  EXPECT_EQ(info.backend_detail().find("last request not on the device"), std::string::npos)
      << info.backend_detail();
  v1::StreamBatchesRequest fast = Requests("syn", 7, 20, 16)[0];
  fast.mutable_transform()->set_fidelity(v1::FIDELITY_FAST);
  ExpectSameStream(cpu.Stream(fast), fpga.Stream(fast), fast.ShortDebugString());
  const v1::ServerInfo after = fpga.Info();
  EXPECT_EQ(after.counters().backend_fallbacks() - info.counters().backend_fallbacks(),
            Processed(after) - Processed(info));
  EXPECT_NE(after.backend_detail().find(
                "last request not on the device: transform.fidelity: the kernel computes "
                "TF_COMPAT only"),
            std::string::npos)
      << after.backend_detail();
}

TEST_F(FpgaEndToEndTest, InjectedDeviceErrorFallsBackWithNoBatchLost) {
  // Baseline JPEGs only, so that without the error nothing falls back and
  // with it exactly the images of run 1 do.
  const std::string ds = "base=" + data_ + ",list_file=" + baseline_list_;
  Daemon cpu, fpga, faulty;
  ASSERT_TRUE(cpu.Start({"--dataset", ds, "--backend", "cpu"}, dir_->path(),
                        "cpu2"))
      << cpu.Log();
  ASSERT_TRUE(fpga.Start({"--dataset", ds, "--backend", "fpga", "--xclbin",
                          NEARPREP_TEST_XCLBIN, "--fpga-simulate-kernel"},
                         dir_->path(), "fpga2"))
      << fpga.Log();
  // The faulty daemon takes its backend section from YAML (the keys behind
  // --fpga-simulate-kernel / --fpga-inject-error-run N).
  const std::string yaml = dir_->path() + "/faulty.yaml";
  {
    std::ofstream out(yaml);
    out << "backend:\n  kind: fpga\n  xclbin: " << NEARPREP_TEST_XCLBIN
        << "\n  fpga_simulate_kernel: true\n  fpga_inject_error_run: 1\n";
  }
  ASSERT_TRUE(faulty.Start({"--config", yaml, "--dataset", ds}, dir_->path(),
                           "faulty"))
      << faulty.Log();
  EXPECT_EQ(faulty.Info().backend(), "fpga");
  EXPECT_NE(faulty.Info().backend_detail().find("FAULT INJECTION: run 1"),
            std::string::npos)
      << faulty.Info().backend_detail();

  for (const v1::StreamBatchesRequest& r : Requests("base", 5, 20, 16)) {
    const StreamResult a = cpu.Stream(r);
    ExpectSameStream(a, fpga.Stream(r), "fpga " + r.ShortDebugString());
    const StreamResult c = faulty.Stream(r);
    ExpectSameStream(a, c, "fpga with a device error on run 1");
    // Every sample of the epoch is there, once.
    std::set<uint64_t> ids;
    for (const v1::Batch& batch : c.batches) {
      EXPECT_EQ(batch.errors_size(), 0);
      for (uint64_t id : batch.sample_ids()) {
        EXPECT_TRUE(ids.insert(id).second);
      }
    }
    EXPECT_EQ(ids.size(), num_baseline_);
  }

  // Without the error every image was finished on the device; with it, the
  // images of run 1 (and only those) went to the CPU.
  EXPECT_EQ(fpga.Info().counters().backend_fallbacks(), 0u);
  const std::string log = faulty.Log();
  const std::string marker = "injected device error on run 1";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_EQ(log.find(marker, at + 1), std::string::npos) << "only run 1 fails";
  const size_t count_at = log.find("); ", at);
  ASSERT_NE(count_at, std::string::npos) << log;
  const uint64_t run_images = std::stoull(log.substr(count_at + 3));
  EXPECT_GT(run_images, 0u);
  EXPECT_EQ(faulty.Info().counters().backend_fallbacks(), run_images);
  EXPECT_EQ(fpga.Log().find("injected device error"), std::string::npos);
}

TEST_F(FpgaEndToEndTest, AutoWithAMissingXclbinServesOnCpuAndSaysWhy) {
  Daemon d;
  const std::string missing = dir_->path() + "/no_such.xclbin";
  ASSERT_TRUE(d.Start({"--dataset", "syn=" + data_, "--backend", "auto",
                       "--xclbin", missing},
                      dir_->path(), "auto"))
      << d.Log();
  const v1::ServerInfo info = d.Info();
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_NE(info.backend_detail().find("auto"), std::string::npos)
      << info.backend_detail();
  EXPECT_NE(info.backend_detail().find(missing), std::string::npos)
      << info.backend_detail();
  EXPECT_NE(info.backend_detail().find("using cpu"), std::string::npos)
      << info.backend_detail();
  const StreamResult s = d.Stream(Requests("syn", 8, 20, 16)[0]);
  EXPECT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_GT(s.batches.size(), 0u);
}

TEST_F(FpgaEndToEndTest, FpgaWithAMissingXclbinExits2WithAClearMessage) {
  Daemon d;
  const std::string missing = dir_->path() + "/no_such.xclbin";
  EXPECT_FALSE(d.Start({"--dataset", "syn=" + data_, "--backend", "fpga",
                        "--xclbin", missing},
                       dir_->path(), "fpga_missing"));
  EXPECT_EQ(d.exit_code(), 2);
  const std::string log = d.Log();
  EXPECT_NE(log.find(missing), std::string::npos) << log;
  EXPECT_NE(log.find("No such file"), std::string::npos) << log;
}

TEST_F(FpgaEndToEndTest, RealImagesStreamTheSameBytesAsCpu) {
  if (!fs::is_directory(kRealImages)) {
    GTEST_SKIP() << "real images not found at " << kRealImages
                 << " (CI keeps ../shared beside the clone)";
  }
  // A file list of 64 of the 200 images (every third class folder).
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(kRealImages)) {
    if (e.is_regular_file()) {
      files.push_back(fs::relative(e.path(), kRealImages).string());
    }
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 64u);
  const std::string list = dir_->path() + "/real_list.txt";
  {
    std::ofstream out(list);
    int n = 0;
    for (size_t i = 0; i < files.size() && n < 64; i += 3, ++n) {
      out << files[i] << " " << n << "\n";
    }
  }
  const std::string ds = std::string("real=") + kRealImages + ",list_file=" + list;
  Daemon cpu, fpga;
  ASSERT_TRUE(cpu.Start({"--dataset", ds, "--backend", "cpu"}, dir_->path(),
                        "real_cpu"))
      << cpu.Log();
  ASSERT_TRUE(fpga.Start({"--dataset", ds, "--backend", "fpga", "--xclbin",
                          NEARPREP_TEST_XCLBIN, "--fpga-simulate-kernel"},
                         dir_->path(), "real_fpga"))
      << fpga.Log();
  const std::vector<v1::StreamBatchesRequest> rs = Requests("real", 16, 64, 64);
  for (size_t i = 0; i < 2; ++i) {  // float32 RRC and uint8 NCHW RRC
    ExpectSameStream(cpu.Stream(rs[i]), fpga.Stream(rs[i]),
                     rs[i].ShortDebugString());
  }
  const v1::ServerInfo info = fpga.Info();
  EXPECT_EQ(Processed(info), 128u);
  const uint64_t device_images =
      Processed(info) - info.counters().backend_fallbacks();
  EXPECT_GT(device_images, 100u) << "most real images are baseline JPEGs";
}

}  // namespace
}  // namespace nearprep
