// nearprep C++ client: talks to nearprepd over gRPC.
//
//   nearprep::ClientOptions options;  // C++17 (the header needs no more)
//   options.target = "storage-node:7070";
//   nearprep::Client client(options);
//   nearprep::v1::StreamBatchesRequest req;  // dataset, batch_size, ...
//   auto reader = client.StreamBatches(req);
//   nearprep::v1::Batch batch;
//   while (reader->Next(&batch)) { ... }
//   if (!reader->status().ok()) { ... }
//
// BatchReader survives daemon restarts: on UNAVAILABLE (connection broken,
// daemon draining or restarted, keepalive timeout), or CANCELLED that it did
// not cause, it reconnects with exponential backoff until
// reconnect_deadline, and resumes at the next batch index with the
// start_position token of the last batch received, so no batch is lost or
// repeated. Only the status code decides (never the message text); every
// other code ends the reader with that status.
//
// NextInto() is the receive path with one copy: the tensor bytes go from
// gRPC's receive buffers straight into memory the caller provides (the
// native Python module uses it to fill page-aligned pooled buffers that
// numpy then wraps without a copy).
//
// Compressed batches (OutputFormat.compression, docs/protocol.md): Next()
// and NextInto() both hand out the decoded tensor (NextInto decodes
// straight into the caller's memory), with tensor.compression reading
// COMPRESSION_NONE; a damaged payload ends the reader with DATA_LOSS.
//
// A stream may have a deadline (StreamOptions::timeout): the whole call,
// reconnects included, must end by then, or the reader ends with
// DEADLINE_EXCEEDED (a blocked Next()/NextInto() returns false when it
// passes). A fleet client uses it to notice a node that stopped answering
// and fail over to a replica.
//
// A target must name its port ("host:port", "[v6]:port", "dns:///host:port",
// "ipv4:a:p,b:p", or a "unix:" path): Client refuses "127.0.0.1" alone (gRPC
// would dial port 0 or 443 and retry silently) with INVALID_ARGUMENT naming
// `target`, from every call and reader (ValidateTarget below).
//
// While a reader waits to reconnect it calls ClientOptions::on_reconnect_wait
// about once per reconnect_wait_interval with what it waits for and why, so a
// command-line tool can say so instead of hanging silently.
//
// Thread-safety: Client is thread-safe; a BatchReader is used by one thread,
// except Cancel(), which any thread may call at any time.
#ifndef NEARPREP_CLIENT_CPP_INCLUDE_NEARPREP_CLIENT_H_
#define NEARPREP_CLIENT_CPP_INCLUDE_NEARPREP_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nearprep/v1/nearprep.grpc.pb.h"

namespace nearprep {

// What a reader is waiting for while it reconnects (on_reconnect_wait).
struct ReconnectWait {
  std::string target;
  // Why the last attempt failed, short: "connection refused", "cannot
  // resolve the host name", ... (the full gRPC text is in `status`).
  std::string reason;
  absl::Status status;
  std::chrono::milliseconds waited{0};    // since the stream first failed
  std::chrono::milliseconds deadline{0};  // reconnect_deadline
};

// OK for a target gRPC can dial; INVALID_ARGUMENT naming `target` and the
// form expected otherwise (no port, port 0 or above 65535, empty host, an
// IPv6 address without brackets).
absl::Status ValidateTarget(const std::string& target);

// The batch and shard position a resume token (Batch.resume_token) resumes
// at: its last two fields, `;batch=K;position=P` (docs/protocol.md "Resume
// protocol"; the daemon checks that the rest matches the stream).
// INVALID_ARGUMENT naming resume_token when it has no such fields.
absl::Status ResumePoint(const std::string& token, uint64_t* batch,
                         uint64_t* position);

// The short reason ReconnectWait::reason gives for a gRPC status message.
std::string ShortConnectReason(const std::string& grpc_message);

// The largest response message (v1::Batch, serialized) a daemon can send
// for `request` with at most `samples` samples per message: the tensor
// (3 x transform.height x transform.width elements of output.dtype per
// sample; with a compression, its worst-case growth), plus 16 KiB per
// sample for its id, label, drawn parameters and a per-sample error, plus
// 1 MiB for the rest (resume token, mix, counters). A receive limit sized
// by this refuses an answer no honest daemon sends before the client parses
// or copies it (ClientOptions::max_receive_message_bytes). -1 when the
// request names no output size (nothing to size a limit from).
int64_t MaxBatchMessageBytes(const v1::StreamBatchesRequest& request,
                             uint64_t samples);

struct ClientOptions {
  std::string target = "localhost:7070";
  // Total time a reader keeps retrying after the server went away (or
  // before it was ever reached). Zero: no retry at all; the first failure
  // ends the reader with UNAVAILABLE and gRPC's message.
  std::chrono::milliseconds reconnect_deadline{60000};
  // Called on the reading thread while a reader waits to reconnect: once
  // when it starts waiting, then about every reconnect_wait_interval. Must
  // not block; empty: nothing is called.
  std::function<void(const ReconnectWait&)> on_reconnect_wait{};
  std::chrono::milliseconds reconnect_wait_interval{1000};
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  // Per-RPC deadline for unary calls.
  std::chrono::milliseconds rpc_timeout{10000};
  // HTTP/2 keepalive while a stream is open: a ping after this much silence,
  // and the connection is declared dead (UNAVAILABLE, then reconnect and
  // resume) when no answer comes within keepalive_timeout. This is what
  // unblocks Next() when the daemon hangs or its host vanishes without
  // closing the connection. nearprepd accepts pings every >= 0.5 s.
  // The synchronous client reads the connection only inside Next(), so a
  // caller that waits longer than keepalive_time + keepalive_timeout between
  // two Next() calls also sees the connection dropped; the reader then
  // resumes transparently (no batch lost; reconnects() counts it). Hence
  // generous defaults.
  std::chrono::milliseconds keepalive_time{60000};
  std::chrono::milliseconds keepalive_timeout{20000};
  // gRPC's receive limit for one message on this channel, in bytes; -1: no
  // limit (a batch of 256 float32 224x224 images is 154 MB). A larger
  // message ends its call with RESOURCE_EXHAUSTED before it is parsed. The
  // fleet clients size it from their request (MaxBatchMessageBytes).
  int64_t max_receive_message_bytes = -1;
  // TLS. Empty tls_root_ca_file = plaintext. Set = TLS, the server's
  // certificate verified against the CA certificates in this PEM file.
  std::string tls_root_ca_file{};
  // Mutual TLS: this client's certificate chain and private key (PEM); both
  // or neither, and only with tls_root_ca_file.
  std::string tls_client_cert_file{};
  std::string tls_client_key_file{};
  // Checks the server certificate against this name instead of the target's
  // host (tests, IP-address targets). Empty = the target's host.
  std::string tls_target_name_override{};
  // A bearer token, sent as `authorization: Bearer TOKEN` metadata on every
  // call (daemons behind a TLS-terminating proxy, docs/operations.md
  // "Access control"). bearer_token_file: a file whose first line is the
  // token (read once, by the constructor; keep it out of command lines);
  // bearer_token: the token itself. At most one of the two. Send tokens
  // over TLS (tls_root_ca_file), or plaintext only to a proxy on this host.
  std::string bearer_token_file{};
  std::string bearer_token{};
  // A TLS or token file that cannot be read, or a token that is empty or
  // has characters other than printable ASCII without spaces, makes every
  // call (and every reader) fail with INVALID_ARGUMENT naming the file.
  // Handshake failures (bad or missing certificates) surface as UNAVAILABLE,
  // which readers retry until reconnect_deadline.
};

// Per-stream settings of Client::StreamBatches.
struct StreamOptions {
  // Deadline of the whole call, counted from StreamBatches(): every
  // (re)opened stream gets what is left of it, the backoff between
  // reconnects stops at it, and once it has passed the reader ends with
  // DEADLINE_EXCEEDED (never retried). Zero or negative: no deadline.
  std::chrono::milliseconds timeout{0};
};

// Where BatchReader::NextInto puts a batch's tensor bytes: called once per
// batch with a tensor, after the header is parsed and before any tensor byte
// is copied, with the tensor's size in bytes. Returns memory of at least that
// size that stays valid until NextInto returns, or nullptr (NextInto then
// fails with RESOURCE_EXHAUSTED). Called on the thread that calls NextInto.
using TensorAllocator = std::function<uint8_t*(size_t bytes)>;

class BatchReader {
 public:
  virtual ~BatchReader() = default;
  // Blocks for the next batch. false at the end of the stream or on error
  // (then status() says which).
  virtual bool Next(v1::Batch* batch) = 0;
  // Like Next(), but the tensor's bytes are copied once, from gRPC's receive
  // buffers into allocate(size); batch->tensor().data() is left empty. A
  // malformed message ends the stream with DATA_LOSS.
  virtual bool NextInto(v1::Batch* batch, const TensorAllocator& allocate) = 0;
  // Cancels the stream from any thread: a blocked Next/NextInto returns
  // false with CANCELLED, and so does every later call.
  virtual void Cancel() = 0;
  virtual absl::Status status() const = 0;
  // Number of reconnects performed so far.
  virtual int reconnects() const = 0;
};

// Process-wide malloc tuning for a process that receives large batches
// (glibc only; false elsewhere or if refused). gRPC allocates its receive
// buffers per read and frees them once a message is consumed; with glibc's
// defaults that memory goes back to the kernel (heap trimming, munmap of
// chunks above the mmap threshold) and is faulted in again for the next
// message: page faults on every received megabyte. This keeps up to `bytes`
// of freed heap and serves allocations up to min(bytes, 32 MiB) from the
// heap. The Python client's native module and `nearprep stream` / `load`
// call it; a C++ trainer may.
bool KeepFreedMemory(size_t bytes);

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  absl::StatusOr<v1::ServerInfo> Info();
  absl::StatusOr<std::vector<v1::DatasetInfo>> ListDatasets();
  std::unique_ptr<BatchReader> StreamBatches(
      const v1::StreamBatchesRequest& request);
  std::unique_ptr<BatchReader> StreamBatches(
      const v1::StreamBatchesRequest& request, const StreamOptions& stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_INCLUDE_NEARPREP_CLIENT_H_
