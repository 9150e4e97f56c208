// DecodeBatchInto (client/cpp/src/batch_decoder.h) against protobuf's own
// parser: same header, same tensor bytes, whatever the slicing of the
// receive buffer and the field order; malformed input is DATA_LOSS.
#include "batch_decoder.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <string>
#include <vector>

#include "common/tensor_codec.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

v1::Batch SampleBatch(size_t tensor_bytes) {
  v1::Batch b;
  b.set_epoch(3);
  b.set_batch_index(17);
  for (int i = 0; i < 5; ++i) {
    b.add_labels(i * 7 - 2);
    b.add_sample_ids(100 + i);
    v1::SampleParams* p = b.add_params();
    p->set_flipped(i % 2);
    p->set_saturation_factor(1.0f + i);
    p->mutable_crop()->set_height(10 + i);
  }
  v1::SampleError* e = b.add_errors();
  e->set_sample_id(9);
  e->set_path("a/b.jpg");
  e->set_message("corrupt");
  b.mutable_timings()->set_decode_us(1234);
  b.set_next_position(99);
  v1::Tensor* t = b.mutable_tensor();
  t->add_shape(tensor_bytes);
  t->set_dtype(v1::DTYPE_UINT8);
  t->set_layout(v1::LAYOUT_NCHW);
  std::string data(tensor_bytes, '\0');
  for (size_t i = 0; i < tensor_bytes; ++i) data[i] = static_cast<char>(i * 31 + 7);
  t->set_data(data);
  return b;
}

// `bytes` as a ByteBuffer of slices of `slice` bytes each.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += slice) {
    slices.emplace_back(bytes.data() + i, std::min(slice, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

struct Decoded {
  absl::Status status;
  v1::Batch header;
  std::string tensor;
  int allocations = 0;
};

Decoded Decode(const std::string& bytes, size_t slice) {
  grpc::ByteBuffer raw = Sliced(bytes, slice);
  Decoded d;
  d.status = DecodeBatchInto(&raw, &d.header, [&d](size_t n) {
    ++d.allocations;
    d.tensor.assign(n, '\0');
    return reinterpret_cast<uint8_t*>(d.tensor.data());
  });
  return d;
}

TEST(BatchDecoderTest, MatchesProtobufForAnySlicing) {
  const v1::Batch want = SampleBatch(5000);
  const std::string bytes = want.SerializeAsString();
  for (size_t slice : {size_t{1}, size_t{7}, size_t{64}, size_t{4096}, bytes.size()}) {
    Decoded d = Decode(bytes, slice);
    ASSERT_TRUE(d.status.ok()) << d.status << " slice " << slice;
    EXPECT_EQ(d.allocations, 1);
    EXPECT_EQ(d.tensor, want.tensor().data());
    v1::Batch header = want;
    header.mutable_tensor()->clear_data();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(d.header, header))
        << "slice " << slice << ": " << d.header.DebugString();
  }
}

TEST(BatchDecoderTest, AnyFieldOrder) {
  const v1::Batch want = SampleBatch(300);
  // Tensor first, then the rest; data before the tensor's shape.
  v1::Tensor data_only;
  data_only.set_data(want.tensor().data());
  v1::Tensor meta = want.tensor();
  meta.clear_data();
  // One tensor submessage whose data precedes its shape, written before
  // every other Batch field.
  std::string tensor_bytes = data_only.SerializeAsString() + meta.SerializeAsString();
  v1::Batch no_tensor = want;
  no_tensor.clear_tensor();
  std::string bytes;
  bytes.push_back(static_cast<char>((15 << 3) | 2));
  google::protobuf::io::StringOutputStream sos(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&sos);
    out.WriteVarint32(static_cast<uint32_t>(tensor_bytes.size()));
    out.WriteString(tensor_bytes);
    out.WriteString(no_tensor.SerializeAsString());
  }
  v1::Batch parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.tensor().data(), want.tensor().data());
  Decoded d = Decode(bytes, 13);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.tensor, want.tensor().data());
  parsed.mutable_tensor()->clear_data();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(d.header, parsed));
}

TEST(BatchDecoderTest, NoTensorDataMeansNoAllocation) {
  v1::Batch b = SampleBatch(0);
  b.mutable_tensor()->clear_data();
  Decoded d = Decode(b.SerializeAsString(), 5);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.allocations, 0);
  EXPECT_EQ(d.header.next_position(), 99u);
}

TEST(BatchDecoderTest, EveryTruncationIsDataLossNotACrash) {
  const std::string bytes = SampleBatch(200).SerializeAsString();
  int failures = 0;
  for (size_t n = 1; n < bytes.size(); ++n) {
    Decoded d = Decode(bytes.substr(0, n), 3);
    if (!d.status.ok()) {
      EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << n;
      ++failures;
    } else {
      // A cut at a field boundary is a valid (shorter) message; protobuf
      // agrees.
      v1::Batch parsed;
      EXPECT_TRUE(parsed.ParseFromString(bytes.substr(0, n))) << n;
    }
  }
  EXPECT_GT(failures, static_cast<int>(bytes.size()) / 2);
}

TEST(BatchDecoderTest, RepeatedTensorDataIsRefused) {
  v1::Tensor t;
  t.set_data("abc");
  const std::string tensor = t.SerializeAsString() + t.SerializeAsString();
  std::string bytes;
  bytes.push_back(static_cast<char>((15 << 3) | 2));
  bytes.push_back(static_cast<char>(tensor.size()));
  bytes += tensor;
  Decoded d = Decode(bytes, 4);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_NE(d.status.message().find("Tensor.data appears twice"),
            absl::string_view::npos);
}

TEST(BatchDecoderTest, NullAllocationIsResourceExhausted) {
  grpc::ByteBuffer raw = Sliced(SampleBatch(100).SerializeAsString(), 50);
  v1::Batch header;
  absl::Status st =
      DecodeBatchInto(&raw, &header, [](size_t) { return nullptr; });
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
}


// ---------------------------------------------------------------------------
// Compressed tensors (common/tensor_codec.h): both receive paths decode them
// into the same bytes as the uncompressed tensor; damage is DATA_LOSS.

namespace compressed {

struct Pair {
  v1::Batch plain;
  v1::Batch packed;
};

Pair MakePair(v1::Layout layout, TensorCompression comp) {
  Pair p;
  p.plain = SampleBatch(0);
  v1::Tensor* t = p.plain.mutable_tensor();
  t->clear_shape();
  const uint64_t n = 3, h = 5, w = 7;
  const TensorGeometry g = layout == v1::LAYOUT_NCHW
                               ? TensorGeometry::Nchw(n, 3, h, w)
                               : TensorGeometry::Nhwc(n, h, w, 3);
  if (layout == v1::LAYOUT_NCHW) {
    for (uint64_t d : {n, uint64_t{3}, h, w}) t->add_shape(d);
  } else {
    for (uint64_t d : {n, h, w, uint64_t{3}}) t->add_shape(d);
  }
  t->set_layout(layout);
  std::string data(g.total_bytes(), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * i) % 251 + i / 9);
  }
  t->set_data(data);
  p.packed = p.plain;
  std::string out(CompressedBound(g), '\0');
  absl::StatusOr<size_t> size = CompressTensor(
      g, comp, 1, reinterpret_cast<const uint8_t*>(data.data()),
      reinterpret_cast<uint8_t*>(out.data()), out.size());
  EXPECT_TRUE(size.ok()) << size.status();
  out.resize(*size);
  v1::Tensor* pt = p.packed.mutable_tensor();
  pt->set_compression(static_cast<v1::Compression>(comp));
  pt->set_uncompressed_bytes(g.total_bytes());
  pt->set_data(out);
  return p;
}

TEST(BatchDecoderCompressedTest, BothPathsDecodeToThePlainTensor) {
  for (v1::Layout layout : {v1::LAYOUT_NHWC, v1::LAYOUT_NCHW}) {
    for (TensorCompression comp :
         {TensorCompression::kDeltaZstd, TensorCompression::kGradientZstd}) {
      SCOPED_TRACE(::testing::Message() << "layout " << layout << " comp "
                                        << static_cast<int>(comp));
      Pair p = MakePair(layout, comp);
      const std::string bytes = p.packed.SerializeAsString();
      for (size_t slice : {size_t{3}, size_t{100}, bytes.size()}) {
        Decoded d = Decode(bytes, slice);
        ASSERT_TRUE(d.status.ok()) << d.status;
        EXPECT_EQ(d.allocations, 1);
        EXPECT_EQ(d.tensor, p.plain.tensor().data());
        v1::Batch header = p.plain;
        header.mutable_tensor()->clear_data();
        EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
            d.header, header))
            << d.header.DebugString();
      }
      v1::Batch parsed = p.packed;
      ASSERT_TRUE(DecompressBatchTensor(&parsed).ok());
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed,
                                                                     p.plain));
    }
  }
}

TEST(BatchDecoderCompressedTest, CorruptPayloadIsDataLoss) {
  Pair p = MakePair(v1::LAYOUT_NHWC, TensorCompression::kGradientZstd);
  std::string payload = p.packed.tensor().data();
  payload[payload.size() / 2] ^= 0x40;
  payload[payload.size() - 2] ^= 0x11;  // the checksum of the last frame
  p.packed.mutable_tensor()->set_data(payload);
  Decoded d = Decode(p.packed.SerializeAsString(), 64);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_NE(d.status.message().find("compressed tensor"), std::string::npos)
      << d.status;
  v1::Batch parsed = p.packed;
  absl::Status st = DecompressBatchTensor(&parsed);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;

  // uncompressed_bytes that disagrees with the shape.
  Pair q = MakePair(v1::LAYOUT_NCHW, TensorCompression::kDeltaZstd);
  q.packed.mutable_tensor()->set_uncompressed_bytes(
      q.packed.tensor().uncompressed_bytes() + 1);
  d = Decode(q.packed.SerializeAsString(), 64);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_NE(d.status.message().find("uncompressed_bytes"), std::string::npos);
  // A compression value this client does not know.
  q = MakePair(v1::LAYOUT_NCHW, TensorCompression::kDeltaZstd);
  q.packed.mutable_tensor()->set_compression(static_cast<v1::Compression>(9));
  d = Decode(q.packed.SerializeAsString(), 64);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  // Compression with a float dtype.
  q = MakePair(v1::LAYOUT_NCHW, TensorCompression::kDeltaZstd);
  q.packed.mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
  d = Decode(q.packed.SerializeAsString(), 64);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
}

}  // namespace compressed

}  // namespace
}  // namespace nearprep
