// StreamAssembler without threads: the test takes chunks, runs the fake
// backend on them inline, completes them in a chosen order (reversed: the
// worst case for slot compaction) and takes the batches. Expected batches
// are written out by hand from the batch-formation rules in pipeline.h.
#include "server/pipeline/stream_assembler.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

using testing_internal::MakeDummyDataset;
using testing_internal::FakeBackend;
using testing_internal::FakePattern;

constexpr size_t kChunk = 3;

class StreamAssemblerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_ = MakeDummyDataset(20, 2);
    ASSERT_NE(ds_, nullptr);
  }

  // Identity order (id == shard position), batches of 4 uint8 samples.
  StreamRequest Request() const {
    StreamRequest r;
    r.context.source = std::make_shared<const SampleSource>(*ds_);
    r.context.seed = 9;
    r.context.spec.height = 2;
    r.context.spec.width = 3;
    r.context.output.dtype = DType::kUint8;
    r.batch_size = 4;
    return r;
  }

  // Takes every chunk the assembler offers now.
  std::vector<std::unique_ptr<Chunk>> TakeAll(StreamAssembler& a) {
    std::vector<std::unique_ptr<Chunk>> out;
    while (a.CanDispatch()) {
      auto c = std::make_unique<Chunk>();
      if (a.TakeChunk(kChunk, c.get())) out.push_back(std::move(c));
    }
    return out;
  }

  // Runs the backend on `chunks` and completes them last first.
  void CompleteReversed(StreamAssembler& a,
                        std::vector<std::unique_ptr<Chunk>> chunks) {
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
      Chunk& c = **it;
      backend_.Process(a.request().context, c.works.data(), c.works.size());
      a.CompleteChunk(&c);
    }
  }

  // Dispatches and completes until nothing more can be dispatched.
  void Pump(StreamAssembler& a) {
    for (auto chunks = TakeAll(a); !chunks.empty(); chunks = TakeAll(a)) {
      CompleteReversed(a, std::move(chunks));
    }
  }

  // Takes results while there are any; `last` gets the end (OK) or the
  // error, or stays nullopt when the stream is not over.
  std::vector<std::shared_ptr<const BatchData>> TakeBatches(
      StreamAssembler& a, std::optional<absl::Status>* last) {
    std::vector<std::shared_ptr<const BatchData>> out;
    last->reset();
    while (a.HasResult()) {
      BatchStream::NextResult r = a.Take(StreamAssembler::Clock::now());
      if (!r.ok() || *r == nullptr) {
        *last = r.status();
        return out;
      }
      out.push_back(*r);
    }
    return out;
  }

  // Pumps and takes until the stream ends or is stuck; `last` as in
  // TakeBatches.
  std::vector<std::shared_ptr<const BatchData>> Drain(
      StreamAssembler& a, std::optional<absl::Status>* last) {
    std::vector<std::shared_ptr<const BatchData>> out;
    while (true) {
      Pump(a);
      auto got = TakeBatches(a, last);
      out.insert(out.end(), got.begin(), got.end());
      if (last->has_value() || !a.CanDispatch()) return out;
    }
  }

  // All of one stream, expecting a clean end.
  std::vector<std::shared_ptr<const BatchData>> RunAll(StreamAssembler& a) {
    a.Start(nullptr);
    std::vector<std::shared_ptr<const BatchData>> out;
    std::optional<absl::Status> last;
    while (true) {
      Pump(a);
      auto got = TakeBatches(a, &last);
      out.insert(out.end(), got.begin(), got.end());
      if (last.has_value()) break;
      if (!a.CanDispatch()) break;  // stuck: reported below
    }
    EXPECT_TRUE(last.has_value() && last->ok())
        << (last ? last->ToString() : "stream did not end");
    return out;
  }

  // Checks ids, errors, next_position and the bytes of every sample.
  void ExpectBatch(const BatchData& b, const std::vector<uint64_t>& ids,
                   const std::vector<uint64_t>& errors, uint64_t next_position,
                   const StreamRequest& r) {
    EXPECT_EQ(b.sample_ids, ids);
    EXPECT_EQ(b.num_samples, ids.size());
    EXPECT_EQ(b.next_position, next_position);
    std::vector<uint64_t> error_ids;
    for (const auto& e : b.errors) error_ids.push_back(e.sample_id);
    EXPECT_EQ(error_ids, errors);
    const size_t bytes = r.context.output.SampleBytes(r.context.spec);
    ASSERT_EQ(b.tensor_bytes, ids.size() * bytes);
    std::vector<uint8_t> want(bytes);
    for (size_t i = 0; i < ids.size(); ++i) {
      FakePattern(ids[i], r.context.seed, want.data(), bytes);
      EXPECT_EQ(0, std::memcmp(b.tensor + i * bytes, want.data(), bytes))
          << "slot " << i << " id " << ids[i];
    }
  }

  std::unique_ptr<Dataset> ds_;
  FakeBackend backend_;
  PipelineCounters counters_;
};

TEST_F(StreamAssemblerTest, SkipPolicyCompactsWhenChunksCompleteInReverse) {
  for (uint64_t id : {1, 4, 5, 11}) {
    backend_.SetBad(id, absl::DataLossError("bad"));
  }
  const StreamRequest r = Request();
  StreamAssembler a(r, /*prefetch_depth=*/8, &counters_);
  auto got = RunAll(a);
  ASSERT_EQ(got.size(), 4u);
  ExpectBatch(*got[0], {0, 2, 3, 6}, {1, 4, 5}, 7, r);
  ExpectBatch(*got[1], {7, 8, 9, 10}, {}, 11, r);
  ExpectBatch(*got[2], {12, 13, 14, 15}, {11}, 16, r);
  ExpectBatch(*got[3], {16, 17, 18, 19}, {}, 20, r);
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k]->batch_index, k);
  EXPECT_EQ(counters_.samples_ok.load(), 16u);
  EXPECT_EQ(counters_.samples_failed.load(), 4u);
  EXPECT_EQ(counters_.batches_produced.load(), 4u);
}

TEST_F(StreamAssemblerTest, RecordsStageTimeHistogramsAndReadyBatches) {
  backend_.SetBad(5, absl::DataLossError("bad"));
  backend_.SetBad(6, absl::DataLossError("bad"));
  const StreamRequest r = Request();
  StreamAssembler a(r, 8, &counters_);
  a.Start(nullptr);
  Pump(a);
  // The first batch alone is produced until it is taken...
  EXPECT_EQ(counters_.ready_batches.load(), 1);
  ASSERT_TRUE(a.HasResult());
  ASSERT_TRUE(a.Take(StreamAssembler::Clock::now()).ok());
  EXPECT_EQ(counters_.ready_batches.load(), 0);
  Pump(a);
  // ...then everything: 18 good samples = 5 batches, 4 of them not taken.
  EXPECT_EQ(counters_.ready_batches.load(), 4);
  // The fake backend reports 1, 2, 3 us per sample, failed ones included.
  const metrics::HistogramValue read = counters_.read_seconds.Value();
  EXPECT_EQ(read.count, 20u);
  EXPECT_NEAR(read.sum, 20 * 1e-6, 1e-12);
  EXPECT_EQ(read.cumulative_counts.front(), 20u);  // all <= 50 us
  EXPECT_NEAR(counters_.decode_seconds.Value().sum, 20 * 2e-6, 1e-12);
  EXPECT_NEAR(counters_.transform_seconds.Value().sum, 20 * 3e-6, 1e-12);
  EXPECT_EQ(counters_.read_size_bytes.Value().count, 0u);  // fake: unknown
  std::optional<absl::Status> last;
  auto rest = TakeBatches(a, &last);
  EXPECT_EQ(rest.size(), 4u);
  EXPECT_EQ(counters_.ready_batches.load(), 0);
  EXPECT_EQ(counters_.queue_wait_seconds.Value().count, 5u);

  // Cancelling drops the ready batches from the gauge.
  StreamAssembler b(r, 8, &counters_);
  b.Start(nullptr);
  Pump(b);
  EXPECT_GT(counters_.ready_batches.load(), 0);
  b.Cancel();
  EXPECT_EQ(counters_.ready_batches.load(), 0);
  // So does destroying a stream whose batches were never taken.
  {
    StreamAssembler c(r, 8, &counters_);
    c.Start(nullptr);
    Pump(c);
    EXPECT_GT(counters_.ready_batches.load(), 0);
  }
  EXPECT_EQ(counters_.ready_batches.load(), 0);
}

TEST_F(StreamAssemblerTest, FailuresAfterTheLastFullBatchGiveAnErrorsOnlyBatch) {
  backend_.SetBad(18, absl::InvalidArgumentError("not a JPEG"));
  backend_.SetBad(19, absl::NotFoundError("gone"));
  const StreamRequest r = Request();
  StreamAssembler a(r, 8, &counters_);
  auto got = RunAll(a);
  ASSERT_EQ(got.size(), 5u);
  ExpectBatch(*got[3], {12, 13, 14, 15}, {}, 16, r);
  ExpectBatch(*got[4], {16, 17}, {18, 19}, 20, r);

  // Exactly at a batch boundary: the final batch has no samples.
  backend_.SetBad(16, absl::DataLossError("bad"));
  backend_.SetBad(17, absl::DataLossError("bad"));
  StreamAssembler b(r, 8, &counters_);
  got = RunAll(b);
  ASSERT_EQ(got.size(), 5u);
  ExpectBatch(*got[4], {}, {16, 17, 18, 19}, 20, r);
  EXPECT_EQ(got[4]->shape[0], 0u);
  EXPECT_EQ(got[4]->tensor, nullptr);

  // drop_remainder drops it.
  StreamRequest drop = r;
  drop.drop_remainder = true;
  StreamAssembler c(drop, 8, &counters_);
  EXPECT_EQ(RunAll(c).size(), 4u);
}

TEST_F(StreamAssemblerTest, DropRemainderDropsThePartialBatch) {
  StreamRequest r = Request();
  r.batch_size = 6;
  StreamAssembler keep(r, 8, &counters_);
  auto got = RunAll(keep);
  ASSERT_EQ(got.size(), 4u);
  ExpectBatch(*got[3], {18, 19}, {}, 20, r);
  r.drop_remainder = true;
  StreamAssembler drop(r, 8, &counters_);
  got = RunAll(drop);
  ASSERT_EQ(got.size(), 3u);
  ExpectBatch(*got[2], {12, 13, 14, 15, 16, 17}, {}, 18, r);
}

TEST_F(StreamAssemblerTest, NextPositionResumesWhereTheBatchEnded) {
  for (uint64_t id : {3, 7, 8}) backend_.SetBad(id, absl::DataLossError("x"));
  const StreamRequest r = Request();
  StreamAssembler full(r, 8, &counters_);
  auto all = RunAll(full);
  ASSERT_EQ(all.size(), 5u);
  // Resume after batch 1 with its token: the same tail, the same indices.
  StreamRequest resume = r;
  resume.start_batch = 2;
  resume.start_position = all[1]->next_position;
  EXPECT_EQ(all[1]->next_position, 11u);  // 0 1 2 4 | 5 6 9 10
  StreamAssembler tail(resume, 8, &counters_);
  auto got = RunAll(tail);
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k]->batch_index, k + 2);
    ExpectBatch(*got[k], all[k + 2]->sample_ids, {}, all[k + 2]->next_position,
                r);
  }
}

// Samples offered now, over all chunks TakeAll takes.
size_t Dispatched(const std::vector<std::unique_ptr<Chunk>>& chunks) {
  size_t n = 0;
  for (const auto& c : chunks) n += c->works.size();
  return n;
}

TEST_F(StreamAssemblerTest, FirstBatchIsDispatchedAloneUntilConsumed) {
  // Time to first batch must not grow with the depth: until the first batch
  // is consumed, only its samples are handed out, whatever the depth.
  for (int depth : {1, 2, 4}) {
    const StreamRequest r = Request();
    StreamAssembler a(r, depth, &counters_);
    a.Start(nullptr);
    auto chunks = TakeAll(a);
    EXPECT_EQ(Dispatched(chunks), 4u) << "depth " << depth;  // batch 4
    CompleteReversed(a, std::move(chunks));
    EXPECT_FALSE(a.CanDispatch()) << "depth " << depth;
    EXPECT_FALSE(a.HasDispatchableWork()) << "depth " << depth;
    ASSERT_TRUE(a.HasResult());
    auto batch = a.Take(StreamAssembler::Clock::now());
    ASSERT_TRUE(batch.ok() && *batch != nullptr);
    // Then the whole window opens: depth batches beyond the one taken.
    EXPECT_TRUE(a.HasDispatchableWork()) << "depth " << depth;
    EXPECT_EQ(Dispatched(TakeAll(a)), std::min<size_t>(4u * depth, 16u))
        << "depth " << depth;  // 20 samples, 4 already dispatched
  }
}

TEST_F(StreamAssemblerTest, PrefetchWindowMovesWhenTheConsumerTakes) {
  const StreamRequest r = Request();
  StreamAssembler a(r, /*prefetch_depth=*/2, &counters_);
  a.Start(nullptr);
  auto chunks = TakeAll(a);
  EXPECT_EQ(Dispatched(chunks), 4u);  // the first batch alone
  CompleteReversed(a, std::move(chunks));
  ASSERT_TRUE(a.HasResult());
  auto batch = a.Take(StreamAssembler::Clock::now());
  ASSERT_TRUE(batch.ok() && *batch != nullptr);
  chunks = TakeAll(a);
  EXPECT_EQ(Dispatched(chunks), 8u);  // depth 2 x batch 4 after the taken one
  CompleteReversed(a, std::move(chunks));
  EXPECT_FALSE(a.CanDispatch());
  ASSERT_TRUE(a.HasResult());
  batch = a.Take(StreamAssembler::Clock::now());
  ASSERT_TRUE(batch.ok() && *batch != nullptr);
  EXPECT_EQ(Dispatched(TakeAll(a)), 4u);  // one batch more
}

TEST_F(StreamAssemblerTest, MemoryLimitLowersTheDepth) {
  StreamRequest r = Request();
  const uint64_t batch_bytes =
      r.batch_size * r.context.output.SampleBytes(r.context.spec);
  r.memory_limit_bytes = 3 * batch_bytes - 1;
  EXPECT_EQ(StreamAssembler(r, 8, &counters_).depth(), 2u);
  r.memory_limit_bytes = 3 * batch_bytes;
  EXPECT_EQ(StreamAssembler(r, 8, &counters_).depth(), 3u);
  EXPECT_EQ(StreamAssembler(r, 1, &counters_).depth(), 1u);
}

TEST_F(StreamAssemblerTest, FailPolicyDeliversEarlierBatchesThenDataLoss) {
  backend_.SetBad(9, absl::InvalidArgumentError("Not a JPEG file"));
  StreamRequest r = Request();
  r.error_policy = ErrorPolicy::kFailStream;
  StreamAssembler a(r, 8, &counters_);
  a.Start(nullptr);
  std::optional<absl::Status> last;
  auto got = Drain(a, &last);
  ASSERT_EQ(got.size(), 2u);
  ExpectBatch(*got[1], {4, 5, 6, 7}, {}, 8, r);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(last->message().find("sample 9 "), std::string::npos) << *last;
  EXPECT_TRUE(a.Terminal());
  EXPECT_FALSE(a.CanDispatch());
}

TEST_F(StreamAssemblerTest, CancelDropsWhatWasNotTaken) {
  StreamAssembler a(Request(), 8, &counters_);
  a.Start(nullptr);
  auto chunks = TakeAll(a);
  a.Cancel();
  CompleteReversed(a, std::move(chunks));  // late results are dropped
  ASSERT_TRUE(a.HasResult());
  EXPECT_EQ(a.Take(StreamAssembler::Clock::now()).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_FALSE(a.CanDispatch());
}

TEST_F(StreamAssemblerTest, ResumeWithoutTokenValidatesThenReusesTheCache) {
  for (uint64_t id : {1, 4, 5}) backend_.SetBad(id, absl::DataLossError("x"));
  StreamRequest r = Request();
  r.start_batch = 1;
  auto cache = std::make_shared<std::vector<int8_t>>(ds_->size(), kUnknown);

  StreamAssembler a(r, 8, &counters_);
  ASSERT_TRUE(a.NeedsValidation());
  a.Start(cache);
  // Validation chunks write to scratch, not to batches.
  auto chunks = TakeAll(a);
  ASSERT_FALSE(chunks.empty());
  EXPECT_TRUE(chunks[0]->validation);
  CompleteReversed(a, std::move(chunks));
  std::optional<absl::Status> last;
  auto got = Drain(a, &last);
  ASSERT_EQ(got.size(), 4u);  // positions 7..19: 4 + 4 + 4 + 1
  EXPECT_EQ(got[0]->batch_index, 1u);
  // Batch 0 is 0 2 3 6; batch 1 starts after position 6.
  ExpectBatch(*got[0], {7, 8, 9, 10}, {}, 11, r);
  EXPECT_EQ((*cache)[1], kBad);
  EXPECT_EQ((*cache)[6], kGood);

  // A second resume finds every earlier result cached: no validation chunk.
  const uint64_t before = backend_.processed();
  StreamAssembler b(r, 8, &counters_);
  b.Start(cache);
  chunks = TakeAll(b);
  ASSERT_FALSE(chunks.empty());
  EXPECT_FALSE(chunks[0]->validation);
  EXPECT_EQ(chunks[0]->first_pos, 7u);
  CompleteReversed(b, std::move(chunks));
  Drain(b, &last);
  EXPECT_EQ(backend_.processed() - before, 13u);  // positions 7..19
}

TEST_F(StreamAssemblerTest, ResumeWithoutTokenPastTheEndIsEmpty) {
  StreamRequest r = Request();
  r.start_batch = 6;  // 24 successes needed, 20 samples
  StreamAssembler a(r, 8, &counters_);
  a.Start(std::make_shared<std::vector<int8_t>>(ds_->size(), kUnknown));
  Pump(a);
  std::optional<absl::Status> last;
  EXPECT_TRUE(TakeBatches(a, &last).empty());
  ASSERT_TRUE(last.has_value());
  EXPECT_TRUE(last->ok()) << *last;
}

}  // namespace
}  // namespace nearprep
