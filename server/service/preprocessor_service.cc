#include "server/service/preprocessor_service.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include <grpc/grpc_security_constants.h>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "server/service/batch_serializer.h"
#include "server/service/connection_listener.h"
#include "server/service/display_string.h"
#include "server/service/fleet_request.h"

#include "common/version.h"

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
    return absl::InvalidArgumentError(
        "request: not a valid " + Request::descriptor()->full_name() +
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
  const std::shared_ptr<const grpc::AuthContext> auth =
      context.auth_context();
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
  }
  return c;
}

// Serializes a unary answer into the raw response buffer.
template <typename Response>
grpc::Status SerializeResponse(const Response& message,
                               grpc::ByteBuffer* out) {
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

  BatchWriter(PreprocessorService* service,
              std::shared_ptr<StreamRegistry::Entry> entry,
              DatasetCounters* dataset)
      : service_(service), dataset_(dataset), entry_(std::move(entry)) {
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
    ServiceCounters& c = service_->counters_;
    c.batches_sent.fetch_add(1, std::memory_order_relaxed);
    c.bytes_sent.fetch_add(bytes_, std::memory_order_relaxed);
    c.send_seconds.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                      write_started_)
            .count());
    c.batch_bytes.Observe(static_cast<double>(bytes_));
    if (dataset_ != nullptr) {
      dataset_->batches_sent.fetch_add(1, std::memory_order_relaxed);
      dataset_->samples_sent.fetch_add(samples_, std::memory_order_relaxed);
      dataset_->bytes_sent.fetch_add(bytes_, std::memory_order_relaxed);
    }
    NextBatch();
  }

  void OnCancel() override {
    if (entry_) entry_->Stop(absl::CancelledError("stream cancelled"));
  }

  void OnDone() override {
    if (entry_) service_->streams_.Close(entry_);
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
                   std::string(status.message()));
    }
    Finish(ToGrpc(status));  // OnDone may run (and delete this) at once.
  }

  PreprocessorService* const service_ = nullptr;
  DatasetCounters* const dataset_ = nullptr;
  const std::shared_ptr<StreamRegistry::Entry> entry_;
  grpc::ByteBuffer buffer_;
  size_t bytes_ = 0;
  uint32_t samples_ = 0;
  std::chrono::steady_clock::time_point write_started_;
  uint64_t batches_ = 0;
};

PreprocessorService::PreprocessorService(std::vector<const Dataset*> datasets,
                                         Pipeline* pipeline,
                                         ServiceLimits limits,
                                         std::string backend_why,
                                         authz::Authorizer* authorizer)
    : pipeline_(pipeline),
      limits_(limits),
      authorizer_(authorizer),
      backend_why_(std::move(backend_why)),
      start_time_(std::chrono::steady_clock::now()),
      streams_(pipeline, limits.max_concurrent_streams) {
  for (const Dataset* d : datasets) {
    datasets_[d->name()] = d;
    dataset_names_.push_back(d->name());
    dataset_counters_[d->name()] = std::make_unique<DatasetCounters>();
  }
  std::random_device random;
  for (int i = 0; i < 4; ++i) internal_key_ += std::to_string(random());
}

PreprocessorService::~PreprocessorService() = default;

const Dataset* PreprocessorService::FindDataset(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : it->second;
}

grpc::ServerUnaryReactor* PreprocessorService::ListDatasets(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw,
    grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListDatasetsRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    counters_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
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
  v1::ListDatasetsResponse* response = &response_message;
  for (const auto& [name, d] : datasets_) {
    // Only what the caller may list (server/authz).
    if (visible && !visible(name)) continue;
    v1::DatasetInfo* info = response->add_datasets();
    // String fields must be UTF-8; names from the file system or the
    // config are bytes (display_string.h).
    info->set_name(DisplayString(name));
    info->set_format(DisplayString(d->config().format));
    info->set_num_samples(d->size());
    info->set_num_classes(d->num_classes());
    for (const std::string& c : d->class_names()) {
      info->add_class_names(DisplayString(c));
      info->add_class_name_bytes(c);
    }
    info->set_num_refused(d->num_refused());
    info->set_num_shards(d->num_shards());
    info->set_total_bytes(d->total_bytes());
    info->set_block_samples(d->block_samples());
    FillFleetInfo(*d, info);
  }
  reactor->Finish(SerializeResponse(response_message, raw_response));
  return reactor;
}

void PreprocessorService::FillServerInfo(v1::ServerInfo* info) const {
  info->set_version(NEARPREP_VERSION);
  Backend& backend = pipeline_->backend();
  info->set_backend(backend.name());
  std::string detail = backend.detail();
  if (!backend_why_.empty()) {
    detail = detail.empty() ? backend_why_ : detail + "; " + backend_why_;
  }
  info->set_backend_detail(DisplayString(detail));
  info->set_workers(static_cast<uint32_t>(pipeline_->workers()));
  info->add_compressions(v1::COMPRESSION_DELTA_ZSTD);
  info->add_compressions(v1::COMPRESSION_GRADIENT_ZSTD);
  v1::Limits* l = info->mutable_limits();
  l->set_max_batch_size(limits_.max_batch_size);
  l->set_max_output_pixels(limits_.max_output_pixels);
  l->set_max_decoded_pixels(limits_.max_decoded_pixels);
  l->set_max_concurrent_streams(limits_.max_concurrent_streams);
  l->set_per_stream_memory_bytes(limits_.per_stream_memory_bytes);
  l->set_prefetch_depth(
      static_cast<uint32_t>(pipeline_->options().prefetch_depth));

  constexpr auto kRelaxed = std::memory_order_relaxed;
  const PipelineCounters& p = pipeline_->counters();
  v1::Counters* c = info->mutable_counters();
  c->set_streams_started(streams_.counters().streams_started.load(kRelaxed));
  c->set_streams_active(streams_.counters().streams_active.load(kRelaxed));
  c->set_batches_sent(counters_.batches_sent.load(kRelaxed));
  c->set_samples_ok(p.samples_ok.load(kRelaxed));
  c->set_samples_failed(p.samples_failed.load(kRelaxed));
  c->set_bytes_sent(counters_.bytes_sent.load(kRelaxed));
  c->set_requests_rejected(counters_.requests_rejected.load(kRelaxed));
  c->set_decode_errors(p.decode_errors.load(kRelaxed));
  c->set_limit_errors(p.limit_errors.load(kRelaxed));
  c->set_io_errors(p.io_errors.load(kRelaxed));
  // The backend's own counters that ServerInfo has fields for (a backend
  // without them, like cpu, leaves them 0).
  for (const BackendStat& s : backend.stats()) {
    if (s.name == "fallbacks") c->set_backend_fallbacks(s.value);
    if (s.name == "p2p_read_bytes") c->set_p2p_reads(s.value);
    if (s.name == "buffered_read_bytes") c->set_buffered_reads(s.value);
  }
  info->set_uptime_seconds(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::steady_clock::now() - start_time_)
          .count()));
}

grpc::ServerUnaryReactor* PreprocessorService::GetServerInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw,
    grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetServerInfoRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    counters_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
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
      if (absl::Status st = authorizer_->Authorize(
              CredentialsOf(*context), authz::Operation::kInfo, "");
          !st.ok()) {
        reactor->Finish(ToGrpc(st));
        return reactor;
      }
    }
  }
  v1::ServerInfo info;
  FillServerInfo(&info);
  reactor->Finish(SerializeResponse(info, raw_response));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PreprocessorService::StreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  // `invalid`: the request itself was at fault (not the server's state).
  auto reject = [this, context](const absl::Status& st, bool invalid) {
    counters_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    if (invalid) {
      counters_.request_errors.fetch_add(1, std::memory_order_relaxed);
    }
    spdlog::info("StreamBatches from {} refused: {}",
                 PeerName(context->peer()),
                 st.ToString());
    return new BatchWriter(ToGrpc(st));
  };

  v1::StreamBatchesRequest request;
  if (absl::Status st = ParseRequest(*raw, &request); !st.ok()) {
    return reject(st, /*invalid=*/true);
  }
  // Before validation: a caller the policy does not allow learns nothing
  // about the dataset (not even whether it exists). Fleet explicit-id
  // requests are StreamBatches calls too, checked the same way.
  if (authorizer_ != nullptr) {
    if (absl::Status st = authorizer_->Authorize(
            CredentialsOf(*context), authz::Operation::kStream,
            request.dataset());
        !st.ok()) {
      return reject(st, /*invalid=*/false);
    }
  }
  absl::StatusOr<StreamRequest> validated = ValidateStreamRequest(
      request, [this](const std::string& n) { return FindDataset(n); },
      limits_, dataset_names_);
  if (!validated.ok()) return reject(validated.status(), /*invalid=*/true);
  validated->origin = PeerName(context->peer());

  absl::StatusOr<std::shared_ptr<StreamRegistry::Entry>> entry =
      streams_.Open(*validated);
  if (!entry.ok()) return reject(entry.status(), /*invalid=*/false);
  spdlog::debug("stream from {}: dataset={} batch_size={} shard={}/{} "
                "start_batch={}",
                PeerName(context->peer()), request.dataset(), request.batch_size(),
                validated->shard_index, validated->num_shards,
                validated->start_batch);
  DatasetCounters* dc = nullptr;
  if (auto it = dataset_counters_.find(request.dataset());
      it != dataset_counters_.end()) {
    dc = it->second.get();
    dc->streams_started.fetch_add(1, std::memory_order_relaxed);
  }
  return new BatchWriter(this, std::move(*entry), dc);
}

}  // namespace nearprep
