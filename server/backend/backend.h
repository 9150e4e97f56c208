// Backend: where samples are read, decoded and transformed. The pipeline
// hands a backend groups of samples ("chunks") of one stream; the backend
// fills each sample's output slot and result fields. Implementations: "cpu"
// (server/backend/cpu_backend.h) and "fpga" (server/fpga/, XRT). This header
// is the whole interface: the pipeline includes it and nothing else of a
// backend; which backend runs is wiring, decided by the daemon
// (server/daemon/backend_choice.h).
//
// Contract
//  - Process() is called concurrently from the shared worker pool, each call
//    with its own chunk; implementations are thread-safe.
//  - Process() never throws and never aborts on bad input: a failed sample
//    gets a non-OK status (and its slot is left unspecified); the others in
//    the chunk are unaffected.
//  - Output is a pure function of (ctx, sample_id): two backends produce the
//    same bytes for the same sample in TF_COMPAT fidelity (the shared
//    conformance suite in tests/unit/backend checks this).
//  - The backend reads the sample bytes itself, through the stream's
//    SampleSource (ctx.source; server/data/sample_source.h), so a backend
//    with peer-to-peer storage can bypass host memory. How the source
//    reads (alone, in blocks) is the source's business. The source is also
//    the one road to the catalogue (ctx.source->dataset(): names, sizes,
//    listing version).
#ifndef NEARPREP_SERVER_BACKEND_BACKEND_H_
#define NEARPREP_SERVER_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/spec/types.h"
#include "server/data/decoded_cache.h"
#include "server/data/sample_source.h"

namespace nearprep {

// Everything that is the same for every sample of a stream.
struct WorkContext {
  // The stream's data: where its samples are read from (the strategy over
  // the dataset's store, made once per stream by Pipeline::OpenStream) and,
  // through source->dataset(), the catalogue (names, sizes, labels).
  // Shared: the request and its copies hold it alive.
  std::shared_ptr<const SampleSource> source;
  TransformSpec spec;
  OutputSpec output;
  DecodeLimits limits;
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

// One sample to process, and its result.
struct SampleWork {
  // In:
  uint64_t sample_id = 0;
  uint8_t* out = nullptr;  // output.SampleBytes(spec) bytes.
  // Out:
  absl::Status status;
  SampleParams params;
  StageTimes times;
  // Encoded bytes read for this sample (its file or record); 0 when the
  // read failed or the backend does not say. For the read-size metrics.
  uint64_t read_bytes = 0;
};

// One of a backend's own counters (monotonic), e.g. {"fallbacks", 6}. The
// names a backend reports are its own; the service maps those it knows onto
// ServerInfo fields.
struct BackendStat {
  std::string name;
  uint64_t value = 0;
};

// Whether a backend computes a stream's samples on its own path
// (Backend::Supports). A stream it does not support is still served, by the
// backend's fallback with the same bytes: this says where samples run and,
// when not on the backend's own path, why.
struct Capability {
  bool supported = true;
  // When not supported: why, naming the request field (e.g.
  // "transform.fidelity: the kernel computes TF_COMPAT only").
  std::string reason;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu" or "fpga".
  virtual std::string name() const = 0;
  // Human-readable detail for ServerInfo.backend_detail (device, xclbin, why
  // auto chose this backend).
  virtual std::string detail() const { return ""; }
  // Processes samples[0..n). See the contract above.
  virtual void Process(const WorkContext& ctx, SampleWork* samples,
                       size_t n) = 0;
  // Whether Process() computes ctx's samples on this backend's own path
  // (default: everything). Thread-safe and cheap: callers may ask per stream.
  virtual Capability Supports(const WorkContext& ctx) const {
    (void)ctx;
    return {};
  }
  // A snapshot of the backend's counters; may be called concurrently with
  // Process(). Empty when the backend counts nothing of its own.
  virtual std::vector<BackendStat> stats() const { return {}; }
  // The decoded-image cache's figures per dataset (decoded_cache.h); empty
  // when the backend has no cache (the FPGA backend decodes on the device).
  virtual std::vector<DecodedCacheStats> decoded_cache_stats() const {
    return {};
  }
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_BACKEND_BACKEND_H_
