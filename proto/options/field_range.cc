#include "proto/options/field_range.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {
namespace {

using google::protobuf::FieldDescriptor;

// `v` in the fewest significant digits from `first` to `last` that read back
// as `v` (strtod / strtof per `T`); `last` always does (9 for a float, 17
// for a double).
template <typename T>
std::string Shortest(T v, int first, int last) {
  char buf[40];
  for (int p = first; p <= last; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*g", p, static_cast<double>(v));
    const T back = sizeof(T) == sizeof(float)
                       ? static_cast<T>(std::strtof(buf, nullptr))
                       : static_cast<T>(std::strtod(buf, nullptr));
    if (back == v || std::isnan(v)) break;
  }
  return buf;
}

}  // namespace

std::string FormatBound(double v) { return Shortest(v, 15, 17); }

std::optional<double> NumericFieldValue(const google::protobuf::Message& m,
                                        const FieldDescriptor& f) {
  if (f.is_repeated()) return std::nullopt;
  const google::protobuf::Reflection* r = m.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r->GetFloat(m, &f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetDouble(m, &f);
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(m, &f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(m, &f);
    case FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(r->GetInt64(m, &f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<double>(r->GetUInt64(m, &f));
    default:
      return std::nullopt;
  }
}

std::optional<FieldRangeCheck> CheckFieldRange(
    const google::protobuf::Message& m, const FieldDescriptor& f) {
  if (!f.options().HasExtension(v1::range)) return std::nullopt;
  const std::optional<double> v = NumericFieldValue(m, f);
  if (!v.has_value()) return std::nullopt;
  const v1::FieldRange& range = f.options().GetExtension(v1::range);
  FieldRangeCheck c;
  c.value = *v;
  const google::protobuf::Reflection* r = m.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_FLOAT:
      c.value_text = Shortest(r->GetFloat(m, &f), 6, 9);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      c.value_text = FormatBound(*v);
      break;
    case FieldDescriptor::CPPTYPE_INT32:
      c.value_text = absl::StrCat(r->GetInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      c.value_text = absl::StrCat(r->GetUInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      c.value_text = absl::StrCat(r->GetInt64(m, &f));
      break;
    default:  // CPPTYPE_UINT64, the last numeric type
      c.value_text = absl::StrCat(r->GetUInt64(m, &f));
      break;
  }
  // Written so that NaN (every comparison false) is out of range.
  c.in_range = (!range.has_min() || *v >= range.min()) &&
               (!range.has_max() || *v <= range.max());
  if (range.has_min() && range.has_max()) {
    c.rule = absl::StrCat("in [", FormatBound(range.min()), ", ",
                          FormatBound(range.max()), "]");
  } else if (range.has_min()) {
    c.rule = absl::StrCat(">= ", FormatBound(range.min()));
  } else if (range.has_max()) {
    c.rule = absl::StrCat("<= ", FormatBound(range.max()));
  }
  return c;
}

}  // namespace nearprep
