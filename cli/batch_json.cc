#include "cli/batch_json.h"

#include <nlohmann/json.hpp>

#include "cli/npy.h"
#include "cli/request_flags.h"
#include "cli/vocabulary.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace nearprep {
namespace {

// Messages are printed field by field from the descriptor, in declaration
// order: a field added to SampleParams is printed without an edit here.
nlohmann::ordered_json FieldsJson(const google::protobuf::Message& m);

// Field `f` of `m` (element `i` when repeated, else -1) as JSON.
nlohmann::ordered_json FieldJson(const google::protobuf::Message& m,
                                 const google::protobuf::FieldDescriptor* f,
                                 int i) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FD::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f);
    case FD::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
    case FD::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
    case FD::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f);
    case FD::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f);
    case FD::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f);
    case FD::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f);
    case FD::CPPTYPE_ENUM:
      return EnumValueName(f->enum_type(), rep ? r->GetRepeatedEnumValue(m, f, i)
                                               : r->GetEnumValue(m, f));
    case FD::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
    case FD::CPPTYPE_MESSAGE:
      if (rep) return FieldsJson(r->GetRepeatedMessage(m, f, i));
      // An absent sub-message (SampleParams.erased when nothing was
      // erased) is null.
      if (!r->HasField(m, f)) return nullptr;
      return FieldsJson(r->GetMessage(m, f));
  }
  return nullptr;
}

// Every field of `m` by its proto name, from the descriptor (repeated ones
// as arrays).
nlohmann::ordered_json FieldsJson(const google::protobuf::Message& m) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (!f->is_repeated()) {
      j[f->name()] = FieldJson(m, f, -1);
      continue;
    }
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (int k = 0; k < r->FieldSize(m, f); ++k) a.push_back(FieldJson(m, f, k));
    j[f->name()] = a;
  }
  return j;
}

}  // namespace

std::string BatchToJson(const v1::Batch& batch, const std::string& npy_file) {
  using json = nlohmann::ordered_json;
  json j;
  j["epoch"] = batch.epoch();
  j["batch_index"] = batch.batch_index();
  j["next_position"] = batch.next_position();
  j["resume_token"] = batch.resume_token();
  const v1::Tensor& t = batch.tensor();
  json tensor;
  tensor["file"] = npy_file;
  tensor["shape"] = json::array();
  for (uint64_t d : t.shape()) tensor["shape"].push_back(d);
  tensor["dtype"] = DTypeName(t.dtype());
  tensor["layout"] = LayoutName(t.layout());
  absl::StatusOr<std::string> descr = NpyDescr(t.dtype());
  tensor["npy_descr"] = descr.ok() ? *descr : "";
  if (t.dtype() == v1::DTYPE_BFLOAT16) {
    tensor["note"] =
        "bfloat16 stored as raw uint16 bit patterns: "
        "(x.astype(np.uint32) << 16).view(np.float32)";
  }
  j["tensor"] = tensor;
  j["sample_ids"] = std::vector<uint64_t>(batch.sample_ids().begin(),
                                          batch.sample_ids().end());
  j["labels"] =
      std::vector<int64_t>(batch.labels().begin(), batch.labels().end());
  json params = json::array();
  for (const v1::SampleParams& p : batch.params())
    params.push_back(FieldsJson(p));
  j["params"] = params;
  if (batch.has_mix()) {
    j["mix"] = FieldsJson(batch.mix());
    j["mix_labels"] = json::array();
    for (int64_t l : batch.mix_labels()) j["mix_labels"].push_back(l);
  }
  json errors = json::array();
  for (const v1::SampleError& e : batch.errors()) {
    errors.push_back({{"sample_id", e.sample_id()},
                      {"path", e.path()},
                      {"code", e.code()},
                      {"message", e.message()}});
  }
  j["errors"] = errors;
  j["timings_us"] = {{"read", batch.timings().read_us()},
                     {"decode", batch.timings().decode_us()},
                     {"transform", batch.timings().transform_us()},
                     {"queue_wait", batch.timings().queue_wait_us()}};
  // Replace invalid UTF-8 (paths are bytes) rather than throw.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace nearprep
