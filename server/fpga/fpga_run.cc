// FpgaBackend, runs: launching a staged buffer set on the device, waiting
// for it and collecting its results, and the double-buffered loop over a
// chunk (stage run k+1 while run k executes). See fpga_backend.h for the
// data path and the fallback rules.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nearprep_kernel_abi.h"
#include "server/spec/types.h"
#include "server/fpga/fpga_device.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

// The kernel ABI's numbering of kCfgDType / kCfgLayout is types.h's (the
// proto's, request_validation.cc): a value added to one must reach the others.
static_assert(nf::kDTypeF32 == static_cast<uint32_t>(DType::kFloat32) &&
                  nf::kDTypeF16 == static_cast<uint32_t>(DType::kFloat16) &&
                  nf::kDTypeBF16 == static_cast<uint32_t>(DType::kBFloat16) &&
                  nf::kDTypeU8 == static_cast<uint32_t>(DType::kUint8) &&
                  nf::kNumDTypes == static_cast<uint32_t>(DType::kUint8) + 1,
              "kernel ABI dtype numbering != server/spec/types.h DType");
static_assert(nf::kLayoutNHWC == static_cast<uint32_t>(Layout::kNHWC) &&
                  nf::kLayoutNCHW == static_cast<uint32_t>(Layout::kNCHW) &&
                  nf::kNumLayouts == static_cast<uint32_t>(Layout::kNCHW) + 1,
              "kernel ABI layout numbering != server/spec/types.h Layout");

}  // namespace

void FpgaBackend::Impl::Launch(BufferSet* s, const WorkContext& ctx) {
  const uint32_t n = static_cast<uint32_t>(s->entries.size());
  s->started = Clock::now();
  try {
    uint32_t* c = s->cfg_map;
    std::memset(c, 0, nf::kCfgWords * sizeof(uint32_t));
    c[nf::kCfgOutHeight] = static_cast<uint32_t>(ctx.spec.height);
    c[nf::kCfgOutWidth] = static_cast<uint32_t>(ctx.spec.width);
    c[nf::kCfgDType] = static_cast<uint32_t>(ctx.output.dtype);
    c[nf::kCfgLayout] = static_cast<uint32_t>(ctx.output.layout);
    c[nf::kCfgFlags] = (ctx.spec.clip ? nf::kCfgClip : 0) |
                       (ctx.spec.normalize ? nf::kCfgNormalize : 0);
    for (int i = 0; i < 3; ++i) {
      c[nf::kCfgMean0 + i] = FloatBits(ctx.spec.mean[i]);
      c[nf::kCfgStd0 + i] = FloatBits(ctx.spec.std[i]);
    }
    c[nf::kCfgMaxValuesLo] = Lo(ctx.limits.max_decoded_values);
    c[nf::kCfgMaxValuesHi] = Hi(ctx.limits.max_decoded_values);
    c[nf::kCfgAbiVersion] = nf::kAbiVersion;
    c[nf::kCfgJpegBytesLo] = Lo(s->jpeg_used);
    c[nf::kCfgJpegBytesHi] = Hi(s->jpeg_used);
    const uint64_t out_bytes = static_cast<uint64_t>(n) * s->slot_bytes;
    c[nf::kCfgOutBytesLo] = Lo(out_bytes);
    c[nf::kCfgOutBytesHi] = Hi(out_bytes);
    for (uint32_t i = 0; i < n * nf::kStatusWords; ++i) {
      s->status_map[i] = nf::kStatusNotRun;
    }
    if (s->any_buffered) {
      s->jpeg.sync(XCL_BO_SYNC_BO_TO_DEVICE, AlignUp(s->jpeg_used), 0);
    }
    s->desc.sync(XCL_BO_SYNC_BO_TO_DEVICE, n * nf::kDescWords * 4, 0);
    s->cfg.sync(XCL_BO_SYNC_BO_TO_DEVICE, nf::kCfgWords * 4, 0);
    s->status.sync(XCL_BO_SYNC_BO_TO_DEVICE, n * nf::kStatusWords * 4, 0);
    s->run.set_arg(nf::kArgJpeg, s->jpeg);
    s->run.set_arg(nf::kArgDesc, s->desc);
    s->run.set_arg(nf::kArgCfg, s->cfg);
    s->run.set_arg(nf::kArgOut, s->out);
    s->run.set_arg(nf::kArgStatus, s->status);
    s->run.set_arg(nf::kArgNumImages, n);
    s->run.start();
    stats->Add(FpgaCounter::kRuns);
    stats->Add(static_cast<FpgaCounter>(static_cast<int>(FpgaCounter::kRunsCu0) + s->cu));
  } catch (const std::exception& e) {
    s->failed = true;
    s->error = absl::StrCat("launch: ", e.what());
  }
}

void FpgaBackend::Impl::Finish(BufferSet* s, const WorkContext& ctx,
                               SampleWork* samples) {
  const uint32_t n = static_cast<uint32_t>(s->entries.size());
  if (!s->failed) {
    try {
      const ert_cmd_state state =
          s->run.wait(std::chrono::milliseconds(config.run_timeout_ms));
      if (state != ERT_CMD_STATE_COMPLETED) {
        s->failed = true;
        s->error = absl::StrCat("run ended in state ", static_cast<int>(state));
        if (state == ERT_CMD_STATE_TIMEOUT || state == ERT_CMD_STATE_NEW ||
            state == ERT_CMD_STATE_QUEUED || state == ERT_CMD_STATE_RUNNING ||
            state == ERT_CMD_STATE_SUBMITTED) {
          try {
            s->run.abort();
          } catch (const std::exception&) {
          }
          s->broken = true;  // never reuse buffers a run may still touch
        }
      } else {
        if (config.hook) {
          MutexLock lock(&hook_mu);
          FpgaRunView v;
          v.jpeg = s->jpeg_map;
          v.desc = s->desc_map;
          v.cfg = s->cfg_map;
          v.out = s->out_map;
          v.status = s->status_map;
          v.num_images = n;
          v.run_index = run_counter++;
          v.compute_unit = s->cu;
          const absl::Status hs = config.hook(v);
          if (!hs.ok()) {
            s->failed = true;
            s->error = absl::StrCat("device: ", hs.message());
          }
        }
        if (!s->failed) {
          s->status.sync(XCL_BO_SYNC_BO_FROM_DEVICE, n * nf::kStatusWords * 4, 0);
          s->out.sync(XCL_BO_SYNC_BO_FROM_DEVICE, n * s->slot_bytes, 0);
        }
      }
    } catch (const std::exception& e) {
      s->failed = true;
      s->error = absl::StrCat("wait: ", e.what());
    }
  }
  // A staged image the device did not finish: its bytes in the run's input
  // buffer and its parameters go to the fallback.
  auto fall_back = [&](const BufferSet::Entry& e, FpgaCounter why) {
    const Staged staged{s->jpeg_map + e.offset, e.size, e.read_us, &e.params};
    Fallback(ctx, why, &staged, &samples[e.index]);
  };
  if (s->failed) {
    stats->Add(FpgaCounter::kDeviceErrors);
    Warn(absl::StrCat("device error (", s->error, "); ", n,
                      " images of the run go to the CPU"));
    for (const auto& e : s->entries) fall_back(e, FpgaCounter::kFallbackDeviceError);
    s->entries.clear();
    return;
  }
  const uint64_t run_us = MicrosSince(s->started);
  for (uint32_t k = 0; k < n; ++k) {
    const BufferSet::Entry& e = s->entries[k];
    const uint32_t* st = s->status_map + k * nf::kStatusWords;
    const uint32_t code = st[nf::kStCode];
    if (code == nf::kStatusOk && st[nf::kStHeight] == static_cast<uint32_t>(e.height) &&
        st[nf::kStWidth] == static_cast<uint32_t>(e.width)) {
      SampleWork& w = samples[e.index];
      std::memcpy(w.out, s->out_map + k * s->slot_bytes, s->slot_bytes);
      w.status = absl::OkStatus();
      w.params = e.params;
      w.times.read_us = e.read_us;
      w.read_bytes = e.size;
      w.times.decode_us = run_us / n;
      w.times.transform_us = 0;
      stats->Add(FpgaCounter::kDeviceImages);
      continue;
    }
    FpgaCounter why = FpgaCounter::kFallbackCorrupt;  // OK with another size, or garbage
    switch (code) {
      case nf::kStatusUnsupported: why = FpgaCounter::kFallbackUnsupported; break;
      case nf::kStatusCorrupt: why = FpgaCounter::kFallbackCorrupt; break;
      case nf::kStatusTooLarge: why = FpgaCounter::kFallbackTooLarge; break;
      case nf::kStatusNotRun: why = FpgaCounter::kFallbackNotRun; break;
      default: break;
    }
    fall_back(e, why);
  }
  s->entries.clear();
}

void FpgaBackend::Impl::RunChunk(const WorkContext& ctx, SampleWork* samples,
                                 size_t n, std::vector<Deferred>* deferred) {
  const size_t slot = ctx.output.SampleBytes(ctx.spec);
  const int per_run = static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>(config.max_images_per_run,
                            config.out_bytes_per_run / std::max<size_t>(slot, 1))));
  BufferSet* staging = Acquire();
  BufferSet* running = nullptr;
  size_t i = 0;
  auto rest_to_cpu = [&](size_t from) {
    for (size_t k = from; k < n; ++k) {
      deferred->push_back({k, FpgaCounter::kFallbackDeviceError});
    }
  };
  // Prepares a free set for staging; false when its out bo cannot grow.
  auto begin = [&](BufferSet* s) {
    s->Reset(per_run, slot);
    try {
      EnsureOut(s, static_cast<uint64_t>(per_run) * slot);
      return true;
    } catch (const std::exception& e) {
      Warn(absl::StrCat("output buffer: ", e.what()));
      return false;
    }
  };
  if (staging == nullptr || !begin(staging)) {
    Release(staging);
    rest_to_cpu(0);
    return;
  }
  // Launches `staging`, collects the previous run, and provides the next
  // staging set (null: none available, the caller sends the rest to CPU).
  auto flush = [&](bool more) -> bool {
    Launch(staging, ctx);
    BufferSet* spare = nullptr;
    if (running != nullptr) {
      Finish(running, ctx, samples);
      if (running->broken) {
        Release(running);
      } else {
        spare = running;
      }
    } else if (more) {
      spare = TryAcquire();
    }
    running = staging;
    staging = nullptr;
    if (!more) return true;
    if (spare == nullptr) {
      Finish(running, ctx, samples);
      if (running->broken) {
        Release(running);
      } else {
        spare = running;
      }
      running = nullptr;
    }
    if (spare == nullptr) spare = Acquire();  // holds nothing else here
    if (spare == nullptr || !begin(spare)) {
      Release(spare);
      return false;
    }
    staging = spare;
    return true;
  };
  try {
    while (i < n) {
      const StageResult r = Stage(staging, ctx, &samples[i], i, deferred);
      if (r == StageResult::kFull) {
        if (!flush(true)) {
          rest_to_cpu(i);
          i = n;
          break;
        }
        continue;  // stage sample i again into the new set
      }
      ++i;
    }
    if (staging != nullptr) {
      if (!staging->entries.empty()) {
        flush(false);
      } else {
        Release(staging);
        staging = nullptr;
      }
    }
    if (running != nullptr) {
      Finish(running, ctx, samples);
      Release(running);
      running = nullptr;
    }
  } catch (...) {
    // Only allocation failures get here. Give the sets back (after the
    // device is done with a launched one); the caller redoes the chunk.
    if (running != nullptr) {
      try {
        running->run.wait(std::chrono::milliseconds(config.run_timeout_ms));
      } catch (...) {
        running->broken = true;
      }
    }
    Release(running);
    Release(staging);
    throw;
  }
}

}  // namespace nearprep
