// Fuzz targets of nearprep: each takes arbitrary bytes and must never crash,
// hang, or report an inconsistent result. The same functions back two
// drivers:
//  - libFuzzer binaries (clang, NEARPREP_FUZZ=ON): one per target, each a
//    *_fuzzer.cc compiled with NEARPREP_LIBFUZZER_MAIN so that it defines
//    LLVMFuzzerTestOneInput; a failed check aborts (libFuzzer saves the
//    input as crash-*);
//  - nearprep_fuzz_regress (gtest, any compiler): seeds + deterministic
//    mutations + tests/fuzz/regressions/<target>/*, with failed checks
//    collected instead of aborting.
//
// Thread-safety: the targets keep process-wide state (temp folders, reused
// buffers); call them from one thread at a time.
#ifndef NEARPREP_TESTS_FUZZ_FUZZ_TARGETS_H_
#define NEARPREP_TESTS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace nearprep {
namespace fuzz {

// Called with a description of every failed check. The default handler
// prints it and aborts (what libFuzzer wants); the regression driver
// installs one that records it.
using FailureHandler = void (*)(const char* target, const std::string& what);
void SetFailureHandler(FailureHandler handler);
void ReportFailure(const char* target, const std::string& what);

// FUZZ_CHECK(target, condition, message-expression).
#define NEARPREP_FUZZ_CHECK(target, cond, msg)                          \
  do {                                                                  \
    if (!(cond)) {                                                      \
      ::nearprep::fuzz::ReportFailure(                                  \
          (target), std::string(__FILE__ ":") + std::to_string(__LINE__) + \
                        ": check `" #cond "` failed: " + (msg));        \
    }                                                                   \
  } while (0)

// Outcome counters ("accepted", "refused", "unparsable", ...) per target, so
// that the driver can show that mutations reach past the first parser.
void CountOutcome(const char* target, const char* outcome);
std::string OutcomeSummary(const char* target);

// Strict mode (env NEARPREP_FUZZ_STRICT=1): known, documented divergences
// (docs/fuzzing.md "Known findings") fail like any other check.
bool StrictMode();

// True when `s` is an error whose message starts with a field path followed
// by ": " (e.g. "transform.height: ..."): the service's contract for
// INVALID_ARGUMENT / NOT_FOUND / RESOURCE_EXHAUSTED.
bool MessageNamesField(const absl::Status& s);

// Decoded-value limit used by the image targets (height*width*components):
// small, so that a forged 65535x65535 header is refused before any
// allocation and mutated inputs decode quickly.
inline constexpr uint64_t kFuzzMaxDecodedValues = uint64_t{1} << 22;

// The targets. Each returns 0 (libFuzzer's convention).
//  JPEG: ReadJpegHeader, DecodeJpegTfCompat, DecodeJpegFast and
//        PreprocessJpeg (both fidelities) on the bytes, cross-checked.
int FuzzJpegDecode(const uint8_t* data, size_t size);
//  Request: bytes -> v1::StreamBatchesRequest -> ValidateStreamRequest.
int FuzzStreamRequest(const uint8_t* data, size_t size);
//  Dataset: bytes as a file_list list file under a temp root that holds
//  real files, a folder, and symlinks leading inside and outside the root.
int FuzzFileList(const uint8_t* data, size_t size);
//  FPGA kernel C simulation (nearprep_preprocess) on the bytes as one JPEG,
//  with a guard zone after its output buffer. One input in
//  FpgaKernelThreadedEvery() runs on the threaded C simulation (every
//  dataflow process on its own thread, FIFOs of their hardware depth) and
//  again sequentially, and the two must agree bit for bit; the others run
//  sequentially only (hls_sim::SequentialScope: the same results without a
//  thread switch per FIFO handoff, blind only to FIFOs too shallow); an
//  image too large for a sequential run (hls_sim::SequentialLimit) runs
//  threaded. Which ones: the input's hash, unless
//  SetFpgaKernelAllThreaded(true).
int FuzzFpgaKernel(const uint8_t* data, size_t size);
// NEARPREP_FUZZ_THREADED_EVERY (default 8; 1: every input threaded).
size_t FpgaKernelThreadedEvery();
// Every input threaded (the regression driver: regression files and seeds).
void SetFpgaKernelAllThreaded(bool all);
//  Record shards: the bytes as a TFRecord shard, a tar shard, one Example
//  and a cached shard index (server/records).
int FuzzRecords(const uint8_t* data, size_t size);
// Seeds of the records target (a TFRecord shard, a tar shard, an index).
std::vector<std::vector<uint8_t>> RecordSeeds();

}  // namespace fuzz
}  // namespace nearprep

#endif  // NEARPREP_TESTS_FUZZ_FUZZ_TARGETS_H_
