// The file_list format (sample_listing.h): "relative/path label" lines.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/storage/listing_internal.h"

namespace nearprep {
namespace listing_internal {
namespace {

constexpr int64_t kMaxLabel = int64_t{1} << 31;

}  // namespace

absl::Status ListFileList(const Storage& storage, const ListingOptions& options,
                          Refusals* refusals, SampleListing* listing) {
  const std::string& name = options.name;
  if (options.list_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name, "': format file_list needs list_file"));
  }
  const std::string list_path = storage.Describe(options.list_file);
  std::string text_all;
  if (!ReadFileToString(storage, options.list_file, &text_all).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", name, "': cannot read list file ", list_path));
  }
  std::set<std::string> seen;
  int64_t max_label = -1;
  int line_no = 0;
  std::vector<absl::string_view> lines = absl::StrSplit(text_all, '\n');
  // A final '\n' ends the last line rather than starting an empty one.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (absl::string_view raw_line : lines) {
    ++line_no;
    std::string line(raw_line);
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    // A path with a NUL byte names another file than it spells (the file
    // system stops at the NUL; the duplicate check does not): refuse it.
    if (text.find('\0') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset '", name, "': ", list_path, " line ", line_no,
          ": contains a NUL byte"));
    }
    const size_t blank = text.find_last_of(" \t");
    int64_t label = 0;
    if (blank == absl::string_view::npos ||
        !absl::SimpleAtoi(text.substr(blank + 1), &label) || label < 0 ||
        label >= kMaxLabel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset '", name, "': ", list_path, " line ", line_no,
          ": expected 'relative/path label' with a label in [0, 2^31)"));
    }
    const std::string raw(absl::StripAsciiWhitespace(text.substr(0, blank)));
    if (raw.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset '", name, "': ", list_path, " line ", line_no,
          ": empty path"));
    }
    if (raw[0] == '/') {
      refusals->Refuse(raw, "absolute path in list file");
      continue;
    }
    std::vector<std::string> parts;
    bool dotdot = false;
    for (absl::string_view p : absl::StrSplit(raw, '/')) {
      if (p.empty() || p == ".") continue;
      if (p == "..") dotdot = true;
      parts.emplace_back(p);
    }
    if (dotdot) {
      refusals->Refuse(raw, "'..' in list file path");
      continue;
    }
    if (parts.empty()) {
      refusals->Refuse(raw, "not a file path");
      continue;
    }
    const std::string rel = absl::StrJoin(parts, "/");
    if (!seen.insert(rel).second) {
      refusals->Refuse(rel, "duplicate entry in list file");
      continue;
    }
    absl::StatusOr<std::string> target = storage.Resolve(rel);
    if (absl::IsPermissionDenied(target.status())) {
      refusals->Refuse(rel, "leads outside the root");
      continue;
    }
    if (!target.ok()) {
      refusals->Refuse(
          rel, absl::StrCat("cannot resolve: ", target.status().message()));
      continue;
    }
    absl::StatusOr<FileInfo> info = storage.Stat(*target);
    if (!info.ok() || info->type != FileType::kRegular) {
      refusals->Refuse(rel, "not a regular file");
      continue;
    }
    ListedSample s;
    s.key = rel;
    s.file = *target;
    s.size = info->size;
    s.label = label;
    listing->samples.push_back(std::move(s));
    max_label = std::max(max_label, label);
  }
  listing->num_classes = static_cast<uint32_t>(max_label + 1);
  return absl::OkStatus();
}

}  // namespace listing_internal
}  // namespace nearprep
