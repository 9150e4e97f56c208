// Fuzz target: the file_list dataset format. The bytes become the list file
// of a temporary dataset root that holds real files, a folder, and symlinks
// leading inside the root, outside it, in a loop and nowhere; a sibling
// folder outside the root holds a "secret" file. Checks:
//  - Open either fails with INVALID_ARGUMENT (and a message) or yields a
//    manifest whose every entry is a clean relative path (no '/', '..', '.'
//    or empty components), sorted, unique, with id == index and a label in
//    [0, 2^31), and num_classes == largest label + 1;
//  - every sample reads back (ReadSample OK) as one of the files inside the
//    root, never the outside secret; an id past the end is OUT_OF_RANGE.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/data/dataset.h"
#include "tests/fuzz/fuzz_targets.h"

namespace nearprep {
namespace fuzz {
namespace {

constexpr char kTarget[] = "file_list";
#define CHECK_LIST(cond, msg) NEARPREP_FUZZ_CHECK(kTarget, cond, msg)

constexpr char kSecret[] = "SECRET-OUTSIDE-THE-ROOT";

struct Fixture {
  std::string base;       // temp folder
  std::string root;       // base/root
  std::string list_path;  // base/list.txt (outside the root)
  std::set<std::string> inside_contents;
};

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    f->base = (std::filesystem::temp_directory_path() /
               ("nearprep_fuzz_list_" + std::to_string(::getpid())))
                  .string();
    f->root = f->base + "/root";
    f->list_path = f->base + "/list.txt";
    namespace fs = std::filesystem;
    fs::create_directories(f->root + "/sub/deeper");
    fs::create_directories(f->root + "/dir");
    fs::create_directories(f->base + "/outside");
    const std::vector<std::pair<std::string, std::string>> files = {
        {"a.jpg", "content of a"},
        {"b c.jpg", "content of b c"},
        {"sub/b.jpg", "content of sub/b"},
        {"sub/deeper/c.jpg", "content of sub/deeper/c"},
        {"dir/d.png", "content of dir/d"},
    };
    for (const auto& [rel, content] : files) {
      Write(f->root + "/" + rel, content);
      f->inside_contents.insert(content);
    }
    Write(f->base + "/outside/secret.jpg", kSecret);
    std::error_code ec;
    fs::create_symlink("a.jpg", f->root + "/in_link.jpg", ec);
    fs::create_symlink("../a.jpg", f->root + "/sub/up_link.jpg", ec);
    fs::create_symlink("../outside/secret.jpg", f->root + "/out_link.jpg", ec);
    fs::create_symlink(f->base + "/outside/secret.jpg",
                       f->root + "/abs_link.jpg", ec);
    fs::create_symlink("../outside", f->root + "/out_dir", ec);
    fs::create_symlink("loop.jpg", f->root + "/loop.jpg", ec);
    fs::create_symlink("nowhere.jpg", f->root + "/dangling.jpg", ec);
    fs::create_symlink("sub", f->root + "/sub_link", ec);
    static std::string base_copy = f->base;
    std::atexit([] {
      std::error_code ec2;
      std::filesystem::remove_all(base_copy, ec2);
    });
    return f;
  }();
  return *fixture;
}

}  // namespace

int FuzzFileList(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // Bound the work per input.
  const Fixture& f = GetFixture();
  {
    std::ofstream list(f.list_path, std::ios::binary | std::ios::trunc);
    list.write(reinterpret_cast<const char*>(data),
               static_cast<std::streamsize>(size));
  }
  DatasetConfig c;
  c.name = "fuzz";
  c.format = "file_list";
  c.root = f.root;
  c.list_file = f.list_path;
  const absl::StatusOr<std::unique_ptr<Dataset>> ds = Dataset::Open(c);
  CountOutcome(kTarget, !ds.ok()               ? "refused"
                        : (*ds)->size() == 0    ? "opened, empty"
                                                : "opened, samples");
  if (!ds.ok()) {
    CHECK_LIST(ds.status().code() == absl::StatusCode::kInvalidArgument,
               ds.status().ToString());
    CHECK_LIST(!ds.status().message().empty(), "empty message");
    return 0;
  }
  const Dataset& d = **ds;
  CHECK_LIST(d.class_names().empty(), "file_list has class names");
  int64_t max_label = -1;
  const std::vector<Sample>& samples = d.samples();
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    CHECK_LIST(s.id == i, absl::StrCat("id ", s.id, " at index ", i));
    CHECK_LIST(!s.path.empty() && s.path[0] != '/',
               "not a relative path: '" + s.path + "'");
    for (const absl::string_view part : absl::StrSplit(s.path, '/')) {
      CHECK_LIST(!part.empty() && part != "." && part != "..",
                 "unclean path '" + s.path + "'");
    }
    if (i > 0) {
      CHECK_LIST(samples[i - 1].path < s.path,
                 "not sorted/unique: '" + samples[i - 1].path + "' then '" +
                     s.path + "'");
    }
    CHECK_LIST(s.label >= 0 && s.label < (int64_t{1} << 31),
               absl::StrCat("label ", s.label));
    max_label = std::max(max_label, s.label);
    const absl::Status read = d.store().ReadSample(s.id, &bytes);
    CHECK_LIST(read.ok(), "'" + s.path + "': " + read.ToString());
    if (read.ok()) {
      const std::string content(bytes.begin(), bytes.end());
      CHECK_LIST(content != kSecret,
                 "'" + s.path + "' served a file outside the root");
      CHECK_LIST(f.inside_contents.count(content) == 1,
                 "'" + s.path + "' served unexpected content '" + content +
                     "'");
    }
  }
  CHECK_LIST(d.num_classes() == static_cast<uint32_t>(max_label + 1),
             absl::StrCat("num_classes ", d.num_classes(), ", max label ",
                          max_label));
  const absl::Status past = d.store().ReadSample(samples.size(), &bytes);
  CHECK_LIST(past.code() == absl::StatusCode::kOutOfRange, past.ToString());
  return 0;
}

}  // namespace fuzz
}  // namespace nearprep

#ifdef NEARPREP_LIBFUZZER_MAIN
#include <spdlog/spdlog.h>
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // refusals are logged otherwise
  return 0;
}
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nearprep::fuzz::FuzzFileList(data, size);
}
#endif
