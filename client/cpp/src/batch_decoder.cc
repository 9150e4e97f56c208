#include "batch_decoder.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <climits>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace nearprep {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using google::protobuf::internal::WireFormatLite;

// Batch.tensor and Tensor.data are both field 15, length-delimited.
constexpr uint32_t kField15Bytes =
    (15u << 3) | WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

absl::Status Malformed(const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed Batch message: ", what));
}

// Reads the fields of a Tensor message (up to the current limit): data is
// copied into allocate(size), every other field into `rest`.
absl::Status ReadTensor(CodedInputStream* in, std::string* rest,
                        const TensorAllocator& allocate) {
  StringOutputStream rest_stream(rest);
  CodedOutputStream out(&rest_stream);
  bool have_data = false;
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) break;
    if (tag != kField15Bytes) {
      if (!WireFormatLite::SkipField(in, tag, &out)) {
        return Malformed("bad field in Batch.tensor");
      }
      continue;
    }
    if (have_data) return Malformed("Tensor.data appears twice");
    have_data = true;
    uint32_t size = 0;
    if (!in->ReadVarint32(&size) || size > static_cast<uint32_t>(INT_MAX) ||
        static_cast<int>(size) > in->BytesUntilLimit()) {
      return Malformed("Tensor.data runs past the end of the message");
    }
    if (size == 0) continue;
    uint8_t* dst = allocate(size);
    if (dst == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no buffer for a ", size, "-byte tensor"));
    }
    if (!in->ReadRaw(dst, static_cast<int>(size))) {
      return Malformed("Tensor.data truncated");
    }
  }
  out.Trim();
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeBatchInto(grpc::ByteBuffer* raw, v1::Batch* header,
                             const TensorAllocator& allocate) {
  grpc::ProtoBufferReader reader(raw);
  if (!reader.status().ok()) return Malformed("unreadable receive buffer");
  const size_t total = raw->Length();
  if (total > static_cast<size_t>(INT_MAX)) {
    return Malformed("over 2 GiB");
  }
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  std::string rest;        // Every Batch field but the tensor.
  std::string tensor_rest; // Every Tensor field but data.
  bool have_tensor = false;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream out(&rest_stream);
    for (;;) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) break;
      if (tag != kField15Bytes) {
        if (!WireFormatLite::SkipField(&in, tag, &out)) {
          return Malformed("bad field");
        }
        continue;
      }
      if (have_tensor) return Malformed("Batch.tensor appears twice");
      have_tensor = true;
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) ||
          length > total - static_cast<size_t>(in.CurrentPosition())) {
        return Malformed("Batch.tensor runs past the end of the message");
      }
      const CodedInputStream::Limit limit =
          in.PushLimit(static_cast<int>(length));
      absl::Status st = ReadTensor(&in, &tensor_rest, allocate);
      if (!st.ok()) return st;
      if (!in.ConsumedEntireMessage()) return Malformed("bad Batch.tensor");
      in.PopLimit(limit);
    }
    if (!in.ConsumedEntireMessage()) return Malformed("bad field");
    out.Trim();
  }
  if (!header->ParseFromString(rest)) return Malformed("header does not parse");
  if (have_tensor &&
      !header->mutable_tensor()->ParseFromString(tensor_rest)) {
    return Malformed("Batch.tensor does not parse");
  }
  return absl::OkStatus();
}

}  // namespace nearprep
