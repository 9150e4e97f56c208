#include "client/cpp/src/batch_json.h"

#include <nlohmann/json.hpp>

#include "client/cpp/src/npy.h"
#include "client/cpp/src/request_flags.h"
#include "client/cpp/src/vocabulary.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace nearprep {
namespace {

// Every singular field of `m` by its proto name, in declaration order: a
// field added to SampleParams is printed without an edit here.
nlohmann::ordered_json FieldsJson(const google::protobuf::Message& m) {
  using FD = google::protobuf::FieldDescriptor;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (f->is_repeated()) continue;
    const std::string& n = f->name();
    switch (f->cpp_type()) {
      case FD::CPPTYPE_BOOL:
        j[n] = r->GetBool(m, f);
        break;
      case FD::CPPTYPE_FLOAT:
        j[n] = r->GetFloat(m, f);
        break;
      case FD::CPPTYPE_DOUBLE:
        j[n] = r->GetDouble(m, f);
        break;
      case FD::CPPTYPE_INT32:
        j[n] = r->GetInt32(m, f);
        break;
      case FD::CPPTYPE_UINT32:
        j[n] = r->GetUInt32(m, f);
        break;
      case FD::CPPTYPE_INT64:
        j[n] = r->GetInt64(m, f);
        break;
      case FD::CPPTYPE_UINT64:
        j[n] = r->GetUInt64(m, f);
        break;
      case FD::CPPTYPE_ENUM:
        j[n] = EnumValueName(f->enum_type(), r->GetEnumValue(m, f));
        break;
      case FD::CPPTYPE_STRING:
        j[n] = r->GetString(m, f);
        break;
      case FD::CPPTYPE_MESSAGE:
        j[n] = FieldsJson(r->GetMessage(m, f));
        break;
    }
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
