#include "server/service/batch_serializer.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <grpc/grpc.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

namespace nearprep {
namespace {

// A batch with every field set, owning `bytes` of pseudo-random tensor data.
std::shared_ptr<BatchData> MakeBatch(size_t n, size_t bytes_per_sample,
                                     bool with_errors) {
  auto b = std::make_shared<BatchData>();
  b->epoch = 3;
  b->batch_index = 129;  // Two-byte varint.
  b->next_position = 1u << 20;
  b->num_samples = static_cast<uint32_t>(n);
  std::mt19937 rng(42);
  for (size_t i = 0; i < n; ++i) {
    b->labels.push_back(static_cast<int64_t>(i % 3) - 1);  // -1 too.
    b->sample_ids.push_back(1000 + 7 * i);
    SampleParams p;
    p.flip = i % 2 == 1;
    p.brightness_delta = -0.125f * static_cast<float>(i);
    p.saturation_factor = 1.5f;
    p.crop = {1, 2, 30, 40};
    p.source_height = 480;
    p.source_width = 640;
    b->params.push_back(p);
  }
  if (with_errors) {
    b->errors.push_back(
        {17, "bad/corrupt.jpg", absl::InvalidArgumentError("bogus huffman")});
    b->errors.push_back(
        {18, "bad/huge.jpg", absl::ResourceExhaustedError("too many pixels")});
  }
  b->times = {11, 222, 3333};
  b->queue_wait_us = 44444;
  b->shape = {n, 8, 4, 3};
  b->dtype = DType::kUint8;
  b->layout = Layout::kNHWC;
  auto storage = std::make_shared<std::vector<uint8_t>>(n * bytes_per_sample);
  for (auto& x : *storage) x = static_cast<uint8_t>(rng());
  b->tensor = storage->data();
  b->tensor_bytes = storage->size();
  b->storage = storage;
  return b;
}

std::string Flatten(const grpc::ByteBuffer& buffer,
                    std::vector<grpc::Slice>* slices) {
  EXPECT_TRUE(buffer.Dump(slices).ok());
  std::string out;
  for (const grpc::Slice& s : *slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

class BatchSerializerTest : public ::testing::Test {
 protected:
  void SetUp() override { grpc_init(); }
  void TearDown() override { grpc_shutdown(); }
};

TEST_F(BatchSerializerTest, RawBytesEqualTypedSerializationByteForByte) {
  for (size_t bytes_per_sample : {size_t{1}, size_t{96}, size_t{50000}}) {
    for (bool with_errors : {false, true}) {
      std::shared_ptr<BatchData> b = MakeBatch(5, bytes_per_sample, with_errors);
      v1::Batch typed;
      BatchToProto(*b, /*with_data=*/true, &typed);
      const std::string expected = typed.SerializeAsString();

      std::vector<grpc::Slice> slices;
      const std::string raw = Flatten(SerializeBatch(b), &slices);
      EXPECT_EQ(raw.size(), expected.size());
      EXPECT_TRUE(raw == expected) << "bytes differ, " << bytes_per_sample
                                   << " bytes per sample";
      EXPECT_EQ(EncodeBatchPrefix(*b) + std::string(
                    reinterpret_cast<const char*>(b->tensor), b->tensor_bytes),
                expected);

      v1::Batch parsed;
      ASSERT_TRUE(parsed.ParseFromString(raw));
      EXPECT_EQ(parsed.batch_index(), 129u);
      EXPECT_EQ(parsed.epoch(), 3u);
      EXPECT_EQ(parsed.next_position(), 1u << 20);
      ASSERT_EQ(parsed.labels_size(), 5);
      EXPECT_EQ(parsed.labels(0), -1);
      EXPECT_EQ(parsed.sample_ids(4), 1028u);
      EXPECT_TRUE(parsed.params(1).flipped());
      EXPECT_EQ(parsed.params(2).crop().width(), 40u);
      EXPECT_EQ(parsed.timings().queue_wait_us(), 44444u);
      EXPECT_EQ(parsed.errors_size(), with_errors ? 2 : 0);
      if (with_errors) {
        EXPECT_EQ(parsed.errors(1).code(), "RESOURCE_EXHAUSTED");
        EXPECT_EQ(parsed.errors(0).path(), "bad/corrupt.jpg");
      }
      ASSERT_EQ(parsed.tensor().shape_size(), 4);
      EXPECT_EQ(parsed.tensor().shape(1), 8u);
      EXPECT_EQ(parsed.tensor().dtype(), v1::DTYPE_UINT8);
      ASSERT_EQ(parsed.tensor().data().size(), b->tensor_bytes);
      EXPECT_EQ(std::memcmp(parsed.tensor().data().data(), b->tensor,
                            b->tensor_bytes),
                0);
    }
  }
}

TEST_F(BatchSerializerTest, NonUtf8PathsKeepTheBatchParseable) {
  // File names are bytes; protobuf refuses a Batch whose string field holds
  // invalid UTF-8, which lost the whole batch in every client.
  std::shared_ptr<BatchData> b = MakeBatch(2, 12, false);
  const std::string path = std::string("caf\xe9/\xff.txt");
  b->errors.push_back(
      {5, path, absl::InvalidArgumentError("not a JPEG: " + path)});
  std::vector<grpc::Slice> slices;
  v1::Batch parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(SerializeBatch(b), &slices)));
  ASSERT_EQ(parsed.errors_size(), 1);
  EXPECT_EQ(parsed.errors(0).path(), "caf\\xe9/\\xff.txt");
  EXPECT_EQ(parsed.errors(0).path_bytes(), path);
  EXPECT_EQ(parsed.errors(0).message(), "not a JPEG: caf\\xe9/\\xff.txt");
}

TEST_F(BatchSerializerTest, PayloadSliceReferencesBatchMemoryUntilReleased) {
  std::shared_ptr<BatchData> b = MakeBatch(4, 4096, false);
  std::weak_ptr<BatchData> weak = b;
  const uint8_t* tensor = b->tensor;
  {
    grpc::ByteBuffer buffer = SerializeBatch(std::move(b));
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    // No copy: the second slice is the batch's own memory.
    EXPECT_EQ(slices[1].begin(), tensor);
    EXPECT_EQ(slices[1].size(), 4u * 4096u);
    EXPECT_FALSE(weak.expired()) << "the slice must keep the batch alive";
  }
  EXPECT_TRUE(weak.expired()) << "the slice's destroy callback must release it";
}

TEST_F(BatchSerializerTest, CompressedTensorCarriesItsCodecAndSize) {
  std::shared_ptr<BatchData> b = MakeBatch(3, 96, false);
  b->compression = TensorCompression::kGradientZstd;
  b->uncompressed_bytes = 3 * 96 + 5;  // any value: the serializer copies it
  v1::Batch typed;
  BatchToProto(*b, true, &typed);
  std::vector<grpc::Slice> slices;
  const std::string raw = Flatten(SerializeBatch(b), &slices);
  EXPECT_TRUE(raw == typed.SerializeAsString());
  v1::Batch parsed;
  ASSERT_TRUE(parsed.ParseFromString(raw));
  EXPECT_EQ(parsed.tensor().compression(), v1::COMPRESSION_GRADIENT_ZSTD);
  EXPECT_EQ(parsed.tensor().uncompressed_bytes(), 3u * 96u + 5u);
  EXPECT_EQ(parsed.tensor().data().size(), 3u * 96u);
}

TEST_F(BatchSerializerTest, EmptyTensorMatchesTypedSerialization) {
  std::shared_ptr<BatchData> b = MakeBatch(0, 0, true);
  v1::Batch typed;
  BatchToProto(*b, true, &typed);
  std::vector<grpc::Slice> slices;
  EXPECT_EQ(Flatten(SerializeBatch(b), &slices), typed.SerializeAsString());
}

}  // namespace
}  // namespace nearprep
