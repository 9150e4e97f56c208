#include "server/service/server_metrics.h"

#include <cstdint>
#include <string>
#include <utility>

#include "server/service/connection_listener.h"
#include "server/service/service_core.h"
#include "server/service/stream_registry.h"

#include "common/version.h"

namespace nearprep {
namespace {

using metrics::CounterFamily;
using metrics::GaugeFamily;
using metrics::HistogramFamily;
using metrics::MetricFamily;

double Load(const std::atomic<uint64_t>& v) {
  return static_cast<double>(v.load(std::memory_order_relaxed));
}
double Load(const std::atomic<int64_t>& v) {
  return static_cast<double>(v.load(std::memory_order_relaxed));
}

}  // namespace

void CollectServerMetrics(NearprepServer& server,
                          std::vector<metrics::MetricFamily>* out) {
  ServiceCore& service = server.core();
  Pipeline& pipeline = server.pipeline();
  const PipelineCounters& p = pipeline.counters();
  const ServiceCounters& s = service.counters();
  const StreamRegistry::Counters& r = service.streams().counters();
  Backend& backend = pipeline.backend();
  const std::string backend_name = backend.name();

  out->push_back(GaugeFamily("nearprep_build_info",
                             "Always 1: the daemon's version and backend.")
                     .Add({{"version", NEARPREP_VERSION},
                           {"backend", backend_name}},
                          1));
  out->push_back(GaugeFamily("nearprep_draining",
                             "1 while the daemon drains streams before "
                             "exiting, else 0.")
                     .Add({}, service.streams().draining() ? 1 : 0));

  // The gRPC port's connections (plaintext; all 0 with TLS).
  const ConnectionStats conns = server.connection_stats();
  out->push_back(GaugeFamily("nearprep_grpc_connections_active",
                             "Connections open on the gRPC port.")
                     .Add({}, static_cast<double>(conns.active)));
  out->push_back(GaugeFamily("nearprep_grpc_connections_limit",
                             "Most connections the gRPC port keeps open "
                             "(from the descriptor limit; 0: no cap, TLS).")
                     .Add({}, static_cast<double>(conns.limit)));
  out->push_back(CounterFamily("nearprep_grpc_connections_accepted_total",
                               "Connections accepted on the gRPC port.")
                     .Add({}, static_cast<double>(conns.accepted)));
  out->push_back(CounterFamily("nearprep_grpc_connections_rejected_total",
                               "Connections closed at once: the cap reached, "
                               "or no descriptor left to accept them.")
                     .Add({}, static_cast<double>(conns.rejected)));
  out->push_back(
      CounterFamily("nearprep_grpc_connections_closed_total",
                    "Connections the daemon shut down (plaintext): "
                    "handshake_timeout (no HTTP/2 preface within "
                    "limits.handshake_timeout_seconds), idle_timeout "
                    "(nothing received for limits.idle_timeout_seconds), "
                    "evicted (no preface yet, closed at the cap to admit a "
                    "new connection).")
          .Add({{"kind", "handshake_timeout"}},
               static_cast<double>(conns.closed_handshake_timeout))
          .Add({{"kind", "idle_timeout"}},
               static_cast<double>(conns.closed_idle_timeout))
          .Add({{"kind", "evicted"}}, static_cast<double>(conns.evicted)));

  // Streams.
  out->push_back(GaugeFamily("nearprep_streams_active",
                             "StreamBatches calls streaming now.")
                     .Add({}, Load(r.streams_active)));
  out->push_back(CounterFamily("nearprep_streams_started_total",
                               "StreamBatches calls admitted.")
                     .Add({}, Load(r.streams_started)));
  out->push_back(CounterFamily("nearprep_streams_rejected_total",
                               "StreamBatches calls refused before their "
                               "first batch (invalid request, draining, "
                               "max_concurrent_streams).")
                     .Add({}, Load(s.requests_rejected)));

  // Authorization (server/authz): audited decisions (stream opens and
  // denials). No identity label: one series per identity would grow
  // without bound; the audit log has the identities.
  MetricFamily authz = CounterFamily(
      "nearprep_authz_decisions_total",
      "Authorization decisions: every stream opened (allow) and every call "
      "refused (deny, unauthenticated), per dataset (\"(other)\": a name "
      "this daemon does not serve; empty: GetServerInfo, ListDatasets).");
  for (const auto& [key, n] : server.authorizer().decision_counts()) {
    authz.Add({{"decision", key.first}, {"dataset", key.second}},
              static_cast<double>(n));
  }
  out->push_back(std::move(authz));
  out->push_back(
      CounterFamily("nearprep_authz_reloads_total",
                    "Reloads of the authorization policy (SIGHUP); failed: "
                    "the previous policy stayed in force.")
          .Add({{"kind", "ok"}},
               static_cast<double>(server.authorizer().reloads_ok()))
          .Add({{"kind", "failed"}},
               static_cast<double>(server.authorizer().reloads_failed())));
  out->push_back(
      CounterFamily("nearprep_authz_audit_write_failures_total",
                    "Audit records that could not be written to "
                    "authorization.audit_log (disk full, I/O error): lost.")
          .Add({}, static_cast<double>(
                       server.authorizer().audit_write_failures())));
  out->push_back(
      CounterFamily("nearprep_authz_audit_refusals_total",
                    "Streams the policy allowed but refused (UNAVAILABLE) "
                    "because their audit record could not be written "
                    "(authorization.audit_fail_closed).")
          .Add({}, static_cast<double>(server.authorizer().audit_refusals())));

  // What was sent, per dataset.
  MetricFamily batches = CounterFamily(
      "nearprep_batches_sent_total", "Batches written to clients.");
  MetricFamily samples = CounterFamily(
      "nearprep_samples_sent_total",
      "Samples (images) in the batches written to clients.");
  MetricFamily bytes = CounterFamily(
      "nearprep_sent_bytes_total",
      "Bytes of the batch messages written to clients.");
  MetricFamily started = CounterFamily(
      "nearprep_dataset_streams_started_total",
      "StreamBatches calls admitted, per dataset.");
  for (const auto& [name, c] : service.dataset_counters()) {
    batches.Add({{"dataset", name}}, Load(c->batches_sent));
    samples.Add({{"dataset", name}}, Load(c->samples_sent));
    bytes.Add({{"dataset", name}}, Load(c->bytes_sent));
    started.Add({{"dataset", name}}, Load(c->streams_started));
  }
  out->push_back(std::move(batches));
  out->push_back(std::move(samples));
  out->push_back(std::move(bytes));
  out->push_back(std::move(started));

  // What the datasets' reads cost storage (Dataset::read_counters).
  MetricFamily reads = CounterFamily(
      "nearprep_storage_reads_total",
      "Read calls issued to storage (one per sample read alone, one per "
      "block part read whole).");
  MetricFamily read_bytes = CounterFamily(
      "nearprep_storage_read_bytes_total", "Bytes those reads returned.");
  MetricFamily block_samples = CounterFamily(
      "nearprep_block_samples_total",
      "Record datasets' block reads, per sample: hit (served from a block "
      "in memory), miss (its block was read), bypass (a fleet plan's block "
      "did not fit the block cache: read alone), alone (the last sample of "
      "a fleet plan's block not in memory: read alone), idle_drop (blocks "
      "dropped idle before all their samples were served).");
  MetricFamily aligned = CounterFamily(
      "nearprep_storage_block_reads_total",
      "Record datasets' aligned block reads: direct (O_DIRECT), "
      "direct_refused (the file system refused O_DIRECT: read buffered).");
  MetricFamily rebuilt = CounterFamily(
      "nearprep_shard_indexes_rebuilt_total",
      "Record datasets: cached shard indexes refused when the dataset was "
      "opened (not bound to their shard, malformed, entries outside it, a "
      "changed shard) and rebuilt by a scan.");
  MetricFamily changed = CounterFamily(
      "nearprep_shard_changed_reads_total",
      "Record datasets: reads refused because the shard is no longer the "
      "file that was indexed (replaced or rewritten while the daemon runs), "
      "or because a TFRecord record does not hold what its index entry says "
      "(an edited index: image location or label).");
  MetricFamily digests = CounterFamily(
      "nearprep_sample_digests_total",
      "Fleet datasets whose manifest has per-sample digests: samples checked "
      "against their SHA-256 when read (kind=ok) and refused because their "
      "bytes differ (kind=mismatch: the shard was rewritten since the "
      "manifest was made).");
  for (const auto& d : server.datasets()) {
    const ReadCounters& c = d->store().read_counters();
    const uint64_t mism = c.digest_mismatches.load(std::memory_order_relaxed);
    const uint64_t checks = c.digest_checks.load(std::memory_order_relaxed);
    digests.Add({{"dataset", d->name()}, {"kind", "ok"}},
                static_cast<double>(checks >= mism ? checks - mism : 0))
        .Add({{"dataset", d->name()}, {"kind", "mismatch"}}, static_cast<double>(mism));
    rebuilt.Add({{"dataset", d->name()}}, static_cast<double>(d->indexes_rebuilt()));
    changed.Add({{"dataset", d->name()}}, Load(c.shard_changed));
    aligned.Add({{"dataset", d->name()}, {"kind", "direct"}}, Load(c.direct_reads))
        .Add({{"dataset", d->name()}, {"kind", "direct_refused"}},
             Load(c.buffered_fallbacks));
    reads.Add({{"dataset", d->name()}}, Load(c.reads));
    read_bytes.Add({{"dataset", d->name()}}, Load(c.bytes));
    block_samples.Add({{"dataset", d->name()}, {"kind", "hit"}}, Load(c.block_hits))
        .Add({{"dataset", d->name()}, {"kind", "miss"}}, Load(c.block_misses))
        .Add({{"dataset", d->name()}, {"kind", "bypass"}}, Load(c.block_bypasses))
        .Add({{"dataset", d->name()}, {"kind", "alone"}}, Load(c.block_alone))
        .Add({{"dataset", d->name()}, {"kind", "idle_drop"}}, Load(c.block_idle_drops));
  }
  MetricFamily resident = GaugeFamily(
      "nearprep_block_cache_bytes",
      "Bytes of record blocks held in memory now (block reads).");
  for (const auto& d : server.datasets()) {
    resident.Add({{"dataset", d->name()}},
                 static_cast<double>(d->store().block_cache_resident_bytes()));
  }
  // Fleet datasets: partitions held here, assigned by the placement, and
  // assigned but not held (a copy still to do, or a damaged shard).
  MetricFamily partitions = GaugeFamily(
      "nearprep_fleet_partitions",
      "Fleet datasets (with a manifest): partitions held (served), assigned "
      "by the placement (0 without one), missing (assigned, not held).");
  for (const auto& d : server.datasets()) {
    if (d->manifest() == nullptr) continue;
    partitions
        .Add({{"dataset", d->name()}, {"kind", "held"}},
             static_cast<double>(d->partitions_held().size()))
        .Add({{"dataset", d->name()}, {"kind", "assigned"}},
             static_cast<double>(d->partitions_assigned().size()))
        .Add({{"dataset", d->name()}, {"kind", "missing"}},
             static_cast<double>(d->partitions_missing().size()));
  }
  out->push_back(std::move(partitions));
  out->push_back(std::move(resident));
  out->push_back(std::move(reads));
  out->push_back(std::move(read_bytes));
  out->push_back(std::move(block_samples));
  out->push_back(std::move(aligned));
  out->push_back(std::move(rebuilt));
  out->push_back(std::move(changed));
  out->push_back(std::move(digests));

  // The pipeline's production.
  out->push_back(CounterFamily("nearprep_batches_produced_total",
                               "Batches assembled by the pipeline.")
                     .Add({}, Load(p.batches_produced)));
  out->push_back(CounterFamily("nearprep_samples_processed_total",
                               "Samples read, decoded and transformed "
                               "successfully.")
                     .Add({}, Load(p.samples_ok)));
  out->push_back(CounterFamily("nearprep_samples_failed_total",
                               "Samples that failed (see "
                               "nearprep_errors_total by kind).")
                     .Add({}, Load(p.samples_failed)));
  out->push_back(
      CounterFamily("nearprep_errors_total",
                    "Errors by kind: decode (corrupt or unsupported image), "
                    "limit (over a size limit), io (cannot read), request "
                    "(malformed or invalid StreamBatches request).")
          .Add({{"kind", "decode"}}, Load(p.decode_errors))
          .Add({{"kind", "limit"}}, Load(p.limit_errors))
          .Add({{"kind", "io"}}, Load(p.io_errors))
          .Add({{"kind", "request"}}, Load(s.request_errors)));

  // Stage times.
  out->push_back(HistogramFamily("nearprep_sample_read_seconds",
                                 "Time to read one sample's encoded bytes.")
                     .Add({}, p.read_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_sample_decode_seconds",
                                 "Time to decode one sample.")
                     .Add({}, p.decode_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_sample_transform_seconds",
                                 "Time to crop, resize, augment and convert "
                                 "one sample.")
                     .Add({}, p.transform_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_sample_read_size_bytes",
                                 "Encoded bytes read per sample.")
                     .Add({}, p.read_size_bytes.Value()));
  out->push_back(HistogramFamily("nearprep_batch_queue_wait_seconds",
                                 "Time a finished batch waited for its "
                                 "consumer (long: the clients are the "
                                 "bottleneck).")
                     .Add({}, p.queue_wait_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_stream_next_wait_seconds",
                                 "Time a stream waited for the pipeline to "
                                 "produce its next batch (0 when one was "
                                 "ready); rate(_sum) / streams_active is the "
                                 "fraction of time streams stalled on the "
                                 "daemon.")
                     .Add({}, p.next_wait_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_batch_send_seconds",
                                 "Time to hand one batch message to the "
                                 "network (includes the client's flow "
                                 "control).")
                     .Add({}, s.send_seconds.Value()));
  out->push_back(HistogramFamily("nearprep_batch_size_bytes",
                                 "Bytes of one batch message.")
                     .Add({}, s.batch_bytes.Value()));

  // The worker pool.
  out->push_back(GaugeFamily("nearprep_worker_pool_workers",
                             "Worker threads of the shared pool.")
                     .Add({}, pipeline.workers()));
  out->push_back(GaugeFamily("nearprep_worker_pool_busy_workers",
                             "Workers inside the backend now.")
                     .Add({}, Load(p.busy_workers)));
  out->push_back(CounterFamily("nearprep_worker_pool_busy_seconds_total",
                               "Time workers spent inside the backend; "
                               "busy fraction = rate / workers.")
                     .Add({}, static_cast<double>(p.busy_nanos.load(
                                  std::memory_order_relaxed)) /
                                  1e9));
  out->push_back(GaugeFamily("nearprep_worker_pool_queue_depth",
                             "Streams with work waiting for a worker.")
                     .Add({}, static_cast<double>(pipeline.RunnableStreams())));
  out->push_back(GaugeFamily("nearprep_pipeline_producing_streams",
                             "Streams whose batches are still being "
                             "produced.")
                     .Add({}, static_cast<double>(pipeline.ProducingStreams())));
  out->push_back(GaugeFamily("nearprep_pipeline_ready_batches",
                             "Finished batches waiting for their consumer.")
                     .Add({}, Load(p.ready_batches)));

  // The CPU backend's decoded-image cache, per dataset (a dataset appears
  // once a stream of it has asked the cache). The families are declared
  // also without a cache (no series then), as the dashboard names them.
  const std::vector<DecodedCacheStats> cache = backend.decoded_cache_stats();
  {
    MetricFamily lookups = CounterFamily(
        "nearprep_decoded_cache_lookups_total",
        "Decoded-image cache lookups: hit (the decode was skipped) or miss.");
    MetricFamily stale = CounterFamily(
        "nearprep_decoded_cache_stale_total",
        "Of the misses: an entry for the file's older bytes existed (the "
        "file was replaced in place) and was dropped.");
    MetricFamily admitted = CounterFamily(
        "nearprep_decoded_cache_admitted_total",
        "Decodes admitted into the decoded-image cache.");
    MetricFamily evicted = CounterFamily(
        "nearprep_decoded_cache_evicted_total",
        "Entries dropped: the dataset's listing version changed, or the "
        "file was replaced.");
    MetricFamily bytes = GaugeFamily(
        "nearprep_decoded_cache_bytes",
        "Bytes of decoded pixels held now.");
    MetricFamily entries = GaugeFamily(
        "nearprep_decoded_cache_entries", "Decoded images held now.");
    MetricFamily budget = GaugeFamily(
        "nearprep_decoded_cache_budget_bytes",
        "The dataset's share of the decoded-image cache.");
    for (const DecodedCacheStats& d : cache) {
      const metrics::Labels l = {{"dataset", d.dataset}};
      lookups.Add({{"dataset", d.dataset}, {"kind", "hit"}},
                  static_cast<double>(d.hits))
          .Add({{"dataset", d.dataset}, {"kind", "miss"}},
               static_cast<double>(d.misses));
      stale.Add(l, static_cast<double>(d.stale));
      admitted.Add(l, static_cast<double>(d.admitted));
      evicted.Add(l, static_cast<double>(d.evicted));
      bytes.Add(l, static_cast<double>(d.bytes));
      entries.Add(l, static_cast<double>(d.entries));
      budget.Add(l, static_cast<double>(d.budget_bytes));
    }
    for (MetricFamily* f :
         {&lookups, &stale, &admitted, &evicted, &bytes, &entries, &budget}) {
      out->push_back(std::move(*f));
    }
  }

  // The backend's own counters: fallbacks and how it read.
  double fallbacks = 0, p2p_bytes = 0, p2p_reads = 0, buffered_bytes = 0,
         buffered_reads = 0;
  bool has_read_stats = false;
  for (const BackendStat& b : backend.stats()) {
    const double v = static_cast<double>(b.value);
    if (b.name == "fallbacks") fallbacks = v;
    if (b.name == "p2p_read_bytes") p2p_bytes = v, has_read_stats = true;
    if (b.name == "p2p_reads") p2p_reads = v;
    if (b.name == "buffered_read_bytes") buffered_bytes = v;
    if (b.name == "buffered_reads") buffered_reads = v;
  }
  if (!has_read_stats) {
    // A backend without read statistics (cpu) reads every sample through
    // the dataset, buffered: the pipeline's read-size histogram counts them.
    const metrics::HistogramValue sizes = p.read_size_bytes.Value();
    buffered_bytes = sizes.sum;
    buffered_reads = static_cast<double>(sizes.count);
  }
  const metrics::Labels b = {{"backend", backend_name}};
  out->push_back(CounterFamily("nearprep_backend_fallbacks_total",
                               "Samples the backend served on the CPU "
                               "instead of its device.")
                     .Add(b, fallbacks));
  out->push_back(CounterFamily("nearprep_backend_reads_total",
                               "Sample reads by kind: p2p (storage to the "
                               "device directly) or buffered (through host "
                               "memory).")
                     .Add({{"backend", backend_name}, {"kind", "p2p"}},
                          p2p_reads)
                     .Add({{"backend", backend_name}, {"kind", "buffered"}},
                          buffered_reads));
  out->push_back(CounterFamily("nearprep_backend_read_bytes_total",
                               "Bytes read by kind (p2p or buffered).")
                     .Add({{"backend", backend_name}, {"kind", "p2p"}},
                          p2p_bytes)
                     .Add({{"backend", backend_name}, {"kind", "buffered"}},
                          buffered_bytes));
}

}  // namespace nearprep
