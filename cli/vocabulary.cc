// See vocabulary.h.
#include "cli/vocabulary.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {
namespace {

using google::protobuf::EnumDescriptor;

// The prefix every value name of `e` shares, up to and including its last
// '_' ("CROP_MODE_" for CropMode).
std::string Prefix(const EnumDescriptor* e) {
  std::string prefix = e->value(0)->name();
  for (int i = 1; i < e->value_count(); ++i) {
    const std::string& n = e->value(i)->name();
    size_t k = 0;
    while (k < prefix.size() && k < n.size() && prefix[k] == n[k]) ++k;
    prefix.resize(k);
  }
  const size_t underscore = prefix.rfind('_');
  return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
}

std::string Normalize(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::vector<std::string> EnumValueNames(const EnumDescriptor* e) {
  const std::string prefix = Prefix(e);
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    names.push_back(Normalize(std::string_view(e->value(i)->name()).substr(prefix.size())));
  }
  return names;
}

std::string EnumValueName(const EnumDescriptor* e, int number) {
  const google::protobuf::EnumValueDescriptor* v = e->FindValueByNumber(number);
  if (v == nullptr) return absl::StrCat(number);
  return Normalize(std::string_view(v->name()).substr(Prefix(e).size()));
}

std::vector<std::pair<std::string, std::string>> DeprecatedNames(const EnumDescriptor* e) {
  // The proto's table: each value's (nearprep.v1.deprecated_spelling)
  // options (the CLI's spellings before one vocabulary).
  std::vector<std::pair<std::string, std::string>> out;
  const std::string prefix = Prefix(e);
  for (int i = 0; i < e->value_count(); ++i) {
    const google::protobuf::EnumValueOptions& o = e->value(i)->options();
    const std::string name =
        Normalize(std::string_view(e->value(i)->name()).substr(prefix.size()));
    for (int k = 0; k < o.ExtensionSize(v1::deprecated_spelling); ++k) {
      out.emplace_back(o.GetExtension(v1::deprecated_spelling, k), name);
    }
  }
  return out;
}

absl::StatusOr<int> ParseEnumValue(const EnumDescriptor* e, std::string_view flag,
                                   std::string_view text) {
  std::string want = Normalize(text);
  for (const auto& [old_name, name] : DeprecatedNames(e)) {
    if (want == old_name) want = name;
  }
  const std::vector<std::string> names = EnumValueNames(e);
  for (int i = 0; i < e->value_count(); ++i) {
    if (names[i] == want) return e->value(i)->number();
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": one of ", absl::StrJoin(names, ", "),
                                                 "; got '", std::string(text), "'"));
}

std::string EnumHelp(const EnumDescriptor* e) {
  std::string help = absl::StrJoin(EnumValueNames(e), " | ");
  std::vector<std::string> old;
  for (const auto& [old_name, name] : DeprecatedNames(e)) {
    old.push_back(absl::StrCat(old_name, " = ", name));
  }
  if (!old.empty()) {
    absl::StrAppend(&help, " (deprecated spellings, still accepted: ", absl::StrJoin(old, ", "),
                    ")");
  }
  return help;
}

}  // namespace nearprep
