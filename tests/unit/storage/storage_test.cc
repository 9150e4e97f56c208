// Storage implementations: one set of behaviours run on PosixStorage (a temp
// folder) and MemStorage, then what only the posix one has (symlinks, the
// O_NOFOLLOW walk, FIFOs, O_DIRECT).
#include "server/storage/storage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/mem_storage.h"
#include "server/storage/posix_storage.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;
using testing_common::TempDir;

// Builds files in one implementation.
class Fixture {
 public:
  virtual ~Fixture() = default;
  virtual void Put(const std::string& path, const std::string& bytes) = 0;
  virtual void Remove(const std::string& path) = 0;
  virtual void MakeDir(const std::string& path) = 0;
  virtual const Storage& storage() = 0;
};

class PosixFixture : public Fixture {
 public:
  PosixFixture() {
    auto s = PosixStorage::Create(dir_.path());
    EXPECT_TRUE(s.ok()) << s.status();
    storage_ = std::move(s).value();
  }
  void Put(const std::string& path, const std::string& bytes) override {
    const fs::path p = fs::path(dir_.path()) / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  void Remove(const std::string& path) override {
    fs::remove(fs::path(dir_.path()) / path);
  }
  void MakeDir(const std::string& path) override {
    fs::create_directories(fs::path(dir_.path()) / path);
  }
  const Storage& storage() override { return *storage_; }

 private:
  TempDir dir_{"storage"};
  std::unique_ptr<PosixStorage> storage_;
};

class MemFixture : public Fixture {
 public:
  void Put(const std::string& path, const std::string& bytes) override {
    storage_.AddFile(path, bytes);
  }
  void Remove(const std::string& path) override { storage_.RemoveFile(path); }
  void MakeDir(const std::string& path) override { storage_.AddDir(path); }
  const Storage& storage() override { return storage_; }

 private:
  MemStorage storage_;
};

class StorageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      f_ = std::make_unique<PosixFixture>();
    } else {
      f_ = std::make_unique<MemFixture>();
    }
  }
  const Storage& s() { return f_->storage(); }
  std::string ReadAll(const std::string& path) {
    auto file = s().Open(path, OpenOptions{});
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return "";
    std::vector<uint8_t> bytes;
    EXPECT_TRUE(ReadRange(**file, 0, (*file)->size(), &bytes).ok());
    return std::string(bytes.begin(), bytes.end());
  }
  std::unique_ptr<Fixture> f_;
};

TEST_P(StorageTest, ListsFoldersAndStatsFiles) {
  f_->Put("b/x.jpg", "xx");
  f_->Put("a/y.jpg", "yyy");
  f_->Put("a/sub/z.jpg", "z");
  f_->MakeDir("empty");
  std::vector<std::string> names;
  ASSERT_TRUE(s().ListDir("", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "empty"}));
  ASSERT_TRUE(s().ListDir("a", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"sub", "y.jpg"}));
  ASSERT_TRUE(s().ListDir("empty", &names).ok());
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(s().ListDir("nope", &names).code(), absl::StatusCode::kNotFound);

  auto info = s().Lstat("a/y.jpg");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->size, 3u);
  info = s().Stat("a/sub");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kDirectory);
  EXPECT_EQ(s().Stat("a/none.jpg").status().code(), absl::StatusCode::kNotFound);
  auto r = s().Resolve("a/y.jpg");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "a/y.jpg");
  EXPECT_EQ(s().Resolve("a/none.jpg").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StorageTest, ReadsWholeFilesAndRanges) {
  f_->Put("c/f.bin", "0123456789");
  EXPECT_EQ(ReadAll("c/f.bin"), "0123456789");
  auto file = s().Open("c/f.bin", OpenOptions{});
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->size(), 10u);
  std::vector<uint8_t> out;
  ASSERT_TRUE(ReadRange(**file, 3, 4, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "3456");
  // A range past the end is cut at the end of the file.
  ASSERT_TRUE(ReadRange(**file, 8, 5, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "89");
  ASSERT_TRUE(ReadRange(**file, 20, 5, &out).ok());
  EXPECT_TRUE(out.empty());
  // An opened file keeps its bytes when the name goes away.
  f_->Remove("c/f.bin");
  ASSERT_TRUE(ReadRange(**file, 0, 2, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "01");
  EXPECT_EQ(s().Open("c/f.bin", OpenOptions{}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StorageTest, OpenRefusesFoldersAndUncleanPaths) {
  f_->Put("d/f.jpg", "f");
  const auto dir = s().Open("d", OpenOptions{});
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(dir.status().message(), "not a regular file");
  EXPECT_FALSE(s().Open("d/../d/f.jpg", OpenOptions{}).ok());
  EXPECT_FALSE(s().Open("d//f.jpg", OpenOptions{}).ok());
  EXPECT_EQ(ReadAll("d/f.jpg"), "f");
}

TEST_P(StorageTest, ConfigurationFilesMayBeReadWithoutTheWalk) {
  f_->Put("lists/train.txt", "a 1\nb 2\n");
  std::string text;
  ASSERT_TRUE(ReadFileToString(s(), "lists/train.txt", &text).ok());
  EXPECT_EQ(text, "a 1\nb 2\n");
  EXPECT_EQ(ReadFileToString(s(), "lists/none.txt", &text).code(),
            absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Implementations, StorageTest,
                         ::testing::Values("posix", "mem"),
                         [](const auto& info) { return info.param; });

class PosixStorageTest : public ::testing::Test {
 protected:
  void Write(const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  std::unique_ptr<PosixStorage> Make() {
    auto s = PosixStorage::Create(root_.string());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  TempDir tmp_{"posix_storage"};
  fs::path root_ = fs::path(tmp_.path()) / "root";
  fs::path outside_ = fs::path(tmp_.path()) / "outside";
};

TEST_F(PosixStorageTest, CreateChecksTheRoot) {
  auto missing = PosixStorage::Create(root_.string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(root_.string()), std::string::npos);
  Write(root_ / "f.jpg", "f");
  auto file = PosixStorage::Create((root_ / "f.jpg").string());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("is not a folder"), std::string::npos);
  fs::create_symlink(root_, fs::path(tmp_.path()) / "alias");
  auto alias = PosixStorage::Create((fs::path(tmp_.path()) / "alias").string());
  ASSERT_TRUE(alias.ok());
  EXPECT_EQ((*alias)->real_root(), fs::canonical(root_).string());
  EXPECT_EQ((*alias)->Describe("a/b.jpg"),
            fs::canonical(root_).string() + "/a/b.jpg");
}

TEST_F(PosixStorageTest, TheWalkNeverFollowsASymlink) {
  Write(root_ / "c" / "ok.jpg", "ok");
  Write(outside_ / "secret.jpg", "secret");
  fs::create_directories(outside_ / "dir");
  Write(outside_ / "dir" / "x.jpg", "x");
  fs::create_symlink(outside_ / "secret.jpg", root_ / "c" / "link.jpg");
  fs::create_symlink(outside_ / "dir", root_ / "d");
  fs::create_symlink(root_ / "c" / "ok.jpg", root_ / "c" / "inside.jpg");
  auto s = Make();
  ASSERT_NE(s, nullptr);
  auto link = s->Open("c/link.jpg", OpenOptions{});
  EXPECT_EQ(link.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(link.status().message().find("symlink not allowed here"),
            std::string::npos)
      << link.status();
  EXPECT_EQ(s->Open("d/x.jpg", OpenOptions{}).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Even a symlink that stays inside is refused by the walk; listings open
  // the resolved path instead.
  EXPECT_FALSE(s->Open("c/inside.jpg", OpenOptions{}).ok());
  auto resolved = s->Resolve("c/inside.jpg");
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, "c/ok.jpg");
  EXPECT_EQ(s->Resolve("c/link.jpg").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->Resolve("d").status().code(),
            absl::StatusCode::kPermissionDenied);
  auto lst = s->Lstat("c/link.jpg");
  ASSERT_TRUE(lst.ok());
  EXPECT_EQ(lst->type, FileType::kSymlink);
  // A plain open (configuration files) follows it.
  OpenOptions follow;
  follow.no_follow = false;
  EXPECT_TRUE(s->Open("c/link.jpg", follow).ok());
  EXPECT_TRUE(s->Open((outside_ / "secret.jpg").string(), follow).ok());
}

TEST_F(PosixStorageTest, AFifoIsRefusedWithoutBlocking) {
  fs::create_directories(root_ / "c");
  ASSERT_EQ(::mkfifo((root_ / "c" / "p.jpg").c_str(), 0600), 0);
  auto s = Make();
  ASSERT_NE(s, nullptr);
  auto info = s->Lstat("c/p.jpg");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kOther);
  const auto f = s->Open("c/p.jpg", OpenOptions{});
  EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PosixStorageTest, DirectReadsOfAlignedBuffers) {
  const std::string bytes(3 * 4096 + 100, 'q');
  Write(root_ / "c" / "big.bin", bytes);
  auto s = Make();
  ASSERT_NE(s, nullptr);
  OpenOptions direct;
  direct.direct = true;
  auto f = s->Open("c/big.bin", direct);
  if (!f.ok()) GTEST_SKIP() << "O_DIRECT not supported here: " << f.status();
  EXPECT_EQ((*f)->size(), bytes.size());
  // An aligned buffer and length: the whole file (short at its end).
  void* mem = nullptr;
  ASSERT_EQ(::posix_memalign(&mem, 4096, 4 * 4096), 0);
  size_t got = 0;
  const absl::Status st =
      (*f)->Read(0, 4 * 4096, static_cast<uint8_t*>(mem), &got);
  if (st.ok()) {
    EXPECT_EQ(got, bytes.size());
    EXPECT_EQ(std::string(static_cast<char*>(mem), got), bytes);
  } else {
    // tmpfs-like file systems may refuse O_DIRECT reads: INVALID_ARGUMENT.
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  std::free(mem);
}

}  // namespace
}  // namespace nearprep
