// Test doubles for the pipeline: a Backend that writes a deterministic byte
// pattern per sample id (so assembly can be checked without JPEG code) and
// fails chosen ids, and helpers that build an image_folder dataset of dummy
// files (in memory, or in a folder).
//
// Thread-safety: FakeBackend::Process is thread-safe (atomics and a mutex);
// configure it before the pipeline runs.
#ifndef NEARPREP_TESTS_UNIT_PIPELINE_FAKE_BACKEND_H_
#define NEARPREP_TESTS_UNIT_PIPELINE_FAKE_BACKEND_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/backend.h"
#include "server/data/dataset.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace testing_internal {

inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The bytes FakeBackend writes for `id` under `seed`.
inline void FakePattern(uint64_t id, uint64_t seed, uint8_t* out,
                        size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    out[i] = static_cast<uint8_t>(Mix64(seed * 1000003u + id * 7919u + i / 8) >>
                                  (8 * (i % 8)));
  }
}

class FakeBackend : public Backend {
 public:
  std::string name() const override { return "fake"; }

  void Process(const WorkContext& ctx, SampleWork* samples,
               size_t n) override {
    calls_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_seeds_.push_back(ctx.seed);
    }
    const size_t bytes = ctx.output.SampleBytes(ctx.spec);
    for (size_t i = 0; i < n; ++i) {
      SampleWork& s = samples[i];
      processed_.fetch_add(1);
      if (delay_us_ > 0) {
        // Varying delays scramble completion order across workers.
        std::this_thread::sleep_for(std::chrono::microseconds(
            delay_us_ * (1 + Mix64(s.sample_id) % 4)));
      }
      s.times = StageTimes{1, 2, 3};
      auto it = bad_.find(s.sample_id);
      if (it != bad_.end()) {
        s.status = it->second;
        std::memset(s.out, 0xEE, bytes);  // garbage in a failed slot
        continue;
      }
      s.status = absl::OkStatus();
      FakePattern(s.sample_id, ctx.seed, s.out, bytes);
      s.params = SampleParams{};
      s.params.flip = (s.sample_id % 2) == 1;
      s.params.brightness_delta = static_cast<float>(s.sample_id);
      s.params.source_height = static_cast<int>(ctx.epoch);
    }
  }

  // Configuration (before use).
  void SetBad(uint64_t id, absl::Status status) { bad_[id] = std::move(status); }
  void SetDelayUs(int us) { delay_us_ = us; }
  const std::map<uint64_t, absl::Status>& bad() const { return bad_; }

  uint64_t processed() const { return processed_.load(); }
  uint64_t calls() const { return calls_.load(); }
  std::vector<uint64_t> call_seeds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return call_seeds_;
  }

 private:
  std::map<uint64_t, absl::Status> bad_;
  int delay_us_ = 0;
  std::atomic<uint64_t> processed_{0};
  std::atomic<uint64_t> calls_{0};
  mutable std::mutex mu_;
  std::vector<uint64_t> call_seeds_;
};

// Dummy file i of MakeDummyDataset: "c<i % classes>/s<i>.jpg" (zero
// padded), so ids follow the sorted paths.
inline std::string DummyPath(int i, int classes) {
  char path[48];
  std::snprintf(path, sizeof path, "c%02d/s%05d.jpg", i % classes, i);
  return path;
}

// An image_folder dataset of `n` dummy files (DummyPath) spread over
// `classes` class folders, held in memory.
inline std::unique_ptr<Dataset> MakeDummyDataset(int n, int classes) {
  auto storage = std::make_shared<MemStorage>();
  for (int i = 0; i < n; ++i) {
    storage->AddFile(DummyPath(i, classes), "not a jpeg " + std::to_string(i));
  }
  DatasetConfig config;
  config.name = "dummy";
  auto ds = Dataset::Open(config, storage);
  if (!ds.ok()) return nullptr;
  return std::move(ds).value();
}

// The same dataset written under folder `root`, for tests that need it on
// disk (a server opens its datasets by folder).
inline std::unique_ptr<Dataset> MakeDummyDataset(const std::string& root,
                                                 int n, int classes) {
  for (int i = 0; i < n; ++i) {
    const std::filesystem::path p =
        std::filesystem::path(root) / DummyPath(i, classes);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << "not a jpeg " << i;
  }
  DatasetConfig config;
  config.name = "dummy";
  config.root = root;
  auto ds = Dataset::Open(config);
  if (!ds.ok()) return nullptr;
  return std::move(ds).value();
}

}  // namespace testing_internal
}  // namespace nearprep

#endif  // NEARPREP_TESTS_UNIT_PIPELINE_FAKE_BACKEND_H_
