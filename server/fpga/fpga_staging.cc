// FpgaBackend, staging: the run buffer sets, and reading each sample into
// a run's input buffer (P2P with O_DIRECT, or buffered) with its host-side
// parameters. See fpga_backend.h for the data path and the fallback rules.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nearprep_kernel_abi.h"
#include "server/data/epoch_plan.h"
#include "server/data/sample_source.h"
#include "server/fpga/fpga_device.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/preprocess.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

}  // namespace

void FpgaBackend::Impl::EnsureOut(BufferSet* s, uint64_t bytes) {
  bytes = AlignUp(bytes);  // the kernel writes whole 64-byte words
  if (s->out_capacity >= bytes) return;
  s->out_map = nullptr;
  s->out = xrt::bo();
  s->out = xrt::bo(device, bytes, xrt::bo::flags::normal,
                   cus[static_cast<size_t>(s->cu)].group_id(nf::kArgOut));
  s->out_map = s->out.map<uint8_t*>();
  s->out_capacity = bytes;
}

std::unique_ptr<BufferSet> FpgaBackend::Impl::NewSet(int cu) {
  auto s = std::make_unique<BufferSet>();
  s->cu = cu;
  const xrt::kernel& kernel = cus[static_cast<size_t>(cu)];
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

FpgaBackend::Impl::StageResult FpgaBackend::Impl::Stage(
    BufferSet* s, const WorkContext& ctx, SampleWork* sample, size_t index,
    std::vector<Deferred>* deferred) {
  if (static_cast<int>(s->entries.size()) >= s->per_run) {
    return StageResult::kFull;
  }
  sample->times = StageTimes{};
  sample->params = SampleParams{};
  const Clock::time_point t0 = Clock::now();
  const SampleSource& source = *ctx.source;
  Placed p = StageFromBlock(s, source, sample, t0);
  if (p.kind == Placed::Kind::kNotTaken) p = StageDirect(s, source, sample, index, deferred);
  if (p.kind == Placed::Kind::kNotTaken) p = StageBuffered(s, ctx, sample, t0);
  if (p.kind == Placed::Kind::kFinished) return p.result;
  return Describe(s, ctx, sample, index, p.offset, p.size, MicrosSince(t0));
}

FpgaBackend::Impl::Placed FpgaBackend::Impl::StageFromBlock(
    BufferSet* s, const SampleSource& source, SampleWork* sample,
    Clock::time_point t0) {
  // The kernel gets the offset and size of the sample's image bytes inside
  // its block; a block already read for this run serves its other samples.
  const BlockSample* in_block = nullptr;
  uint64_t block_base = 0;
  for (const BufferSet::StagedBlock& b : s->blocks) {
    for (const BlockSample& x : b.samples) {
      if (x.id == sample->sample_id) {
        in_block = &x;
        block_base = b.base;
      }
    }
  }
  if (in_block == nullptr) {
    const uint64_t need = source.BlockBytesFor(sample->sample_id);
    if (need == 0 || need > s->jpeg_capacity) return {};
    uint64_t offset = AlignUp(s->jpeg_used);
    if (offset + need > s->jpeg_capacity) {
      if (!s->entries.empty()) return {Placed::Kind::kFinished, StageResult::kFull};
      s->blocks.clear();  // only bad records staged so far: start over
      s->jpeg_used = 0;
      offset = 0;
    }
    absl::StatusOr<std::vector<BlockSample>> got = source.ReadBlockInto(
        sample->sample_id, s->jpeg_map + offset, s->jpeg_capacity - offset);
    if (!got.ok()) return {};  // the per-sample paths report the error
    s->blocks.push_back(BufferSet::StagedBlock{offset, std::move(got).value()});
    s->jpeg_used = offset + need;
    s->any_buffered = true;  // host-side read: synced at launch
    stats->Add(FpgaCounter::kBlockReads);
    stats->Add(FpgaCounter::kBlockReadBytes, need);
    stats->Add(FpgaCounter::kBufferedReads);
    stats->Add(FpgaCounter::kBufferedReadBytes, need);
    for (const BlockSample& x : s->blocks.back().samples) {
      if (x.id == sample->sample_id) {
        in_block = &x;
        block_base = offset;
      }
    }
    if (in_block == nullptr) return {};
  }
  if (!in_block->status.ok()) {  // a bad record: the CPU path's error
    sample->status = in_block->status;
    sample->times.read_us = MicrosSince(t0);
    return {Placed::Kind::kFinished, StageResult::kDone};
  }
  stats->Add(FpgaCounter::kBlockSamples);
  return {Placed::Kind::kPlaced, StageResult::kStaged, block_base + in_block->offset,
          in_block->size};
}

FpgaBackend::Impl::Placed FpgaBackend::Impl::StageDirect(
    BufferSet* s, const SampleSource& source, SampleWork* sample, size_t index,
    std::vector<Deferred>* deferred) {
  // Through the stream's source (the same O_NOFOLLOW walk as every read).
  // Anything unusual (open refused, empty, too big, unaligned range, short
  // or refused read) is not taken: the buffered path reports the real error
  // if there is one.
  if (!s->p2p || !s->direct_ok || !config.use_o_direct) return {};
  OpenOptions direct;
  direct.direct = true;
  absl::StatusOr<SampleFile> f = source.OpenSample(sample->sample_id, direct);
  if (!f.ok() || f->size == 0 || f->size >= (uint64_t{1} << 32) ||
      f->offset % kAlign != 0) {
    return {};
  }
  const uint64_t offset = AlignUp(s->jpeg_used);
  const uint64_t size = f->size;
  const uint64_t rounded = AlignUp(size);
  if (offset + rounded > s->jpeg_capacity) {
    if (s->entries.empty()) {  // larger than a run's buffer
      deferred->push_back({index, FpgaCounter::kFallbackHost});
      return {Placed::Kind::kFinished, StageResult::kDeferred};
    }
    return {Placed::Kind::kFinished, StageResult::kFull};
  }
  size_t got = 0;
  const absl::Status rs = f->file->Read(f->offset, static_cast<size_t>(rounded),
                                        s->jpeg_map + offset, &got);
  if (absl::IsInvalidArgument(rs)) {
    // Buffer or offset not aligned as O_DIRECT needs (the noop shim's
    // malloc'd buffers), or the file system refuses it.
    s->direct_ok = false;
  }
  if (!rs.ok() || got < size) return {};
  stats->Add(FpgaCounter::kP2pReads);
  stats->Add(FpgaCounter::kP2pReadBytes, size);
  return {Placed::Kind::kPlaced, StageResult::kStaged, offset, size};
}

FpgaBackend::Impl::Placed FpgaBackend::Impl::StageBuffered(
    BufferSet* s, const WorkContext& ctx, SampleWork* sample, Clock::time_point t0) {
  thread_local std::vector<uint8_t> buf;
  const absl::Status st = ctx.source->ReadInto(sample->sample_id, &buf);
  if (!st.ok()) {
    sample->status = st;
    sample->times.read_us = MicrosSince(t0);
    return {Placed::Kind::kFinished, StageResult::kDone};
  }
  const uint64_t offset = AlignUp(s->jpeg_used);
  const uint64_t size = buf.size();
  if (size == 0 || size >= (uint64_t{1} << 32) || offset + size > s->jpeg_capacity) {
    if (s->entries.empty() || size == 0 || size >= (uint64_t{1} << 32)) {
      // Not for the device: the CPU serves it from the bytes in hand.
      stats->Add(FpgaCounter::kBufferedReads);
      stats->Add(FpgaCounter::kBufferedReadBytes, size);
      const Staged staged{buf.data(), size, MicrosSince(t0), nullptr};
      Fallback(ctx, FpgaCounter::kFallbackHost, &staged, sample);
      return {Placed::Kind::kFinished, StageResult::kDone};
    }
    return {Placed::Kind::kFinished, StageResult::kFull};
  }
  std::memcpy(s->jpeg_map + offset, buf.data(), size);
  if (buf.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(buf);
  s->any_buffered = true;
  stats->Add(FpgaCounter::kBufferedReads);
  stats->Add(FpgaCounter::kBufferedReadBytes, size);
  return {Placed::Kind::kPlaced, StageResult::kStaged, offset, size};
}

FpgaBackend::Impl::StageResult FpgaBackend::Impl::Describe(
    BufferSet* s, const WorkContext& ctx, SampleWork* sample, size_t index,
    uint64_t offset, uint64_t size, uint64_t read_us) {
  // Host-side parameters from the header (the crop box needs the size).
  auto header = ReadJpegHeader(s->jpeg_map + offset, size, ctx.limits);
  if (!header.ok()) {  // the CPU path reports the header's error
    const Staged staged{s->jpeg_map + offset, size, read_us, nullptr};
    Fallback(ctx, FpgaCounter::kFallbackHost, &staged, sample);
    return StageResult::kDone;
  }
  SampleParams p = DrawSampleParams(ctx.spec, ctx.seed, ctx.epoch,
                                    sample->sample_id, header->height,
                                    header->width);
  p.source_height = header->height;
  p.source_width = header->width;
  if (ctx.spec.crop == CropMode::kNone) {
    p.crop = CropBox{0, 0, header->height, header->width};
  } else if (!CropBoxInside(p.crop, header->height, header->width)) {
    const Staged staged{s->jpeg_map + offset, size, read_us, &p};
    Fallback(ctx, FpgaCounter::kFallbackHost, &staged, sample);
    return StageResult::kDone;
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
  e.offset = offset;
  e.size = size;
  e.height = header->height;
  e.width = header->width;
  e.params = p;
  e.read_us = read_us;
  s->entries.push_back(e);
  s->jpeg_used = std::max(s->jpeg_used, offset + size);
  return StageResult::kStaged;
}

}  // namespace nearprep
