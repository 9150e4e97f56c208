// CpuBackend: the reference backend. For each sample: read the file
// (ctx.source->Read, timed as read_us), then PreprocessJpeg with the
// sample's random parameters drawn by DrawSampleParams(spec, seed, epoch,
// id, decoded height, decoded width).
//
// The per-sample path is also offered as two functions, for backends that
// serve some samples on the CPU (the FPGA backend's fallback):
// ProcessSampleOnCpu reads the sample first; PreprocessSampleBytes starts
// from bytes the caller has already read, so a fallback never reads a file
// twice.
//
// Decode once per node: a CpuBackend given a DecodedImageCache
// (decoded_cache.h; the daemon's decoded_cache_bytes) looks each sample up
// there before decoding (TF_COMPAT and TORCHVISION: the full decode in that
// fidelity's JPEG style, the crop then taken from it; FAST bypasses the
// cache: its decodes are DCT-scaled regions, other pixels). The file is
// still read every time: the entry must match the bytes read (a replaced
// file is decoded again), and the read's own checks (a replaced shard)
// still refuse. The FPGA backend's CPU fallback passes no cache.
//
// Thread-safety: Process() may be called concurrently; the read buffer is
// thread_local, everything else is per call (the cache is thread-safe).
// Never throws.
#ifndef NEARPREP_SERVER_BACKEND_CPU_BACKEND_H_
#define NEARPREP_SERVER_BACKEND_CPU_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/backend.h"
#include "server/data/decoded_cache.h"

namespace nearprep {

// One sample on the CPU: reads it through ctx.source (into `buffer`,
// scratch, or a view of a block the source holds), then
// PreprocessSampleBytes. Sets every result field of *sample; never throws.
// `cache` (optional): the decoded-image cache to use.
void ProcessSampleOnCpu(const WorkContext& ctx, std::vector<uint8_t>* buffer,
                        SampleWork* sample, DecodedImageCache* cache = nullptr);

// One sample on the CPU from its encoded bytes [data, data + size), already
// read by the caller in `read_us` microseconds (reported as times.read_us).
// `drawn`: the sample's parameters when the caller has already drawn them
// for this image's size (DrawSampleParams, crop box resolved), used as they
// are instead of a second draw; null: drawn here. Sets every result field of
// *sample; never throws. `cache` (optional): as ProcessSampleOnCpu's.
void PreprocessSampleBytes(const WorkContext& ctx, const uint8_t* data,
                           size_t size, uint64_t read_us, SampleWork* sample,
                           const SampleParams* drawn = nullptr,
                           DecodedImageCache* cache = nullptr);

class CpuBackend : public Backend {
 public:
  CpuBackend() = default;
  // With a decoded-image cache (null: none), shared with whoever else holds
  // it.
  explicit CpuBackend(std::shared_ptr<DecodedImageCache> cache)
      : cache_(std::move(cache)) {}

  std::string name() const override { return "cpu"; }
  std::string detail() const override;
  void Process(const WorkContext& ctx, SampleWork* samples,
               size_t n) override;
  std::vector<DecodedCacheStats> decoded_cache_stats() const override;
  // Null when the backend has no cache.
  const DecodedImageCache* decoded_cache() const { return cache_.get(); }

 private:
  std::shared_ptr<DecodedImageCache> cache_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_BACKEND_CPU_BACKEND_H_
