// Tests of the dataset manifest: both formats, ids and labels, everything
// that must be refused at scan time and again at read time, and concurrent
// reads.
#include "server/data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;

using testing_common::TempDir;

void Write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

std::string Read(const Dataset& ds, uint64_t id) {
  std::vector<uint8_t> bytes;
  const absl::Status s = ds.store().ReadSample(id, &bytes);
  EXPECT_TRUE(s.ok()) << s;
  return std::string(bytes.begin(), bytes.end());
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.dir() / "root";
    outside_ = tmp_.dir() / "outside";
    Write(outside_ / "secret.jpg", "secret");
    fs::create_directories(outside_ / "dir");
    Write(outside_ / "dir" / "x.jpg", "outside-dir");
  }
  DatasetConfig Config() const {
    DatasetConfig c;
    c.name = "t";
    c.root = root_.string();
    return c;
  }
  TempDir tmp_;
  fs::path root_, outside_;
};

TEST_F(DatasetTest, ImageFolderSortsClassesAndIds) {
  Write(root_ / "zebra" / "b.jpg", "zb");
  Write(root_ / "zebra" / "a.JPEG", "za");
  Write(root_ / "apple" / "2.Jpg", "a2");
  Write(root_ / "apple" / "1.png", "a1");
  Write(root_ / "apple" / "notes.txt", "ignored");
  Write(root_ / "apple" / ".hidden.jpg", "ignored");
  Write(root_ / "apple" / "sub" / "deep.jpg", "deep");
  Write(root_ / "mango" / "m.bmp", "m");
  Write(root_ / "top.jpg", "files at the root are ignored");
  Write(root_ / ".git" / "x.jpg", "hidden folder ignored");
  auto ds = Dataset::Open(Config());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  ASSERT_EQ(d.class_names(),
            (std::vector<std::string>{"apple", "mango", "zebra"}));
  EXPECT_EQ(d.num_classes(), 3u);
  EXPECT_EQ(d.num_refused(), 0u);
  const std::vector<std::string> paths = {"apple/1.png",        "apple/2.Jpg",
                                          "apple/sub/deep.jpg", "mango/m.bmp",
                                          "zebra/a.JPEG",       "zebra/b.jpg"};
  const std::vector<int64_t> labels = {0, 0, 0, 1, 2, 2};
  ASSERT_EQ(d.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(d.samples()[i].id, i);
    EXPECT_EQ(d.samples()[i].path, paths[i]);
    EXPECT_EQ(d.samples()[i].label, labels[i]);
  }
  EXPECT_EQ(Read(d, 0), "a1");
  EXPECT_EQ(Read(d, 5), "zb");
  EXPECT_EQ(Read(d, 2), "deep");
}

TEST_F(DatasetTest, RefusesWhatLeavesTheRootAndNonRegularFiles) {
  Write(root_ / "cls" / "ok.jpg", "ok");
  Write(root_ / "other" / "target.jpg", "inside");
  fs::create_symlink(outside_ / "secret.jpg", root_ / "cls" / "escape.jpg");
  fs::create_symlink("../../outside/secret.jpg",
                     root_ / "cls" / "rel_escape.jpg");
  fs::create_symlink(root_ / "other" / "target.jpg",
                     root_ / "cls" / "inside.jpg");
  fs::create_symlink(root_ / "missing.jpg", root_ / "cls" / "dangling.jpg");
  fs::create_symlink(outside_ / "dir", root_ / "escaping_class");
  fs::create_symlink(root_ / "other", root_ / "cls" / "linked_folder");
  ASSERT_EQ(::mkfifo((root_ / "cls" / "fifo.jpg").c_str(), 0600), 0);
  auto ds = Dataset::Open(Config());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  // escape, rel_escape, dangling, escaping_class, linked_folder, fifo.
  EXPECT_EQ(d.num_refused(), 6u);
  EXPECT_EQ(d.class_names(), (std::vector<std::string>{"cls", "other"}));
  std::vector<std::string> paths;
  for (const auto& s : d.samples()) paths.push_back(s.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"cls/inside.jpg", "cls/ok.jpg",
                                             "other/target.jpg"}));
  EXPECT_EQ(Read(d, 0), "inside");  // a symlink within the root is served
  for (uint64_t id = 0; id < d.size(); ++id) {
    EXPECT_NE(Read(d, id), "secret");
  }
}

TEST_F(DatasetTest, ReadRechecksAtOpen) {
  Write(root_ / "c" / "a.jpg", "aaaa");
  Write(root_ / "c" / "b.jpg", "bbbb");
  Write(root_ / "c" / "d.jpg", "dddd");
  Write(root_ / "c" / "e.jpg", "eeee");
  Write(root_ / "d" / "f.jpg", "ffff");
  auto ds = Dataset::Open(Config());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  ASSERT_EQ(d.size(), 5u);
  std::vector<uint8_t> out;
  // a.jpg swapped for a symlink to a file outside.
  fs::remove(root_ / "c" / "a.jpg");
  fs::create_symlink(outside_ / "secret.jpg", root_ / "c" / "a.jpg");
  EXPECT_EQ(d.store().ReadSample(0, &out).code(), absl::StatusCode::kPermissionDenied);
  // b.jpg deleted.
  fs::remove(root_ / "c" / "b.jpg");
  EXPECT_EQ(d.store().ReadSample(1, &out).code(), absl::StatusCode::kNotFound);
  // d.jpg replaced by a FIFO: refused, and the open does not block.
  fs::remove(root_ / "c" / "d.jpg");
  ASSERT_EQ(::mkfifo((root_ / "c" / "d.jpg").c_str(), 0600), 0);
  EXPECT_EQ(d.store().ReadSample(2, &out).code(), absl::StatusCode::kPermissionDenied);
  // e.jpg grew over the limit is checked with its own config below.
  // The folder of f.jpg swapped for a symlink to a folder outside.
  fs::rename(root_ / "d", tmp_.dir() / "moved");
  fs::create_symlink(outside_ / "dir", root_ / "d");
  Write(outside_ / "dir" / "f.jpg", "outside");
  EXPECT_EQ(d.store().ReadSample(4, &out).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(d.store().ReadSample(5, &out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Read(d, 3), "eeee");
}

TEST_F(DatasetTest, RefusesFilesOverTheSizeLimit) {
  Write(root_ / "c" / "small.jpg", std::string(100, 'x'));
  Write(root_ / "c" / "big.jpg", std::string(101, 'y'));
  DatasetConfig c = Config();
  c.max_file_bytes = 100;
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint8_t> out;
  EXPECT_EQ((*ds)->store().ReadSample(0, &out).code(),
            absl::StatusCode::kResourceExhausted);  // big.jpg sorts first
  EXPECT_TRUE((*ds)->store().ReadSample(1, &out).ok());
  EXPECT_EQ(out.size(), 100u);
}

TEST_F(DatasetTest, EmptyFileReadsAsEmpty) {
  Write(root_ / "c" / "empty.jpg", "");
  auto ds = Dataset::Open(Config());
  ASSERT_TRUE(ds.ok());
  std::vector<uint8_t> out = {1, 2, 3};
  EXPECT_TRUE((*ds)->store().ReadSample(0, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST_F(DatasetTest, FileListFormat) {
  Write(root_ / "imgs" / "b.jpg", "b");
  Write(root_ / "imgs" / "a.jpg", "a");
  Write(root_ / "imgs" / "with space.jpg", "s");
  Write(root_ / "other.jpg", "o");
  fs::create_directories(root_ / "afolder");
  fs::create_symlink(outside_ / "secret.jpg", root_ / "imgs" / "escape.jpg");
  Write(root_ / "list.txt",
        "# a comment line\n"
        "imgs/b.jpg 3\n"
        "./imgs//a.jpg\t1   # trailing comment\n"
        "imgs/with space.jpg 0\r\n"
        "\n"
        "other.jpg 7\n"
        "/etc/passwd 1\n"
        "imgs/../other.jpg 2\n"
        "imgs/escape.jpg 1\n"
        "imgs/missing.jpg 1\n"
        "imgs/b.jpg 4\n"
        "afolder 1\n");
  DatasetConfig c = Config();
  c.format = "file_list";
  c.list_file = "list.txt";
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  // absolute, '..', escape, missing, duplicate, folder.
  EXPECT_EQ(d.num_refused(), 6u);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d.samples()[0].path, "imgs/a.jpg");
  EXPECT_EQ(d.samples()[0].label, 1);
  EXPECT_EQ(d.samples()[1].path, "imgs/b.jpg");
  EXPECT_EQ(d.samples()[1].label, 3);
  EXPECT_EQ(d.samples()[2].path, "imgs/with space.jpg");
  EXPECT_EQ(d.samples()[2].label, 0);
  EXPECT_EQ(d.samples()[3].path, "other.jpg");
  EXPECT_EQ(d.num_classes(), 8u);
  EXPECT_EQ(Read(d, 2), "s");
  // An absolute list path works too.
  c.list_file = (root_ / "list.txt").string();
  EXPECT_TRUE(Dataset::Open(c).ok());
}

TEST_F(DatasetTest, FileListErrors) {
  Write(root_ / "a.jpg", "a");
  DatasetConfig c = Config();
  c.format = "file_list";
  c.list_file = "nope.txt";
  EXPECT_EQ(Dataset::Open(c).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.list_file = "";
  EXPECT_EQ(Dataset::Open(c).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* bad :
       {"a.jpg\n", "a.jpg x\n", "a.jpg -1\n", "a.jpg 99999999999\n", " 3\n"}) {
    Write(root_ / "list.txt", bad);
    c.list_file = "list.txt";
    const auto s = Dataset::Open(c).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("line 1"), std::string::npos) << s;
  }
}

TEST_F(DatasetTest, OpenErrors) {
  DatasetConfig c = Config();
  EXPECT_EQ(Dataset::Open(c).status().code(), absl::StatusCode::kNotFound);
  Write(root_ / "c" / "a.jpg", "a");
  c.format = "lmdb";
  EXPECT_EQ(Dataset::Open(c).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.format = "image_folder";
  c.root = (root_ / "c" / "a.jpg").string();
  EXPECT_EQ(Dataset::Open(c).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DatasetTest, RootGivenThroughASymlinkWorks) {
  Write(root_ / "c" / "a.jpg", "a");
  fs::create_symlink(root_, tmp_.dir() / "alias");
  DatasetConfig c = Config();
  c.root = (tmp_.dir() / "alias").string();
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 1u);
  EXPECT_EQ((*ds)->num_refused(), 0u);
  EXPECT_EQ(Read(**ds, 0), "a");
}

TEST_F(DatasetTest, ConcurrentReadsReturnTheRightBytes) {
  const int n = 64;
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "f%03d.jpg", i);
    Write(root_ / "c" / name,
          std::string(1000 + i * 37, static_cast<char>('A' + i % 26)));
  }
  auto ds = Dataset::Open(Config());
  ASSERT_TRUE(ds.ok());
  const Dataset& d = **ds;
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int rep = 0; rep < 20; ++rep) {
        for (int i = 0; i < n; ++i) {
          const int id = (i * 7 + t * 13 + rep) % n;
          if (!d.store().ReadSample(id, &out).ok() ||
              out.size() != static_cast<size_t>(1000 + id * 37) ||
              out[0] != 'A' + id % 26 || out.back() != 'A' + id % 26) {
            ++bad[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(DatasetRealTest, ImagenetSample) {
  const std::string root =
      NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200";
  if (!fs::exists(root)) GTEST_SKIP() << root << " not present";
  DatasetConfig c;
  c.name = "imagenet-sample-200";
  c.root = root;
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 200u);
  EXPECT_GT((*ds)->num_classes(), 1u);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE((*ds)->store().ReadSample(199, &bytes).ok());
  ASSERT_GT(bytes.size(), 2u);
  EXPECT_EQ(bytes[0], 0xFF);
  EXPECT_EQ(bytes[1], 0xD8);
  for (size_t i = 1; i < (*ds)->size(); ++i) {
    EXPECT_LT((*ds)->samples()[i - 1].path, (*ds)->samples()[i].path);
    EXPECT_LE((*ds)->samples()[i - 1].label, (*ds)->samples()[i].label);
  }
}

}  // namespace
}  // namespace nearprep
