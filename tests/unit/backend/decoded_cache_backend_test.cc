// The CPU backend with a decoded-image cache: every output byte equals the
// backend without one (TF_COMPAT, TORCHVISION, FAST; first pass admitting,
// later passes and epochs hitting), a crop taken from the cached full image
// equals the region decode's, a file replaced in place is decoded again
// (never its old pixels), and a dataset reopened with another listing drops
// its entries. The shared conformance suite also runs on it.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/backend/cpu_backend.h"
#include "server/data/decoded_cache.h"
#include "server/data/epoch_plan.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/preprocess.h"
#include "tests/unit/backend/backend_conformance.h"

namespace nearprep {
namespace {

std::shared_ptr<DecodedImageCache> NewCache(uint64_t bytes) {
  DecodedImageCache::Options o;
  o.budget_bytes = bytes;
  return std::make_shared<DecodedImageCache>(o);
}

INSTANTIATE_TEST_SUITE_P(
    CpuDecodedCache, BackendConformanceTest,
    ::testing::ValuesIn(OnEveryStorage(BackendUnderTest{
        "cpu_decoded_cache",
        [] {
          return std::shared_ptr<Backend>(new CpuBackend(NewCache(64 << 20)));
        }})),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

DecodedCacheStats Sum(const Backend& b) {
  DecodedCacheStats sum;
  for (const auto& s : b.decoded_cache_stats()) {
    sum.hits += s.hits;
    sum.misses += s.misses;
    sum.admitted += s.admitted;
    sum.evicted += s.evicted;
    sum.stale += s.stale;
    sum.entries += s.entries;
    sum.bytes += s.bytes;
  }
  return sum;
}

// Contexts over every fidelity and crop mode the decode paths distinguish.
std::vector<WorkContext> FidelityContexts(const Dataset* ds) {
  std::vector<WorkContext> out = conformance_internal::Contexts(ds);
  WorkContext tf = out[0];
  tf.spec.crop = CropMode::kRandomResized;
  tf.spec.contrast_enabled = true;  // the staged path
  tf.spec.contrast_lower = 0.6f;
  tf.spec.contrast_upper = 1.4f;
  tf.spec.hue_max_delta = 0.1f;
  out.push_back(tf);
  WorkContext tv = out[0];
  tv.spec = TransformSpec{};
  tv.spec.fidelity = Fidelity::kTorchvision;
  tv.spec.height = 20;
  tv.spec.width = 18;
  tv.spec.crop = CropMode::kRandomResized;
  tv.spec.flip_probability = 0.5f;
  tv.spec.normalize = true;
  tv.spec.mean[0] = 0.485f;
  tv.spec.std[0] = 0.229f;
  out.push_back(tv);
  tv.spec.crop = CropMode::kResizeCenter;
  tv.spec.resize_shorter = 24;
  tv.spec.height = tv.spec.width = 16;
  out.push_back(tv);
  tv.spec.crop = CropMode::kCenter;
  tv.spec.auto_augment = AugmentPolicy::kTrivialAugmentWide;
  tv.spec.erase_probability = 0.5f;
  tv.output.dtype = DType::kUint8;
  out.push_back(tv);
  WorkContext fast = out[1];
  fast.spec.fidelity = Fidelity::kFast;
  out.push_back(fast);
  return out;
}

class DecodedCacheBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void Reopen() {
    DatasetConfig config;
    config.name = "images";
    config.root = dir_.path();
    if (!written_) {
      testing_internal::WriteConformanceDataset(dir_.path());
      // Larger baseline images: crops well inside them take the region
      // decode (DecodeCrop) on the path without a cache.
      int pattern = 20;
      for (int sub : {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY}) {
        testing_internal::WriteFile(
            std::filesystem::path(dir_.path()) /
                ("c/big_" + std::to_string(sub) + ".jpg"),
            testing_internal::MakeTestJpeg(150, 190, sub, 88, false,
                                           pattern++));
      }
      written_ = true;
    }
    auto ds = Dataset::Open(config);
    ASSERT_TRUE(ds.ok()) << ds.status();
    dataset_ = std::move(ds).value();
    ids_.clear();
    for (const Sample& s : dataset_->samples()) ids_.push_back(s.id);
  }
  WorkContext ForDataset(WorkContext ctx) const {
    ctx.source = std::make_shared<const SampleSource>(*dataset_);
    return ctx;
  }

  testing_common::TempDir dir_;
  bool written_ = false;
  std::unique_ptr<Dataset> dataset_;
  std::vector<uint64_t> ids_;
};

TEST_F(DecodedCacheBackendTest, CacheOnEqualsCacheOffByteForByte) {
  using conformance_internal::ProcessAll;
  CpuBackend plain;
  CpuBackend cached(NewCache(64 << 20));
  uint64_t compared = 0;
  const std::vector<WorkContext> contexts = FidelityContexts(dataset_.get());
  for (const WorkContext& base : contexts) {
    for (uint64_t epoch : {0, 1, 5}) {
      WorkContext ctx = ForDataset(base);
      ctx.epoch = epoch;
      const auto want = ProcessAll(plain, ctx, ids_, 1);
      // Twice: the first pass admits, the second hits.
      for (int pass = 0; pass < 2; ++pass) {
        const auto got = ProcessAll(cached, ctx, ids_, 4);
        for (size_t i = 0; i < ids_.size(); ++i) {
          SCOPED_TRACE(::testing::Message()
                       << dataset_->samples()[i].path << " fidelity "
                       << static_cast<int>(ctx.spec.fidelity) << " crop "
                       << static_cast<int>(ctx.spec.crop) << " epoch "
                       << epoch << " pass " << pass);
          ASSERT_EQ(got[i].ok, want[i].ok) << got[i].status;
          if (!want[i].ok) {
            EXPECT_EQ(got[i].status.code(), want[i].status.code());
            continue;
          }
          EXPECT_TRUE(conformance_internal::SameParams(got[i].params,
                                                       want[i].params));
          ASSERT_TRUE(got[i].bytes == want[i].bytes) << "output bytes differ";
          ++compared;
        }
      }
    }
  }
  // Two styles (TensorFlow's, Pillow's) x the good images, decoded once.
  const uint64_t good = 12;
  // Every good image of every context, epoch and pass.
  EXPECT_EQ(compared, contexts.size() * 3 * 2 * good);
  const DecodedCacheStats s = Sum(cached);
  EXPECT_EQ(s.admitted, 2 * good);
  EXPECT_EQ(s.entries, 2 * good);
  EXPECT_GT(s.hits, 10 * good);
}

TEST_F(DecodedCacheBackendTest, FastBypassesTheCache) {
  using conformance_internal::ProcessAll;
  CpuBackend cached(NewCache(64 << 20));
  WorkContext ctx = ForDataset(FidelityContexts(dataset_.get()).back());
  ASSERT_EQ(ctx.spec.fidelity, Fidelity::kFast);
  ProcessAll(cached, ctx, ids_, 4);
  ProcessAll(cached, ctx, ids_, 4);
  const DecodedCacheStats s = Sum(cached);
  EXPECT_EQ(s.hits + s.misses + s.admitted, 0u);
}

// The proof that the crop from the cached full image is the region decode's:
// many random crops of baseline images of every subsampling, through the
// image module's two entry points.
TEST_F(DecodedCacheBackendTest, CropOfCachedFullImageEqualsRegionDecode) {
  int compared = 0;
  for (Fidelity f : {Fidelity::kTfCompat, Fidelity::kTorchvision}) {
    for (const Sample& s : dataset_->samples()) {
      if (s.path.rfind("c/big_", 0) != 0) continue;
      std::vector<uint8_t> file;
      ASSERT_TRUE(dataset_->store().ReadSample(s.id, &file).ok());
      DecodeLimits limits;
      auto full = DecodeForReuse(file.data(), file.size(), f, limits);
      ASSERT_TRUE(full.ok()) << full.status();
      TransformSpec spec;
      spec.fidelity = f;
      spec.height = 32;
      spec.width = 40;
      spec.crop = CropMode::kRandomResized;
      spec.scale_min = 0.05f;
      spec.scale_max = 0.5f;  // small crops: region decodes
      OutputSpec out;
      out.dtype = DType::kUint8;
      for (uint64_t seed = 0; seed < 40; ++seed) {
        ParamsFn draw = [&](int h, int w) {
          return DrawSampleParams(spec, seed, 0, s.id, h, w);
        };
        std::vector<uint8_t> want(out.SampleBytes(spec)), got(want.size());
        SampleParams pw, pg;
        ASSERT_TRUE(PreprocessJpeg(file.data(), file.size(), spec, out, limits,
                                   draw, &pw, want.data(), nullptr)
                        .ok());
        ASSERT_TRUE(PreprocessDecoded(full->pixels.data(), full->height,
                                      full->width, spec, out, draw, &pg,
                                      got.data(), nullptr)
                        .ok());
        ASSERT_LT(pw.crop.height, full->height);  // a region, not the whole
        ASSERT_EQ(want, got) << s.path << " seed " << seed;
        EXPECT_EQ(pw.crop.x, pg.crop.x);
        EXPECT_EQ(pw.crop.width, pg.crop.width);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2 * 4 * 40);
}

TEST_F(DecodedCacheBackendTest, FileReplacedInPlaceIsNeverServedFromTheCache) {
  using conformance_internal::ProcessAll;
  const std::filesystem::path file =
      std::filesystem::path(dir_.path()) / "c/big_0.jpg";  // TJSAMP_444
  uint64_t id = 0;
  for (const Sample& s : dataset_->samples()) {
    if (s.path == "c/big_0.jpg") id = s.id;
  }
  ASSERT_EQ(dataset_->samples()[id].path, "c/big_0.jpg");
  CpuBackend plain;
  CpuBackend cached(NewCache(64 << 20));
  WorkContext ctx = ForDataset(conformance_internal::Contexts(dataset_.get())[1]);
  const auto old_out = ProcessAll(cached, ctx, {id}, 1);
  ASSERT_TRUE(old_out[0].ok);
  ASSERT_EQ(Sum(cached).entries, 1u);
  // Another picture of the same size in the same file, padded after its EOI
  // (never read) to the old file's byte length: size alone cannot tell.
  std::vector<uint8_t> old_bytes, new_bytes =
      testing_internal::MakeTestJpeg(150, 190, TJSAMP_420, 88, false, 99);
  ASSERT_TRUE(dataset_->store().ReadSample(id, &old_bytes).ok());
  if (new_bytes.size() > old_bytes.size()) {
    new_bytes = testing_internal::MakeTestJpeg(150, 190, TJSAMP_420, 60,
                                               false, 99);
  }
  ASSERT_LE(new_bytes.size(), old_bytes.size());
  new_bytes.resize(old_bytes.size(), 0);
  testing_internal::WriteFile(file, new_bytes);
  const auto want = ProcessAll(plain, ctx, {id}, 1);
  const auto got = ProcessAll(cached, ctx, {id}, 1);
  ASSERT_TRUE(want[0].ok && got[0].ok) << got[0].status;
  ASSERT_FALSE(want[0].bytes == old_out[0].bytes);  // the pictures differ
  EXPECT_TRUE(got[0].bytes == want[0].bytes);
  DecodedCacheStats s = Sum(cached);
  EXPECT_EQ(s.stale, 1u);
  EXPECT_EQ(s.evicted, 1u);
  EXPECT_EQ(s.admitted, 2u);  // the new picture, decoded once
  // And from now on the new picture's decode is served.
  const auto again = ProcessAll(cached, ctx, {id}, 1);
  EXPECT_TRUE(again[0].bytes == want[0].bytes);
  EXPECT_EQ(Sum(cached).hits, s.hits + 1);
}

TEST_F(DecodedCacheBackendTest, ReopenedWithAnotherListingDropsTheEntries) {
  using conformance_internal::ProcessAll;
  CpuBackend cached(NewCache(64 << 20));
  WorkContext ctx = ForDataset(conformance_internal::Contexts(dataset_.get())[0]);
  ProcessAll(cached, ctx, ids_, 4);
  const uint64_t held = Sum(cached).entries;
  ASSERT_EQ(held, 12u);
  const std::string v1 = dataset_->listing_version();
  // A file added: every id may stand for another file now.
  testing_internal::WriteFile(
      std::filesystem::path(dir_.path()) / "a/00_aaa.jpg",
      testing_internal::MakeTestJpeg(30, 40, TJSAMP_420, 90, false, 5));
  Reopen();
  ASSERT_NE(dataset_->listing_version(), v1);
  CpuBackend plain;
  ctx = ForDataset(conformance_internal::Contexts(dataset_.get())[0]);
  const auto want = ProcessAll(plain, ctx, ids_, 1);
  const auto got = ProcessAll(cached, ctx, ids_, 4);
  for (size_t i = 0; i < ids_.size(); ++i) {
    ASSERT_EQ(got[i].ok, want[i].ok);
    EXPECT_TRUE(got[i].bytes == want[i].bytes) << i;
  }
  const DecodedCacheStats s = Sum(cached);
  EXPECT_EQ(s.evicted, held);
  EXPECT_EQ(s.entries, 13u);
}

TEST_F(DecodedCacheBackendTest, BudgetBoundsTheHeldPixels) {
  using conformance_internal::ProcessAll;
  // Room for about a third of the images' decodes.
  CpuBackend cached(NewCache(100000));
  WorkContext ctx = ForDataset(conformance_internal::Contexts(dataset_.get())[1]);
  CpuBackend plain;
  const auto want = ProcessAll(plain, ctx, ids_, 1);
  for (int pass = 0; pass < 3; ++pass) {
    const auto got = ProcessAll(cached, ctx, ids_, 4);
    for (size_t i = 0; i < ids_.size(); ++i) {
      EXPECT_TRUE(got[i].bytes == want[i].bytes) << i;
    }
  }
  const DecodedCacheStats s = Sum(cached);
  EXPECT_LE(s.bytes, 100000u);
  EXPECT_GT(s.entries, 0u);
  EXPECT_LT(s.entries, 12u);
  EXPECT_GT(s.hits, 0u);
}

}  // namespace
}  // namespace nearprep
