#include "server/service/preprocessor_service.h"

#include <grpc/grpc_security_constants.h>
#include <spdlog/spdlog.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/service/batch_serializer.h"
#include "server/service/connection_listener.h"
#include "server/service/display_string.h"

namespace nearprep {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // Messages may quote file names (bytes): keep them UTF-8 for clients.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      DisplayString(s.message()));
}

// Copies a (small) request buffer into one string and parses it. Malformed
// bytes are INVALID_ARGUMENT naming the message type (docs/operations.md).
template <typename Request>
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, Request* request) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("request: unreadable message bytes");
  }
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!request->ParseFromString(bytes)) {
    return absl::InvalidArgumentError("request: not a valid " +
                                      Request::descriptor()->full_name() +
                                      " message");
  }
  return absl::OkStatus();
}

// What the transport established about the caller (server/authz decides
// what it may do): the verified client certificate's SAN URIs, SAN DNS names
// and CN, the `authorization` metadata, the peer address.
authz::Credentials CredentialsOf(const grpc::CallbackServerContext& context) {
  authz::Credentials c;
  c.peer = PeerName(context.peer());
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    const auto copy = [&auth](const char* property,
                              std::vector<std::string>* out) {
      for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
        out->emplace_back(v.data(), v.size());
      }
    };
    copy(GRPC_PEER_URI_PROPERTY_NAME, &c.san_uris);
    copy(GRPC_PEER_DNS_PROPERTY_NAME, &c.san_dns);
    std::vector<std::string> cn;
    copy(GRPC_X509_CN_PROPERTY_NAME, &cn);
    if (!cn.empty()) c.common_name = cn.front();
  }
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    c.has_authorization = true;
    c.authorization.assign(it->second.data(), it->second.size());
    c.duplicate_authorization = metadata.count("authorization") > 1;
  }
  return c;
}

// Serializes a unary answer into the raw response buffer.
template <typename Response>
grpc::Status SerializeResponse(const Response& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  return grpc::SerializationTraits<Response>::Serialize(message, out,
                                                        &own_buffer);
}

}  // namespace

// One StreamBatches call. Exactly one of these is outstanding at a time: a
// Next on the stream, a write, or (last) the Finish; whoever completes it
// starts the next, so no lock or flag orders them. OnCancel only stops the
// stream: the pending Next is then answered (CANCELLED) and its answer
// finishes the call. Finish is therefore called only when no Next is
// pending, and gRPC calls OnDone (which deletes the reactor) only after
// Finish: a Next's `done` always finds the reactor alive.
class PreprocessorService::BatchWriter
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // A stream refused before it started.
  explicit BatchWriter(const grpc::Status& status) { Finish(status); }

  BatchWriter(ServiceCore* core, ServiceCore::OpenedStream opened)
      : core_(core), dataset_(opened.dataset), entry_(std::move(opened.entry)) {
    NextBatch();
  }

  void OnWriteDone(bool ok) override {
    buffer_.Clear();  // Drops this batch's reference to its memory.
    if (!ok) {
      // The client went away (or the server is shutting down).
      entry_->Stop(absl::CancelledError("stream write failed"));
      End(entry_->stop_status());
      return;
    }
    ++batches_;
    core_->CountBatchSent(dataset_, bytes_, samples_,
                          std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - write_started_)
                              .count());
    NextBatch();
  }

  void OnCancel() override {
    if (entry_) entry_->Stop(absl::CancelledError("stream cancelled"));
  }

  void OnDone() override {
    if (entry_) core_->streams().Close(entry_);
    delete this;
  }

 private:
  void NextBatch() {
    entry_->stream().Next(
        [this](BatchStream::NextResult result) { OnNext(std::move(result)); });
  }

  // The stream's answer: write it, or end the call.
  void OnNext(BatchStream::NextResult result) {
    if (entry_->stopped()) return End(entry_->stop_status());
    if (!result.ok()) return End(result.status());
    if (*result == nullptr) return End(absl::OkStatus());
    samples_ = (*result)->num_samples;
    buffer_ = SerializeBatch(std::move(*result));
    bytes_ = buffer_.Length();
    write_started_ = std::chrono::steady_clock::now();
    StartWrite(&buffer_);  // Last use of `this` until OnWriteDone.
  }

  void End(const absl::Status& status) {
    if (status.ok()) {
      spdlog::debug("stream finished: {} batches", batches_);
    } else {
      spdlog::info("stream ended after {} batches: {}: {}", batches_,
                   absl::StatusCodeToString(status.code()),
                   LogSafe(status.message()));
    }
    Finish(ToGrpc(status));  // OnDone may run (and delete this) at once.
  }

  ServiceCore* const core_ = nullptr;
  DatasetCounters* const dataset_ = nullptr;
  const std::shared_ptr<StreamRegistry::Entry> entry_;
  grpc::ByteBuffer buffer_;
  size_t bytes_ = 0;
  uint32_t samples_ = 0;
  std::chrono::steady_clock::time_point write_started_;
  uint64_t batches_ = 0;
};

PreprocessorService::PreprocessorService(ServiceCore* core,
                                         authz::Authorizer* authorizer)
    : core_(core), authorizer_(authorizer) {
  std::random_device random;
  for (int i = 0; i < 4; ++i) internal_key_ += std::to_string(random());
}

PreprocessorService::~PreprocessorService() = default;

grpc::ServerUnaryReactor* PreprocessorService::ListDatasets(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw,
    grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListDatasetsRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    core_->CountRejected(/*invalid=*/false);
    reactor->Finish(ToGrpc(st));
    return reactor;
  }
  std::function<bool(const std::string&)> visible;
  if (authorizer_ != nullptr) {
    absl::StatusOr<std::function<bool(const std::string&)>> f =
        authorizer_->ListFilter(CredentialsOf(*context));
    if (!f.ok()) {
      reactor->Finish(ToGrpc(f.status()));
      return reactor;
    }
    visible = std::move(*f);
  }
  v1::ListDatasetsResponse response_message;
  core_->FillDatasetList(visible, &response_message);
  reactor->Finish(SerializeResponse(response_message, raw_response));
  return reactor;
}

grpc::ServerUnaryReactor* PreprocessorService::GetServerInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw,
    grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetServerInfoRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    core_->CountRejected(/*invalid=*/false);
    reactor->Finish(ToGrpc(st));
    return reactor;
  }
  if (authorizer_ != nullptr) {
    const auto& metadata = context->client_metadata();
    const auto internal = metadata.find(kInternalKeyHeader);
    // Compared in constant time: the key must not be guessable from timing.
    bool own_watchdog = internal != metadata.end() &&
                        internal->second.size() == internal_key_.size();
    if (own_watchdog) {
      unsigned char diff = 0;
      for (size_t i = 0; i < internal_key_.size(); ++i) {
        diff |= static_cast<unsigned char>(internal->second.data()[i] ^
                                           internal_key_[i]);
      }
      own_watchdog = diff == 0;
    }
    if (!own_watchdog) {
      if (absl::Status st = authorizer_->Authorize(CredentialsOf(*context),
                                                   authz::Operation::kInfo, "");
          !st.ok()) {
        reactor->Finish(ToGrpc(st));
        return reactor;
      }
    }
  }
  v1::ServerInfo info;
  core_->FillServerInfo(&info);
  reactor->Finish(SerializeResponse(info, raw_response));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PreprocessorService::StreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  // Refusals before the core was asked (unparseable, not authorized) are
  // counted here; the core counts its own.
  auto reject = [this, context](const absl::Status& st) {
    // The message may hold the caller's strings (a dataset name): escaped,
    // so that none can end this record and forge another.
    spdlog::info("StreamBatches from {} refused: {}", PeerName(context->peer()),
                 LogSafe(st.ToString()));
    return new BatchWriter(ToGrpc(st));
  };

  v1::StreamBatchesRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    core_->CountRejected(/*invalid=*/true);
    return reject(st);
  }
  // Before validation: a caller the policy does not allow learns nothing
  // about the dataset (not even whether it exists). Fleet explicit-id
  // requests are StreamBatches calls too, checked the same way.
  if (authorizer_ != nullptr) {
    if (absl::Status st = authorizer_->Authorize(CredentialsOf(*context),
                                                 authz::Operation::kStream,
                                                 request.dataset());
        !st.ok()) {
      core_->CountRejected(/*invalid=*/false);
      return reject(st);
    }
  }
  absl::StatusOr<ServiceCore::OpenedStream> opened =
      core_->OpenStream(request, PeerName(context->peer()));
  if (!opened.ok()) return reject(opened.status());
  return new BatchWriter(core_, std::move(*opened));
}

}  // namespace nearprep
