#include "server/records/tf_example.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"

namespace nearprep::records {
namespace {

using google::protobuf::io::CodedInputStream;

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

// A length-delimited field's payload: [offset, offset + size) of the buffer.
struct Range {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool present = false;
};

class Walker {
 public:
  Walker(const uint8_t* base, Range r)
      : offset_(r.offset),
        size_(static_cast<int>(r.size)),
        in_(base + r.offset, static_cast<int>(r.size)) {
    in_.SetTotalBytesLimit(std::numeric_limits<int>::max());
  }
  // Next field; false at the end. On malformed input sets error().
  bool Next(uint32_t* field, uint32_t* wire) {
    const uint32_t tag = in_.ReadTag();
    if (tag == 0) {
      // End of the message, or a malformed tag before it.
      if (in_.CurrentPosition() != size_) bad_ = true;
      return false;
    }
    *field = tag >> 3;
    *wire = tag & 7;
    if (*field == 0) return Fail();  // Field number 0 is never valid.
    return true;
  }
  bool ReadRange(Range* r) {
    uint32_t len;
    if (!in_.ReadVarint32(&len)) return Fail();
    r->offset = offset_ + static_cast<uint64_t>(in_.CurrentPosition());
    r->size = len;
    r->present = true;
    return in_.Skip(static_cast<int>(len)) || Fail();
  }
  bool ReadVarint(uint64_t* v) { return in_.ReadVarint64(v) || Fail(); }
  bool Skip(uint32_t wire) {
    uint64_t v;
    uint32_t v32;
    switch (wire) {
      case kVarint:
        return ReadVarint(&v);
      case kFixed64:
        return in_.ReadLittleEndian64(&v) || Fail();
      case kFixed32:
        return in_.ReadLittleEndian32(&v32) || Fail();
      case kLengthDelimited: {
        Range r;
        return ReadRange(&r);
      }
      default:  // Groups and invalid wire types: not in an Example.
        return Fail();
    }
  }
  bool Fail() {
    bad_ = true;
    return false;
  }
  bool bad() const { return bad_; }

 private:
  uint64_t offset_;
  int size_;
  CodedInputStream in_;
  bool bad_ = false;
};

absl::Status NotAnExample(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("record is not a tf.train.Example (", what, ")"));
}

// Walks every field of the message in `r`; on_field(field, wire, walker)
// consumes the field's value and returns false on error.
template <typename F>
bool WalkMessage(const uint8_t* base, Range r, F on_field) {
  Walker w(base, r);
  uint32_t field, wire;
  while (w.Next(&field, &wire)) {
    if (!on_field(field, wire, w)) return false;
  }
  return !w.bad();
}

}  // namespace

absl::StatusOr<ExampleFields> LocateExampleFields(const uint8_t* data,
                                                  size_t n,
                                                  absl::string_view image_key,
                                                  absl::string_view label_key) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return NotAnExample("over 2 GiB");
  }
  Range image_feature, label_feature;
  // Example { Features features = 1; }
  Range features;
  if (!WalkMessage(data, Range{0, n, true},
                   [&](uint32_t field, uint32_t wire, Walker& w) {
                     if (field == 1 && wire == kLengthDelimited) {
                       // A second `features` replaces the first (protobuf
                       // would merge the two; no Example writer sends two).
                       return w.ReadRange(&features);
                     }
                     return w.Skip(wire);
                   })) {
    return NotAnExample("malformed Example");
  }
  if (features.present) {
    // Features { map<string, Feature> feature = 1; } entries are
    // { string key = 1; Feature value = 2; }.
    bool ok = WalkMessage(
        data, features, [&](uint32_t field, uint32_t wire, Walker& w) {
          if (field != 1 || wire != kLengthDelimited) return w.Skip(wire);
          Range entry;
          if (!w.ReadRange(&entry)) return false;
          Range key, value;
          if (!WalkMessage(data, entry,
                           [&](uint32_t f, uint32_t wt, Walker& e) {
                             if (f == 1 && wt == kLengthDelimited) {
                               return e.ReadRange(&key);
                             }
                             if (f == 2 && wt == kLengthDelimited) {
                               return e.ReadRange(&value);
                             }
                             return e.Skip(wt);
                           })) {
            return false;
          }
          const absl::string_view k(
              reinterpret_cast<const char*>(data + key.offset),
              key.present ? key.size : 0);
          if (!value.present) value = Range{entry.offset, 0, true};
          if (k == image_key) image_feature = value;
          if (!label_key.empty() && k == label_key) label_feature = value;
          return true;
        });
    if (!ok) return NotAnExample("malformed Features");
  }

  ExampleFields out;
  if (!image_feature.present) {
    return absl::DataLossError(
        absl::StrCat("Example has no feature '", image_key, "'"));
  }
  // Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
  //                       Int64List int64_list = 3; } }
  Range list;
  uint32_t kind = 0;
  auto read_kind = [&](Range feature) {
    list = Range{};
    kind = 0;
    return WalkMessage(data, feature,
                       [&](uint32_t f, uint32_t wt, Walker& w) {
                         if (f >= 1 && f <= 3 && wt == kLengthDelimited) {
                           kind = f;  // The last member of the oneof wins.
                           return w.ReadRange(&list);
                         }
                         return w.Skip(wt);
                       });
  };
  if (!read_kind(image_feature)) return NotAnExample("malformed Feature");
  if (kind != 1) {
    return absl::DataLossError(absl::StrCat(
        "Example feature '", image_key, "' is not a bytes_list"));
  }
  Range first;
  if (!WalkMessage(data, list, [&](uint32_t f, uint32_t wt, Walker& w) {
        if (f == 1 && wt == kLengthDelimited && !first.present) {
          return w.ReadRange(&first);
        }
        return w.Skip(wt);
      })) {
    return NotAnExample("malformed BytesList");
  }
  if (!first.present) {
    return absl::DataLossError(
        absl::StrCat("Example feature '", image_key, "' is empty"));
  }
  out.image_offset = first.offset;
  out.image_size = first.size;

  if (label_feature.present) {
    if (!read_kind(label_feature)) return NotAnExample("malformed Feature");
    if (kind != 3) {
      return absl::DataLossError(absl::StrCat(
          "Example label feature '", label_key, "' is not an int64_list"));
    }
    bool found = false;
    uint64_t value = 0;
    bool ok = WalkMessage(data, list, [&](uint32_t f, uint32_t wt, Walker& w) {
      if (f != 1 || found) return w.Skip(wt);
      if (wt == kVarint) {
        found = true;
        return w.ReadVarint(&value);
      }
      if (wt == kLengthDelimited) {  // Packed.
        Range packed;
        if (!w.ReadRange(&packed)) return false;
        if (packed.size == 0) return true;
        Walker p(data, packed);
        found = true;
        return p.ReadVarint(&value);
      }
      return w.Skip(wt);
    });
    if (!ok) return NotAnExample("malformed Int64List");
    if (!found) {
      return absl::DataLossError(absl::StrCat(
          "Example label feature '", label_key, "' has no value"));
    }
    out.has_label = true;
    out.label = static_cast<int64_t>(value);
  }
  return out;
}

}  // namespace nearprep::records
