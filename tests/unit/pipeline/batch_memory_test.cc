// BatchMemoryOf: the one count of a batch's memory (validation's limits, the
// prefetch depth, the stream's buffer pools), checked against a computation
// written here from the definitions (bytes per element of each dtype, three
// channels, the layout not mattering for the count), and against the batches
// a stream really emits.
#include <cstdint>
#include <memory>
#include <vector>

#include "common/tensor_codec.h"
#include "gtest/gtest.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/scheduler.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

using testing_internal::FakeBackend;
using testing_internal::MakeDummyDataset;

struct Case {
  int height, width;
  DType dtype;
  Layout layout;
  uint32_t batch;
  TensorCompression compression;
  uint64_t element_bytes;  // written out, not DTypeSize
};

StreamRequest RequestFor(const Case& c) {
  StreamRequest r;
  r.batch_size = c.batch;
  r.context.spec.height = c.height;
  r.context.spec.width = c.width;
  r.context.output.dtype = c.dtype;
  r.context.output.layout = c.layout;
  r.compression = c.compression;
  return r;
}

const std::vector<Case>& Cases() {
  constexpr TensorCompression kNone = TensorCompression::kNone;
  static const std::vector<Case> cases = {
      {224, 224, DType::kFloat32, Layout::kNHWC, 32, kNone, 4},
      {224, 224, DType::kFloat32, Layout::kNCHW, 32, kNone, 4},
      {160, 128, DType::kFloat16, Layout::kNHWC, 7, kNone, 2},
      {99, 301, DType::kBFloat16, Layout::kNCHW, 1, kNone, 2},
      {64, 48, DType::kUint8, Layout::kNHWC, 256, kNone, 1},
      {64, 48, DType::kUint8, Layout::kNHWC, 16,
       TensorCompression::kDeltaZstd, 1},
      {33, 17, DType::kUint8, Layout::kNCHW, 5,
       TensorCompression::kGradientZstd, 1},
      // Large enough that batch * sample bytes needs 64 bits.
      {4096, 4096, DType::kFloat32, Layout::kNHWC, 100000, kNone, 4},
  };
  return cases;
}

TEST(BatchMemoryTest, MatchesAnIndependentCount) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(testing::Message()
                 << c.height << "x" << c.width << " dtype "
                 << static_cast<int>(c.dtype) << " layout "
                 << static_cast<int>(c.layout) << " batch " << c.batch
                 << " compression " << static_cast<int>(c.compression));
    const StreamRequest r = RequestFor(c);
    const uint64_t sample =
        uint64_t(c.height) * uint64_t(c.width) * 3 * c.element_bytes;
    const uint64_t tensor = sample * c.batch;
    uint64_t compressed = 0;
    if (c.compression != TensorCompression::kNone) {
      const TensorGeometry g =
          c.layout == Layout::kNCHW
              ? TensorGeometry::Nchw(c.batch, 3, c.height, c.width)
              : TensorGeometry::Nhwc(c.batch, c.height, c.width, 3);
      EXPECT_EQ(g.total_bytes(), tensor);
      compressed = CompressedBound(g);
      // A bound for a whole tensor is at least its raw bytes.
      EXPECT_GE(compressed, tensor);
    }
    const BatchMemory m = BatchMemoryOf(r);
    EXPECT_EQ(m.sample_bytes, sample);
    EXPECT_EQ(m.tensor_bytes, tensor);
    EXPECT_EQ(m.compressed_bytes, compressed);
    EXPECT_EQ(m.total(), tensor + compressed);
    EXPECT_EQ(BatchMemoryBytes(r), tensor + compressed);
  }
}

// The batches a stream emits are exactly the counted bytes: a full batch's
// tensor is tensor_bytes, a partial one n * sample_bytes.
TEST(BatchMemoryTest, EmittedBatchesHaveTheCountedSize) {
  std::unique_ptr<Dataset> ds = MakeDummyDataset(11, 2);
  ASSERT_NE(ds, nullptr);
  PipelineOptions o;
  o.workers = 1;
  Pipeline pipeline(o, std::make_shared<FakeBackend>());
  for (const Case& c : Cases()) {
    if (c.compression != TensorCompression::kNone || c.height > 1000) continue;
    SCOPED_TRACE(testing::Message() << c.height << "x" << c.width << " dtype "
                                    << static_cast<int>(c.dtype));
    StreamRequest r = RequestFor(c);
    r.batch_size = 4;
    r.context.source = std::make_shared<const SampleSource>(*ds);
    const BatchMemory m = BatchMemoryOf(r);
    auto stream = pipeline.OpenStream(r);
    ASSERT_TRUE(stream.ok()) << stream.status();
    std::vector<uint64_t> sizes;
    while (true) {
      auto next = (*stream)->NextBlocking();
      ASSERT_TRUE(next.ok()) << next.status();
      if (*next == nullptr) break;
      sizes.push_back((*next)->tensor_bytes);
    }
    const std::vector<uint64_t> want = {m.tensor_bytes, m.tensor_bytes,
                                        3 * m.sample_bytes};
    EXPECT_EQ(sizes, want);
  }
}

// A stream's memory is counted once, when its assembler is made: the value
// the scheduler's stream hands out (the compressed-copy pool of StreamHandle
// is sized by it) is BatchMemoryOf its request, compression included.
TEST(BatchMemoryTest, TheStreamHoldsItsCount) {
  std::unique_ptr<Dataset> ds = MakeDummyDataset(11, 2);
  ASSERT_NE(ds, nullptr);
  PipelineCounters counters;
  for (const Case& c : Cases()) {
    if (c.height > 1000) continue;
    StreamRequest r = RequestFor(c);
    r.context.source = std::make_shared<const SampleSource>(*ds);
    const BatchMemory want = BatchMemoryOf(r);
    Scheduler::Stream stream(r, 2, &counters);
    EXPECT_EQ(stream.memory().sample_bytes, want.sample_bytes);
    EXPECT_EQ(stream.memory().tensor_bytes, want.tensor_bytes);
    EXPECT_EQ(stream.memory().compressed_bytes, want.compressed_bytes);
    EXPECT_EQ(stream.memory().compressed_bytes > 0,
              c.compression != TensorCompression::kNone);
  }
}

}  // namespace
}  // namespace nearprep
