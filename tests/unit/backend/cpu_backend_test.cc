// CpuBackend: the shared conformance suite, its plumbing (read, parameter
// draws, preprocessing) against the image module's building blocks, the
// backend factory, and the whole pipeline on the real sample images.
#include "server/backend/cpu_backend.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "gtest/gtest.h"
#include "server/data/epoch_plan.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/preprocess.h"
#include "server/pipeline/pipeline.h"
#include "server/storage/fault_injection_storage.h"
#include "server/storage/mem_storage.h"
#include "server/storage/posix_storage.h"
#include "tests/unit/backend/backend_conformance.h"

namespace nearprep {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Cpu, BackendConformanceTest,
    ::testing::ValuesIn(OnEveryStorage(BackendUnderTest{
        "cpu", [] { return std::shared_ptr<Backend>(new CpuBackend()); }})),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_internal::WriteConformanceDataset(dir_.path());
    DatasetConfig config;
    config.root = dir_.path();
    auto ds = Dataset::Open(config);
    ASSERT_TRUE(ds.ok()) << ds.status();
    dataset_ = std::move(ds).value();
  }
  testing_common::TempDir dir_;
  std::unique_ptr<Dataset> dataset_;
};

TEST_F(CpuBackendTest, EqualsDecodeThenTransformWithDrawnParams) {
  CpuBackend backend;
  for (CropMode crop : {CropMode::kNone, CropMode::kRandomResized}) {
    WorkContext ctx = conformance_internal::Contexts(dataset_.get())[0];
    ctx.spec.crop = crop;
    const size_t bytes = ctx.output.SampleBytes(ctx.spec);
    int checked = 0;
    for (const Sample& s : dataset_->samples()) {
      if (s.path.find("bad_") != std::string::npos) continue;
      std::vector<uint8_t> file;
      ASSERT_TRUE(dataset_->store().ReadSample(s.id, &file).ok());
      auto img = DecodeJpegTfCompat(file.data(), file.size(), ctx.limits);
      ASSERT_TRUE(img.ok()) << img.status();
      SampleParams p = DrawSampleParams(ctx.spec, ctx.seed, ctx.epoch, s.id,
                                        img->height, img->width);
      std::vector<uint8_t> want(bytes), got(bytes);
      TransformDecoded(img->pixels.data(), img->height, img->width, ctx.spec,
                       ctx.output, p, want.data());
      SampleWork w;
      w.sample_id = s.id;
      w.out = got.data();
      backend.Process(ctx, &w, 1);
      ASSERT_TRUE(w.status.ok()) << s.path << ": " << w.status;
      EXPECT_EQ(want, got) << s.path;
      EXPECT_EQ(w.params.flip, p.flip);
      EXPECT_EQ(w.params.brightness_delta, p.brightness_delta);
      EXPECT_EQ(w.params.crop.width, p.crop.width);
      ++checked;
    }
    EXPECT_EQ(checked, 8);
  }
}

TEST_F(CpuBackendTest, ReadsThroughTheSourceOfItsContext) {
  // The backend reads what ctx.source reads, whatever storage is under it.
  const Sample& first = dataset_->samples()[0];
  std::vector<uint8_t> first_bytes;
  ASSERT_TRUE(dataset_->store().ReadSample(0, &first_bytes).ok());
  // A failing storage: the read's status comes through (its code).
  auto base = PosixStorage::Create(dir_.path());
  ASSERT_TRUE(base.ok()) << base.status();
  auto faults = std::make_shared<FaultInjectionStorage>(
      std::shared_ptr<const Storage>(std::move(base).value()));
  DatasetConfig config;
  config.root = dir_.path();
  auto faulty = Dataset::Open(config, faults);
  ASSERT_TRUE(faulty.ok()) << faulty.status();
  faults->FailOpen(first.path, absl::NotFoundError("gone"));
  WorkContext ctx = conformance_internal::Contexts(faulty->get())[0];
  std::vector<uint8_t> buf(ctx.output.SampleBytes(ctx.spec));
  CpuBackend plain;
  SampleWork w;
  w.out = buf.data();
  plain.Process(ctx, &w, 1);
  EXPECT_EQ(w.status.code(), absl::StatusCode::kNotFound);
  // The same bytes in memory (a MemStorage with only that file): output
  // follows the bytes.
  auto mem = std::make_shared<MemStorage>();
  mem->AddFile(first.path, first_bytes);
  auto in_memory = Dataset::Open(config, mem);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  ASSERT_EQ((*in_memory)->samples()[0].path, first.path);
  std::vector<uint8_t> a(buf.size()), b(buf.size());
  SampleWork wa, wb;
  wa.sample_id = wb.sample_id = 0;
  wa.out = a.data();
  wb.out = b.data();
  plain.Process(conformance_internal::Contexts(in_memory->get())[0], &wa, 1);
  plain.Process(conformance_internal::Contexts(dataset_.get())[0], &wb, 1);
  ASSERT_TRUE(wa.status.ok() && wb.status.ok()) << wa.status << " " << wb.status;
  EXPECT_EQ(a, b);
  EXPECT_EQ(plain.name(), "cpu");
}

TEST_F(CpuBackendTest, BytesInHandGiveWhatReadingGives) {
  // PreprocessSampleBytes (a fallback's path, bytes already read) equals
  // ProcessSampleOnCpu (reads first) for good and broken files alike.
  WorkContext ctx = conformance_internal::Contexts(dataset_.get())[1];
  const size_t bytes = ctx.output.SampleBytes(ctx.spec);
  int good = 0;
  for (const Sample& s : dataset_->samples()) {
    std::vector<uint8_t> file, scratch;
    ASSERT_TRUE(dataset_->store().ReadSample(s.id, &file).ok());
    std::vector<uint8_t> a(bytes), b(bytes);
    SampleWork wa, wb;
    wa.sample_id = wb.sample_id = s.id;
    wa.out = a.data();
    wb.out = b.data();
    ProcessSampleOnCpu(ctx, &scratch, &wa);
    PreprocessSampleBytes(ctx, file.data(), file.size(), 17, &wb);
    EXPECT_EQ(wa.status, wb.status) << s.path;
    EXPECT_EQ(wb.times.read_us, 17u);
    if (!wa.status.ok()) continue;
    ++good;
    EXPECT_EQ(a, b) << s.path;
    EXPECT_EQ(wa.params.crop.x, wb.params.crop.x) << s.path;
    EXPECT_EQ(wa.params.flip, wb.params.flip) << s.path;
  }
  EXPECT_EQ(good, 8);
}

TEST_F(CpuBackendTest, BytesInHandUseTheParametersAlreadyDrawn) {
  // A fallback hands over the parameters it drew when it staged the sample
  // (FPGA backend): they are used as given, not drawn again. Drawn for
  // another image size, they are not used.
  WorkContext ctx = conformance_internal::Contexts(dataset_.get())[1];
  const size_t bytes = ctx.output.SampleBytes(ctx.spec);
  int checked = 0;
  for (const Sample& s : dataset_->samples()) {
    std::vector<uint8_t> file, scratch;
    ASSERT_TRUE(dataset_->store().ReadSample(s.id, &file).ok());
    std::vector<uint8_t> want(bytes), got(bytes), other(bytes);
    SampleWork w;
    w.sample_id = s.id;
    w.out = want.data();
    ProcessSampleOnCpu(ctx, &scratch, &w);
    if (!w.status.ok()) continue;
    SampleParams given = w.params;
    given.flip = !given.flip;  // not what DrawSampleParams gives
    given.brightness_delta += 0.25f;
    SampleWork g;
    g.sample_id = s.id;
    g.out = got.data();
    PreprocessSampleBytes(ctx, file.data(), file.size(), 0, &g, &given);
    ASSERT_TRUE(g.status.ok()) << s.path;
    EXPECT_EQ(g.params.flip, given.flip) << s.path;
    EXPECT_NE(got, want) << s.path << ": the given parameters were not used";
    SampleParams stale = w.params;
    stale.flip = !stale.flip;
    stale.source_width += 1;  // drawn for another size: drawn again
    SampleWork o;
    o.sample_id = s.id;
    o.out = other.data();
    PreprocessSampleBytes(ctx, file.data(), file.size(), 0, &o, &stale);
    EXPECT_EQ(other, want) << s.path;
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

std::string Concat(const std::vector<std::shared_ptr<const BatchData>>& bs) {
  std::string s;
  for (const auto& b : bs) {
    s.append(reinterpret_cast<const char*>(b->tensor), b->tensor_bytes);
  }
  return s;
}

TEST(CpuPipelineRealImagesTest, StreamsTheSampleDatasetDeterministically) {
  const std::string root =
      NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200";
  if (!std::filesystem::is_directory(root)) {
    GTEST_SKIP() << "real images not found at " << root
                 << " (CI provides ../shared beside the clone)";
  }
  DatasetConfig config;
  config.name = "imagenet-sample-200";
  config.root = root;
  auto ds = Dataset::Open(config);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_GE((*ds)->size(), 100u);
  StreamRequest req;
  req.context.source = std::make_shared<const SampleSource>(**ds);
  req.batch_size = 16;
  req.context.seed = 7;
  req.context.epoch = 1;
  req.shuffle = true;
  req.context.spec.height = 112;
  req.context.spec.width = 112;
  req.context.spec.crop = CropMode::kRandomResized;
  req.context.spec.flip_probability = 0.5f;
  req.context.spec.brightness_max_delta = 32.0f / 255.0f;
  req.context.spec.saturation_enabled = true;
  req.context.spec.saturation_lower = 0.5f;
  req.context.spec.saturation_upper = 1.5f;
  req.include_params = true;

  auto run = [&](int workers, const StreamRequest& r) {
    PipelineOptions o;
    o.workers = workers;
    o.chunk_size = 3;
    Pipeline pipeline(o, std::make_shared<CpuBackend>());
    auto stream = pipeline.OpenStream(r);
    EXPECT_TRUE(stream.ok());
    std::vector<std::shared_ptr<const BatchData>> out;
    while (true) {
      auto b = (*stream)->NextBlocking();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || *b == nullptr) break;
      out.push_back(*b);
    }
    return out;
  };
  auto full = run(2, req);
  std::set<uint64_t> ids;
  uint64_t read_us = 0, decode_us = 0;
  for (const auto& b : full) {
    EXPECT_TRUE(b->errors.empty());
    ids.insert(b->sample_ids.begin(), b->sample_ids.end());
    read_us += b->times.read_us;
    decode_us += b->times.decode_us;
    const float* f = reinterpret_cast<const float*>(b->tensor);
    for (size_t i = 0; i < b->tensor_bytes / 4; ++i) {
      ASSERT_TRUE(f[i] >= 0.0f && f[i] <= 1.0f) << "clip is on";
    }
    for (size_t i = 0; i < b->num_samples; ++i) {
      const Sample& s = (*ds)->samples()[b->sample_ids[i]];
      EXPECT_EQ(b->labels[i], s.label);
      EXPECT_GT(b->params[i].crop.width, 0);
    }
  }
  EXPECT_EQ(ids.size(), (*ds)->size());
  EXPECT_GT(decode_us, 0u);
  EXPECT_GT(decode_us, read_us / 100);
  // Resume without a token from batch 5, one worker: the same tail.
  StreamRequest tail_req = req;
  tail_req.start_batch = 5;
  auto tail = run(1, tail_req);
  ASSERT_EQ(tail.size() + 5, full.size());
  EXPECT_TRUE(Concat(tail) ==
              Concat({full.begin() + 5, full.end()}));
}

}  // namespace
}  // namespace nearprep
