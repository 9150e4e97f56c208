// Dataset listings over a MemStorage: the image_folder and file_list rules
// without a disk (the posix-only rules, symlinks and FIFOs, are in
// tests/unit/data/dataset_test.cc).
#include "server/storage/sample_listing.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

ListingOptions ImageFolder() {
  ListingOptions o;
  o.name = "m";
  o.extensions = {".jpg", ".jpeg", ".png"};
  return o;
}

std::vector<std::string> Keys(const SampleListing& l) {
  std::vector<std::string> keys;
  for (const auto& s : l.samples) keys.push_back(s.key);
  return keys;
}

TEST(SampleListingTest, ImageFolderFromMemory) {
  MemStorage mem;
  mem.AddFile("zebra/b.jpg", std::string("zb"));
  mem.AddFile("zebra/a.JPEG", std::string("zaa"));
  mem.AddFile("apple/1.png", std::string("a1"));
  mem.AddFile("apple/notes.txt", std::string("ignored"));
  mem.AddFile("apple/.hidden.jpg", std::string("ignored"));
  mem.AddFile("apple/sub/deep.jpg", std::string("deep"));
  mem.AddFile("top.jpg", std::string("ignored: directly under the root"));
  mem.AddFile(".git/x.jpg", std::string("hidden folder"));
  mem.AddDir("empty_class");
  auto l = ListSamples(mem, ImageFolder());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->class_names,
            (std::vector<std::string>{"apple", "empty_class", "zebra"}));
  EXPECT_EQ(l->num_classes, 3u);
  EXPECT_EQ(l->refused, 0u);
  EXPECT_EQ(Keys(*l), (std::vector<std::string>{"apple/1.png",
                                                "apple/sub/deep.jpg",
                                                "zebra/a.JPEG", "zebra/b.jpg"}));
  const ListedSample& s = l->samples[2];
  EXPECT_EQ(s.file, "zebra/a.JPEG");
  EXPECT_EQ(s.size, 3u);
  EXPECT_EQ(s.label, 2);
  EXPECT_TRUE(s.whole_file);
  EXPECT_EQ(s.offset, 0u);
}

TEST(SampleListingTest, FileListFromMemory) {
  MemStorage mem;
  mem.AddFile("imgs/a.jpg", std::string("a"));
  mem.AddFile("imgs/b.jpg", std::string("bb"));
  mem.AddDir("afolder");
  mem.AddFile("list.txt", std::string("# comment\n"
                                      "imgs/b.jpg 3\n"
                                      "./imgs//a.jpg\t1  # trailing\n"
                                      "imgs/../x.jpg 2\n"
                                      "/abs.jpg 1\n"
                                      "imgs/missing.jpg 1\n"
                                      "imgs/b.jpg 4\n"
                                      "afolder 1"));
  ListingOptions o;
  o.name = "m";
  o.format = "file_list";
  o.list_file = "list.txt";
  auto l = ListSamples(mem, o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Keys(*l), (std::vector<std::string>{"imgs/a.jpg", "imgs/b.jpg"}));
  EXPECT_EQ(l->samples[0].label, 1);
  EXPECT_EQ(l->samples[1].label, 3);
  EXPECT_EQ(l->samples[1].size, 2u);
  EXPECT_EQ(l->num_classes, 4u);
  EXPECT_EQ(l->refused, 5u);  // '..', absolute, missing, duplicate, folder
  EXPECT_TRUE(l->class_names.empty());
}

TEST(SampleListingTest, Errors) {
  MemStorage mem;
  ListingOptions o = ImageFolder();
  o.format = "lmdb";
  auto bad = ListSamples(mem, o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "dataset 'm': unknown format 'lmdb' (image_folder, file_list, tfrecord or tar)");
  o.format = "file_list";
  o.list_file = "none.txt";
  auto missing = ListSamples(mem, o);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(),
            "dataset 'm': cannot read list file mem:/none.txt");
  mem.AddFile("l.txt", std::string("ok.jpg 1\nbroken\n"));
  o.list_file = "l.txt";
  auto line = ListSamples(mem, o);
  EXPECT_EQ(line.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(line.status().message().find("line 2"), std::string::npos);
}

TEST(SampleListingTest, FileListRefusesLineWithNulByte) {
  // "a/1.jpg\0x 2" would open a/1.jpg (the file system stops at the NUL)
  // and serve it twice per epoch: the whole line is refused, by number.
  MemStorage mem;
  mem.AddFile("a/1.jpg", std::string("1"));
  using namespace std::string_literals;
  mem.AddFile("l.txt", "a/1.jpg 1\n# fine\na/1.jpg\0x 2\n"s);
  ListingOptions o;
  o.name = "m";
  o.format = "file_list";
  o.list_file = "l.txt";
  auto l = ListSamples(mem, o);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(l.status().message(),
            "dataset 'm': mem:/l.txt line 3: contains a NUL byte");
}

// Issue 20: why a listing is empty, in the words of the error at start.
TEST(SampleListingTest, ExplainsAFlatFolderOfImages) {
  MemStorage mem;
  for (int i = 0; i < 12; ++i) {
    mem.AddFile("img" + std::to_string(i) + ".jpg", std::string("x"));
  }
  auto l = ListSamples(mem, ImageFolder());
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(l->samples.empty());
  const std::string why = ExplainEmptyListing(mem, ImageFolder(), *l);
  EXPECT_NE(why.find("12 .jpg files directly under the root"), std::string::npos)
      << why;
  EXPECT_NE(why.find("no class sub-folder"), std::string::npos) << why;
  EXPECT_NE(why.find("list_file=FILE"), std::string::npos) << why;
}

TEST(SampleListingTest, ExplainsShardsWithoutAFormatAndEmptyFolders) {
  MemStorage mem;
  mem.AddFile("train-00000-of-00002", std::string("records"));
  mem.AddFile("train-00001-of-00002", std::string("records"));
  auto l = ListSamples(mem, ImageFolder());
  ASSERT_TRUE(l.ok());
  std::string why = ExplainEmptyListing(mem, ImageFolder(), *l);
  EXPECT_NE(why.find("2 other files directly under the root"), std::string::npos)
      << why;
  EXPECT_NE(why.find("format=tfrecord or format=tar"), std::string::npos) << why;
  MemStorage empty_classes;
  empty_classes.AddDir("a");
  empty_classes.AddFile("a/notes.txt", std::string("x"));
  l = ListSamples(empty_classes, ImageFolder());
  ASSERT_TRUE(l.ok());
  why = ExplainEmptyListing(empty_classes, ImageFolder(), *l);
  EXPECT_NE(why.find("1 sub-folder with no file ending in .jpg"), std::string::npos)
      << why;
  MemStorage nothing;
  l = ListSamples(nothing, ImageFolder());
  ASSERT_TRUE(l.ok());
  EXPECT_NE(ExplainEmptyListing(nothing, ImageFolder(), *l).find("the root is empty"),
            std::string::npos);
}

TEST(SampleListingTest, NearprepsOwnFilesAreNotShards) {
  for (const char* own : {"MANIFEST", "MANIFEST.tmp", "a.nearprep-index",
                          "a.nearprep-index.tmp.12", "a.idx", "x.nearprep-manifest",
                          "x.nearprep-placement"}) {
    EXPECT_TRUE(IsNearprepOwnFile(own)) << own;
  }
  for (const char* shard : {"train-00000-of-00001", "data-00000-of-00001.tar",
                            "MANIFESTO.tfrecord", "manifest"}) {
    EXPECT_FALSE(IsNearprepOwnFile(shard)) << shard;
  }
}

}  // namespace
}  // namespace nearprep
