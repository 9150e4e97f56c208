// Pipeline assembly, policies, resume, determinism and lifecycle, with a
// fake backend (fake_backend.h) so every expected byte is known.
#include "server/pipeline/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "server/data/epoch_order_cache.h"
#include "server/data/epoch_plan.h"
#include "server/data/sample_source.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

using testing_internal::FakeBackend;
using testing_internal::FakePattern;
using testing_internal::MakeDummyDataset;

// What a batch must contain, computed independently of the pipeline.
struct ExpectedBatch {
  std::vector<uint64_t> ids;
  std::vector<uint64_t> error_ids;
  uint64_t next_position = 0;
};

// Reference model of batch formation: batch k = the k-th group of B
// successful samples in shard order; an error belongs to the batch being
// filled when it is met; a trailing partial (or error-only) batch unless
// drop_remainder.
std::vector<ExpectedBatch> ExpectedStream(const std::vector<uint64_t>& shard,
                                          const std::set<uint64_t>& bad,
                                          uint32_t batch, bool drop_remainder) {
  std::vector<ExpectedBatch> out;
  ExpectedBatch cur;
  for (uint64_t pos = 0; pos < shard.size(); ++pos) {
    if (bad.count(shard[pos])) {
      cur.error_ids.push_back(shard[pos]);
      continue;
    }
    cur.ids.push_back(shard[pos]);
    if (cur.ids.size() == batch) {
      cur.next_position = pos + 1;
      out.push_back(cur);
      cur = ExpectedBatch{};
    }
  }
  if (!drop_remainder && (!cur.ids.empty() || !cur.error_ids.empty())) {
    cur.next_position = shard.size();
    out.push_back(cur);
  }
  return out;
}

// A small uint8 tensor per sample keeps the tests fast.
StreamRequest SmallRequest(const Dataset* ds) {
  StreamRequest r;
  r.context.source = std::make_shared<const SampleSource>(*ds);
  r.batch_size = 8;
  r.context.seed = 42;
  r.context.epoch = 3;
  r.shuffle = true;
  r.context.spec.height = 4;
  r.context.spec.width = 5;
  r.context.output.dtype = DType::kUint8;
  return r;
}

std::vector<std::shared_ptr<const BatchData>> Drain(BatchStream& stream,
                                                    absl::Status* status) {
  std::vector<std::shared_ptr<const BatchData>> out;
  while (true) {
    auto next = stream.NextBlocking();
    if (!next.ok()) {
      *status = next.status();
      return out;
    }
    if (*next == nullptr) {
      *status = absl::OkStatus();
      return out;
    }
    out.push_back(*next);
  }
}

std::vector<std::shared_ptr<const BatchData>> RunStream(
    Pipeline& pipeline, const StreamRequest& request,
    absl::Status* status = nullptr) {
  auto stream = pipeline.OpenStream(request);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  absl::Status st;
  auto batches = Drain(**stream, &st);
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st;
  }
  return batches;
}

// Checks `got` against the expected batches [first, first + got.size()).
void ExpectBatches(const std::vector<std::shared_ptr<const BatchData>>& got,
                   const std::vector<ExpectedBatch>& want, size_t first,
                   const StreamRequest& req, const Dataset& ds) {
  ASSERT_EQ(got.size() + first, want.size());
  const size_t sample_bytes =
      req.context.output.SampleBytes(req.context.spec);
  std::vector<uint8_t> expect(sample_bytes);
  for (size_t k = 0; k < got.size(); ++k) {
    const BatchData& b = *got[k];
    const ExpectedBatch& e = want[first + k];
    SCOPED_TRACE(testing::Message() << "batch " << first + k);
    EXPECT_EQ(b.batch_index, req.start_batch + k);
    EXPECT_EQ(b.epoch, req.context.epoch);
    EXPECT_EQ(b.sample_ids, e.ids);
    EXPECT_EQ(b.num_samples, e.ids.size());
    EXPECT_EQ(b.next_position, e.next_position);
    ASSERT_EQ(b.labels.size(), e.ids.size());
    for (size_t i = 0; i < e.ids.size(); ++i) {
      EXPECT_EQ(b.labels[i], ds.samples()[e.ids[i]].label);
    }
    std::vector<uint64_t> err_ids;
    for (const auto& err : b.errors) {
      err_ids.push_back(err.sample_id);
      EXPECT_EQ(err.path, ds.samples()[err.sample_id].path);
      EXPECT_FALSE(err.status.ok());
    }
    EXPECT_EQ(err_ids, e.error_ids);
    ASSERT_EQ(b.tensor_bytes, e.ids.size() * sample_bytes);
    ASSERT_EQ(b.shape.size(), 4u);
    EXPECT_EQ(b.shape[0], e.ids.size());
    for (size_t i = 0; i < e.ids.size(); ++i) {
      FakePattern(e.ids[i], req.context.seed, expect.data(), sample_bytes);
      ASSERT_EQ(0, std::memcmp(expect.data(), b.tensor + i * sample_bytes,
                               sample_bytes))
          << "sample slot " << i << " id " << e.ids[i];
    }
  }
}

std::vector<uint64_t> Shard(const Dataset& ds, const StreamRequest& r) {
  return ShardSamples(
      EpochOrder(ds.size(), r.context.seed, r.context.epoch, r.shuffle),
                      r.shard_index, r.num_shards);
}

std::string Bytes(const std::vector<std::shared_ptr<const BatchData>>& bs) {
  std::string all;
  for (const auto& b : bs) {
    all.append(reinterpret_cast<const char*>(b->tensor), b->tensor_bytes);
    for (uint64_t id : b->sample_ids) all += "|" + std::to_string(id);
    for (const auto& e : b->errors) all += "!" + std::to_string(e.sample_id);
    all += "#" + std::to_string(b->next_position);
  }
  return all;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_ = MakeDummyDataset(50, 3);
    ASSERT_NE(ds_, nullptr);
    ASSERT_EQ(ds_->size(), 50u);
    backend_ = std::make_shared<FakeBackend>();
  }
  PipelineOptions Options(int workers, int chunk = 3, int depth = 3) {
    PipelineOptions o;
    o.workers = workers;
    o.chunk_size = chunk;
    o.prefetch_depth = depth;
    return o;
  }

  std::unique_ptr<Dataset> ds_;
  // Waits (at most 5 s) until the backend has processed `n` samples since
  // `before`, then 30 ms more so that one too many would be seen; returns
  // the count.
  uint64_t WaitForProcessed(uint64_t before, uint64_t n) {
    for (int i = 0; i < 2500 && backend_->processed() - before < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return backend_->processed() - before;
  }

  std::shared_ptr<FakeBackend> backend_;
};

TEST_F(PipelineTest, BatchesFollowTheEpochPlan) {
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.include_params = true;
  auto got = RunStream(pipeline, req);
  auto want = ExpectedStream(Shard(*ds_, req), {}, req.batch_size, false);
  ASSERT_EQ(want.size(), 7u);  // 6 x 8 + 2
  ExpectBatches(got, want, 0, req, *ds_);
  EXPECT_EQ(got.back()->num_samples, 2u);
  // Shuffled: the order is not the identity.
  EXPECT_NE(got[0]->sample_ids[0] + 1, got[0]->sample_ids[1]);
  for (const auto& b : got) {
    ASSERT_EQ(b->params.size(), b->num_samples);
    for (size_t i = 0; i < b->num_samples; ++i) {
      EXPECT_EQ(b->params[i].brightness_delta,
                static_cast<float>(b->sample_ids[i]));
    }
    // Stage times are sums over the batch (fake: 1/2/3 us per sample).
    EXPECT_EQ(b->times.read_us, b->num_samples * 1u);
    EXPECT_EQ(b->times.decode_us, b->num_samples * 2u);
    EXPECT_EQ(b->times.transform_us, b->num_samples * 3u);
  }
  EXPECT_EQ(pipeline.counters().batches_produced.load(), 7u);
  EXPECT_EQ(pipeline.counters().samples_ok.load(), 50u);
}

TEST_F(PipelineTest, ParamsOmittedUnlessRequested) {
  Pipeline pipeline(Options(1), backend_);
  auto got = RunStream(pipeline, SmallRequest(ds_.get()));
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(got[0]->params.empty());
}

TEST_F(PipelineTest, SkipPolicyCompactsAcrossBatchBoundaries) {
  // Identity order: id == position. Bad at 0, at the end and start of
  // batches, and a run of consecutive failures spanning a boundary.
  for (uint64_t id : {0, 8, 9, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 49}) {
    backend_->SetBad(id, absl::DataLossError("truncated"));
  }
  backend_->SetDelayUs(50);
  StreamRequest req = SmallRequest(ds_.get());
  req.shuffle = false;
  for (int depth : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "depth " << depth);
    Pipeline pipeline(Options(2, 3, depth), backend_);
    auto got = RunStream(pipeline, req);
    std::set<uint64_t> bad;
    for (auto& [id, st] : backend_->bad()) bad.insert(id);
    auto want = ExpectedStream(Shard(*ds_, req), bad, req.batch_size, false);
    ExpectBatches(got, want, 0, req, *ds_);
    EXPECT_EQ(pipeline.counters().samples_failed.load(), bad.size());
  }
}

TEST_F(PipelineTest, AllSamplesBadGiveOneErrorOnlyBatch) {
  for (uint64_t id = 0; id < 50; ++id) {
    backend_->SetBad(id, absl::InvalidArgumentError("not a JPEG"));
  }
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  auto got = RunStream(pipeline, req);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->num_samples, 0u);
  EXPECT_EQ(got[0]->errors.size(), 50u);
  EXPECT_EQ(got[0]->tensor_bytes, 0u);
  req.drop_remainder = true;
  EXPECT_TRUE(RunStream(pipeline, req).empty());
}

TEST_F(PipelineTest, FailPolicyEndsStreamWithDataLossNamingTheSample) {
  backend_->SetBad(13, absl::InvalidArgumentError("Not a JPEG file"));
  Pipeline pipeline(Options(2, 2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.shuffle = false;
  req.batch_size = 4;
  req.error_policy = ErrorPolicy::kFailStream;
  absl::Status status;
  auto got = RunStream(pipeline, req, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(ds_->samples()[13].path), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("Not a JPEG file"), std::string::npos)
      << status;
  // The three complete batches before the bad sample are delivered first.
  auto want = ExpectedStream(Shard(*ds_, req), {}, 4, false);
  want.resize(3);
  ExpectBatches(got, want, 0, req, *ds_);
}

TEST_F(PipelineTest, ResumeEqualsTailOfFullStream) {
  for (uint64_t id : {3, 4, 11, 12, 13, 30, 44}) {
    backend_->SetBad(id, absl::DataLossError("bad"));
  }
  Pipeline pipeline(Options(2, 3, 2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.batch_size = 4;
  auto full = RunStream(pipeline, req);
  ASSERT_GE(full.size(), 10u);
  const uint64_t n = full.size();
  for (uint64_t k : std::vector<uint64_t>{1, 2, 5, 9, n - 1, n, n + 3}) {
    for (bool token : {false, true}) {
      SCOPED_TRACE(testing::Message() << "k=" << k << " token=" << token);
      StreamRequest r = req;
      r.start_batch = k;
      if (token && k <= full.size()) r.start_position = full[k - 1]->next_position;
      auto tail = RunStream(pipeline, r);
      std::vector<std::shared_ptr<const BatchData>> want(
          full.begin() + std::min<size_t>(k, full.size()), full.end());
      ASSERT_EQ(tail.size(), want.size());
      EXPECT_EQ(Bytes(tail), Bytes(want));
      for (size_t i = 0; i < tail.size(); ++i) {
        EXPECT_EQ(tail[i]->batch_index, want[i]->batch_index);
      }
    }
  }
  // With max_batches: a window from the middle.
  StreamRequest r = req;
  r.start_batch = 3;
  r.max_batches = 2;
  auto mid = RunStream(pipeline, r);
  EXPECT_EQ(Bytes(mid), Bytes({full[3], full[4]}));
}

TEST_F(PipelineTest, ResumeWithoutTokenCachesValidation) {
  for (uint64_t id : {5, 6, 7}) backend_->SetBad(id, absl::DataLossError("x"));
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.start_batch = 4;
  req.max_batches = 1;
  uint64_t before = backend_->processed();
  auto first = RunStream(pipeline, req);
  uint64_t cost1 = backend_->processed() - before;
  before = backend_->processed();
  auto second = RunStream(pipeline, req);
  uint64_t cost2 = backend_->processed() - before;
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(Bytes(first), Bytes(second));
  // The first validates >= 32 earlier samples; the second reuses them.
  EXPECT_GE(cost1, 32u + 8u);
  EXPECT_EQ(cost2, 8u + first[0]->errors.size());
}

TEST_F(PipelineTest, SameBytesWhateverWorkersChunksAndDepth) {
  for (uint64_t id : {2, 9, 10, 31}) backend_->SetBad(id, absl::DataLossError("x"));
  backend_->SetDelayUs(30);
  StreamRequest req = SmallRequest(ds_.get());
  req.batch_size = 6;
  std::string reference;
  for (int workers : {1, 2, 4}) {
    for (int chunk : {1, 4, 7}) {
      for (int depth : {1, 3}) {
        SCOPED_TRACE(testing::Message() << workers << "/" << chunk << "/" << depth);
        Pipeline pipeline(Options(workers, chunk, depth), backend_);
        std::string got = Bytes(RunStream(pipeline, req));
        if (reference.empty()) reference = got;
        EXPECT_EQ(got, reference);
      }
    }
  }
  EXPECT_FALSE(reference.empty());
}

TEST_F(PipelineTest, ShardsPartitionTheEpoch) {
  backend_->SetBad(17, absl::NotFoundError("gone"));
  Pipeline pipeline(Options(2), backend_);
  std::multiset<uint64_t> seen;
  for (uint32_t k = 0; k < 3; ++k) {
    StreamRequest req = SmallRequest(ds_.get());
    req.num_shards = 3;
    req.shard_index = k;
    auto got = RunStream(pipeline, req);
    auto want = ExpectedStream(Shard(*ds_, req), {17}, req.batch_size, false);
    ExpectBatches(got, want, 0, req, *ds_);
    for (const auto& b : got) {
      seen.insert(b->sample_ids.begin(), b->sample_ids.end());
      for (const auto& e : b->errors) seen.insert(e.sample_id);
    }
  }
  ASSERT_EQ(seen.size(), 50u);
  for (uint64_t id = 0; id < 50; ++id) EXPECT_EQ(seen.count(id), 1u) << id;
}

TEST_F(PipelineTest, DropRemainderAndMaxBatches) {
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.drop_remainder = true;
  auto got = RunStream(pipeline, req);
  ASSERT_EQ(got.size(), 6u);
  for (const auto& b : got) EXPECT_EQ(b->num_samples, 8u);

  req.drop_remainder = false;
  req.max_batches = 3;
  uint64_t before = backend_->processed();
  got = RunStream(pipeline, req);
  ASSERT_EQ(got.size(), 3u);
  // Dispatch stops at max_batches * batch_size samples.
  EXPECT_EQ(backend_->processed() - before, 24u);
  auto want = ExpectedStream(Shard(*ds_, req), {}, 8, false);
  want.resize(3);
  ExpectBatches(got, want, 0, req, *ds_);
}

TEST_F(PipelineTest, CancelMidStreamDoesNotHang) {
  backend_->SetDelayUs(1000);
  auto pipeline = std::make_unique<Pipeline>(Options(2, 2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  auto stream = pipeline->OpenStream(req);
  ASSERT_TRUE(stream.ok());
  auto first = (*stream)->NextBlocking();
  ASSERT_TRUE(first.ok());
  ASSERT_NE(*first, nullptr);
  // A blocked consumer is woken by Cancel from another thread.
  auto blocked = std::async(std::launch::async, [&] {
    std::vector<absl::StatusOr<std::shared_ptr<const BatchData>>> out;
    for (int i = 0; i < 100; ++i) {
      auto n = (*stream)->NextBlocking();
      bool stop = !n.ok() || *n == nullptr;
      out.push_back(std::move(n));
      if (stop) break;
    }
    return out;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  (*stream)->Cancel();
  (*stream)->Cancel();  // idempotent
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto results = blocked.get();
  ASSERT_FALSE(results.empty());
  EXPECT_EQ(results.back().status().code(), absl::StatusCode::kCancelled);
  // Nothing more is dispatched after the cancel settles.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  uint64_t settled = backend_->processed();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(backend_->processed(), settled);
  EXPECT_LT(settled, 50u);
  // The batch taken before the cancel stays valid after the pipeline is gone.
  pipeline.reset();
  const BatchData& b = **first;
  std::vector<uint8_t> expect(req.context.output.SampleBytes(req.context.spec));
  FakePattern(b.sample_ids[0], req.context.seed, expect.data(), expect.size());
  EXPECT_EQ(0, std::memcmp(b.tensor, expect.data(), expect.size()));
}

TEST_F(PipelineTest, DestroyingPipelineWithOpenStreamsDoesNotHang) {
  backend_->SetDelayUs(500);
  auto pipeline = std::make_unique<Pipeline>(Options(2), backend_);
  auto s1 = pipeline->OpenStream(SmallRequest(ds_.get()));
  auto s2 = pipeline->OpenStream(SmallRequest(ds_.get()));
  ASSERT_TRUE(s1.ok() && s2.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pipeline.reset();
  auto n = (*s1)->NextBlocking();
  EXPECT_EQ(n.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(PipelineTest, NextAnswersEachCallExactlyOnce) {
  backend_->SetDelayUs(200);
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  auto stream = pipeline.OpenStream(req);
  ASSERT_TRUE(stream.ok());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> calls(1000, 0);
  std::vector<std::shared_ptr<const BatchData>> got;
  const std::thread::id consumer = std::this_thread::get_id();
  int asked = 0;
  int inline_answers = 0;
  bool end = false;
  while (!end && asked < 1000) {
    const int my = asked++;
    BatchStream::NextResult result;
    (*stream)->Next([&, my](BatchStream::NextResult r) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls[my];
      result = std::move(r);
      if (std::this_thread::get_id() == consumer) ++inline_answers;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10),
                              [&] { return calls[my] > 0; }));
    }
    ASSERT_TRUE(result.ok()) << result.status();
    if (*result == nullptr) {
      end = true;
    } else {
      got.push_back(*result);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < asked; ++i) EXPECT_EQ(calls[i], 1) << i;
  // The first answer needs the backend, so it comes from a worker.
  EXPECT_LT(inline_answers, asked);
  auto want = ExpectedStream(Shard(*ds_, req), {}, req.batch_size, false);
  ExpectBatches(got, want, 0, req, *ds_);
}

TEST_F(PipelineTest, CancelAnswersAPendingNextOnAPipelineThread) {
  backend_->SetDelayUs(20000);  // the first batch takes a while
  Pipeline pipeline(Options(1, 1, 1), backend_);
  auto stream = pipeline.OpenStream(SmallRequest(ds_.get()));
  ASSERT_TRUE(stream.ok());
  auto answer = std::make_shared<std::promise<BatchStream::NextResult>>();
  auto thread = std::make_shared<std::promise<std::thread::id>>();
  (*stream)->Next([answer, thread](BatchStream::NextResult r) {
    thread->set_value(std::this_thread::get_id());
    answer->set_value(std::move(r));
  });
  (*stream)->Cancel();
  auto f = answer->get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(thread->get_future().get(), std::this_thread::get_id());
  // Later calls are answered at once.
  EXPECT_EQ((*stream)->NextBlocking().status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(PipelineTest, QueueWaitMeasuresTimeBeforeTheConsumerTakesIt) {
  backend_->SetDelayUs(500);
  Pipeline pipeline(Options(1, 2, 1), backend_);
  const uint64_t before = backend_->processed();
  auto stream = pipeline.OpenStream(SmallRequest(ds_.get()));
  ASSERT_TRUE(stream.ok());
  // Depth 1: batch 1 (samples 8..15) is made only once batch 0 is taken,
  // so it cannot be done before this moment: its wait is at most
  // taken - asked (a wait counted from anything earlier, e.g. the stream's
  // opening, would exceed it).
  const auto asked = std::chrono::steady_clock::now();
  auto first = (*stream)->NextBlocking();
  ASSERT_TRUE(first.ok() && *first != nullptr);
  // Wait until the backend has started its last sample, leave the batch
  // waiting for 60 ms, then take it: it waited at least ~40 ms (the last
  // sample takes at most 2 ms of the margin).
  for (int i = 0; i < 5000 && backend_->processed() - before < 16; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(backend_->processed() - before, 16u);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  auto second = (*stream)->NextBlocking();
  const auto taken = std::chrono::steady_clock::now();
  ASSERT_TRUE(second.ok() && *second != nullptr);
  EXPECT_GE((*second)->queue_wait_us, 40000u);
  EXPECT_LE((*second)->queue_wait_us,
            static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::microseconds>(
                    taken - asked)
                    .count()));
}

TEST_F(PipelineTest, MemoryLimitBoundsPrefetch) {
  PipelineOptions o = Options(2, 2, 8);
  StreamRequest req = SmallRequest(ds_.get());
  const uint64_t batch_bytes =
      req.batch_size * req.context.output.SampleBytes(req.context.spec);
  req.memory_limit_bytes = 2 * batch_bytes + batch_bytes / 2;  // depth 2
  Pipeline pipeline(o, backend_);
  uint64_t before = backend_->processed();
  auto s = pipeline.OpenStream(req);
  ASSERT_TRUE(s.ok());
  // Waits until `n` samples are processed, then 30 ms more, so that one
  // too many is seen.
  auto wait_for = [&](uint64_t n) { return WaitForProcessed(before, n); };
  // The first batch alone is produced until the consumer takes it...
  EXPECT_EQ(wait_for(8), 8u);
  auto b = (*s)->NextBlocking();
  ASSERT_TRUE(b.ok());
  // ...then the window of two batches beyond it, and no more.
  EXPECT_EQ(wait_for(24), 24u);
  // Taking one batch lets exactly one more be produced.
  b = (*s)->NextBlocking();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(wait_for(32), 32u);
}

// With account_until_released (the daemon's setting) a taken batch keeps
// counting against the window until every copy of it is gone (issue 12,
// item 2: gRPC holds sent batches until written). Taking alone moves
// nothing; dropping the batch (and a copy sharing its token) does.
TEST_F(PipelineTest, TakenBatchesCountUntilReleased) {
  PipelineOptions o = Options(2, 2, 8);
  StreamRequest req = SmallRequest(ds_.get());
  const uint64_t batch_bytes =
      req.batch_size * req.context.output.SampleBytes(req.context.spec);
  req.memory_limit_bytes = 2 * batch_bytes + batch_bytes / 2;  // depth 2
  req.account_until_released = true;
  Pipeline pipeline(o, backend_);
  const uint64_t before = backend_->processed();
  auto s = pipeline.OpenStream(req);
  ASSERT_TRUE(s.ok());
  // Waits until `n` samples are processed, then 30 ms more, so that one
  // too many is seen.
  auto wait_for = [&](uint64_t n) { return WaitForProcessed(before, n); };
  // The first batch alone until it is released.
  EXPECT_EQ(wait_for(8), 8u);
  auto b0 = (*s)->NextBlocking();
  ASSERT_TRUE(b0.ok() && *b0 != nullptr);
  EXPECT_EQ(wait_for(8), 8u);  // taken and held: nothing more is produced
  // A copy (as the compressed copy of a batch is) shares the token: the
  // original alone going does not release the batch.
  auto copy = std::make_shared<BatchData>(**b0);
  b0->reset();
  EXPECT_EQ(wait_for(8), 8u);
  copy.reset();
  EXPECT_EQ(wait_for(24), 24u);  // released: two batches beyond it
  // Taking both and holding them: nothing more is produced.
  auto b1 = (*s)->NextBlocking();
  auto b2 = (*s)->NextBlocking();
  ASSERT_TRUE(b1.ok() && *b1 != nullptr);
  ASSERT_TRUE(b2.ok() && *b2 != nullptr);
  EXPECT_EQ(wait_for(24), 24u);
  b1->reset();
  EXPECT_EQ(wait_for(32), 32u);
  b2->reset();
  EXPECT_EQ(wait_for(40), 40u);
  // The stream still delivers everything, in order.
  uint64_t index = 3;
  while (true) {
    auto b = (*s)->NextBlocking();
    ASSERT_TRUE(b.ok());
    if (*b == nullptr) break;
    EXPECT_EQ((*b)->batch_index, index++);
  }
  EXPECT_EQ(index, 7u);
}

TEST_F(PipelineTest, CountersClassifyFailures) {
  backend_->SetBad(1, absl::InvalidArgumentError("not a JPEG"));
  backend_->SetBad(2, absl::DataLossError("truncated"));
  backend_->SetBad(3, absl::ResourceExhaustedError("too big"));
  backend_->SetBad(4, absl::NotFoundError("gone"));
  backend_->SetBad(5, absl::PermissionDeniedError("symlink"));
  Pipeline pipeline(Options(2), backend_);
  RunStream(pipeline, SmallRequest(ds_.get()));
  const PipelineCounters& c = pipeline.counters();
  EXPECT_EQ(c.samples_ok.load(), 45u);
  EXPECT_EQ(c.samples_failed.load(), 5u);
  EXPECT_EQ(c.decode_errors.load(), 2u);
  EXPECT_EQ(c.limit_errors.load(), 1u);
  EXPECT_EQ(c.io_errors.load(), 2u);
}

TEST_F(PipelineTest, WorkerPoolAndNextWaitMetrics) {
  backend_->SetDelayUs(200);
  Pipeline pipeline(Options(2), backend_);
  EXPECT_EQ(pipeline.RunnableStreams(), 0u);
  auto stream = pipeline.OpenStream(SmallRequest(ds_.get()));
  ASSERT_TRUE(stream.ok());
  // Just opened: it has work for a worker, or a worker already took it.
  EXPECT_LE(pipeline.RunnableStreams(), 1u);
  absl::Status st;
  auto batches = Drain(**stream, &st);
  ASSERT_TRUE(st.ok()) << st;
  const PipelineCounters& c = pipeline.counters();
  // 50 samples of at least 200 us each ran inside the backend.
  EXPECT_GE(c.busy_nanos.load(), 50u * 200u * 1000u);
  EXPECT_EQ(c.busy_workers.load(), 0);
  EXPECT_EQ(pipeline.RunnableStreams(), 0u);
  EXPECT_EQ(pipeline.ProducingStreams(), 0u);
  // One Next per batch plus the end of the stream; the first one waited
  // for the backend.
  const metrics::HistogramValue wait = c.next_wait_seconds.Value();
  EXPECT_EQ(wait.count, batches.size() + 1);
  EXPECT_GT(wait.sum, 0.0002);
  EXPECT_EQ(c.queue_wait_seconds.Value().count, batches.size());
  EXPECT_EQ(c.read_seconds.Value().count, 50u);
  EXPECT_EQ(c.ready_batches.load(), 0);
}

TEST_F(PipelineTest, StreamsShareWorkersRoundRobin) {
  backend_->SetDelayUs(300);
  Pipeline pipeline(Options(1, 2, 8), backend_);
  StreamRequest a = SmallRequest(ds_.get());
  StreamRequest b = a;
  a.context.seed = 1;
  b.context.seed = 2;
  auto sa = pipeline.OpenStream(a);
  auto sb = pipeline.OpenStream(b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  // Each stream's first batch is made alone; taking both opens both
  // windows.
  auto a0 = (*sa)->NextBlocking();
  auto b0 = (*sb)->NextBlocking();
  ASSERT_TRUE(a0.ok() && *a0 != nullptr && b0.ok() && *b0 != nullptr);
  const size_t opened = backend_->call_seeds().size();
  absl::Status st;
  auto ba = Drain(**sa, &st);
  auto bb = Drain(**sb, &st);
  EXPECT_EQ(ba.size(), 6u);
  EXPECT_EQ(bb.size(), 6u);
  std::vector<uint64_t> seeds = backend_->call_seeds();
  // From the first chunk of b after both windows opened.
  auto first_b = std::find(seeds.begin() + static_cast<std::ptrdiff_t>(opened),
                           seeds.end(), 2u);
  ASSERT_NE(first_b, seeds.end());
  // Once both streams have work, no stream gets more than 2 chunks in a row
  // until the other runs out of its window.
  int run = 0, longest = 0;
  for (auto it = first_b; it != seeds.end() && it < first_b + 20; ++it) {
    run = (it != first_b && *it == *(it - 1)) ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  EXPECT_LE(longest, 2);
}

// Streams of the same (dataset size, seed, epoch, mode) read one shared
// epoch order (epoch_order_cache.h); another seed has its own; the orders
// go when their streams end. What the streams emit is checked against the
// per-stream computation by the tests above.
TEST_F(PipelineTest, StreamsOfOneEpochShareItsOrder) {
  EpochOrderCache& cache = SharedEpochOrders();
  ASSERT_EQ(cache.live(), 0u);
  Pipeline pipeline(Options(2), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  StreamRequest shard1 = req;
  shard1.num_shards = 2;
  shard1.shard_index = 1;
  StreamRequest other_seed = req;
  other_seed.context.seed = req.context.seed + 1;
  std::vector<std::unique_ptr<BatchStream>> open;
  for (const StreamRequest* r : {&req, &req, &shard1, &other_seed}) {
    auto s = pipeline.OpenStream(*r);
    ASSERT_TRUE(s.ok()) << s.status();
    open.push_back(std::move(*s));
  }
  EXPECT_EQ(cache.live(), 2u);
  EpochOrderKey key;
  key.num_samples = ds_->size();
  key.seed = req.context.seed;
  key.epoch = req.context.epoch;
  key.shuffle = true;
  EpochOrderPtr shared = cache.Get(key);
  // This reference and the three streams' (two of shard 0, one of shard 1).
  EXPECT_EQ(shared.use_count(), 4);
  EXPECT_EQ(*shared, EpochOrder(ds_->size(), key.seed, key.epoch, true));
  key.seed = other_seed.context.seed;
  EXPECT_EQ(cache.Get(key).use_count(), 2);  // its stream's and this one
  // Both streams of shard 0 emit the shard of the per-stream computation.
  auto want = ExpectedStream(Shard(*ds_, req), {}, req.batch_size, false);
  for (int i = 0; i < 2; ++i) {
    absl::Status st;
    auto got = Drain(*open[static_cast<size_t>(i)], &st);
    ASSERT_TRUE(st.ok()) << st;
    ExpectBatches(got, want, 0, req, *ds_);
  }
  open.clear();
  // A stream's state may outlive its handle on a worker for a moment.
  for (int i = 0; i < 500 && cache.live() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(cache.live(), 1u);  // `shared` only
  std::weak_ptr<const std::vector<uint64_t>> watch = shared;
  shared.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(cache.live(), 0u);
}

TEST_F(PipelineTest, StartPastTheEndIsAnEmptyStream) {
  Pipeline pipeline(Options(1), backend_);
  StreamRequest req = SmallRequest(ds_.get());
  req.start_batch = 100;
  req.start_position = 1000;
  EXPECT_TRUE(RunStream(pipeline, req).empty());
  // Without a token the validation runs out of shard first.
  req.start_position = 0;
  EXPECT_TRUE(RunStream(pipeline, req).empty());
}


// Records the SampleSource each Process() call reads through.
class SourceRecordingBackend : public Backend {
 public:
  std::string name() const override { return "source-recording"; }
  void Process(const WorkContext& ctx, SampleWork* samples, size_t n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sources_.insert(ctx.source);
    }
    for (size_t i = 0; i < n; ++i) samples[i].status = absl::OkStatus();
  }
  std::set<std::shared_ptr<const SampleSource>> sources() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sources_;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::shared_ptr<const SampleSource>> sources_;
};

TEST_F(PipelineTest, EachStreamReadsThroughOneSourceMadeForItsOrder) {
  struct Case {
    const char* what;
    std::function<void(StreamRequest*)> set;
    SampleSourceOptions want;
  };
  BlockShuffleParams block;
  block.block_samples = 6;
  block.open_blocks = 2;
  block.window = 4;
  const std::vector<Case> cases = {
      {"global shuffle", [](StreamRequest*) {}, SampleSourceOptions{0, 0, 42, 3}},
      {"block shuffle",
       [&](StreamRequest* r) {
         r->block_shuffle = true;
         r->block = block;
       },
       SampleSourceOptions{6, 0, 42, 3}},
      {"fleet plan blocks",
       [](StreamRequest* r) {
         r->shuffle = false;
         r->sample_ids = {5, 1, 9, 2, 7};
         r->plan_block_samples = 4;
       },
       SampleSourceOptions{0, 4, 42, 3}},
      // plan_block_samples without explicit ids is not a fleet plan.
      {"plan blocks without ids", [](StreamRequest* r) { r->plan_block_samples = 4; },
       SampleSourceOptions{0, 0, 42, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto backend = std::make_shared<SourceRecordingBackend>();
    Pipeline pipeline(Options(2, 2), backend);
    StreamRequest req = SmallRequest(ds_.get());
    c.set(&req);
    ASSERT_FALSE(RunStream(pipeline, req).empty());
    // Several chunks, one source, made for this dataset and order.
    const auto sources = backend->sources();
    ASSERT_EQ(sources.size(), 1u);
    const std::shared_ptr<const SampleSource>& s = *sources.begin();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(&s->dataset(), ds_.get());
    EXPECT_EQ(s->options().block_samples, c.want.block_samples);
    EXPECT_EQ(s->options().plan_block_samples, c.want.plan_block_samples);
    EXPECT_EQ(s->options().seed, c.want.seed);
    EXPECT_EQ(s->options().epoch, c.want.epoch);
    // A second stream gets its own source.
    ASSERT_FALSE(RunStream(pipeline, req).empty());
    EXPECT_EQ(backend->sources().size(), 2u);
  }
}

}  // namespace
}  // namespace nearprep
