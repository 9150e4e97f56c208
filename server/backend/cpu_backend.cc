#include "server/backend/cpu_backend.h"

#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/data/epoch_plan.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/preprocess.h"

namespace nearprep {
namespace {

uint64_t MicrosSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - t0)
          .count());
}

// The status of the exception being handled (call only inside a catch):
// no exception leaves a backend.
absl::Status StatusOfException(uint64_t id) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sample ", id, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("sample ", id, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(
        absl::StrCat("sample ", id, ": unknown exception"));
  }
}

}  // namespace

std::string CpuBackend::detail() const {
  return absl::StrCat("cpu: libjpeg-turbo decode + TensorFlow-exact float ops, ",
                      std::thread::hardware_concurrency(), " hardware threads");
}

namespace {

// The cached path of PreprocessSampleBytes: true when it produced the
// sample (from a cached decode, or from a full decode it admitted); false
// to take the ordinary path (FAST, not cacheable, not admitted, damaged
// data, any decode error: the ordinary path then gives today's bytes or
// error).
bool PreprocessWithCache(const WorkContext& ctx, const uint8_t* data,
                         size_t size, const ParamsFn& draw,
                         DecodedImageCache* cache, SampleWork* s) {
  JpegStyle style = JpegStyle::kTensorFlow;
  if (cache == nullptr || !cache->enabled() || ctx.source == nullptr ||
      !ReusableDecode(ctx.spec.fidelity, &style)) {
    return false;
  }
  const Dataset& dataset = ctx.source->dataset();
  const std::string& name = dataset.name();
  const std::string& version = dataset.listing_version();
  DecodeSettings settings;
  settings.style = static_cast<uint32_t>(style);
  settings.max_decoded_values = ctx.limits.max_decoded_values;
  const uint64_t hash = DecodedImageCache::Fingerprint(data, size);
  std::shared_ptr<const DecodedImage> image =
      cache->Find(name, version, s->sample_id, settings, size, hash);
  uint64_t decode_us = 0;
  if (image == nullptr) {
    // One header read: the decode asks for its memory once it knows the
    // size, and gets none when the cache would not admit the image (full):
    // then nothing was decoded and the ordinary path (which may decode only
    // the crop's region) serves the sample. The memory is the cache's own
    // (AllocatePixels: no zero fill, prefaulted), decoded into in place.
    const auto t0 = std::chrono::steady_clock::now();
    auto fresh = std::make_shared<DecodedImage>();
    auto allocate = [&](int height, int width) -> uint8_t* {
      const uint64_t bytes = uint64_t{3} * static_cast<uint64_t>(height) *
                             static_cast<uint64_t>(width);
      if (!cache->WouldAdmit(name, version, bytes)) return nullptr;
      fresh->block = cache->AllocatePixels(bytes);
      if (fresh->block != nullptr) {
        fresh->block_bytes = bytes;
        return fresh->block.get();
      }
      fresh->pixels.resize(bytes);  // no mapping: an ordinary vector
      return fresh->pixels.data();
    };
    if (!DecodeForReuseInto(data, size, ctx.spec.fidelity, ctx.limits,
                            allocate, &fresh->height, &fresh->width)
             .ok()) {
      return false;
    }
    fresh->encoded_size = size;
    fresh->encoded_hash = hash;
    decode_us = MicrosSince(t0);
    image = fresh;
    cache->Insert(name, version, s->sample_id, settings, std::move(fresh));
  }
  s->status = PreprocessDecoded(image->data(), image->height, image->width,
                                ctx.spec, ctx.output, draw, &s->params, s->out,
                                &s->times);
  s->times.decode_us += decode_us;
  return true;
}

}  // namespace

void PreprocessSampleBytes(const WorkContext& ctx, const uint8_t* data,
                           size_t size, uint64_t read_us, SampleWork* s,
                           const SampleParams* drawn,
                           DecodedImageCache* cache) {
  s->times = StageTimes{};
  s->params = SampleParams{};
  try {
    const uint64_t id = s->sample_id;
    ParamsFn draw = [&ctx, id, drawn](int height, int width) {
      if (drawn != nullptr && drawn->source_height == height &&
          drawn->source_width == width) {
        return *drawn;
      }
      return DrawSampleParams(ctx.spec, ctx.seed, ctx.epoch, id, height, width);
    };
    if (!PreprocessWithCache(ctx, data, size, draw, cache, s)) {
      s->status = PreprocessJpeg(data, size, ctx.spec, ctx.output, ctx.limits,
                                 draw, &s->params, s->out, &s->times);
    }
  } catch (...) {
    s->status = StatusOfException(s->sample_id);
  }
  s->times.read_us = read_us;
  s->read_bytes = size;
}

void ProcessSampleOnCpu(const WorkContext& ctx, std::vector<uint8_t>* buffer,
                        SampleWork* s, DecodedImageCache* cache) {
  s->times = StageTimes{};
  s->params = SampleParams{};
  uint64_t read_us = 0;
  // The bytes to decode: the caller's buffer, or (record datasets read in
  // blocks) a view into the block buffer, which `view.keep` holds alive
  // until the sample is done: no copy between the block read and the decoder.
  SampleView view;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    if (ctx.source == nullptr) {
      s->status = absl::FailedPreconditionError("no sample source in WorkContext");
    } else {
      absl::StatusOr<SampleView> v = ctx.source->Read(s->sample_id, buffer);
      if (v.ok()) {
        view = *std::move(v);
      } else {
        s->status = v.status();
      }
    }
    read_us = MicrosSince(t0);
  } catch (...) {
    s->status = StatusOfException(s->sample_id);
  }
  if (!s->status.ok()) {
    s->times.read_us = read_us;
    return;
  }
  PreprocessSampleBytes(ctx, view.data, view.size, read_us, s, nullptr, cache);
}

void CpuBackend::Process(const WorkContext& ctx, SampleWork* samples,
                         size_t n) {
  thread_local std::vector<uint8_t> buffer;
  for (size_t i = 0; i < n; ++i) {
    ProcessSampleOnCpu(ctx, &buffer, &samples[i], cache_.get());
  }
  // Do not pin an unusually large file's memory in the thread forever.
  if (buffer.capacity() > (size_t{16} << 20)) {
    std::vector<uint8_t>().swap(buffer);
  }
}

std::vector<DecodedCacheStats> CpuBackend::decoded_cache_stats() const {
  if (cache_ == nullptr) return {};
  return cache_->Stats();
}

}  // namespace nearprep
