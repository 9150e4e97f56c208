// FpgaBackend implementation: the only code in nearprep that includes XRT
// headers. See fpga_backend.h for the data path and the fallback rules.
#include "server/fpga/fpga_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "absl/strings/str_cat.h"
#include "nearprep_kernel_abi.h"
#include "server/data/epoch_plan.h"
#include "server/image/jpeg_decoder.h"
#include "server/pipeline/cpu_backend.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 4096;  // O_DIRECT / NVMe block alignment

uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

uint64_t MicrosSince(Clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0)
          .count());
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

uint32_t Lo(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t Hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

bool CropInside(const CropBox& c, int h, int w) {
  return c.x >= 0 && c.y >= 0 && c.width > 0 && c.height > 0 &&
         c.x <= w - c.width && c.y <= h - c.height;
}

}  // namespace

// One set of run buffers (input JPEGs, descriptors, config, output,
// status) with its xrt::run, plus the host-side record of what is staged.
struct BufferSet {
  xrt::bo jpeg, desc, cfg, out, status;
  uint8_t* jpeg_map = nullptr;
  uint32_t* desc_map = nullptr;
  uint32_t* cfg_map = nullptr;
  uint8_t* out_map = nullptr;
  uint32_t* status_map = nullptr;
  uint64_t jpeg_capacity = 0;
  uint64_t out_capacity = 0;
  int max_images = 0;
  bool p2p = false;
  bool direct_ok = true;  // cleared after O_DIRECT was refused (EINVAL)
  bool broken = false;    // a run never finished: buffers may be in use
  xrt::run run;

  // Per run.
  struct Entry {
    size_t index = 0;  // into the chunk
    int height = 0, width = 0;
    SampleParams params;
    uint64_t read_us = 0;
  };
  std::vector<Entry> entries;
  int per_run = 0;
  size_t slot_bytes = 0;
  uint64_t jpeg_used = 0;
  bool any_buffered = false;
  bool failed = false;
  std::string error;
  Clock::time_point started;

  void Reset(int images, size_t slot) {
    entries.clear();
    per_run = images;
    slot_bytes = slot;
    jpeg_used = 0;
    any_buffered = false;
    failed = false;
    error.clear();
  }
};

class FpgaBackend::Impl {
 public:
  FpgaBackendConfig config;
  xrt::device device;
  xrt::uuid uuid;
  xrt::kernel kernel;
  xrt::bo scratch;
  uint8_t* scratch_map = nullptr;
  std::string device_name;
  bool p2p = false;

  BackendCounters* counters = nullptr;
  FpgaStats* stats = nullptr;

  std::vector<std::unique_ptr<BufferSet>> sets;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<BufferSet*> free_sets;
  int live = 0;

  std::mutex hook_mu;  // one compute unit: runs (and hooks) one at a time
  uint64_t run_counter = 0;
  std::atomic<uint64_t> warnings{0};

  // Blocks until a set is free; null when every set is broken. Only call
  // while holding no other set.
  BufferSet* Acquire() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return !free_sets.empty() || live == 0; });
    if (free_sets.empty()) return nullptr;
    BufferSet* s = free_sets.back();
    free_sets.pop_back();
    return s;
  }
  BufferSet* TryAcquire() {
    std::lock_guard<std::mutex> lock(mu);
    if (free_sets.empty()) return nullptr;
    BufferSet* s = free_sets.back();
    free_sets.pop_back();
    return s;
  }
  void Release(BufferSet* s) {
    if (s == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (s->broken) {
        --live;
      } else {
        free_sets.push_back(s);
      }
    }
    cv.notify_all();
  }

  void Warn(const std::string& msg) {
    if (warnings.fetch_add(1, std::memory_order_relaxed) < 20) {
      spdlog::warn("fpga backend: {}", msg);
    }
  }

  // Makes sure the output bo holds `images` slots of `slot` bytes.
  void EnsureOut(BufferSet* s, uint64_t bytes) {
    bytes = AlignUp(bytes);  // the kernel writes whole 64-byte words
    if (s->out_capacity >= bytes) return;
    s->out_map = nullptr;
    s->out = xrt::bo();
    s->out = xrt::bo(device, bytes, xrt::bo::flags::normal,
                     kernel.group_id(nf::kArgOut));
    s->out_map = s->out.map<uint8_t*>();
    s->out_capacity = bytes;
  }

  std::unique_ptr<BufferSet> NewSet() {
    auto s = std::make_unique<BufferSet>();
    s->max_images = config.max_images_per_run;
    s->jpeg_capacity = AlignUp(config.jpeg_bytes_per_run);
    const auto jpeg_group = kernel.group_id(nf::kArgJpeg);
    if (config.use_p2p) {
      try {
        s->jpeg = xrt::bo(device, s->jpeg_capacity, xrt::bo::flags::p2p,
                          jpeg_group);
        s->jpeg_map = s->jpeg.map<uint8_t*>();
        s->p2p = true;
      } catch (const std::exception& e) {
        Warn(absl::StrCat("p2p buffer not available (", e.what(),
                          "); using buffered reads"));
        s->jpeg = xrt::bo();
        s->jpeg_map = nullptr;
      }
    }
    if (!s->p2p) {
      s->jpeg = xrt::bo(device, s->jpeg_capacity, xrt::bo::flags::normal,
                        jpeg_group);
      s->jpeg_map = s->jpeg.map<uint8_t*>();
    }
    const size_t n = static_cast<size_t>(s->max_images);
    s->desc = xrt::bo(device, n * nf::kDescWords * 4, xrt::bo::flags::normal,
                      kernel.group_id(nf::kArgDesc));
    s->desc_map = s->desc.map<uint32_t*>();
    s->cfg = xrt::bo(device, nf::kCfgWords * 4, xrt::bo::flags::normal,
                     kernel.group_id(nf::kArgCfg));
    s->cfg_map = s->cfg.map<uint32_t*>();
    s->status = xrt::bo(device, n * nf::kStatusWords * 4,
                        xrt::bo::flags::normal, kernel.group_id(nf::kArgStatus));
    s->status_map = s->status.map<uint32_t*>();
    s->run = xrt::run(kernel);
    return s;
  }

  enum class StageResult { kStaged, kFull, kFallback, kDone };

  // Reads sample `index` of the chunk into `s` and fills its descriptor.
  StageResult Stage(BufferSet* s, const WorkContext& ctx, SampleWork* sample,
                    size_t index) {
    if (static_cast<int>(s->entries.size()) >= s->per_run) {
      return StageResult::kFull;
    }
    sample->times = StageTimes{};
    sample->params = SampleParams{};
    const Clock::time_point t0 = Clock::now();
    const uint64_t offset = AlignUp(s->jpeg_used);
    uint64_t size = 0;
    bool staged = false;

    // P2P path: O_DIRECT read straight into the (p2p) buffer mapping,
    // through the dataset's storage (the same O_NOFOLLOW walk as every
    // read). Anything unusual (open refused, empty, too big, unaligned
    // range, short or refused read) takes the buffered path, which reports
    // the real error if there is one.
    if (s->p2p && s->direct_ok && config.use_o_direct) {
      OpenOptions direct;
      direct.direct = true;
      absl::StatusOr<SampleFile> f =
          ctx.dataset->OpenSample(sample->sample_id, direct);
      if (f.ok() && f->size > 0 && f->size < (uint64_t{1} << 32) &&
          f->offset % kAlign == 0) {
        size = f->size;
        const uint64_t rounded = AlignUp(size);
        if (offset + rounded > s->jpeg_capacity) {
          if (s->entries.empty()) {
            stats->fallback_host.fetch_add(1, std::memory_order_relaxed);
            return StageResult::kFallback;
          }
          return StageResult::kFull;
        }
        size_t got = 0;
        const absl::Status rs = f->file->Read(
            f->offset, static_cast<size_t>(rounded), s->jpeg_map + offset, &got);
        if (absl::IsInvalidArgument(rs)) {
          // Buffer or offset not aligned as O_DIRECT needs (the noop
          // shim's malloc'd buffers), or the file system refuses it.
          s->direct_ok = false;
        }
        if (rs.ok() && got >= size) {
          staged = true;
          counters->p2p_reads.fetch_add(size, std::memory_order_relaxed);
          stats->direct_reads.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }

    // Buffered path: the dataset's own reader, then a copy into the mapping.
    if (!staged) {
      thread_local std::vector<uint8_t> buf;
      const absl::Status st =
          ctx.dataset->ReadSample(sample->sample_id, &buf, ctx.read_hint);
      if (!st.ok()) {
        sample->status = st;
        sample->times.read_us = MicrosSince(t0);
        return StageResult::kDone;
      }
      size = buf.size();
      if (size == 0 || size >= (uint64_t{1} << 32) ||
          offset + size > s->jpeg_capacity) {
        if (s->entries.empty() || size == 0 || size >= (uint64_t{1} << 32)) {
          stats->fallback_host.fetch_add(1, std::memory_order_relaxed);
          return StageResult::kFallback;
        }
        return StageResult::kFull;
      }
      std::memcpy(s->jpeg_map + offset, buf.data(), size);
      if (buf.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf);
      s->any_buffered = true;
      counters->buffered_reads.fetch_add(size, std::memory_order_relaxed);
      stats->buffered_files.fetch_add(1, std::memory_order_relaxed);
    }
    const uint64_t read_us = MicrosSince(t0);

    // Host-side parameters from the header (the crop box needs the size).
    auto header = ReadJpegHeader(s->jpeg_map + offset, size, ctx.limits);
    if (!header.ok()) {
      stats->fallback_host.fetch_add(1, std::memory_order_relaxed);
      return StageResult::kFallback;
    }
    SampleParams p = DrawSampleParams(ctx.spec, ctx.seed, ctx.epoch,
                                      sample->sample_id, header->height,
                                      header->width);
    p.source_height = header->height;
    p.source_width = header->width;
    if (ctx.spec.crop == CropMode::kNone) {
      p.crop = CropBox{0, 0, header->height, header->width};
    } else if (!CropInside(p.crop, header->height, header->width)) {
      stats->fallback_host.fetch_add(1, std::memory_order_relaxed);
      return StageResult::kFallback;
    }

    const size_t k = s->entries.size();
    uint32_t* d = s->desc_map + k * nf::kDescWords;
    std::memset(d, 0, nf::kDescWords * sizeof(uint32_t));
    d[nf::kDescJpegOffsetLo] = Lo(offset);
    d[nf::kDescJpegOffsetHi] = Hi(offset);
    d[nf::kDescJpegSize] = static_cast<uint32_t>(size);
    d[nf::kDescFlags] = (p.flip ? nf::kFlagFlip : 0) |
                        (ctx.spec.crop == CropMode::kNone ? nf::kFlagWholeImage : 0) |
                        (ctx.spec.saturation_enabled ? nf::kFlagSaturation : 0);
    d[nf::kDescBrightness] = FloatBits(p.brightness_delta);
    d[nf::kDescSaturation] = FloatBits(p.saturation_factor);
    d[nf::kDescCropY] = static_cast<uint32_t>(p.crop.y);
    d[nf::kDescCropX] = static_cast<uint32_t>(p.crop.x);
    d[nf::kDescCropH] = static_cast<uint32_t>(p.crop.height);
    d[nf::kDescCropW] = static_cast<uint32_t>(p.crop.width);
    const uint64_t out_off = static_cast<uint64_t>(k) * s->slot_bytes;
    d[nf::kDescOutOffsetLo] = Lo(out_off);
    d[nf::kDescOutOffsetHi] = Hi(out_off);

    BufferSet::Entry e;
    e.index = index;
    e.height = header->height;
    e.width = header->width;
    e.params = p;
    e.read_us = read_us;
    s->entries.push_back(e);
    s->jpeg_used = offset + size;
    return StageResult::kStaged;
  }

  // Writes the run configuration, syncs the inputs and starts the run.
  void Launch(BufferSet* s, const WorkContext& ctx) {
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
      c[nf::kCfgScratchLo] = Lo(config.scratch_bytes);
      c[nf::kCfgScratchHi] = Hi(config.scratch_bytes);
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
      s->run.set_arg(nf::kArgScratch, scratch);
      s->run.set_arg(nf::kArgNumImages, n);
      s->run.start();
      stats->runs.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      s->failed = true;
      s->error = absl::StrCat("launch: ", e.what());
    }
  }

  // Waits for the run of `s`, reads its results into the chunk's samples
  // and lists the images that need the CPU in `fallback`.
  void Finish(BufferSet* s, SampleWork* samples, std::vector<size_t>* fallback) {
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
            std::lock_guard<std::mutex> lock(hook_mu);
            FpgaRunView v;
            v.jpeg = s->jpeg_map;
            v.desc = s->desc_map;
            v.cfg = s->cfg_map;
            v.out = s->out_map;
            v.status = s->status_map;
            v.scratch = scratch_map;
            v.num_images = n;
            v.run_index = run_counter++;
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
    if (s->failed) {
      stats->device_errors.fetch_add(1, std::memory_order_relaxed);
      stats->fallback_device_error.fetch_add(n, std::memory_order_relaxed);
      Warn(absl::StrCat("device error (", s->error, "); ", n,
                        " images of the run go to the CPU"));
      for (const auto& e : s->entries) fallback->push_back(e.index);
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
        w.times.decode_us = run_us / n;
        w.times.transform_us = 0;
        stats->device_images.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      switch (code) {
        case nf::kStatusUnsupported:
          stats->fallback_unsupported.fetch_add(1, std::memory_order_relaxed);
          break;
        case nf::kStatusCorrupt:
          stats->fallback_corrupt.fetch_add(1, std::memory_order_relaxed);
          break;
        case nf::kStatusTooLarge:
          stats->fallback_too_large.fetch_add(1, std::memory_order_relaxed);
          break;
        case nf::kStatusNotRun:
          stats->fallback_not_run.fetch_add(1, std::memory_order_relaxed);
          break;
        default:  // OK with a size other than the header's, or garbage
          stats->fallback_corrupt.fetch_add(1, std::memory_order_relaxed);
          break;
      }
      fallback->push_back(e.index);
    }
    s->entries.clear();
  }

  // The device part of Process(): stages, runs and collects the chunk;
  // images that need the CPU are appended to `fallback`.
  void RunChunk(const WorkContext& ctx, SampleWork* samples, size_t n,
                std::vector<size_t>* fallback) {
    const size_t slot = ctx.output.SampleBytes(ctx.spec);
    const int per_run = static_cast<int>(std::max<uint64_t>(
        1, std::min<uint64_t>(config.max_images_per_run,
                              config.out_bytes_per_run / std::max<size_t>(slot, 1))));
    BufferSet* staging = Acquire();
    BufferSet* running = nullptr;
    size_t i = 0;
    auto rest_to_cpu = [&](size_t from) {
      for (size_t k = from; k < n; ++k) fallback->push_back(k);
      stats->fallback_device_error.fetch_add(n - from, std::memory_order_relaxed);
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
        Finish(running, samples, fallback);
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
        Finish(running, samples, fallback);
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
        const StageResult r = Stage(staging, ctx, &samples[i], i);
        if (r == StageResult::kFull) {
          if (!flush(true)) {
            rest_to_cpu(i);
            i = n;
            break;
          }
          continue;  // stage sample i again into the new set
        }
        if (r == StageResult::kFallback) fallback->push_back(i);
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
        Finish(running, samples, fallback);
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
};

absl::StatusOr<std::shared_ptr<FpgaBackend>> FpgaBackend::Create(
    const FpgaBackendConfig& config) {
  if (config.xclbin.empty()) {
    return absl::InvalidArgumentError("fpga: no xclbin given (--xclbin PATH)");
  }
  if (::access(config.xclbin.c_str(), R_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("fpga: xclbin ", config.xclbin, ": ", std::strerror(errno)));
  }
  if (config.max_images_per_run < 1 || config.buffer_sets < 1 ||
      config.jpeg_bytes_per_run < kAlign || config.out_bytes_per_run < 1 ||
      config.scratch_bytes < kAlign || config.run_timeout_ms < 1) {
    return absl::InvalidArgumentError("fpga: invalid backend configuration");
  }
  std::shared_ptr<FpgaBackend> b(new FpgaBackend());
  b->impl_ = std::make_unique<Impl>();
  Impl& m = *b->impl_;
  m.config = config;
  m.counters = &b->counters_;
  m.stats = &b->stats_;
  std::string step = "open device";
  try {
    m.device = xrt::device(static_cast<unsigned int>(config.device_index));
    try {
      m.device_name = m.device.get_info<xrt::info::device::name>();
    } catch (const std::exception&) {
      m.device_name = "unnamed";  // e.g. the noop shim has no such query
    }
    step = "load xclbin";
    m.uuid = m.device.load_xclbin(config.xclbin);
    step = absl::StrCat("find kernel ", nf::kKernelName);
    m.kernel = xrt::kernel(m.device, m.uuid, nf::kKernelName);
    step = "allocate buffers";
    const auto sflags = config.scratch_device_only ? xrt::bo::flags::device_only
                                                   : xrt::bo::flags::normal;
    m.scratch = xrt::bo(m.device, config.scratch_bytes, sflags,
                        m.kernel.group_id(nf::kArgScratch));
    if (!config.scratch_device_only) m.scratch_map = m.scratch.map<uint8_t*>();
    for (int i = 0; i < config.buffer_sets; ++i) {
      m.sets.push_back(m.NewSet());
      m.free_sets.push_back(m.sets.back().get());
    }
    m.live = config.buffer_sets;
    m.p2p = m.sets.front()->p2p;
  } catch (const std::exception& e) {
    const std::string msg =
        absl::StrCat("fpga: ", step, " (device ", config.device_index,
                     ", xclbin ", config.xclbin, "): ", e.what());
    if (step == "open device") return absl::UnavailableError(msg);
    if (step == "allocate buffers") return absl::ResourceExhaustedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  return b;
}

FpgaBackend::~FpgaBackend() {
  if (impl_ == nullptr) return;
  try {
    spdlog::info("fpga backend: final statistics: {}", detail());
    impl_->sets.clear();  // runs and bos before the kernel and device
    impl_->scratch = xrt::bo();
    impl_->kernel = xrt::kernel();
    impl_.reset();
  } catch (const std::exception& e) {
    spdlog::warn("fpga backend: teardown: {}", e.what());
  }
}

bool FpgaBackend::p2p_buffers() const { return impl_->p2p; }

std::string FpgaBackend::detail() const {
  const auto r = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return absl::StrCat(
      impl_->config.detail_note, impl_->config.detail_note.empty() ? "" : "; ",
      "fpga: device ", impl_->config.device_index, " (", impl_->device_name,
      "), xclbin ", impl_->config.xclbin, " (", impl_->uuid.to_string(),
      "), kernel ", nf::kKernelName, ", input buffers ",
      impl_->p2p ? "p2p" : "host-synced", "; runs ", r(stats_.runs),
      ", device images ", r(stats_.device_images), ", device errors ",
      r(stats_.device_errors), ", CPU fallbacks ", r(counters_.fallbacks),
      " (unsupported ", r(stats_.fallback_unsupported), ", corrupt ",
      r(stats_.fallback_corrupt), ", too large ", r(stats_.fallback_too_large),
      ", not run ", r(stats_.fallback_not_run), ", host ",
      r(stats_.fallback_host), ", device error ",
      r(stats_.fallback_device_error), "); P2P bytes ",
      r(counters_.p2p_reads), ", buffered bytes ", r(counters_.buffered_reads));
}

void FpgaBackend::Process(const WorkContext& ctx, SampleWork* samples,
                          size_t n) {
  if (n == 0) return;
  std::vector<size_t> fallback;
  if (ctx.dataset == nullptr || ctx.spec.height <= 0 || ctx.spec.width <= 0) {
    for (size_t i = 0; i < n; ++i) fallback.push_back(i);
    stats_.fallback_host.fetch_add(n, std::memory_order_relaxed);
  } else {
    try {
      impl_->RunChunk(ctx, samples, n, &fallback);
    } catch (const std::exception& e) {
      // Not expected (XRT calls are guarded inside); never lose the chunk.
      impl_->Warn(absl::StrCat("unexpected: ", e.what()));
      fallback.clear();
      for (size_t i = 0; i < n; ++i) fallback.push_back(i);
      stats_.fallback_device_error.fetch_add(n, std::memory_order_relaxed);
    }
  }
  if (fallback.empty()) return;
  // The CPU path, with FAST fidelity served as TF_COMPAT like the device
  // does, so a sample's bytes never depend on where it ran.
  WorkContext cpu_ctx = ctx;
  cpu_ctx.spec.fidelity = Fidelity::kTfCompat;
  thread_local std::vector<uint8_t> buf;
  for (size_t i : fallback) {
    CpuBackend::ProcessOne(cpu_ctx, nullptr, &buf, &samples[i]);
  }
  counters_.fallbacks.fetch_add(fallback.size(), std::memory_order_relaxed);
  if (buf.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf);
}

absl::StatusOr<std::shared_ptr<Backend>> CreateFpgaBackend(
    const BackendOptions& options, std::string* why) {
  FpgaBackendConfig config;
  config.xclbin = options.xclbin;
  config.device_index = options.device_index;
  std::string dev;
  if (options.fpga_simulate_kernel) {
    config.scratch_device_only = false;  // the host kernel needs the mapping
    dev = "SIMULATED KERNEL: the C-simulation kernel runs on the host after "
          "each device run (development/testing, not hardware acceleration)";
  }
  if (options.fpga_inject_error_run >= 0) {
    absl::StrAppend(&dev, dev.empty() ? "" : "; ",
                    "FAULT INJECTION: run ", options.fpga_inject_error_run,
                    " reports a device error");
  }
  config.hook = MakeDevelopmentHook(options.fpga_simulate_kernel,
                                    options.fpga_inject_error_run);
  config.detail_note = dev;
  auto b = FpgaBackend::Create(config);
  if (!b.ok()) return b.status();
  if (!dev.empty()) {
    spdlog::warn("fpga backend: {}", dev);
  }
  if (why != nullptr) {
    *why = absl::StrCat(options.kind, ": using fpga, device ",
                        options.device_index, ", xclbin ", options.xclbin,
                        (*b)->p2p_buffers() ? ", p2p input buffers"
                                            : ", host-synced input buffers");
  }
  return std::shared_ptr<Backend>(std::move(b).value());
}

}  // namespace nearprep
