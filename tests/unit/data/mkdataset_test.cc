// Tests of the synthetic dataset generator: the files decode, have the
// promised variety, are deterministic, and the bad files are bad in the
// promised ways.
#include "cli/mkdataset/mkdataset.h"

#include <turbojpeg.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/data/dataset.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;

using testing_common::TempDir;

std::vector<uint8_t> ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool HasMarker(const std::vector<uint8_t>& b, uint8_t marker) {
  for (size_t i = 0; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == marker) return true;
  }
  return false;
}

struct Header {
  bool ok = false;
  int w = 0, h = 0, subsamp = -1;
};

Header ReadHeader(tjhandle tj, const std::vector<uint8_t>& b) {
  Header hd;
  int cs = 0;
  hd.ok = tjDecompressHeader3(tj, b.data(), b.size(), &hd.w, &hd.h, &hd.subsamp,
                              &cs) == 0;
  return hd;
}

// Full decode; true when TurboJPEG reports neither error nor warning.
bool DecodesCleanly(tjhandle tj, const std::vector<uint8_t>& b, int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  return tjDecompress2(tj, b.data(), b.size(), rgb.data(), w, 0, h, TJPF_RGB,
                       TJFLAG_FASTDCT) == 0;
}

TEST(MkDatasetTest, WritesDecodableFilesWithVariety) {
  TempDir tmp;
  MkDatasetOptions o;
  o.output_dir = (tmp.dir() / "ds").string();
  o.num_classes = 3;
  o.images_per_class = 12;
  o.seed = 5;
  o.min_side = 48;
  o.max_side = 320;
  MkDatasetSummary sum;
  ASSERT_TRUE(MakeSyntheticDataset(o, &sum).ok());
  ASSERT_EQ(sum.images.size(), 36u);
  EXPECT_TRUE(sum.bad_files.empty());
  EXPECT_FALSE(fs::exists(tmp.dir() / "ds" / "bad"));
  tjhandle tj = tjInitDecompress();
  std::set<int> subsamplings, widths, heights, qualities;
  int progressive = 0, upper_ext = 0;
  for (const auto& img : sum.images) {
    const auto bytes = ReadAll(tmp.dir() / "ds" / img.path);
    ASSERT_EQ(bytes.size(), img.bytes) << img.path;
    const Header hd = ReadHeader(tj, bytes);
    ASSERT_TRUE(hd.ok) << img.path;
    EXPECT_EQ(hd.w, img.width);
    EXPECT_EQ(hd.h, img.height);
    EXPECT_EQ(hd.subsamp, img.subsampling) << img.path;
    EXPECT_GE(img.width, 48);
    EXPECT_LE(img.width, 320);
    EXPECT_GE(img.height, 48);
    EXPECT_LE(img.height, 320);
    EXPECT_TRUE(DecodesCleanly(tj, bytes, hd.w, hd.h)) << img.path;
    EXPECT_EQ(HasMarker(bytes, 0xC2), img.progressive) << img.path;
    progressive += img.progressive;
    upper_ext += img.path.find(".JPEG") != std::string::npos;
    subsamplings.insert(hd.subsamp);
    widths.insert(hd.w);
    heights.insert(hd.h);
    qualities.insert(img.quality);
    EXPECT_EQ(img.path.substr(0, 10),
              "class_00" + std::to_string(img.label) + "/");
  }
  tjDestroy(tj);
  EXPECT_EQ(subsamplings,
            (std::set<int>{TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY}));
  EXPECT_GE(progressive, 5);
  EXPECT_GE(upper_ext, 3);
  EXPECT_GE(widths.size(), 20u);
  EXPECT_GE(heights.size(), 20u);
  EXPECT_GE(qualities.size(), 10u);

  // The dataset scanner sees exactly these files, one class per folder.
  DatasetConfig c;
  c.name = "synthetic";
  c.root = o.output_dir;
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 36u);
  EXPECT_EQ((*ds)->num_classes(), 3u);
  EXPECT_EQ((*ds)->num_refused(), 0u);
}

TEST(MkDatasetTest, DeterministicGivenTheSeed) {
  TempDir tmp;
  MkDatasetOptions o;
  o.num_classes = 2;
  o.images_per_class = 3;
  o.max_side = 200;
  o.with_bad_files = true;
  o.output_dir = (tmp.dir() / "a").string();
  ASSERT_TRUE(MakeSyntheticDataset(o).ok());
  o.output_dir = (tmp.dir() / "b").string();
  ASSERT_TRUE(MakeSyntheticDataset(o).ok());
  o.output_dir = (tmp.dir() / "c").string();
  o.seed = 2;
  ASSERT_TRUE(MakeSyntheticDataset(o).ok());
  int files = 0, differ = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp.dir() / "a")) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), tmp.dir() / "a");
    ++files;
    EXPECT_EQ(ReadAll(e.path()), ReadAll(tmp.dir() / "b" / rel)) << rel;
    if (rel.filename().string().rfind("bad_", 0) != 0) {
      differ += ReadAll(e.path()) != ReadAll(tmp.dir() / "c" / rel);
    }
  }
  EXPECT_EQ(files, 6 + 5);
  EXPECT_EQ(differ, 6);
}

TEST(MkDatasetTest, BadFilesAreBadInThePromisedWays) {
  TempDir tmp;
  MkDatasetOptions o;
  o.output_dir = tmp.dir().string();
  o.num_classes = 1;
  o.images_per_class = 1;
  o.with_bad_files = true;
  MkDatasetSummary sum;
  ASSERT_TRUE(MakeSyntheticDataset(o, &sum).ok());
  EXPECT_EQ(sum.bad_files,
            (std::vector<std::string>{
                "class_000/bad_corrupt.jpg", "class_000/bad_truncated.jpg",
                "class_000/bad_empty.jpg", "class_000/bad_not_a_jpeg.jpg",
                "class_000/bad_huge_header.jpg"}));
  EXPECT_FALSE(fs::exists(tmp.dir() / "bad"));
  const fs::path bad = tmp.dir() / "class_000";
  tjhandle tj = tjInitDecompress();

  const auto empty = ReadAll(bad / "bad_empty.jpg");
  EXPECT_TRUE(empty.empty());

  const auto text = ReadAll(bad / "bad_not_a_jpeg.jpg");
  ASSERT_FALSE(text.empty());
  EXPECT_FALSE(ReadHeader(tj, text).ok);

  const auto huge = ReadAll(bad / "bad_huge_header.jpg");
  const Header hh = ReadHeader(tj, huge);
  ASSERT_TRUE(hh.ok);
  EXPECT_EQ(hh.w, 65000);
  EXPECT_EQ(hh.h, 65000);
  EXPECT_GE(uint64_t{65000} * 65000 * 3, uint64_t{1} << 29);

  const auto truncated = ReadAll(bad / "bad_truncated.jpg");
  const Header th = ReadHeader(tj, truncated);
  ASSERT_TRUE(th.ok);                        // headers intact
  EXPECT_FALSE(HasMarker(truncated, 0xD9));  // no EOI
  EXPECT_FALSE(DecodesCleanly(tj, truncated, th.w, th.h));
  const auto& ok_image = sum.images[0];
  const auto good = ReadAll(tmp.dir() / ok_image.path);
  EXPECT_TRUE(DecodesCleanly(tj, good, ok_image.width, ok_image.height));

  const auto corrupt = ReadAll(bad / "bad_corrupt.jpg");
  const Header ch = ReadHeader(tj, corrupt);
  ASSERT_TRUE(ch.ok);  // headers intact
  EXPECT_EQ(ch.w, 96);
  EXPECT_EQ(ch.h, 80);
  EXPECT_FALSE(DecodesCleanly(tj, corrupt, ch.w, ch.h));
  // A fatal error, not just the corrupt-data warning (TurboJPEG reports
  // the code as a warning once one was seen, so check the message).
  EXPECT_NE(std::string(tjGetErrorStr2(tj)).find("progressive"),
            std::string::npos)
      << tjGetErrorStr2(tj);
  tjDestroy(tj);

  // As an image folder the bad files are samples of class_000, not a class
  // of their own (issue 20), sorted before its images.
  DatasetConfig c;
  c.name = "with-bad";
  c.root = o.output_dir;
  auto ds = Dataset::Open(c);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"class_000"}));
  EXPECT_EQ((*ds)->num_classes(), 1u);
  ASSERT_EQ((*ds)->size(), 6u);
  EXPECT_EQ((*ds)->samples()[0].path, "class_000/bad_corrupt.jpg");
  EXPECT_EQ((*ds)->samples()[0].label, 0);
}

TEST(MkDatasetTest, RejectsBadOptions) {
  MkDatasetOptions o;
  EXPECT_EQ(MakeSyntheticDataset(o).code(), absl::StatusCode::kInvalidArgument);
  o.output_dir = "/tmp/never-created-nearprep";
  o.num_classes = 0;
  EXPECT_EQ(MakeSyntheticDataset(o).code(), absl::StatusCode::kInvalidArgument);
  o.num_classes = 1;
  o.min_side = 100;
  o.max_side = 50;
  const auto s = MakeSyntheticDataset(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("min_side"), std::string::npos);
  EXPECT_FALSE(fs::exists("/tmp/never-created-nearprep"));
}

}  // namespace
}  // namespace nearprep
