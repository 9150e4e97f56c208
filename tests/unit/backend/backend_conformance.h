// The shared conformance suite every Backend must pass.
//
// Use: include this header in exactly one test .cc of the backend and
// instantiate it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Fpga, BackendConformanceTest,
//       ::testing::ValuesIn(OnEveryStorage({"fpga", [] { return MakeFpga(); }})),
//       [](const auto& info) { return info.param.name; });
//
// OnEveryStorage runs the suite twice: the dataset read from its folder
// (PosixStorage), and read through a FaultInjectionStorage over it
// ("NAME_faults"), where it also checks that injected open and read errors
// become those samples' statuses.
//
// Link: nearprep_backend, nearprep_storage_testing, libjpeg-turbo::turbojpeg,
// GTest.
//
// What it checks, on a generated dataset (test_images.h) and several
// TF_COMPAT WorkContexts (whole-image resize, random resized crop, center
// crop; float32 / uint8 / bfloat16; NHWC / NCHW; random draws on):
//  - every good sample's bytes and parameters equal the reference
//    CpuBackend's, whatever the chunk it is processed in;
//  - broken files (truncated, empty, not a JPEG, huge header) get a non-OK
//    status and do not disturb the other samples of their chunk;
//  - Process() called concurrently from two threads gives the same results;
//  - (through FaultInjectionStorage) a sample whose open or reads fail gets
//    that error (its code, naming the sample) as its status, the others are
//    unaffected, and the sample is served again once the fault is gone.
//
// Thread-safety: test code; the fixture is per test.
#ifndef NEARPREP_TESTS_UNIT_BACKEND_BACKEND_CONFORMANCE_H_
#define NEARPREP_TESTS_UNIT_BACKEND_BACKEND_CONFORMANCE_H_

#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/backend/backend.h"
#include "server/backend/cpu_backend.h"
#include "server/data/dataset.h"
#include "server/data/sample_source.h"
#include "server/storage/fault_injection_storage.h"
#include "server/storage/posix_storage.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/backend/test_images.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {

struct BackendUnderTest {
  std::string name;
  std::function<std::shared_ptr<Backend>()> make;
  // Read the dataset through a FaultInjectionStorage (over its folder).
  bool fault_injection = false;
};

// `b` reading the dataset's folder, and `b` reading through a
// FaultInjectionStorage ("NAME_faults").
inline std::vector<BackendUnderTest> OnEveryStorage(const BackendUnderTest& b) {
  BackendUnderTest faults = b;
  faults.name += "_faults";
  faults.fault_injection = true;
  return {b, faults};
}

inline void PrintTo(const BackendUnderTest& b, std::ostream* os) {
  *os << b.name;
}

namespace conformance_internal {

struct SampleResult {
  bool ok = false;
  absl::Status status;
  SampleParams params;
  std::vector<uint8_t> bytes;
};

// Processes `ids` with `backend`, `chunk` samples per Process() call.
inline std::vector<SampleResult> ProcessAll(Backend& backend,
                                            const WorkContext& ctx,
                                            const std::vector<uint64_t>& ids,
                                            size_t chunk) {
  const size_t bytes = ctx.output.SampleBytes(ctx.spec);
  std::vector<SampleResult> out(ids.size());
  std::vector<uint8_t> buf(ids.size() * bytes);
  std::vector<SampleWork> works(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    works[i].sample_id = ids[i];
    works[i].out = buf.data() + i * bytes;
  }
  for (size_t i = 0; i < ids.size(); i += chunk) {
    backend.Process(ctx, works.data() + i, std::min(chunk, ids.size() - i));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i].ok = works[i].status.ok();
    out[i].status = works[i].status;
    out[i].params = works[i].params;
    if (out[i].ok) {
      out[i].bytes.assign(works[i].out, works[i].out + bytes);
    }
  }
  return out;
}

inline bool SameParams(const SampleParams& a, const SampleParams& b) {
  return a.flip == b.flip && a.brightness_delta == b.brightness_delta &&
         a.saturation_factor == b.saturation_factor && a.crop.y == b.crop.y &&
         a.crop.x == b.crop.x && a.crop.height == b.crop.height &&
         a.crop.width == b.crop.width;
}

inline std::vector<WorkContext> Contexts(const Dataset* ds) {
  std::vector<WorkContext> out;
  WorkContext whole;
  whole.source = std::make_shared<const SampleSource>(*ds);
  whole.seed = 1234;
  whole.epoch = 2;
  whole.spec.height = 24;
  whole.spec.width = 32;
  whole.spec.flip_probability = 0.5f;
  whole.spec.brightness_max_delta = 32.0f / 255.0f;
  whole.spec.saturation_enabled = true;
  whole.spec.saturation_lower = 0.5f;
  whole.spec.saturation_upper = 1.5f;
  out.push_back(whole);

  WorkContext rrc = whole;
  rrc.spec.crop = CropMode::kRandomResized;
  rrc.spec.height = rrc.spec.width = 20;
  rrc.output.dtype = DType::kUint8;
  rrc.output.layout = Layout::kNCHW;
  rrc.epoch = 7;
  out.push_back(rrc);

  WorkContext center = whole;
  center.spec.crop = CropMode::kCenter;
  center.spec.height = 16;
  center.spec.width = 12;
  center.spec.clip = false;
  center.spec.normalize = true;
  center.spec.mean[0] = 0.485f;
  center.spec.mean[1] = 0.456f;
  center.spec.mean[2] = 0.406f;
  center.spec.std[0] = 0.229f;
  center.spec.std[1] = 0.224f;
  center.spec.std[2] = 0.225f;
  center.output.dtype = DType::kBFloat16;
  out.push_back(center);
  return out;
}

}  // namespace conformance_internal

class BackendConformanceTest
    : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    testing_internal::WriteConformanceDataset(dir_.path());
    DatasetConfig config;
    config.name = "conformance";
    config.root = dir_.path();
    absl::StatusOr<std::unique_ptr<Dataset>> ds;
    if (GetParam().fault_injection) {
      auto base = PosixStorage::Create(dir_.path());
      ASSERT_TRUE(base.ok()) << base.status();
      faults_ = std::make_shared<FaultInjectionStorage>(
          std::shared_ptr<const Storage>(std::move(base).value()));
      ds = Dataset::Open(config, faults_);
    } else {
      ds = Dataset::Open(config);
    }
    ASSERT_TRUE(ds.ok()) << ds.status();
    dataset_ = std::move(ds).value();
    ASSERT_EQ(dataset_->size(), 12u);
    for (const Sample& s : dataset_->samples()) {
      ids_.push_back(s.id);
      bad_.push_back(s.path.find("bad_") != std::string::npos);
    }
    backend_ = GetParam().make();
    ASSERT_NE(backend_, nullptr);
  }

  testing_common::TempDir dir_;
  // With fault_injection: the storage the dataset reads through.
  std::shared_ptr<FaultInjectionStorage> faults_;
  std::unique_ptr<Dataset> dataset_;
  std::vector<uint64_t> ids_;
  std::vector<bool> bad_;
  std::shared_ptr<Backend> backend_;
  CpuBackend reference_;
};

TEST_P(BackendConformanceTest, MatchesCpuReferenceBytes) {
  using conformance_internal::ProcessAll;
  for (const WorkContext& ctx : conformance_internal::Contexts(dataset_.get())) {
    auto want = ProcessAll(reference_, ctx, ids_, 1);
    for (size_t chunk : {size_t{1}, size_t{5}, ids_.size()}) {
      auto got = ProcessAll(*backend_, ctx, ids_, chunk);
      for (size_t i = 0; i < ids_.size(); ++i) {
        SCOPED_TRACE(::testing::Message()
                     << dataset_->samples()[i].path << " crop "
                     << static_cast<int>(ctx.spec.crop) << " chunk " << chunk);
        ASSERT_EQ(want[i].ok, !bad_[i]) << want[i].status;  // reference sanity
        ASSERT_EQ(got[i].ok, want[i].ok) << got[i].status;
        if (!got[i].ok) continue;
        EXPECT_TRUE(conformance_internal::SameParams(got[i].params,
                                                     want[i].params));
        EXPECT_TRUE(got[i].bytes == want[i].bytes) << "output bytes differ";
      }
    }
  }
}

TEST_P(BackendConformanceTest, BadFilesFailWithoutAffectingNeighbours) {
  using conformance_internal::ProcessAll;
  const WorkContext ctx = conformance_internal::Contexts(dataset_.get())[0];
  // Each bad sample alone, and sandwiched between good ones in one call.
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!bad_[i]) continue;
    SCOPED_TRACE(dataset_->samples()[i].path);
    auto alone = ProcessAll(*backend_, ctx, {ids_[i]}, 1);
    EXPECT_FALSE(alone[0].ok);
    EXPECT_FALSE(alone[0].status.message().empty());
    std::vector<uint64_t> sandwich = {ids_[0], ids_[i], ids_[2], ids_[i],
                                      ids_[4]};
    auto got = ProcessAll(*backend_, ctx, sandwich, sandwich.size());
    auto want = ProcessAll(reference_, ctx, sandwich, 1);
    for (size_t k : {0, 2, 4}) {
      ASSERT_TRUE(got[k].ok) << got[k].status;
      EXPECT_TRUE(got[k].bytes == want[k].bytes);
    }
    EXPECT_FALSE(got[1].ok);
    EXPECT_FALSE(got[3].ok);
  }
}

TEST_P(BackendConformanceTest, ConcurrentCallsFromTwoThreads) {
  using conformance_internal::ProcessAll;
  const auto contexts = conformance_internal::Contexts(dataset_.get());
  std::vector<std::vector<conformance_internal::SampleResult>> want;
  for (const auto& ctx : contexts) want.push_back(ProcessAll(reference_, ctx, ids_, 1));
  std::vector<std::vector<std::vector<conformance_internal::SampleResult>>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        for (const auto& ctx : contexts) {
          got[t].push_back(ProcessAll(*backend_, ctx, ids_, 2 + t));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(got[t].size(), 3 * contexts.size());
    for (size_t r = 0; r < got[t].size(); ++r) {
      const auto& w = want[r % contexts.size()];
      for (size_t i = 0; i < ids_.size(); ++i) {
        ASSERT_EQ(got[t][r][i].ok, w[i].ok) << "thread " << t << " sample " << i;
        EXPECT_TRUE(got[t][r][i].bytes == w[i].bytes)
            << "thread " << t << " sample " << i;
      }
    }
  }
}


TEST_P(BackendConformanceTest, InjectedStorageErrorsAreSampleErrors) {
  if (faults_ == nullptr) GTEST_SKIP() << "reads the folder directly";
  using conformance_internal::ProcessAll;
  const WorkContext ctx = conformance_internal::Contexts(dataset_.get())[0];
  const auto want = ProcessAll(reference_, ctx, ids_, 1);
  // Two good samples: one whose reads fail, one whose open fails.
  std::vector<size_t> good;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!bad_[i]) good.push_back(i);
  }
  ASSERT_GE(good.size(), 3u);
  const size_t read_fails = good[0], open_fails = good[2];
  const std::string& read_path = dataset_->samples()[read_fails].path;
  const std::string& open_path = dataset_->samples()[open_fails].path;
  faults_->FailReads(read_path, absl::DataLossError("injected read error"));
  faults_->FailOpen(open_path, absl::UnavailableError("injected open error"));
  for (size_t chunk : {size_t{1}, ids_.size()}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    const auto got = ProcessAll(*backend_, ctx, ids_, chunk);
    for (size_t i = 0; i < ids_.size(); ++i) {
      SCOPED_TRACE(dataset_->samples()[i].path);
      if (i == read_fails || i == open_fails) {
        ASSERT_FALSE(got[i].ok);
        EXPECT_EQ(got[i].status.code(), i == read_fails ? absl::StatusCode::kDataLoss
                                                        : absl::StatusCode::kUnavailable)
            << got[i].status;
        EXPECT_NE(got[i].status.message().find(dataset_->samples()[i].path),
                  std::string::npos)
            << got[i].status;
        continue;
      }
      ASSERT_EQ(got[i].ok, want[i].ok) << got[i].status;
      EXPECT_TRUE(got[i].bytes == want[i].bytes) << "output bytes differ";
    }
  }
  const FaultInjectionStorage::Counts fired = faults_->injected();
  EXPECT_GT(fired.read_errors, 0u);
  EXPECT_GT(fired.open_errors, 0u);
  // The faults gone, the same samples are served, unchanged.
  faults_->Clear();
  const auto again = ProcessAll(*backend_, ctx, ids_, ids_.size());
  for (size_t i : {read_fails, open_fails}) {
    ASSERT_TRUE(again[i].ok) << again[i].status;
    EXPECT_TRUE(again[i].bytes == want[i].bytes);
  }
}

}  // namespace nearprep

#endif  // NEARPREP_TESTS_UNIT_BACKEND_BACKEND_CONFORMANCE_H_
