#include "batch_decoder.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"
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

// The size in bytes of the elements `t` describes, or an error.
absl::StatusOr<TensorGeometry> GeometryOf(const v1::Tensor& t) {
  if (t.dtype() != v1::DTYPE_UINT8) {
    return Malformed(absl::StrCat("Tensor.compression ",
                                  v1::Compression_Name(t.compression()),
                                  " with dtype ", v1::DType_Name(t.dtype())));
  }
  if (t.shape_size() != 4) return Malformed("compressed tensor: shape not 4-D");
  const auto& s = t.shape();
  TensorGeometry g = t.layout() == v1::LAYOUT_NCHW
                         ? TensorGeometry::Nchw(s[0], s[1], s[2], s[3])
                         : TensorGeometry::Nhwc(s[0], s[1], s[2], s[3]);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(g.images, g.image_bytes(), &bytes) ||
      bytes != t.uncompressed_bytes() || bytes > static_cast<uint64_t>(INT_MAX)) {
    return Malformed(absl::StrCat("compressed tensor: uncompressed_bytes ",
                                  t.uncompressed_bytes(),
                                  " does not match its shape"));
  }
  return g;
}

// Reads the fields of a Tensor message (up to the current limit): data is
// copied into allocate(size) (a compressed payload: decoded into
// allocate(uncompressed size)), every other field into `rest`.
absl::Status ReadTensor(CodedInputStream* in, std::string* rest,
                        const TensorAllocator& allocate, bool* decoded) {
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
    out.Trim();  // `rest` now holds every field before data
    v1::Tensor before;
    if (!before.ParseFromString(*rest)) return Malformed("bad Batch.tensor");
    if (before.compression() != v1::COMPRESSION_NONE) {
      thread_local std::vector<uint8_t> scratch;
      if (scratch.size() < size) scratch.resize(size);
      if (size > 0 && !in->ReadRaw(scratch.data(), static_cast<int>(size))) {
        return Malformed("Tensor.data truncated");
      }
      const uint64_t raw = before.uncompressed_bytes();
      uint8_t* dst = raw == 0 ? nullptr : allocate(static_cast<size_t>(raw));
      if (raw > 0 && dst == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "no buffer for a ", raw, "-byte tensor"));
      }
      absl::Status st = DecodeTensorPayload(before, scratch.data(), size, dst);
      if (!st.ok()) return st;
      *decoded = true;
      continue;
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
  bool decoded = false;  // a compressed payload was decoded
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
      absl::Status st = ReadTensor(&in, &tensor_rest, allocate, &decoded);
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
  if (header->tensor().compression() != v1::COMPRESSION_NONE) {
    if (!decoded) return Malformed("Tensor.compression after Tensor.data");
    header->mutable_tensor()->clear_compression();
    header->mutable_tensor()->clear_uncompressed_bytes();
  }
  return absl::OkStatus();
}

absl::Status DecodeTensorPayload(const v1::Tensor& tensor,
                                 const uint8_t* payload, size_t size,
                                 uint8_t* dst) {
  if (!IsKnownCompression(tensor.compression())) {
    return Malformed(absl::StrCat("Tensor.compression: unknown value ",
                                  tensor.compression()));
  }
  absl::StatusOr<TensorGeometry> g = GeometryOf(tensor);
  if (!g.ok()) return g.status();
  absl::Status st = DecompressTensor(
      *g, static_cast<TensorCompression>(tensor.compression()), payload, size,
      dst);
  if (!st.ok()) {
    return absl::DataLossError(
        absl::StrCat("malformed Batch message: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status DecompressBatchTensor(v1::Batch* batch) {
  v1::Tensor* t = batch->mutable_tensor();
  if (t->compression() == v1::COMPRESSION_NONE) return absl::OkStatus();
  std::string out(static_cast<size_t>(std::min<uint64_t>(
                      t->uncompressed_bytes(), uint64_t{INT_MAX})),
                  '\0');
  absl::Status st = DecodeTensorPayload(
      *t, reinterpret_cast<const uint8_t*>(t->data().data()), t->data().size(),
      reinterpret_cast<uint8_t*>(out.data()));
  if (!st.ok()) return st;
  t->set_data(std::move(out));
  t->clear_compression();
  t->clear_uncompressed_bytes();
  return absl::OkStatus();
}

}  // namespace nearprep
