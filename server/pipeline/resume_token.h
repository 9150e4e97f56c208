// Resume tokens: Batch.resume_token, a position bound to its stream.
//
// A bare position (Batch.next_position) means nothing outside the stream
// that sent it: under ERROR_POLICY_SKIP it counts the failures of that
// stream's shard order, which another seed, epoch, shuffle, batch size,
// shard or dataset listing does not share. A resume token carries the
// position and what it depends on:
//
//   nearprep-resume-1;dataset=NAME;listing=HEX;seed=N;epoch=N;
//   shuffle=none|global|block:B/O/W;batch_size=N;shard=I/N;batch=K;position=P
//
// (one line; NAME percent-escaped for '%', ';', '=' and bytes outside
// 0x21..0x7e; listing is Dataset::listing_version(); batch is the next batch
// to send and position where it begins). A request that carries one must
// describe the same stream: a token from another stream is INVALID_ARGUMENT
// naming the first field that differs. The token is opaque to clients: they
// send back the last one they received (docs/protocol.md).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_PIPELINE_RESUME_TOKEN_H_
#define NEARPREP_SERVER_PIPELINE_RESUME_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/pipeline/pipeline.h"

namespace nearprep {

// The token up to its batch and position (StreamRequest::resume_binding):
// "nearprep-resume-1;dataset=...;...;shard=I/N". `r` has its dataset,
// seed, epoch, shuffle, batch size and shard set.
std::string ResumeBinding(const StreamRequest& r);

// The token for resuming at `next_batch`, which begins at `position`.
std::string ResumeToken(const std::string& binding, uint64_t next_batch,
                        uint64_t position);

// Checks `token` against `binding` (ResumeBinding of the request that
// carries it). OK: *batch and *position are where to resume. Otherwise
// INVALID_ARGUMENT "resume_token: ..." naming the field that differs (or
// what is malformed).
absl::Status CheckResumeToken(const std::string& token,
                              const std::string& binding, uint64_t* batch,
                              uint64_t* position);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_RESUME_TOKEN_H_
