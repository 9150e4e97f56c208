// nearprep::Client over gRPC, and the resuming BatchReader.
//
// Resume protocol (see client.h and docs/protocol.md): the reader remembers
// the index of the next batch it expects and the Batch.next_position and
// Batch.resume_token of the last batch it handed out. When the stream breaks
// with a retryable status it sleeps (exponential backoff), waits for the
// channel to connect and re-issues the original request with start_batch = next
// expected index, start_position = that position, resume_token = that token
// (the daemon refuses a token of another stream) and max_batches reduced by
// what it already received. Every batch is checked against the expected index
// and epoch, so a server that skipped or repeated a batch is reported, never
// hidden.
//
// Deadline (StreamOptions::timeout): one absolute time for the whole call;
// each stream the reader opens gets it as its gRPC deadline, so a server
// that stops answering (even without closing the connection) ends the
// blocked Read() with DEADLINE_EXCEEDED, which is never retried.
#include "nearprep/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "batch_decoder.h"
#include "common/mutex.h"
#include "common/pem.h"

namespace nearprep {
namespace {

using Clock = std::chrono::steady_clock;

// gRPC's default minimum connect timeout (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS).
constexpr int64_t kMinConnectTimeoutMs = 20000;

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

// Whether a broken stream is re-opened (resumed), decided by the status code
// alone, never by its message text. gRPC documents UNAVAILABLE as the code of
// a transient condition to retry with backoff: the connection broke, the
// server is shutting down, a keepalive timed out, no connection could be
// made. CANCELLED on a call this client did not cancel (it never cancels a
// stream it is still reading) means the server side tore the call down
// (HTTP/2 RST_STREAM CANCEL), so the same request may succeed again. Every
// other code is the server's answer (or a broken invariant, INTERNAL) and
// goes to the caller.
bool IsRetryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::CANCELLED;
}

// Insecure credentials, or TLS ones built from the options' PEM files.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ClientOptions& o) {
  const bool any_client =
      !o.tls_client_cert_file.empty() || !o.tls_client_key_file.empty();
  if (o.tls_root_ca_file.empty()) {
    if (any_client) {
      return absl::InvalidArgumentError(
          "tls_client_cert_file / tls_client_key_file need tls_root_ca_file");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca =
      ReadPemFile(o.tls_root_ca_file, "tls_root_ca_file");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (any_client) {
    if (o.tls_client_cert_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_cert_file: required with tls_client_key_file");
    }
    if (o.tls_client_key_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_key_file: required with tls_client_cert_file");
    }
    absl::StatusOr<std::string> cert =
        ReadPemFile(o.tls_client_cert_file, "tls_client_cert_file");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPemFile(o.tls_client_key_file, "tls_client_key_file");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

// Resolves bearer_token_file into o->bearer_token and checks the token.
absl::Status ResolveBearerToken(ClientOptions* o) {
  if (!o->bearer_token_file.empty()) {
    if (!o->bearer_token.empty()) {
      return absl::InvalidArgumentError(
          "bearer_token / bearer_token_file: give one, not both");
    }
    std::ifstream in(o->bearer_token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError("bearer_token_file: cannot read '" +
                                        o->bearer_token_file + "'");
    }
    o->bearer_token = std::string(absl::StripAsciiWhitespace(line));
    if (o->bearer_token.empty()) {
      return absl::InvalidArgumentError("bearer_token_file: '" +
                                        o->bearer_token_file +
                                        "' has no token on its first line");
    }
  }
  for (char c : o->bearer_token) {
    if (c <= 0x20 || c >= 0x7f) {
      // Never echo the token itself.
      return absl::InvalidArgumentError(
          o->bearer_token_file.empty()
              ? std::string("bearer_token: only printable ASCII without "
                            "spaces allowed")
              : "bearer_token_file: the token in '" + o->bearer_token_file +
                    "' has characters other than printable ASCII");
    }
  }
  return absl::OkStatus();
}

// Adds the call credentials every call carries (the bearer token).
void AddCallCredentials(const ClientOptions& o, grpc::ClientContext* ctx) {
  if (!o.bearer_token.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + o.bearer_token);
  }
}

}  // namespace

int64_t MaxBatchMessageBytes(const v1::StreamBatchesRequest& request,
                             uint64_t samples) {
  const uint64_t h = request.transform().height();
  const uint64_t w = request.transform().width();
  if (h == 0 || w == 0) return -1;
  uint64_t elem = 4;
  switch (request.output().dtype()) {
    case v1::DTYPE_UINT8: elem = 1; break;
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16: elem = 2; break;
    default: elem = 4; break;
  }
  // Each factor is at most 2^32 (proto uint32), the product far below 2^63
  // for any real request; the daemon itself refuses sizes past its limits.
  const long double tensor = static_cast<long double>(samples) * h * w * 3 * elem;
  // A compressed tensor can exceed the raw bytes by a little (incompressible
  // rows stored in codec frames): 1/64 and 64 KiB cover zstd's and LZ4's
  // worst cases.
  const long double bound = tensor + tensor / 64 + (64 << 10) +
                            static_cast<long double>(samples) * (16 << 10) + (1 << 20);
  return bound >= static_cast<long double>(INT64_MAX) ? -1 : static_cast<int64_t>(bound);
}

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(
    const ClientOptions& o, std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  if (!o.tls_target_name_override.empty()) {
    args.SetSslTargetNameOverride(o.tls_target_name_override);
  }
  // Batches are large (a 256x224x224x3 float32 batch is 154 MB): no limit
  // unless the caller sized one from its request.
  args.SetMaxReceiveMessageSize(
      o.max_receive_message_bytes < 0 || o.max_receive_message_bytes > INT32_MAX
          ? -1
          : static_cast<int>(o.max_receive_message_bytes));
  // The channel's own reconnect backoff follows ours, so that a restarted
  // daemon is found within max_backoff rather than gRPC's default 2 min.
  const int init_ms =
      static_cast<int>(std::max<int64_t>(1, o.initial_backoff.count()));
  const int max_ms =
      static_cast<int>(std::max<int64_t>(init_ms, o.max_backoff.count()));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, init_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is gRPC's minimum *connect timeout*
  // (TCP, TLS and the HTTP/2 SETTINGS frame): give an attempt as long as a
  // unary call may take (rpc_timeout), and at least gRPC's default 20 s, so
  // that a daemon busy or paused for a moment is waited for, not failed.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::clamp<int64_t>(
                  o.rpc_timeout.count(), kMinConnectTimeoutMs, INT32_MAX)));
  // Detect a hung or vanished daemon on an open stream (see client.h).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(std::max<int64_t>(1, o.keepalive_time.count())));
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(std::max<int64_t>(1, o.keepalive_timeout.count())));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Do not share subchannels (and their backoff state) with other channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(o.target, std::move(creds), args);
}

absl::Status BadTarget(const std::string& target, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("target: '", target, "' ", why,
                   "; expected HOST:PORT, e.g. localhost:7070 or [::1]:7070"));
}

// "host:port" or "[v6]:port".
absl::Status CheckHostPort(const std::string& target, std::string_view hp) {
  std::string_view host, port;
  if (!hp.empty() && hp.front() == '[') {
    const size_t close = hp.find(']');
    if (close == std::string_view::npos) {
      return BadTarget(target, "has a '[' without ']'");
    }
    host = hp.substr(1, close - 1);
    if (close + 1 >= hp.size() || hp[close + 1] != ':') {
      return BadTarget(target, "has no port");
    }
    port = hp.substr(close + 2);
  } else {
    const size_t colon = hp.rfind(':');
    if (colon == std::string_view::npos)
      return BadTarget(target, "has no port");
    if (hp.find(':') != colon) {
      return BadTarget(
          target, "is an IPv6 address without brackets (write [ADDRESS]:PORT)");
    }
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  if (host.empty()) return BadTarget(target, "has no host");
  if (port.empty()) return BadTarget(target, "has no port");
  if (port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos) {
    return BadTarget(target, absl::StrCat("has a port that is not a number: '",
                                          std::string(port), "'"));
  }
  const int p = std::stoi(std::string(port));
  if (p < 1 || p > 65535) {
    return BadTarget(target, "has a port outside 1..65535");
  }
  return absl::OkStatus();
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

absl::Status ResumePoint(const std::string& token, uint64_t* batch,
                         uint64_t* position) {
  const absl::Status bad = absl::InvalidArgumentError(
      "resume_token: not a resume token (send back Batch.resume_token "
      "unchanged)");
  const size_t p = token.rfind(";position=");
  const size_t b = token.rfind(";batch=", p);
  if (p == std::string::npos || b == std::string::npos ||
      token.find(';', b + 1) != p) {
    return bad;
  }
  const std::string bs = token.substr(b + 7, p - b - 7);
  const std::string ps = token.substr(p + 10);
  if (!absl::SimpleAtoi(bs, batch) || !absl::SimpleAtoi(ps, position))
    return bad;
  return absl::OkStatus();
}

absl::Status ValidateTarget(const std::string& target) {
  if (target.empty()) return BadTarget(target, "is empty");
  std::string_view t = target;
  for (std::string_view scheme : {"unix:", "unix-abstract:", "vsock:"}) {
    if (StartsWith(t, scheme)) {
      if (t.size() == scheme.size()) return BadTarget(target, "has no path");
      return absl::OkStatus();
    }
  }
  if (StartsWith(t, "ipv4:") || StartsWith(t, "ipv6:")) {
    t.remove_prefix(5);
    size_t start = 0;
    for (;;) {
      const size_t comma = t.find(',', start);
      absl::Status st = CheckHostPort(target, t.substr(start, comma - start));
      if (!st.ok()) return st;
      if (comma == std::string_view::npos) return absl::OkStatus();
      start = comma + 1;
    }
  }
  if (StartsWith(t, "dns:")) {
    t.remove_prefix(4);
    if (StartsWith(t, "//")) {  // dns://AUTHORITY/host:port
      const size_t slash = t.find('/', 2);
      if (slash == std::string_view::npos)
        return BadTarget(target, "has no host");
      t.remove_prefix(slash + 1);
    }
  }
  return CheckHostPort(target, t);
}

std::string ShortConnectReason(const std::string& grpc_message) {
  std::string m = grpc_message;
  for (char& c : m)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (Contains(m, "connection refused")) return "connection refused";
  if (Contains(m, "dns resolution failed") ||
      Contains(m, "domain name not found") ||
      Contains(m, "name or service not known") ||
      Contains(m, "could not resolve")) {
    return "cannot resolve the host name";
  }
  if (Contains(m, "network is unreachable")) return "network unreachable";
  if (Contains(m, "no route to host")) return "no route to host";
  if (Contains(m, "handshake") || Contains(m, "ssl") ||
      Contains(m, "certificate")) {
    return "TLS handshake failed";
  }
  if (Contains(m, "timed out") || Contains(m, "timeout") ||
      Contains(m, "deadline")) {
    return "connection attempt timed out";
  }
  if (Contains(m, "socket closed") || Contains(m, "connection reset") ||
      Contains(m, "broken pipe") || Contains(m, "end of file")) {
    return "connection lost";
  }
  if (grpc_message.size() > 100) return grpc_message.substr(0, 97) + "...";
  return grpc_message.empty() ? "not connected" : grpc_message;
}

bool KeepFreedMemory(size_t bytes) {
#if defined(__GLIBC__)
  const int trim = static_cast<int>(std::min<size_t>(bytes, size_t{1} << 30));
  const int mmap_threshold = std::min(trim, 32 << 20);  // glibc's maximum
  return mallopt(M_TRIM_THRESHOLD, trim) == 1 &&
         mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1;
#else
  (void)bytes;
  return false;
#endif
}

namespace {

// The reader handed out when the channel could not be set up.
class FailedBatchReader : public BatchReader {
 public:
  explicit FailedBatchReader(absl::Status status)
      : status_(std::move(status)) {}
  bool Next(v1::Batch*) override { return false; }
  bool NextInto(v1::Batch*, const TensorAllocator&) override { return false; }
  void Cancel() override {}
  absl::Status status() const override { return status_; }
  int reconnects() const override { return 0; }

 private:
  absl::Status status_;
};

// Reads the stream as raw messages (grpc::ByteBuffer, gRPC's receive slices)
// and decodes each one as the caller asks: a protobuf parse (Next) or the
// one-copy decoder (NextInto).
class GrpcBatchReader : public BatchReader {
 public:
  GrpcBatchReader(const ClientOptions& options,
                  std::shared_ptr<grpc::Channel> channel,
                  const v1::StreamBatchesRequest& request,
                  const StreamOptions& stream)
      : options_(options),
        timeout_(stream.timeout),
        channel_(std::move(channel)),
        method_(kStreamBatchesMethod,
                grpc::internal::RpcMethod::SERVER_STREAMING, channel_),
        request_(request),
        next_batch_(request.start_batch()),
        next_position_(request.start_position()),
        backoff_(
            std::max(options.initial_backoff, std::chrono::milliseconds(1))) {
    if (timeout_.count() > 0) deadline_ = Clock::now() + timeout_;
  }

  ~GrpcBatchReader() override { CloseStream(); }

  bool Next(v1::Batch* batch) override {
    return ReadNext(batch, [batch](grpc::ByteBuffer* raw) {
      const grpc::Status st =
          grpc::SerializationTraits<v1::Batch>::Deserialize(raw, batch);
      if (!st.ok()) {
        return absl::DataLossError(
            absl::StrCat("malformed Batch message: ", st.error_message()));
      }
      return DecompressBatchTensor(batch);
    });
  }

  bool NextInto(v1::Batch* batch, const TensorAllocator& allocate) override {
    return ReadNext(batch, [batch, &allocate](grpc::ByteBuffer* raw) {
      return DecodeBatchInto(raw, batch, allocate);
    });
  }

  void Cancel() override {
    MutexLock lock(&context_mu_);
    cancelled_ = true;
    if (context_) context_->TryCancel();
  }

  absl::Status status() const override { return status_; }
  int reconnects() const override { return reconnects_; }

 private:
  static constexpr const char* kStreamBatchesMethod =
      "/nearprep.v1.Preprocessor/StreamBatches";

  // Reads the next message and decodes it into `batch` with `decode`.
  template <typename Decode>
  bool ReadNext(v1::Batch* batch, const Decode& decode) {
    if (done_) return false;
    for (;;) {
      if (cancelled_) return Fail(absl::CancelledError("stream cancelled"));
      if (!stream_) OpenStream();
      grpc::ByteBuffer raw;
      if (stream_->Read(&raw)) {
        absl::Status decoded = decode(&raw);
        if (!decoded.ok()) return Fail(std::move(decoded));
        if (batch->batch_index() != next_batch_ ||
            batch->epoch() != request_.epoch()) {
          return Fail(absl::DataLossError(absl::StrCat(
              "stream out of order: expected epoch ", request_.epoch(),
              " batch ", next_batch_, ", got epoch ", batch->epoch(), " batch ",
              batch->batch_index())));
        }
        ++received_;
        ++next_batch_;
        next_position_ = batch->next_position();
        next_token_ = batch->resume_token();
        failing_since_.reset();
        backoff_ =
            std::max(options_.initial_backoff, std::chrono::milliseconds(1));
        return true;
      }
      const grpc::Status st = stream_->Finish();
      ResetStream();
      if (cancelled_) return Finish(absl::CancelledError("stream cancelled"));
      if (st.ok()) return Finish(absl::OkStatus());
      if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && deadline_ &&
          Clock::now() >= *deadline_) {
        return Finish(DeadlinePassed(st.error_message()));
      }
      if (!IsRetryable(st)) return Finish(ToAbsl(st));
      if (request_.max_batches() > 0 && received_ >= request_.max_batches()) {
        // Everything asked for arrived; only the trailing status was lost.
        return Finish(absl::OkStatus());
      }
      if (!WaitBeforeRetry(st)) return false;
    }
  }

  v1::StreamBatchesRequest CurrentRequest() const {
    v1::StreamBatchesRequest r = request_;
    if (received_ > 0) {
      r.set_start_batch(next_batch_);
      r.set_start_position(next_position_);
      // The bound token of the last batch (the daemon checks it against
      // the stream); the request's own token is for its first batch only.
      if (next_token_.empty()) {
        r.clear_resume_token();
      } else {
        r.set_resume_token(next_token_);
      }
      if (request_.max_batches() > 0) {
        r.set_max_batches(request_.max_batches() - received_);
      }
    }
    return r;
  }

  void OpenStream() {
    grpc::ClientContext* context;
    {
      MutexLock lock(&context_mu_);
      context_ = std::make_unique<grpc::ClientContext>();
      AddCallCredentials(options_, context_.get());
      if (deadline_) {
        // gRPC takes a system_clock time; what is left of the steady one.
        context_->set_deadline(
            std::chrono::system_clock::now() +
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::max<Clock::duration>(*deadline_ - Clock::now(),
                                          Clock::duration::zero())));
      }
      // A context cancelled before its call starts cancels the call at once.
      if (cancelled_) context_->TryCancel();
      context = context_.get();  // replaced by this thread only
    }
    stream_.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
        channel_.get(), method_, context, CurrentRequest()));
  }

  void ResetStream() {
    stream_.reset();
    MutexLock lock(&context_mu_);
    context_.reset();
  }

  // Cancels a live stream and collects its status (required before the
  // reader and context go away).
  void CloseStream() {
    if (!stream_) return;
    {
      MutexLock lock(&context_mu_);
      context_->TryCancel();
    }
    grpc::ByteBuffer drain;
    while (stream_->Read(&drain)) {
    }
    (void)stream_->Finish();
    ResetStream();
  }

  // Sleeps the backoff and waits for the channel; false (and the final
  // status set) once reconnect_deadline has passed since the first failure.
  // The stream deadline, when set and earlier, cuts this short with
  // DEADLINE_EXCEEDED. A reconnect_deadline of zero: no retry, the failed
  // stream's message is the reader's (UNAVAILABLE). Waits in slices of
  // reconnect_wait_interval, so that on_reconnect_wait hears about it and
  // Cancel() ends the wait.
  bool WaitBeforeRetry(const grpc::Status& st) {
    const Clock::time_point now = Clock::now();
    if (options_.reconnect_deadline.count() <= 0) {
      // UNAVAILABLE as when the retries run out: the caller (the Python
      // client, the fleet client) retries or fails over by that code.
      return Finish(absl::UnavailableError(st.error_message()));
    }
    if (!failing_since_) failing_since_ = now;
    Clock::time_point deadline = *failing_since_ + options_.reconnect_deadline;
    const bool call_deadline_first = deadline_ && *deadline_ <= deadline;
    if (call_deadline_first) deadline = *deadline_;
    auto give_up = [&]() {
      if (call_deadline_first) {
        Fail(DeadlinePassed(
            absl::StrCat("while reconnecting after: ", st.error_message())));
        return false;
      }
      Fail(absl::UnavailableError(absl::StrCat(
          "gave up reconnecting to ", options_.target, " after ",
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                *failing_since_)
              .count(),
          " ms (", reconnects_, " reconnects, resume point batch ", next_batch_,
          "): ", st.error_message())));
      return false;
    };
    if (now >= deadline) return give_up();
    const Clock::duration slice = std::max<Clock::duration>(
        options_.reconnect_wait_interval, std::chrono::milliseconds(10));
    Report(st, /*first=*/true);
    // The backoff.
    const Clock::time_point wake =
        std::min<Clock::time_point>(now + backoff_, deadline);
    while (Clock::now() < wake) {
      if (cancelled_) return Fail(absl::CancelledError("stream cancelled"));
      std::this_thread::sleep_for(
          std::min<Clock::duration>(slice, wake - Clock::now()));
      Report(st, false);
    }
    backoff_ = std::min(
        backoff_ * 2, std::max(options_.max_backoff, options_.initial_backoff));
    // The connection.
    for (;;) {
      if (cancelled_) return Fail(absl::CancelledError("stream cancelled"));
      const Clock::time_point t = Clock::now();
      if (t >= deadline) return give_up();
      const Clock::time_point until =
          std::min<Clock::time_point>(t + slice, deadline);
      const auto wall_until =
          std::chrono::system_clock::now() +
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              until - t);
      if (channel_->WaitForConnected(wall_until)) break;
      Report(st, false);
    }
    ++reconnects_;
    return true;
  }

  // Tells on_reconnect_wait what the reader waits for: at once when
  // `first`, else when reconnect_wait_interval has passed since last time.
  void Report(const grpc::Status& st, bool first) {
    if (!options_.on_reconnect_wait) return;
    const Clock::time_point now = Clock::now();
    if (!first && now - last_report_ < options_.reconnect_wait_interval) return;
    last_report_ = now;
    ReconnectWait w;
    w.target = options_.target;
    w.reason = ShortConnectReason(st.error_message());
    w.status = ToAbsl(st);
    w.waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        now - *failing_since_);
    w.deadline = options_.reconnect_deadline;
    options_.on_reconnect_wait(w);
  }

  absl::Status DeadlinePassed(const std::string& detail) const {
    return absl::DeadlineExceededError(
        absl::StrCat("stream deadline of ", timeout_.count(), " ms passed (",
                     received_, " batches received): ", detail));
  }

  bool Finish(absl::Status s) {
    status_ = std::move(s);
    done_ = true;
    return false;
  }
  bool Fail(absl::Status s) {
    CloseStream();
    return Finish(std::move(s));
  }

  const ClientOptions options_;
  const std::chrono::milliseconds timeout_;
  std::optional<Clock::time_point> deadline_;  // unset: no deadline
  std::shared_ptr<grpc::Channel> channel_;
  const grpc::internal::RpcMethod method_;
  const v1::StreamBatchesRequest request_;

  // context_ is replaced by the reading thread and cancelled by any thread.
  Mutex context_mu_;
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(context_mu_);
  std::atomic<bool> cancelled_{false};
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> stream_;

  uint64_t received_ = 0;
  uint64_t next_batch_;
  uint64_t next_position_;
  std::string next_token_;  // Batch.resume_token of the last batch received
  std::chrono::milliseconds backoff_;
  std::optional<Clock::time_point> failing_since_;
  Clock::time_point last_report_{};
  int reconnects_ = 0;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

struct Client::Impl {
  ClientOptions options;
  absl::Status setup_status;  // Not OK: a bad target or an unusable TLS file.
  std::shared_ptr<grpc::Channel> channel;

  // A unary call whose answer is received as bytes and parsed here: one that
  // does not parse is DATA_LOSS naming the message type (the generated stub
  // reports it as UNIMPLEMENTED "No message returned for unary request").
  template <typename Request, typename Response>
  absl::Status Call(const char* method, const Request& request,
                    Response* response) const {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options.rpc_timeout);
    AddCallCredentials(options, &ctx);
    grpc::ByteBuffer sent;
    bool own_buffer = false;
    grpc::Status st = grpc::SerializationTraits<Request>::Serialize(
        request, &sent, &own_buffer);
    if (!st.ok()) return ToAbsl(st);
    grpc::ByteBuffer received;
    const grpc::internal::RpcMethod rpc(
        method, grpc::internal::RpcMethod::NORMAL_RPC, channel);
    st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(), rpc, &ctx, sent, &received);
    if (!st.ok()) return ToAbsl(st);
    st = grpc::SerializationTraits<Response>::Deserialize(&received, response);
    if (!st.ok()) {
      return absl::DataLossError(
          absl::StrCat("malformed ", Response::descriptor()->full_name(),
                       " from ", options.target, ": ", st.error_message()));
    }
    return absl::OkStatus();
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeCredentials(impl_->options);
  if (absl::Status target = ValidateTarget(impl_->options.target);
      !target.ok()) {
    creds = target;
  }
  if (absl::Status token = ResolveBearerToken(&impl_->options);
      creds.ok() && !token.ok()) {
    creds = token;
  }
  if (!creds.ok()) {
    // Keep a usable (never connected) channel; every call reports this.
    impl_->setup_status = creds.status();
    creds = grpc::InsecureChannelCredentials();
  }
  impl_->channel = MakeChannel(impl_->options, std::move(*creds));
}

Client::~Client() = default;

absl::StatusOr<v1::ServerInfo> Client::Info() {
  if (!impl_->setup_status.ok()) return impl_->setup_status;
  v1::ServerInfo info;
  absl::Status st = impl_->Call("/nearprep.v1.Preprocessor/GetServerInfo",
                                v1::GetServerInfoRequest(), &info);
  if (!st.ok()) return st;
  return info;
}

absl::StatusOr<std::vector<v1::DatasetInfo>> Client::ListDatasets() {
  if (!impl_->setup_status.ok()) return impl_->setup_status;
  v1::ListDatasetsResponse resp;
  absl::Status st = impl_->Call("/nearprep.v1.Preprocessor/ListDatasets",
                                v1::ListDatasetsRequest(), &resp);
  if (!st.ok()) return st;
  return std::vector<v1::DatasetInfo>(resp.datasets().begin(),
                                      resp.datasets().end());
}

std::unique_ptr<BatchReader> Client::StreamBatches(
    const v1::StreamBatchesRequest& request) {
  return StreamBatches(request, StreamOptions());
}

std::unique_ptr<BatchReader> Client::StreamBatches(
    const v1::StreamBatchesRequest& request, const StreamOptions& stream) {
  if (!impl_->setup_status.ok()) {
    return std::make_unique<FailedBatchReader>(impl_->setup_status);
  }
  if (request.resume_token().empty()) {
    return std::make_unique<GrpcBatchReader>(impl_->options, impl_->channel,
                                             request, stream);
  }
  // The reader checks every batch's index against where the stream starts:
  // the token's batch (the daemon takes start_batch / start_position either
  // 0 or equal to the token's).
  v1::StreamBatchesRequest resumed = request;
  uint64_t batch = 0, position = 0;
  absl::Status st = ResumePoint(request.resume_token(), &batch, &position);
  if (st.ok() && request.start_batch() != 0 && request.start_batch() != batch) {
    st = absl::InvalidArgumentError(
        absl::StrCat("start_batch: ", request.start_batch(),
                     " differs from resume_token's batch ", batch,
                     " (leave it 0 with a resume_token)"));
  }
  if (!st.ok()) return std::make_unique<FailedBatchReader>(st);
  resumed.set_start_batch(batch);
  resumed.set_start_position(position);
  return std::make_unique<GrpcBatchReader>(impl_->options, impl_->channel,
                                           resumed, stream);
}

}  // namespace nearprep
