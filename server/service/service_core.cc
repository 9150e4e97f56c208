#include "server/service/service_core.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>

#include "common/version.h"
#include "server/service/display_string.h"
#include "server/service/fleet_request.h"

namespace nearprep {

ServiceCore::ServiceCore(std::vector<const Dataset*> datasets,
                         Pipeline* pipeline, ServiceLimits limits,
                         std::string backend_why)
    : pipeline_(pipeline),
      limits_(limits),
      backend_why_(std::move(backend_why)),
      start_time_(std::chrono::steady_clock::now()),
      streams_(pipeline, limits.max_concurrent_streams) {
  for (const Dataset* d : datasets) {
    datasets_[d->name()] = d;
    dataset_names_.push_back(d->name());
    dataset_counters_[d->name()] = std::make_unique<DatasetCounters>();
  }
}

ServiceCore::~ServiceCore() = default;

const Dataset* ServiceCore::FindDataset(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : it->second;
}

void ServiceCore::FillDatasetList(
    const std::function<bool(const std::string&)>& visible,
    v1::ListDatasetsResponse* response) const {
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
}

void ServiceCore::FillServerInfo(v1::ServerInfo* info) const {
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
  // The decoded-image cache's figures per dataset (the backend's cache;
  // the same figures as the nearprep_decoded_cache_* metrics).
  for (const DecodedCacheStats& d : backend.decoded_cache_stats()) {
    v1::DecodedCacheInfo* dc = info->add_decoded_cache();
    dc->set_dataset(DisplayString(d.dataset));
    dc->set_hits(d.hits);
    dc->set_misses(d.misses);
    dc->set_admitted(d.admitted);
    dc->set_evicted(d.evicted);
    dc->set_stale(d.stale);
    dc->set_bytes(d.bytes);
    dc->set_entries(d.entries);
    dc->set_budget_bytes(d.budget_bytes);
  }
  info->set_uptime_seconds(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::steady_clock::now() - start_time_)
                                .count()));
}

absl::StatusOr<ServiceCore::OpenedStream> ServiceCore::OpenStream(
    const v1::StreamBatchesRequest& request, const std::string& origin) {
  absl::StatusOr<StreamRequest> validated = ValidateStreamRequest(
      request, [this](const std::string& n) { return FindDataset(n); }, limits_,
      dataset_names_);
  if (!validated.ok()) {
    CountRejected(/*invalid=*/true);
    return validated.status();
  }
  validated->origin = origin;
  absl::StatusOr<std::shared_ptr<StreamRegistry::Entry>> entry =
      streams_.Open(*validated);
  if (!entry.ok()) {
    CountRejected(/*invalid=*/false);
    return entry.status();
  }
  spdlog::debug(
      "stream from {}: dataset={} batch_size={} shard={}/{} "
      "start_batch={}",
      origin, LogSafe(request.dataset()), request.batch_size(),
      validated->shard_index, validated->num_shards, validated->start_batch);
  OpenedStream out;
  out.entry = std::move(*entry);
  if (auto it = dataset_counters_.find(request.dataset());
      it != dataset_counters_.end()) {
    out.dataset = it->second.get();
    out.dataset->streams_started.fetch_add(1, std::memory_order_relaxed);
  }
  return out;
}

void ServiceCore::CountRejected(bool invalid) {
  counters_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
  if (invalid) {
    counters_.request_errors.fetch_add(1, std::memory_order_relaxed);
  }
}

void ServiceCore::CountBatchSent(DatasetCounters* dataset, uint64_t bytes,
                                 uint32_t samples, double send_seconds) {
  counters_.batches_sent.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  counters_.send_seconds.Observe(send_seconds);
  counters_.batch_bytes.Observe(static_cast<double>(bytes));
  if (dataset != nullptr) {
    dataset->batches_sent.fetch_add(1, std::memory_order_relaxed);
    dataset->samples_sent.fetch_add(samples, std::memory_order_relaxed);
    dataset->bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  }
}

}  // namespace nearprep
