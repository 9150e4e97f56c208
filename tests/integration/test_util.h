// Helpers shared by the integration tests: temporary dataset folders made
// with nearprep_mkdataset, typed gRPC stubs, whole-stream reads.
//
// Thread-safety: not thread-safe; used from the test thread.
#ifndef NEARPREP_TESTS_INTEGRATION_TEST_UTIL_H_
#define NEARPREP_TESTS_INTEGRATION_TEST_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cli/mkdataset/mkdataset.h"
#include "nearprep/v1/nearprep.grpc.pb.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace testing_util {

namespace fs = std::filesystem;

using testing_common::TempDir;

// Writes a small synthetic dataset (num_classes x per_class JPEGs).
inline void MakeDataset(const std::string& dir, int num_classes, int per_class,
                        bool with_bad_files, uint64_t seed = 1) {
  MkDatasetOptions o;
  o.output_dir = dir;
  o.num_classes = num_classes;
  o.images_per_class = per_class;
  o.seed = seed;
  o.min_side = 24;
  o.max_side = 80;
  o.with_bad_files = with_bad_files;
  absl::Status st = MakeSyntheticDataset(o);
  ASSERT_TRUE(st.ok()) << st;
}

inline std::shared_ptr<grpc::Channel> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

inline v1::StreamBatchesRequest BasicRequest(const std::string& dataset,
                                             uint32_t batch_size) {
  v1::StreamBatchesRequest r;
  r.set_dataset(dataset);
  r.set_batch_size(batch_size);
  r.set_seed(1234);
  r.set_epoch(2);
  r.set_shuffle(true);
  r.set_include_params(true);
  v1::Transform* t = r.mutable_transform();
  t->set_height(20);
  t->set_width(16);
  t->set_crop(v1::CROP_MODE_RANDOM_RESIZED);
  t->set_flip_probability(0.5f);
  t->set_brightness_max_delta(0.2f);
  t->set_saturation_lower(0.5f);
  t->set_saturation_upper(1.5f);
  return r;
}

struct StreamResult {
  std::vector<v1::Batch> batches;
  grpc::Status status;
};

// Reads a whole stream. `deadline`: the call's deadline, a guard against a
// hang, not a speed check (the FPGA tests' C simulation of the kernels is
// slow on a loaded 2-core machine: they pass a longer one).
inline StreamResult ReadAll(
    v1::Preprocessor::Stub* stub, const v1::StreamBatchesRequest& request,
    std::chrono::seconds deadline = std::chrono::seconds(30)) {
  StreamResult out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = stub->StreamBatches(&ctx, request);
  v1::Batch b;
  while (reader->Read(&b)) out.batches.push_back(b);
  out.status = reader->Finish();
  return out;
}

// The batch without its timings (which vary run to run), serialized: two
// batches are "the same bytes" when these strings are equal.
inline std::string Canonical(const v1::Batch& b) {
  v1::Batch c = b;
  c.clear_timings();
  return c.SerializeAsString();
}

// Starts the program argv[0] with `args` as a child process (stdout and
// stderr to `log_file` when it is not empty) and waits up to 20 s until it
// has written a port number > 0 into `port_file`. On success returns the pid
// and sets *port; if the child exits first returns -1 and sets *exit_code.
inline pid_t SpawnAndWaitForPort(const std::vector<std::string>& args,
                                 const std::string& port_file,
                                 const std::string& log_file, int* port,
                                 int* exit_code) {
  std::filesystem::remove(port_file);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!log_file.empty()) {
      const int fd =
          ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int p = 0;
    if (in >> p && p > 0) {
      *port = p;
      return pid;
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}


}  // namespace testing_util
}  // namespace nearprep

#endif  // NEARPREP_TESTS_INTEGRATION_TEST_UTIL_H_
