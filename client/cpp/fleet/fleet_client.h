// C++ fleet client (issue 14): one trainer (rank k of T) of a dataset whose
// partitions live on several daemons. The same protocol as the Python
// nearprep.fleet.FleetClient (docs/protocol.md, "Fleet datasets"): the global
// plan (server/fleet/global_plan.h) gives each position's sample and
// partition; each partition goes to the live replica with the highest
// rendezvous score fleet::RendezvousScore(node, partition)
// (server/fleet/placement.h, the score placements are computed with:
// sha256(node + "/" + partition), first 8 bytes, big endian), or with
// replica_routing kSpread rotates over the live replicas by global batch
// (FleetChooseReplica); each node gets one explicit-ids request per global batch;
// failures (UNAVAILABLE, also a node that stops answering: keepalive, or
// DEADLINE_EXCEEDED after rpc_timeout for one that is up but stuck;
// FAILED_PRECONDITION, ...: FleetStatusAction) mark the node dead; so does
// a malformed answer (a sample id not asked for or sent twice, labels or
// tensor rows not matching the ids: DATA_LOSS from that node, its message
// dropped whole); what it delivered before
// failing is kept (stats().kept_partial counts those samples) and only the
// positions it still owed go to the next replica; results for positions
// already filled are dropped; with no
// live replica the client waits (on_event reports it) and never changes the
// data. Global batches are fetched `prefetch` ahead. on_event also reports
// placement versions (DatasetInfo.placement_version) that differ across
// live nodes (a rollout), agree again, or change between a node's probes;
// informational only: the assignment uses partitions_held.
//
// Hedged requests (on by default: hedge = 0.95; 0: off;
// docs/protocol.md "Hedged requests",
// the Python client's hedge=): a node request not answered within the
// `hedge` percentile of the last kFleetHedgeWindow latencies of its size
// class (FleetHedgeClass of its sample count), pooled over all nodes (at
// least hedge_min; only once the class has hedge_samples of them) is also
// sent, for the positions it has not delivered yet, to all the other live
// replicas of their partitions, split among them (FleetSplitHedge; once per
// request; a hedge is not hedged). The first answer per position wins; a
// request of the race whose positions are all filled is cancelled
// (BatchReader::Cancel: ClientContext::TryCancel) and what it delivers is
// dropped by position. A hedge is not a failure. Stats: hedges (requests
// sent), hedge_wins (positions they filled); on_event: "hedge: node ...".
//
// Verification (opt-in: verify_fraction > 0; docs/protocol.md "Per-sample
// digests", the Python client's verify_fraction=): positions whose
// FleetVerifyScore(seed, epoch, position) is below verify_fraction are also
// asked of a second live replica of their partition (never the node that
// served them) and the answers compared (label, dtype, row shape, tensor
// bytes; or the error code). On a mismatch a third live replica decides:
// the node in the minority is marked dead (re-probed like any dead node)
// and the batch takes the majority's answer; with no third replica (or all
// three differing) the mismatch is unresolved and the first answer kept.
// Stats: verified, verify_mismatches, verify_unresolved; on_event:
// "verify: ..." for each mismatch.
//
// Dead nodes, and nodes that fail their probe in Create() (on_event: "node
// HOST:PORT unreachable at start: ..."), are probed again (ListDatasets)
// every probe_interval on a thread of their own, so a probe of a
// black-holed node waits out its deadline there, never in ReadBatch. One
// that answers with the plan's manifest is live again (on_event: "node
// HOST:PORT is live again") and serves its partitions from the next request
// on; requests already sent stay where they are (every position is still
// served once). The destructor ends the probe loops, waiting for a probe in
// flight (at most its 5 s deadline); no event comes after it.
//
// Thread-safety: one FleetClient per trainer thread. Each node request
// runs on a thread of its own (a global batch's job waits for them, and
// cancels and joins what still runs before it returns). on_event is called
// from the client's threads (prefetch jobs, node requests, probe loops): it
// must be thread-safe.
#ifndef NEARPREP_CLIENT_CPP_FLEET_FLEET_CLIENT_H_
#define NEARPREP_CLIENT_CPP_FLEET_FLEET_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cpp/fleet/membership.h"
#include "nearprep/client.h"
#include "nearprep/v1/nearprep.pb.h"
#include "server/fleet/global_plan.h"
#include "server/fleet/manifest.h"

namespace nearprep {

// Replica routing (docs/protocol.md, "The client"): which live holder of a
// partition serves it in a global batch.
enum class FleetReplicaRouting { kFirst, kSpread };
// "first" / "spread" -> the routing; INVALID_ARGUMENT otherwise.
absl::StatusOr<FleetReplicaRouting> ParseFleetReplicaRouting(absl::string_view name);

// The index in `live_holders` (distinct node names, any order) of the node
// serving `partition` in global batch g, -1 when there is none. kFirst: the
// highest (fleet::RendezvousScore(node, partition), name); kSpread: the
// holders sorted by (score, name) descending, index (g + partition) mod
// their count. The twin of the Python nearprep.fleet.choose (spread_key g);
// tests pin the same picks.
int FleetChooseReplica(uint32_t partition, const std::vector<absl::string_view>& live_holders,
                       FleetReplicaRouting routing, uint64_t g);

struct FleetClientOptions {
  std::vector<std::string> targets;  // host:port each
  // Instead of `targets` (leave it empty): the node set from a DNS name or a
  // targets file, followed as it changes (membership.h). At the start of
  // each global batch the client takes the latest set: a node that left is
  // removed (no new request; it is treated as dead and no longer probed),
  // a node that appeared is added (probed at once, used once it answers
  // with the plan's manifest), through the dead-node and rejoin paths.
  // A node is its "HOST:PORT" string (docs/operations.md, "Fleet
  // membership"). At most kMaxFleetNodes distinct nodes over the client's
  // life.
  std::shared_ptr<Membership> membership;
  std::string dataset;
  fleet::Manifest manifest;
  // epoch is set per call; plan.version selects the algorithm (2 or 3: at
  // most plan.slice_partitions partitions per trainer slice; slice_samples
  // 0: G / trainers; 3 for hundreds of partitions and more).
  fleet::PlanParams plan;
  uint32_t trainers = 1;
  uint32_t rank = 0;
  // Transform, output, include_params... (dataset, ids, batch_size, seed,
  // epoch, manifest_hash are filled in).
  v1::StreamBatchesRequest request;
  int prefetch = 2;
  // Send the plan's block size (StreamBatchesRequest.plan_block_samples) so
  // a node reads each block of a record partition once, whole.
  bool plan_block_reads = true;
  // Samples per response message (StreamBatchesRequest.batch_size); 0: one
  // message per request (at most 256 samples). Smaller messages let a node
  // that fails mid-answer leave more behind.
  uint32_t response_batch = 0;
  std::chrono::milliseconds probe_interval{500};
  // A stream silent for keepalive_time + keepalive_timeout is a dead node
  // (the connection is gone); a request not answered within rpc_timeout
  // too (the node is up but stuck: its HTTP/2 layer still answers pings).
  // rpc_timeout 0: no deadline.
  std::chrono::milliseconds keepalive_time{2000};
  std::chrono::milliseconds keepalive_timeout{3000};
  std::chrono::milliseconds rpc_timeout{10000};
  // Give up waiting for a live replica after this long (0: wait forever).
  std::chrono::milliseconds max_wait{0};
  // Hedged requests (header comment): 0 (off) or a latency percentile in
  // (0, 1); hedge_min: never sooner than this; hedge_samples: in [1,
  // kFleetHedgeWindow], the latencies a request's size class needs before
  // its requests are hedged.
  // Create() refuses other values, naming the field.
  double hedge = 0.95;  // the default: docs/protocol.md "Hedged requests"
  std::chrono::milliseconds hedge_min{50};
  int hedge_samples = 4;
  // In [0, 1]: the share of positions verified against a second replica
  // (header comment); 0: none.
  double verify_fraction = 0;
  // Which live holder serves a partition (FleetChooseReplica; the Python
  // client's replica_routing=): kFirst (the highest rendezvous score) or
  // kSpread (rotated by global batch: every replica serves). Hedges,
  // fail-overs and verification choose the same way among the holders
  // they may use.
  FleetReplicaRouting replica_routing = FleetReplicaRouting::kFirst;
  std::function<void(const std::string&)> on_event;
  // Credentials sent to every node alike: the tls_* and bearer_token*
  // fields of this are copied into each node's ClientOptions (the others
  // are ignored).
  ClientOptions credentials;
};

struct FleetSample {
  uint64_t position = 0;
  uint64_t sample_id = 0;
  int64_t label = 0;
  // This sample's tensor bytes: its row of the buffer the response message
  // was received into (BatchReader::NextInto: copied once, from gRPC's
  // receive buffers), which `storage` keeps alive; the samples of one
  // message share that buffer. Valid as long as a copy of this sample is.
  absl::string_view tensor;
  std::shared_ptr<const void> storage;
  std::string node;
  // The tensor's v1::DType and this row's shape (the message tensor's shape
  // without its first dimension, the sample count).
  int dtype = 0;
  std::vector<uint64_t> shape;
};
struct FleetSampleError {
  uint64_t position = 0;
  uint64_t sample_id = 0;
  std::string code, message;
};
struct FleetBatch {
  uint64_t epoch = 0;
  uint64_t batch = 0;
  std::vector<FleetSample> samples;      // position order
  std::vector<FleetSampleError> errors;  // position order
};

// What a fleet client does when a node's request ends with a status code:
// the table in docs/protocol.md ("Status codes: retry, fail over or raise"),
// which the Python client (nearprep.fleet.STATUS_ACTIONS) follows too;
// tests check both against the document. kRetry: ask the same node again
// for what it still owes (at most kFleetSameNodeRetries times, then fail
// over); kFailover: mark the node dead and ask the next replica; kRaise:
// ReadBatch returns the status (every replica would answer the same).
enum class FleetAction { kRetry, kFailover, kRaise };
inline constexpr int kFleetSameNodeRetries = 2;
FleetAction FleetStatusAction(absl::StatusCode code);
// "retry", "fail over" or "raise": the docs table's words.
const char* FleetActionName(FleetAction action);

// The most distinct nodes a FleetClient with a membership can know (the
// node table is allocated once, so that a node added never moves the
// others while requests read them).
inline constexpr size_t kMaxFleetNodes = 4096;

// sha256(decimal seed + "/" + epoch + "/" + position), first 8 bytes big
// endian, over 2^64: in [0, 1]. verify_fraction f verifies the positions
// scoring below f (the same on every rerun); the Python
// nearprep.fleet.verify_score computes the same number.
double FleetVerifyScore(uint64_t seed, uint64_t epoch, uint64_t position);

// Hedged requests keep the last kFleetHedgeWindow request latencies of
// each request size class, pooled over all nodes. FleetHedgeAfter: how
// long a request whose class has these latencies (seconds, any order) may
// run before it is hedged: the `percentile` of them (the
// ceil(percentile * n)-th smallest), at least `min_s`; nullopt with fewer
// than `samples` latencies (the Python nearprep.fleet.hedge_after).
inline constexpr int kFleetHedgeWindow = 64;
std::optional<double> FleetHedgeAfter(std::vector<double> latencies_s, double percentile,
                                      double min_s, int samples);
// The size class of a request of `samples` samples: floor(log2(samples)),
// 0 for 0 or 1 (the Python nearprep.fleet.hedge_class).
int FleetHedgeClass(uint64_t samples);
// A hedge's requests (the Python nearprep.fleet.split_hedge): items are
// (partition, position) pairs; live_holders(partition) the live nodes
// holding it; `exclude` the hedged request's node. The items whose
// partitions have the same set of other live replicas are taken in
// position order and cut into contiguous chunks, one per node of the set
// in name order, of near-equal size (the first n % k chunks one longer; an
// empty chunk is no request); a node's chunks from several sets make one
// request. Returns node -> its positions (ascending); partitions with no
// other live replica go to *orphans (ascending, when given).
std::map<std::string, std::vector<uint64_t>> FleetSplitHedge(
    const std::vector<std::pair<uint32_t, uint64_t>>& items,
    const std::function<std::vector<std::string>(uint32_t)>& live_holders,
    const std::string& exclude, std::vector<uint32_t>* orphans = nullptr);

class FleetClient {
 public:
  static absl::StatusOr<std::unique_ptr<FleetClient>> Create(FleetClientOptions options);
  ~FleetClient();

  uint64_t NumBatches(uint64_t epoch);
  // This trainer's slice of global batch `batch` of `epoch` (prefetches the
  // next ones). Errors: INVALID_ARGUMENT and the like from a daemon (a bad
  // request), DEADLINE_EXCEEDED after max_wait without a live replica.
  absl::StatusOr<FleetBatch> ReadBatch(uint64_t epoch, uint64_t batch);

  struct Stats {
    uint64_t requests = 0, failovers = 0, duplicates_dropped = 0, waits = 0;
    // Requests asked of the same node again (a kRetry status).
    uint64_t retries = 0;
    // Samples (and sample errors) a node delivered before it failed, kept.
    uint64_t kept_partial = 0;
    // Hedged requests: hedge requests sent, positions they filled.
    uint64_t hedges = 0, hedge_wins = 0;
    // Verification: positions compared with a second replica, mismatches,
    // mismatches no third replica settled.
    uint64_t verified = 0, verify_mismatches = 0, verify_unresolved = 0;
  };
  Stats stats() const;

  struct Impl;

 private:
  explicit FleetClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_FLEET_FLEET_CLIENT_H_
