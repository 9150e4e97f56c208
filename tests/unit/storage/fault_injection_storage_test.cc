// FaultInjectionStorage: each fault really fires (counted, and seen by a
// Dataset reading through it), only on the chosen files, and Clear() ends it.
#include "server/storage/fault_injection_storage.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/data/dataset.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

class FaultInjectionStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = std::make_shared<MemStorage>();
    mem_->AddFile("c/a.jpg", std::string("aaaaaaaa"));
    mem_->AddFile("c/b.jpg", std::string("bbbbbbbb"));
    mem_->AddFile("d/c.jpg", std::string("cccccccc"));
    faulty_ = std::make_shared<FaultInjectionStorage>(mem_);
  }
  std::unique_ptr<Dataset> Open() {
    DatasetConfig c;
    c.name = "f";
    auto ds = Dataset::Open(c, faulty_);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? std::move(ds).value() : nullptr;
  }
  std::shared_ptr<MemStorage> mem_;
  std::shared_ptr<FaultInjectionStorage> faulty_;
};

TEST_F(FaultInjectionStorageTest, ReadErrorsReachTheReaderAsDataLoss) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  faulty_->FailReads("c/b.jpg", absl::DataLossError("read: Input/output error"));
  std::vector<uint8_t> out;
  const absl::Status s = ds->store().ReadSample(1, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "dataset 'f': c/b.jpg: read: Input/output error");
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(faulty_->injected().read_errors, 1u);
  EXPECT_TRUE(ds->store().ReadSample(0, &out).ok());  // other files are untouched
  EXPECT_EQ(faulty_->injected().read_errors, 1u);
  faulty_->Clear();
  EXPECT_TRUE(ds->store().ReadSample(1, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "bbbbbbbb");
}

TEST_F(FaultInjectionStorageTest, OpenErrorsKeepTheirCode) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  faulty_->FailOpen("c/a.jpg", absl::PermissionDeniedError("Permission denied"));
  std::vector<uint8_t> out;
  const absl::Status s = ds->store().ReadSample(0, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "dataset 'f': c/a.jpg: Permission denied");
  EXPECT_EQ(faulty_->injected().open_errors, 1u);
}

TEST_F(FaultInjectionStorageTest, ShortReadsServeWhatIsThere) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  faulty_->ShortReads("d/c.jpg", 3);
  std::vector<uint8_t> out;
  ASSERT_TRUE(ds->store().ReadSample(2, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "ccc");
  EXPECT_GE(faulty_->injected().short_reads, 1u);
  // The file still claims its full size: a file truncated after open.
  auto f = faulty_->Open("d/c.jpg", OpenOptions{});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->size(), 8u);
}

TEST_F(FaultInjectionStorageTest, SlowReadsTakeAtLeastTheDelay) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  faulty_->SlowReads(FaultInjectionStorage::kEveryFile,
                     std::chrono::milliseconds(30));
  std::vector<uint8_t> out;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ds->store().ReadSample(0, &out).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(30));
  EXPECT_EQ(std::string(out.begin(), out.end()), "aaaaaaaa");
  EXPECT_EQ(faulty_->injected().slow_reads, 1u);
}

TEST_F(FaultInjectionStorageTest, FilesVanishBetweenListingAndRead) {
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 3u);
  faulty_->Vanish("c/b.jpg");
  std::vector<uint8_t> out;
  const absl::Status s = ds->store().ReadSample(1, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "dataset 'f': c/b.jpg: No such file or directory");
  EXPECT_GE(faulty_->injected().vanished, 1u);
  // A listing taken now does not see it at all.
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->size(), 2u);
  EXPECT_EQ(again->samples()[1].path, "d/c.jpg");
}

TEST_F(FaultInjectionStorageTest, EveryFileFaultsApplyToAllButOwnFaultsWin) {
  faulty_->FailReads(FaultInjectionStorage::kEveryFile,
                     absl::DataLossError("read: broken disk"));
  faulty_->SlowReads("c/a.jpg", std::chrono::microseconds(1));
  auto ds = Open();
  ASSERT_NE(ds, nullptr);
  std::vector<uint8_t> out;
  EXPECT_TRUE(ds->store().ReadSample(0, &out).ok());  // has its own (slow) faults only
  EXPECT_EQ(ds->store().ReadSample(1, &out).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ds->store().ReadSample(2, &out).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(faulty_->injected().read_errors, 2u);
}

}  // namespace
}  // namespace nearprep
