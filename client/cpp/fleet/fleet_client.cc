// See fleet_client.h.
#include "client/cpp/fleet/fleet_client.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "nearprep/client.h"
#include "server/fleet/placement.h"

namespace nearprep {

namespace {

using Clock = std::chrono::steady_clock;

struct Node {
  std::string target;
  std::unique_ptr<Client> client;
  std::set<uint32_t> partitions;
  bool alive = false;
  Clock::time_point dead_since{};
  int64_t placement_version = -1;  // DatasetInfo.placement_version; -1: not probed
  std::string last_error;  // why it is dead (the last failed probe or request)
  bool probing = false;    // its probe loop (ProbeLoop) runs
  // Membership (fleet_client.h): left the node set (never probed, never
  // assigned, until it is back); added and not probed yet (its probe loop
  // probes at once).
  bool removed = false;
  bool probe_soon = false;
};

struct Item {
  uint64_t position, sample_id;
  uint32_t partition;
};

// What one node returned for some items.
struct NodeResult {
  absl::Status status;  // not OK: the node failed (fail over)
  std::map<uint64_t, FleetSample> ok;             // by sample id
  std::map<uint64_t, FleetSampleError> bad;       // by sample id
};

struct Inbox;

// One node request of a batch (Run) on a thread of its own (Fetch). Run's
// thread owns it, except what is under mu (read by Run while the request
// runs: what it has delivered so far, for a hedge; its reader, for a
// cancel) and what its thread hands over when done: result and finished,
// written before the request is queued in `inbox` (or its thread joined).
struct Req {
  size_t node = 0;
  std::vector<Item> items;  // position order
  Req* hedge_of = nullptr;  // the request this one hedges (hedged requests)
  bool hedged = false;      // a hedge was sent for it
  Clock::time_point started;
  std::thread thread;
  Inbox* inbox = nullptr;  // told when done; nullptr: collected by joining
  NodeResult result;
  Clock::time_point finished;
  Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;  // a hedge race's loser
  BatchReader* reader ABSL_GUARDED_BY(mu) = nullptr;  // the stream in flight
  std::set<uint64_t> delivered ABSL_GUARDED_BY(mu);   // sample (and error) ids so far
};

// Where a batch's requests report that they are done, in finish order.
struct Inbox {
  Mutex mu;
  CondVar cv;
  std::vector<Req*> done ABSL_GUARDED_BY(mu);
};

// Verification: one replica's answer for a position.
struct Answer {
  size_t node = 0;
  bool ok = false;  // sample (ok) or error
  FleetSample sample;
  FleetSampleError error;
};

const char* DtypeName(int dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_UINT8:
      return "uint8";
    default:
      return "dtype?";
  }
}

// Whether two replicas answered alike: label, dtype, row shape and tensor
// bytes, or the error code.
bool SameAnswer(const Answer& a, const Answer& b) {
  if (a.ok != b.ok) return false;
  if (!a.ok) return a.error.code == b.error.code;
  return a.sample.label == b.sample.label && a.sample.dtype == b.sample.dtype &&
         a.sample.shape == b.sample.shape && a.sample.tensor == b.sample.tensor;
}

// How two answers differ (the Python client's _describe_diff).
std::string DescribeDiff(const Answer& a, const Answer& b) {
  if (a.ok != b.ok) return absl::StrCat(a.ok ? "ok" : "error", " vs ", b.ok ? "ok" : "error");
  if (!a.ok) return absl::StrCat("error ", a.error.code, " vs ", b.error.code);
  std::vector<std::string> what;
  if (a.sample.label != b.sample.label) {
    what.push_back(absl::StrCat("label ", a.sample.label, " vs ", b.sample.label));
  }
  if (a.sample.dtype != b.sample.dtype || a.sample.shape != b.sample.shape) {
    what.push_back(absl::StrCat("tensor ", DtypeName(a.sample.dtype), "[",
                                absl::StrJoin(a.sample.shape, ", "), "] vs ",
                                DtypeName(b.sample.dtype), "[",
                                absl::StrJoin(b.sample.shape, ", "), "]"));
  } else if (a.sample.tensor != b.sample.tensor) {
    size_t n = 0;
    const size_t len = std::min(a.sample.tensor.size(), b.sample.tensor.size());
    for (size_t i = 0; i < len; ++i) n += a.sample.tensor[i] != b.sample.tensor[i];
    n += std::max(a.sample.tensor.size(), b.sample.tensor.size()) - len;
    what.push_back(absl::StrCat("tensor bytes differ (", n, " of ", a.sample.tensor.size(), ")"));
  }
  return absl::StrJoin(what, ", ");
}

// Bytes per tensor element of `dtype`; 0: not a dtype of this protocol.
size_t DtypeBytes(int dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return 4;
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16:
      return 2;
    case v1::DTYPE_UINT8:
      return 1;
    default:
      return 0;
  }
}

// Checks one response message against the request: every sample id (and
// error id) was asked for (`asked`) and is not already in `r`, one label per
// sample, and a tensor of exactly one row per sample. `b` is the header
// NextInto decoded (tensor.data empty); `tensor_bytes` is how many tensor
// bytes came with it. OK, or why not.
absl::Status CheckAnswer(const v1::Batch& b, size_t tensor_bytes,
                         const std::set<uint64_t>& asked, const NodeResult& r) {
  const int n = b.sample_ids_size();
  std::set<uint64_t> seen;
  auto check_id = [&](uint64_t id, const char* what) -> absl::Status {
    if (!asked.count(id)) {
      return absl::DataLossError(absl::StrCat(what, " ", id, " was not asked for"));
    }
    if (r.ok.count(id) || r.bad.count(id) || !seen.insert(id).second) {
      return absl::DataLossError(absl::StrCat(what, " ", id, " sent twice"));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = check_id(b.sample_ids(i), "sample_ids: sample"); !s.ok()) return s;
  }
  for (const v1::SampleError& e : b.errors()) {
    if (absl::Status s = check_id(e.sample_id(), "errors: sample"); !s.ok()) return s;
  }
  if (b.labels_size() != n) {
    return absl::DataLossError(
        absl::StrCat("labels: ", b.labels_size(), " for ", n, " sample ids"));
  }
  if (n == 0) {
    if (tensor_bytes != 0) {
      return absl::DataLossError(
          absl::StrCat("tensor.data: ", tensor_bytes, " bytes for 0 sample ids"));
    }
    return absl::OkStatus();
  }
  const v1::Tensor& t = b.tensor();
  const size_t elem = DtypeBytes(t.dtype());
  if (elem == 0) {
    return absl::DataLossError(absl::StrCat("tensor.dtype: unknown value ", t.dtype()));
  }
  if (t.shape_size() < 1 || t.shape(0) != static_cast<uint64_t>(n)) {
    return absl::DataLossError(absl::StrCat("tensor.shape: ",
                                            t.shape_size() ? t.shape(0) : 0, " rows for ", n,
                                            " sample ids"));
  }
  uint64_t bytes = elem;
  for (uint64_t d : t.shape()) {
    if (d != 0 && bytes > UINT64_MAX / d) return absl::DataLossError("tensor.shape: overflows");
    bytes *= d;
  }
  if (bytes != tensor_bytes) {
    return absl::DataLossError(absl::StrCat("tensor.data: ", tensor_bytes,
                                            " bytes for shape [", absl::StrJoin(t.shape(), ", "),
                                            "] (", bytes, " expected)"));
  }
  return absl::OkStatus();
}

}  // namespace

FleetAction FleetStatusAction(absl::StatusCode code) {
  // docs/protocol.md, "Status codes: retry, fail over or raise" (the reasons
  // are there); fleet_status_table_test checks this against it.
  switch (code) {
    case absl::StatusCode::kAborted:
      return FleetAction::kRetry;
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDataLoss:
      return FleetAction::kFailover;
    default:  // INVALID_ARGUMENT, ALREADY_EXISTS, PERMISSION_DENIED,
              // OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED, and OK
      return FleetAction::kRaise;
  }
}

absl::StatusOr<FleetReplicaRouting> ParseFleetReplicaRouting(absl::string_view name) {
  if (name == "first") return FleetReplicaRouting::kFirst;
  if (name == "spread") return FleetReplicaRouting::kSpread;
  return absl::InvalidArgumentError(
      absl::StrCat("replica routing: must be first or spread, got '", name, "'"));
}

int FleetChooseReplica(uint32_t partition, const std::vector<absl::string_view>& live_holders,
                       FleetReplicaRouting routing, uint64_t g) {
  if (live_holders.empty()) return -1;
  std::vector<std::pair<uint64_t, int>> ranked;
  ranked.reserve(live_holders.size());
  for (size_t i = 0; i < live_holders.size(); ++i) {
    ranked.emplace_back(fleet::RendezvousScore(live_holders[i], partition), static_cast<int>(i));
  }
  // Highest (score, name) first.
  const auto higher = [&](const std::pair<uint64_t, int>& a, const std::pair<uint64_t, int>& b) {
    if (a.first != b.first) return a.first > b.first;
    return live_holders[static_cast<size_t>(a.second)] >
           live_holders[static_cast<size_t>(b.second)];
  };
  if (routing == FleetReplicaRouting::kFirst) {
    return std::min_element(ranked.begin(), ranked.end(), higher)->second;
  }
  std::sort(ranked.begin(), ranked.end(), higher);
  return ranked[(g + partition) % ranked.size()].second;
}

double FleetVerifyScore(uint64_t seed, uint64_t epoch, uint64_t position) {
  const std::string key = absl::StrCat(seed, "/", epoch, "/", position);
  uint8_t digest[32];
  fleet::Sha256(reinterpret_cast<const uint8_t*>(key.data()), key.size(), digest);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | digest[i];
  // As Python's int / float: v rounded to a double, then divided exactly.
  return static_cast<double>(v) / 18446744073709551616.0;
}

std::optional<double> FleetHedgeAfter(std::vector<double> latencies_s, double percentile,
                                      double min_s, int samples) {
  if (latencies_s.empty() || static_cast<int64_t>(latencies_s.size()) < samples) {
    return std::nullopt;
  }
  std::sort(latencies_s.begin(), latencies_s.end());
  const double n = static_cast<double>(latencies_s.size());
  const double rank = std::ceil(percentile * n) - 1;
  const size_t i =
      static_cast<size_t>(std::min(n - 1, std::max(0.0, std::isnan(rank) ? 0.0 : rank)));
  return std::max(min_s, latencies_s[i]);
}

int FleetHedgeClass(uint64_t samples) {
  int c = 0;
  while (samples > 1) {
    samples >>= 1;
    ++c;
  }
  return c;
}

std::map<std::string, std::vector<uint64_t>> FleetSplitHedge(
    const std::vector<std::pair<uint32_t, uint64_t>>& items,
    const std::function<std::vector<std::string>(uint32_t)>& live_holders,
    const std::string& exclude, std::vector<uint32_t>* orphans) {
  // The other live replicas of each partition (a set: name order).
  std::map<uint32_t, std::set<std::string>> others_of;
  std::set<uint32_t> orphan_set;
  std::map<std::set<std::string>, std::vector<uint64_t>> groups;
  for (const auto& [part, pos] : items) {
    auto it = others_of.find(part);
    if (it == others_of.end()) {
      std::set<std::string> others;
      for (std::string& n : live_holders(part)) {
        if (n != exclude) others.insert(std::move(n));
      }
      it = others_of.emplace(part, std::move(others)).first;
    }
    if (it->second.empty()) {
      orphan_set.insert(part);
      continue;
    }
    groups[it->second].push_back(pos);
  }
  std::map<std::string, std::vector<uint64_t>> by_node;
  for (auto& [others, positions] : groups) {
    std::sort(positions.begin(), positions.end());
    const size_t k = others.size(), n = positions.size();
    size_t lo = 0, i = 0;
    for (const std::string& node : others) {
      const size_t size = n / k + (i < n % k ? 1 : 0);
      if (size > 0) {
        std::vector<uint64_t>& v = by_node[node];
        v.insert(v.end(), positions.begin() + static_cast<std::ptrdiff_t>(lo),
                 positions.begin() + static_cast<std::ptrdiff_t>(lo + size));
      }
      lo += size;
      ++i;
    }
  }
  for (auto& [node, v] : by_node) std::sort(v.begin(), v.end());
  if (orphans != nullptr) orphans->assign(orphan_set.begin(), orphan_set.end());
  return by_node;
}

const char* FleetActionName(FleetAction action) {
  switch (action) {
    case FleetAction::kRetry:
      return "retry";
    case FleetAction::kFailover:
      return "fail over";
    case FleetAction::kRaise:
      return "raise";
  }
  return "raise";
}

struct FleetClient::Impl {
  FleetClientOptions o;
  Mutex mu;
  // A node's target and client never change once Create() has made them
  // (read without mu: TargetOf, ClientOf); the rest of a Node is under mu.
  std::vector<Node> nodes ABSL_GUARDED_BY(mu);
  Stats stats ABSL_GUARDED_BY(mu);
  // Hedged requests: per request size class (FleetHedgeClass), over all
  // nodes, the durations (s) of its last kFleetHedgeWindow requests. Pooled,
  // so that a node slow on every request is hedged (its own window would
  // hold only its slow latencies).
  std::map<int, std::deque<double>> latency ABSL_GUARDED_BY(mu);
  // Used by the thread calling ReadBatch() only.
  std::map<std::pair<uint64_t, uint64_t>, std::shared_future<absl::StatusOr<FleetBatch>>> jobs;
  std::map<uint64_t, std::shared_ptr<fleet::GlobalPlan>> plans ABSL_GUARDED_BY(mu);

  const std::string& TargetOf(size_t i) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return nodes[i].target;
  }
  Client& ClientOf(size_t i) const ABSL_NO_THREAD_SAFETY_ANALYSIS { return *nodes[i].client; }

  std::shared_ptr<fleet::GlobalPlan> Plan(uint64_t epoch) {
    MutexLock lock(&mu);
    auto it = plans.find(epoch);
    if (it != plans.end()) return it->second;
    fleet::PlanParams p = o.plan;
    p.epoch = epoch;
    auto plan = fleet::GlobalPlan::Create(o.manifest.partition_start, p);
    if (!plan.ok()) return nullptr;
    if (plans.size() > 4) plans.erase(plans.begin());
    return plans[epoch] = std::shared_ptr<fleet::GlobalPlan>(std::move(plan).value());
  }

  void Event(const std::string& s) {
    if (o.on_event) o.on_event(s);
  }

  // Live nodes' placement versions last reported as differing (empty: none).
  std::set<int64_t> version_mix ABSL_GUARDED_BY(mu);

  // Reports live nodes on different placement versions (a rollout), once per
  // set of versions, and their agreeing again. Under mu.
  void CheckVersionMix() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::set<int64_t> distinct;
    std::string shown;
    for (const Node& n : nodes) {
      if (!n.alive || n.placement_version < 0) continue;
      distinct.insert(n.placement_version);
      absl::StrAppend(&shown, shown.empty() ? "" : ", ", n.target, "=", n.placement_version);
    }
    if (distinct.size() > 1 && distinct != version_mix) {
      version_mix = distinct;
      Event("placement versions differ across live nodes (rollout in progress): " + shown);
    } else if (distinct.size() == 1 && !version_mix.empty()) {
      version_mix.clear();
      Event(absl::StrCat("placement versions agree again: ", *distinct.begin()));
    }
  }

  // Set by the destructor: the probe loops end and probes report nothing.
  bool closing ABSL_GUARDED_BY(mu) = false;
  CondVar closing_cv;
  // One per node: its probe loop's thread (joined before another starts
  // and by the destructor).
  std::vector<std::thread> probers ABSL_GUARDED_BY(mu);

  // Probes node i (ListDatasets) and updates its state. Not under mu.
  // Reports through on_event: at start (`initial`) a node that fails its
  // probe; later one that answers again ("is live again"), a manifest that
  // differs (once per distinct answer) and a placement version changed
  // since the last probe. Nothing once the client is closing.
  void Probe(size_t i, bool check_mix = true, bool initial = false) {
    absl::StatusOr<std::vector<v1::DatasetInfo>> infos = ClientOf(i).ListDatasets();
    MutexLock lock(&mu);
    if (closing || nodes[i].removed) return;
    Node& n = nodes[i];
    const bool was_alive = n.alive;
    std::string why;
    bool manifest_differs = false;
    const v1::DatasetInfo* info = nullptr;
    if (!infos.ok()) {
      why = infos.status().ToString();
    } else {
      for (const v1::DatasetInfo& d : *infos) {
        if (d.name() == o.dataset) info = &d;
      }
      if (info == nullptr) {
        why = absl::StrCat("no dataset \"", o.dataset, "\"");
      } else if (info->manifest_hash() != o.manifest.hash) {
        why = absl::StrCat("manifest ", info->manifest_hash(), " is not the plan's");
        manifest_differs = true;
      }
    }
    if (!why.empty()) {
      n.alive = false;
      n.dead_since = Clock::now();
      if (initial) {
        Event(absl::StrCat("node ", n.target,
                           infos.ok() ? " not serving the plan's dataset" : " unreachable",
                           " at start: ", why, "; probed again every ", o.probe_interval.count(),
                           " ms until it answers"));
      } else if (manifest_differs && why != n.last_error) {
        Event(absl::StrCat(n.target, ": ", why));
      }
      n.last_error = why;
      return;
    }
    // Partitions first: Assign takes a node that is alive.
    n.partitions =
        std::set<uint32_t>(info->partitions_held().begin(), info->partitions_held().end());
    n.alive = true;
    n.last_error.clear();
    const int64_t v = static_cast<int64_t>(info->placement_version());
    if (n.placement_version >= 0 && n.placement_version != v) {
      Event(absl::StrCat(n.target, ": placement version ", n.placement_version, " -> ", v));
    }
    n.placement_version = v;
    if (!was_alive && !initial) Event(absl::StrCat("node ", n.target, " is live again"));
    if (check_mix) CheckVersionMix();
  }

  // Starts a probe loop (ProbeLoop) for each dead node that has none: after
  // the start probes, when a node is marked dead, and at each batch's start.
  // Never waits for a probe.
  void StartProbes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (closing) return;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].alive || nodes[i].probing || nodes[i].removed) continue;
      // A previous loop of this node has set probing = false under mu:
      // it has returned or is about to, holding nothing.
      if (probers[i].joinable()) probers[i].join();
      nodes[i].probing = true;
      probers[i] = std::thread([this, i] { ProbeLoop(i); });
    }
  }

  // Probes dead node i every probe_interval, on a thread of its own, until
  // it answers with the plan's manifest (Assign then gives it its
  // partitions from the next request on) or the client is closing. A probe
  // of a black-holed node waits out its deadline here, never on a batch.
  void ProbeLoop(size_t i) {
    while (true) {
      {
        MutexLock lock(&mu);
        const Clock::time_point next =
            nodes[i].probe_soon
                ? Clock::now()
                : Clock::now() + std::max(o.probe_interval, std::chrono::milliseconds(10));
        nodes[i].probe_soon = false;
        while (!closing && !closing_cv.WaitUntil(&mu, next)) {
        }
        if (closing) {
          nodes[i].probing = false;
          return;
        }
      }
      Probe(i);
      MutexLock lock(&mu);
      if (nodes[i].alive || closing || nodes[i].removed) {
        nodes[i].probing = false;
        return;
      }
    }
  }

  // Ends the probe loops and waits for them (a probe in flight ends by its
  // deadline, the node client's rpc_timeout).
  void StopProbes() {
    std::vector<std::thread> threads;
    {
      MutexLock lock(&mu);
      closing = true;
      threads.swap(probers);
    }
    closing_cv.SignalAll();
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }

  // failover: counted in stats.failovers (a failed node request; not a
  // verification's verdict, as in the Python client).
  void MarkDead(size_t i, const std::string& why, bool failover = true) {
    MutexLock lock(&mu);
    if (nodes[i].alive) {
      Event(absl::StrCat("node ", nodes[i].target, " marked dead: ", why));
    }
    nodes[i].alive = false;
    nodes[i].dead_since = Clock::now();
    nodes[i].last_error = why;
    if (failover) ++stats.failovers;
    StartProbes();
  }

  // Live replica serving partition p in global batch g (FleetChooseReplica
  // under o.replica_routing), or -1; the nodes in `exclude` are not
  // chosen. Under mu.
  int Assign(uint32_t p, const std::set<size_t>& exclude, uint64_t g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<size_t> index;
    std::vector<absl::string_view> names;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].alive || !nodes[i].partitions.count(p) || exclude.count(i)) continue;
      index.push_back(i);
      names.push_back(nodes[i].target);
    }
    const int k = FleetChooseReplica(p, names, o.replica_routing, g);
    return k < 0 ? -1 : static_cast<int>(index[static_cast<size_t>(k)]);
  }
  // The global batch of a position (every request's items are in one).
  uint64_t BatchOf(const Item& it) const { return it.position / o.plan.global_batch; }

  // One request to node q.node for q.items, on q's thread (Launch); a status
  // the table says to retry (FleetStatusAction) asks the node again for
  // what it still owes, at most kFleetSameNodeRetries times. A malformed
  // message (CheckAnswer) ends the request with DATA_LOSS and is dropped
  // whole; what earlier messages delivered is kept. Fills q.result; what
  // arrives is also noted in q.delivered (a hedge asks another node only
  // for the rest). A request cancelled (CancelReq: a hedge race's loser)
  // ends with CANCELLED.
  void Fetch(Req& q, uint64_t epoch) {
    NodeResult& r = q.result;
    const size_t node = q.node;
    const std::vector<Item>& items = q.items;
    const std::string& target = TargetOf(node);
    for (int attempt = 0;; ++attempt) {
      {
        MutexLock lock(&q.mu);
        if (q.cancelled) {
          r.status = absl::CancelledError(absl::StrCat(target, ": cancelled (hedge race lost)"));
          return;
        }
      }
      v1::StreamBatchesRequest req = o.request;
      req.set_dataset(o.dataset);
      req.set_seed(o.plan.seed);
      req.set_epoch(epoch);
      req.set_manifest_hash(o.manifest.hash);
      req.set_error_policy(v1::ERROR_POLICY_SKIP);
      req.set_plan_block_samples(o.plan_block_reads ? o.plan.block_samples : 0);
      req.clear_sample_ids();
      std::set<uint64_t> asked;
      for (const Item& it : items) {
        if (r.ok.count(it.sample_id) || r.bad.count(it.sample_id)) continue;
        req.add_sample_ids(it.sample_id);
        asked.insert(it.sample_id);
      }
      if (asked.empty()) {  // a retry after everything arrived
        r.status = absl::OkStatus();
        return;
      }
      const size_t per_message = o.response_batch > 0 ? o.response_batch : 256;
      req.set_batch_size(
          static_cast<uint32_t>(std::min<size_t>(static_cast<size_t>(req.sample_ids_size()),
                                                 per_message)));
      {
        MutexLock lock(&mu);
        ++stats.requests;
      }
      StreamOptions stream;
      stream.timeout = o.rpc_timeout;
      std::unique_ptr<BatchReader> reader = ClientOf(node).StreamBatches(req, stream);
      {
        // From here CancelReq cancels the stream (TryCancel on its context).
        MutexLock lock(&q.mu);
        q.reader = reader.get();
        if (q.cancelled) reader->Cancel();
      }
      v1::Batch b;
      absl::Status malformed;
      // One copy: NextInto puts each message's tensor bytes from gRPC's
      // receive buffers straight into a fresh buffer that its samples then
      // share (FleetSample::tensor views rows of it).
      std::shared_ptr<char[]> buffer;
      size_t tensor_bytes = 0;
      const TensorAllocator allocate = [&buffer, &tensor_bytes](size_t bytes) {
        buffer.reset(new char[std::max<size_t>(bytes, 1)]);  // not zero-filled
        tensor_bytes = bytes;
        return reinterpret_cast<uint8_t*>(buffer.get());
      };
      while ((buffer.reset(), tensor_bytes = 0, reader->NextInto(&b, allocate))) {
        malformed = CheckAnswer(b, tensor_bytes, asked, r);
        if (!malformed.ok()) {
          reader->Cancel();
          break;
        }
        const size_t n = static_cast<size_t>(b.sample_ids_size());
        const size_t row = n ? tensor_bytes / n : 0;
        const std::shared_ptr<const void> storage = buffer;
        std::vector<uint64_t> row_shape;
        if (n > 0) row_shape.assign(b.tensor().shape().begin() + 1, b.tensor().shape().end());
        for (size_t i = 0; i < n; ++i) {
          FleetSample s;
          s.sample_id = b.sample_ids(static_cast<int>(i));
          s.label = b.labels(static_cast<int>(i));
          s.tensor = absl::string_view(buffer.get() + i * row, row);
          s.storage = storage;
          s.node = target;
          s.dtype = b.tensor().dtype();
          s.shape = row_shape;
          r.ok[s.sample_id] = std::move(s);
        }
        for (const v1::SampleError& e : b.errors()) {
          r.bad[e.sample_id()] = FleetSampleError{0, e.sample_id(), e.code(), e.message()};
        }
        MutexLock lock(&q.mu);
        for (int i = 0; i < b.sample_ids_size(); ++i) q.delivered.insert(b.sample_ids(i));
        for (const v1::SampleError& e : b.errors()) q.delivered.insert(e.sample_id());
      }
      {
        MutexLock lock(&q.mu);
        q.reader = nullptr;
      }
      if (!malformed.ok()) {
        r.status = absl::DataLossError(
            absl::StrCat(target, ": malformed answer: ", malformed.message()));
        return;
      }
      r.status = reader->status();
      if (r.status.ok()) {
        for (const Item& it : items) {
          if (!r.ok.count(it.sample_id) && !r.bad.count(it.sample_id)) {
            r.status = absl::UnavailableError(
                absl::StrCat(target, ": stream ended without sample ", it.sample_id));
            break;
          }
        }
      }
      if (r.status.ok() || FleetStatusAction(r.status.code()) != FleetAction::kRetry ||
          attempt >= kFleetSameNodeRetries) {
        return;
      }
      Event(absl::StrCat("node ", target, ": ", r.status.ToString(), "; asking it again"));
      {
        MutexLock lock(&mu);
        ++stats.retries;
      }
    }
  }

  // The membership's node set generation last applied (0: none).
  uint64_t membership_generation ABSL_GUARDED_BY(mu) = 0;

  // Takes the membership's latest node set (between batches: at the start
  // of each Run): nodes that left are removed like dead ones, nodes that
  // appeared (or came back) are added dead and probed at once, so the
  // rejoin path makes them live. Requests in flight stay where they are.
  void ApplyMembership() {
    if (!o.membership) return;
    const Membership::Snapshot now = o.membership->Current();
    std::vector<std::string> events;
    {
      MutexLock lock(&mu);
      if (now.generation == membership_generation || closing) return;
      membership_generation = now.generation;
      const std::set<std::string> want(now.targets.begin(), now.targets.end());
      std::set<std::string> known;
      for (Node& n : nodes) {
        known.insert(n.target);
        const bool in = want.count(n.target) > 0;
        if (!in && !n.removed) {
          n.removed = true;
          n.alive = false;
          n.dead_since = Clock::now();
          n.last_error = "removed from " + o.membership->Describe();
          events.push_back(absl::StrCat("node ", n.target, " removed by membership (",
                                        o.membership->Describe(), "): treated as dead"));
        } else if (in && n.removed) {
          n.removed = false;
          n.probe_soon = true;
          events.push_back(absl::StrCat("node ", n.target, " added by membership (",
                                        o.membership->Describe(), "): probing it"));
        }
      }
      for (const std::string& t : want) {
        if (known.count(t)) continue;
        if (nodes.size() >= kMaxFleetNodes) {
          events.push_back(absl::StrCat("node ", t, " not added: the client knows ",
                                        kMaxFleetNodes, " nodes already"));
          continue;
        }
        // No reallocation (reserved in Create): TargetOf / ClientOf read
        // the other nodes without mu meanwhile.
        Node n;
        n.target = t;
        n.client = std::make_unique<Client>(NodeClientOptions(t));
        n.dead_since = Clock::now();
        n.last_error = "added, not probed yet";
        n.probe_soon = true;
        nodes.push_back(std::move(n));
        probers.resize(nodes.size());
        events.push_back(absl::StrCat("node ", t, " added by membership (",
                                      o.membership->Describe(), "): probing it"));
      }
      StartProbes();
    }
    for (const std::string& e : events) Event(e);
  }

  // The ClientOptions of the node at `target`.
  ClientOptions NodeClientOptions(const std::string& target) const {
    ClientOptions co;
    co.target = target;
    const ClientOptions& cred = o.credentials;
    co.tls_root_ca_file = cred.tls_root_ca_file;
    co.tls_client_cert_file = cred.tls_client_cert_file;
    co.tls_client_key_file = cred.tls_client_key_file;
    co.tls_target_name_override = cred.tls_target_name_override;
    co.bearer_token_file = cred.bearer_token_file;
    co.bearer_token = cred.bearer_token;
    co.reconnect_deadline = std::chrono::milliseconds(0);  // fail over instead
    co.keepalive_time = o.keepalive_time;
    co.keepalive_timeout = o.keepalive_timeout;
    co.rpc_timeout = std::chrono::milliseconds(5000);
    // gRPC's reconnect backoff to a node that refused (down at start, or
    // killed) grows to this at most: a node that comes back answers a probe
    // within about a second, as with the Python client.
    co.max_backoff = std::chrono::milliseconds(1000);
    // A node answers at most a trainer's slice of a global batch per request,
    // in messages of at most response_batch (else 256) samples: a message
    // larger than that request allows is refused when received
    // (RESOURCE_EXHAUSTED: fail over) before it is parsed or copied.
    const uint64_t slice = o.plan.global_batch / std::max<uint32_t>(1, o.trainers);
    const uint64_t per_message = o.response_batch > 0 ? o.response_batch : 256;
    co.max_receive_message_bytes =
        MaxBatchMessageBytes(o.request, std::max<uint64_t>(1, std::min(slice, per_message)));
    return co;
  }

  // Starts a request to `node` for `items` on a thread of its own; `all`
  // owns it (Run cancels what still runs and joins every thread before it
  // returns). When done it is queued in `inbox` (nullptr: collected by
  // joining its thread).
  Req* Launch(std::vector<std::unique_ptr<Req>>* all, size_t node, std::vector<Item> items,
              uint64_t epoch, Inbox* inbox, Req* hedge_of) {
    auto q = std::make_unique<Req>();
    q->node = node;
    q->items = std::move(items);
    std::sort(q->items.begin(), q->items.end(),
              [](const Item& a, const Item& b) { return a.position < b.position; });
    q->hedge_of = hedge_of;
    q->inbox = inbox;
    q->started = Clock::now();
    Req* raw = q.get();
    all->push_back(std::move(q));
    raw->thread = std::thread([this, raw, epoch] {
      Fetch(*raw, epoch);
      raw->finished = Clock::now();
      if (raw->inbox != nullptr) {
        MutexLock lock(&raw->inbox->mu);
        raw->inbox->done.push_back(raw);
        raw->inbox->cv.SignalAll();
      }
    });
    return raw;
  }

  // Requests for `parts` ({partition: items}), one per live node holding
  // them (Assign); partitions without such a node go to *orphans (when
  // given). (Hedges go out through Run's hedge: FleetSplitHedge.)
  std::vector<Req*> Submit(std::vector<std::unique_ptr<Req>>* all,
                           const std::map<uint32_t, std::vector<Item>>& parts, uint64_t epoch,
                           Inbox* inbox, std::vector<uint32_t>* orphans) {
    std::map<size_t, std::vector<Item>> by_node;
    {
      MutexLock lock(&mu);
      for (const auto& [part, items] : parts) {
        const int n = Assign(part, {}, items.empty() ? 0 : BatchOf(items.front()));
        if (n < 0) {
          if (orphans != nullptr) orphans->push_back(part);
          continue;
        }
        std::vector<Item>& v = by_node[static_cast<size_t>(n)];
        v.insert(v.end(), items.begin(), items.end());
      }
    }
    std::vector<Req*> out;
    for (auto& [n, items] : by_node) {
      out.push_back(Launch(all, n, std::move(items), epoch, inbox, nullptr));
    }
    return out;
  }

  // Verification requests: each item to the live replica of its partition
  // chosen outside its own set of nodes; items without one are left out.
  std::vector<Req*> SubmitSecond(std::vector<std::unique_ptr<Req>>* all,
                                 const std::vector<std::pair<Item, std::set<size_t>>>& items,
                                 uint64_t epoch) {
    std::map<size_t, std::vector<Item>> by_node;
    {
      MutexLock lock(&mu);
      for (const auto& [it, exclude] : items) {
        const int n = Assign(it.partition, exclude, BatchOf(it));
        if (n >= 0) by_node[static_cast<size_t>(n)].push_back(it);
      }
    }
    std::vector<Req*> out;
    for (auto& [n, its] : by_node) {
      out.push_back(Launch(all, n, std::move(its), epoch, nullptr, nullptr));
    }
    return out;
  }

  // Waits for verification requests; their answers by position. One that
  // failed is handled like a node request's failure (a fail-over code marks
  // the node dead; what it delivered is used); nothing is raised.
  std::map<uint64_t, Answer> Collect(const std::vector<Req*>& reqs) {
    std::map<uint64_t, Answer> out;
    for (Req* q : reqs) {
      if (q->thread.joinable()) q->thread.join();
      const NodeResult& r = q->result;
      if (!r.status.ok()) {
        if (FleetStatusAction(r.status.code()) == FleetAction::kFailover) {
          MarkDead(q->node, r.status.ToString(), /*failover=*/false);
        } else {
          Event(absl::StrCat("verify: node ", TargetOf(q->node),
                             " request failed: ", r.status.ToString()));
        }
      }
      for (const Item& it : q->items) {
        Answer a;
        a.node = q->node;
        if (auto s = r.ok.find(it.sample_id); s != r.ok.end()) {
          a.ok = true;
          a.sample = s->second;
          a.sample.position = it.position;
        } else if (auto e = r.bad.find(it.sample_id); e != r.bad.end()) {
          a.error = e->second;
          a.error.position = it.position;
        } else {
          continue;
        }
        out[it.position] = std::move(a);
      }
    }
    return out;
  }

  // Compares the verified positions of the filled batch (ok, bad; `by`:
  // the node that filled each) with a second replica's answers (`second`,
  // sent with the batch's requests; positions whose second answer is
  // missing or came from the node that ended up serving them are asked
  // again), and settles mismatches with a third replica (header comment).
  void Verify(uint64_t epoch, uint64_t g, const std::map<uint64_t, Item>& want,
              std::map<uint64_t, FleetSample>* ok, std::map<uint64_t, FleetSampleError>* bad,
              std::map<uint64_t, size_t>* by, const std::vector<Req*>& second_reqs,
              std::vector<std::unique_ptr<Req>>* all) {
    std::map<uint64_t, Answer> second = Collect(second_reqs);
    std::vector<uint64_t> chosen;
    for (const auto& [p, it] : want) {
      if ((ok->count(p) || bad->count(p)) &&
          FleetVerifyScore(o.plan.seed, epoch, p) < o.verify_fraction) {
        chosen.push_back(p);
      }
    }
    if (chosen.empty()) return;
    std::vector<std::pair<Item, std::set<size_t>>> again;
    for (uint64_t p : chosen) {
      auto s = second.find(p);
      if (s == second.end() || s->second.node == by->at(p)) {
        again.push_back({want.at(p), {by->at(p)}});
      }
    }
    if (!again.empty()) {
      for (auto& [p, a] : Collect(SubmitSecond(all, again, epoch))) second[p] = std::move(a);
    }
    struct Mismatch {
      uint64_t position;
      Answer a, b;
    };
    std::vector<Mismatch> mismatched;
    uint64_t verified = 0;
    for (uint64_t p : chosen) {
      auto s = second.find(p);
      if (s == second.end() || s->second.node == by->at(p)) continue;  // no other replica
      ++verified;
      Answer a;
      a.node = by->at(p);
      if (auto f = ok->find(p); f != ok->end()) {
        a.ok = true;
        a.sample = f->second;
      } else {
        a.error = bad->at(p);
      }
      if (!SameAnswer(a, s->second)) mismatched.push_back({p, std::move(a), s->second});
    }
    {
      MutexLock lock(&mu);
      stats.verified += verified;
      stats.verify_mismatches += mismatched.size();
    }
    if (mismatched.empty()) return;
    std::vector<std::pair<Item, std::set<size_t>>> third_items;
    for (const Mismatch& m : mismatched) {
      third_items.push_back({want.at(m.position), {m.a.node, m.b.node}});
    }
    const std::map<uint64_t, Answer> third = Collect(SubmitSecond(all, third_items, epoch));
    for (Mismatch& m : mismatched) {
      const uint64_t p = m.position;
      const uint64_t sid = want.at(p).sample_id;
      const std::string head = absl::StrCat(
          "verify: epoch ", epoch, " batch ", g, " position ", p, " sample ", sid, ": nodes ",
          TargetOf(m.a.node), " and ", TargetOf(m.b.node), " disagree (", DescribeDiff(m.a, m.b),
          ")");
      auto c = third.find(p);
      if (c != third.end() && (SameAnswer(c->second, m.a) || SameAnswer(c->second, m.b))) {
        const bool a_lies = !SameAnswer(c->second, m.a);
        const Answer& liar = a_lies ? m.a : m.b;
        const Answer& honest = a_lies ? m.b : m.a;
        Event(absl::StrCat(head, "; node ", TargetOf(c->second.node), " agrees with ",
                           TargetOf(honest.node), ": ", TargetOf(liar.node),
                           " is in the minority"));
        if (a_lies) {  // the batch takes the majority's answer
          ok->erase(p);
          bad->erase(p);
          if (m.b.ok) {
            (*ok)[p] = m.b.sample;
          } else {
            (*bad)[p] = m.b.error;
          }
          (*by)[p] = m.b.node;
        }
        MarkDead(liar.node,
                 absl::StrCat("verify: answered sample ", sid, " (epoch ", epoch, ") unlike ",
                              TargetOf(honest.node), " and ", TargetOf(c->second.node)),
                 /*failover=*/false);
        continue;
      }
      {
        MutexLock lock(&mu);
        ++stats.verify_unresolved;
      }
      const std::string why =
          c != third.end() ? absl::StrCat("node ", TargetOf(c->second.node), " agrees with neither")
                           : std::string("no third live replica");
      Event(absl::StrCat(head, "; unresolved (", why, "): keeping ", TargetOf(m.a.node),
                         "'s answer"));
    }
  }

  // Hedged requests: records a request's duration in its size class's window.
  void RecordLatency(const Req& q, Clock::duration d) {
    MutexLock lock(&mu);
    std::deque<double>& l = latency[FleetHedgeClass(q.items.size())];
    l.push_back(std::chrono::duration<double>(d).count());
    while (l.size() > static_cast<size_t>(kFleetHedgeWindow)) l.pop_front();
  }

  // How long q may run before it is hedged (nullopt: not yet: its size
  // class has fewer than hedge_samples latencies).
  std::optional<Clock::duration> HedgeAfter(const Req& q) {
    std::vector<double> lat;
    {
      MutexLock lock(&mu);
      const std::deque<double>& l = latency[FleetHedgeClass(q.items.size())];
      lat.assign(l.begin(), l.end());
    }
    const std::optional<double> s = FleetHedgeAfter(
        std::move(lat), o.hedge, std::chrono::duration<double>(o.hedge_min).count(),
        o.hedge_samples);
    if (!s) return std::nullopt;
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*s));
  }

  // Cancels q, a hedge race's loser (its failure then means nothing); its
  // time so far counts as its latency (a lower bound).
  void CancelReq(Req* q) {
    {
      MutexLock lock(&q->mu);
      q->cancelled = true;
      if (q->reader != nullptr) q->reader->Cancel();
    }
    RecordLatency(*q, Clock::now() - q->started);
  }

  absl::StatusOr<FleetBatch> Run(uint64_t epoch, uint64_t g) {
    ApplyMembership();
    std::shared_ptr<fleet::GlobalPlan> plan = Plan(epoch);
    if (!plan) return absl::InvalidArgumentError("epoch: outside the fleet plan's range");
    const auto [lo, hi] = plan->Slice(g, o.rank, o.trainers);
    std::map<uint64_t, Item> want;  // by position
    std::map<uint64_t, uint64_t> pos_of;  // sample id -> position
    for (uint64_t p = lo; p < hi; ++p) {
      const fleet::GlobalPlan::Entry e = plan->At(p);
      want[p] = Item{p, e.sample_id, e.partition};
      pos_of[e.sample_id] = p;
    }
    std::map<uint64_t, FleetSample> ok;
    std::map<uint64_t, FleetSampleError> bad;
    std::map<uint64_t, size_t> by;  // position -> the node that filled it
    const Clock::time_point t0 = Clock::now();
    {
      MutexLock lock(&mu);
      StartProbes();
    }
    // The batch's requests (each on a thread of its own) report here when
    // done. Before Run returns, whatever still runs (after an error) is
    // cancelled and every thread joined (JoinAll, destroyed before inbox).
    Inbox inbox;
    std::vector<std::unique_ptr<Req>> all;
    struct JoinAll {
      std::vector<std::unique_ptr<Req>>* all;
      ~JoinAll() {
        for (std::unique_ptr<Req>& q : *all) {
          if (!q->thread.joinable()) continue;
          {
            MutexLock lock(&q->mu);
            q->cancelled = true;
            if (q->reader != nullptr) q->reader->Cancel();
          }
          q->thread.join();
        }
      }
    } join_all{&all};
    auto filled = [&](uint64_t p) { return ok.count(p) > 0 || bad.count(p) > 0; };
    // Fills the positions still empty from q's results (the first answer per
    // position wins; later ones are dropped, counted); how many it filled.
    auto merge = [&](Req* q) -> uint64_t {
      uint64_t kept = 0, dropped = 0;
      for (auto& [sid, s] : q->result.ok) {
        const uint64_t p = pos_of.at(sid);  // Fetch kept only ids it asked for
        if (filled(p)) {
          ++dropped;
          continue;
        }
        s.position = p;
        ok[p] = std::move(s);
        by[p] = q->node;
        ++kept;
      }
      for (auto& [sid, e] : q->result.bad) {
        const uint64_t p = pos_of.at(sid);
        if (filled(p)) {
          ++dropped;
          continue;
        }
        e.position = p;
        bad[p] = std::move(e);
        by[p] = q->node;
        ++kept;
      }
      MutexLock lock(&mu);
      stats.duplicates_dropped += dropped;
      if (q->hedge_of != nullptr) stats.hedge_wins += kept;
      return kept;
    };
    // Sends the positions of r neither filled nor delivered by r so far to
    // all the other live replicas of their partitions, split among them
    // (FleetSplitHedge); the hedge requests.
    auto hedge = [&](Req* r) -> std::vector<Req*> {
      r->hedged = true;
      std::vector<std::pair<uint32_t, uint64_t>> missing;
      {
        MutexLock lock(&r->mu);
        for (const Item& it : r->items) {
          if (filled(it.position) || r->delivered.count(it.sample_id)) continue;
          missing.emplace_back(it.partition, it.position);
        }
      }
      if (missing.empty()) return {};
      // The live replicas of the missing positions' partitions, as now.
      std::map<uint32_t, std::vector<std::string>> holders;
      std::map<std::string, size_t> index_of;
      {
        MutexLock lock(&mu);
        for (const auto& [part, p] : missing) holders[part];
        for (size_t i = 0; i < nodes.size(); ++i) {
          index_of[nodes[i].target] = i;
          if (!nodes[i].alive) continue;
          for (auto& [part, live] : holders) {
            if (nodes[i].partitions.count(part)) live.push_back(nodes[i].target);
          }
        }
      }
      const std::map<std::string, std::vector<uint64_t>> split = FleetSplitHedge(
          missing, [&](uint32_t part) { return holders.at(part); }, TargetOf(r->node));
      // No other live replica: no hedge.
      std::vector<Req*> hedges;
      for (auto& [target, positions] : split) {
        std::vector<Item> items;
        for (uint64_t p : positions) items.push_back(want.at(p));
        hedges.push_back(Launch(&all, index_of.at(target), std::move(items), epoch, &inbox, r));
      }
      if (hedges.empty()) return hedges;
      size_t n = 0;
      std::vector<std::string> to;
      for (Req* h : hedges) {
        n += h->items.size();
        to.push_back(TargetOf(h->node));
      }
      {
        MutexLock lock(&mu);
        stats.hedges += hedges.size();
      }
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - r->started);
      Event(absl::StrCat("hedge: node ", TargetOf(r->node), " has not answered ", n,
                         " samples of epoch ", epoch, " batch ", g, " after ", ms.count(),
                         " ms (its p", o.hedge * 100, " latency, at least ",
                         std::chrono::duration<double>(o.hedge_min).count(), " s); asked ",
                         absl::StrJoin(to, ", "), " too"));
      return hedges;
    };

    std::map<uint32_t, std::vector<Item>> parts;
    for (const auto& [p, it] : want) parts[it.partition].push_back(it);
    std::vector<uint32_t> orphans;  // partitions without a live replica
    std::vector<Req*> pending = Submit(&all, parts, epoch, &inbox, &orphans);
    // Verification requests go out with the batch's (to the next replica of
    // each position's first node), so they overlap its answers.
    std::vector<Req*> second;
    if (o.verify_fraction > 0) {
      std::vector<std::pair<Item, std::set<size_t>>> items;
      for (Req* q : pending) {
        for (const Item& it : q->items) {
          if (FleetVerifyScore(o.plan.seed, epoch, it.position) < o.verify_fraction) {
            items.push_back({it, {q->node}});
          }
        }
      }
      second = SubmitSecond(&all, items, epoch);
    }
    std::map<uint32_t, std::vector<Item>> retry_parts;
    while (true) {
      if (!retry_parts.empty()) {
        for (Req* q : Submit(&all, retry_parts, epoch, &inbox, &orphans)) pending.push_back(q);
        retry_parts.clear();
      }
      if (pending.empty()) {
        const std::set<uint32_t> orphan_set(orphans.begin(), orphans.end());
        orphans.clear();
        std::map<uint32_t, std::vector<Item>> again;
        for (const auto& [p, it] : want) {
          if (!filled(p) && orphan_set.count(it.partition)) again[it.partition].push_back(it);
        }
        if (again.empty()) break;
        pending = Submit(&all, again, epoch, &inbox, &orphans);
        if (!orphans.empty() && pending.empty()) {
          {
            MutexLock lock(&mu);
            ++stats.waits;
          }
          const std::set<uint32_t> waiting(orphans.begin(), orphans.end());
          Event(absl::StrCat("epoch ", epoch, " batch ", g, ": no live replica for partitions ",
                             absl::StrJoin(waiting, ","), "; waiting"));
          if (o.max_wait.count() > 0 && Clock::now() - t0 > o.max_wait) {
            return absl::DeadlineExceededError(absl::StrCat(
                "no live replica for partitions ", absl::StrJoin(waiting, ","),
                " within max_wait"));
          }
          // Dead nodes are probed in the background (ProbeLoop): a node that
          // answers is assigned on the next pass.
          std::this_thread::sleep_for(o.probe_interval);
        }
        continue;
      }
      std::vector<Req*> done;
      {
        MutexLock lock(&inbox.mu);
        done.swap(inbox.done);
      }
      if (done.empty()) {
        // Wait for the next answer, or the next request due for a hedge.
        std::optional<Clock::time_point> wake;
        if (o.hedge > 0) {
          const Clock::time_point now = Clock::now();
          const std::vector<Req*> snapshot = pending;
          for (Req* q : snapshot) {
            if (q->hedged || q->hedge_of != nullptr) continue;  // once; a hedge is not hedged
            const std::optional<Clock::duration> after = HedgeAfter(*q);
            if (!after) continue;
            const Clock::time_point due = q->started + *after;
            if (due <= now) {
              for (Req* h : hedge(q)) pending.push_back(h);
              continue;
            }
            wake = wake ? std::min(*wake, due) : due;
          }
        }
        MutexLock lock(&inbox.mu);
        while (inbox.done.empty()) {
          if (!wake) {
            inbox.cv.Wait(&inbox.mu);
          } else if (inbox.cv.WaitUntil(&inbox.mu, *wake)) {
            break;
          }
        }
        done.swap(inbox.done);
      }
      // First answer first: it wins the positions both answered.
      for (Req* r : done) {
        auto at = std::find(pending.begin(), pending.end(), r);
        if (at == pending.end()) continue;  // a hedge race's loser, merged when cancelled
        pending.erase(at);
        r->thread.join();
        const absl::Status st = r->result.status;
        if (!st.ok()) {
          // A retry status here has had its retries on the node: fail over.
          if (FleetStatusAction(st.code()) == FleetAction::kRaise) return st;
          MarkDead(r->node, st.ToString());
        } else {
          RecordLatency(*r, r->finished - r->started);
        }
        // What the node delivered is kept even when it then failed (a
        // sample's bytes depend only on (seed, epoch, sample id), not on the
        // replica); only the positions still empty are requested again.
        const uint64_t kept = merge(r);
        if (!st.ok() && kept > 0) {
          MutexLock lock(&mu);
          stats.kept_partial += kept;
        }
        // A hedge race decided: a request of one (a hedge, or the request it
        // hedges) whose positions are all filled, or delivered by itself so
        // far, is cancelled and keeps what it delivered.
        const std::vector<Req*> snapshot = pending;
        for (Req* q : snapshot) {
          if (!q->hedged && q->hedge_of == nullptr) continue;
          bool settled = true;
          {
            MutexLock lock(&q->mu);
            for (const Item& it : q->items) {
              if (!filled(it.position) && !q->delivered.count(it.sample_id)) {
                settled = false;
                break;
              }
            }
          }
          if (!settled) continue;
          pending.erase(std::find(pending.begin(), pending.end(), q));
          CancelReq(q);
          q->thread.join();
          merge(q);
        }
        // Positions still empty that no request in flight covers (a hedge,
        // or the request it hedges) are asked again.
        std::set<uint64_t> covered;
        for (Req* q : pending) {
          for (const Item& it : q->items) covered.insert(it.position);
        }
        for (const Item& it : r->items) {
          if (!filled(it.position) && !covered.count(it.position)) {
            retry_parts[it.partition].push_back(it);
          }
        }
      }
    }
    if (o.verify_fraction > 0) Verify(epoch, g, want, &ok, &bad, &by, second, &all);
    FleetBatch out;
    out.epoch = epoch;
    out.batch = g;
    for (auto& [p, s] : ok) out.samples.push_back(std::move(s));
    for (auto& [p, e] : bad) out.errors.push_back(std::move(e));
    return out;
  }
};

FleetClient::FleetClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FleetClient::~FleetClient() {
  // Let prefetch jobs finish before the state they use goes away, then end
  // the probe loops (no event after this returns).
  for (auto& [k, f] : impl_->jobs) f.wait();
  impl_->StopProbes();
}

absl::StatusOr<std::unique_ptr<FleetClient>> FleetClient::Create(FleetClientOptions o) {
  if (absl::Status s = fleet::CheckTrainers(o.plan.global_batch, o.trainers); !s.ok()) return s;
  o.plan = fleet::ResolveSlice(o.plan, o.trainers);  // plan v2 without L: G / T
  if (o.plan.version != 1) {  // bad v2 params (K, L) or versions: refused here, named
    auto p = fleet::GlobalPlan::Create(o.manifest.partition_start, o.plan);
    if (!p.ok()) return p.status();
  }
  if (o.rank >= o.trainers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: must be < trainers = ", o.trainers, ", got ", o.rank));
  }
  if (o.membership) {
    if (!o.targets.empty()) {
      return absl::InvalidArgumentError("targets: give a target list or a membership, not both");
    }
  }
  // One snapshot: the targets and their generation.
  const Membership::Snapshot first =
      o.membership ? o.membership->Current() : Membership::Snapshot{};
  if (o.membership) o.targets = first.targets;
  if (o.targets.empty()) return absl::InvalidArgumentError("targets: at least one is needed");
  if (!(o.hedge == 0 || (o.hedge > 0 && o.hedge < 1))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hedge: must be 0 (off) or a latency percentile in (0, 1), got ", o.hedge));
  }
  if (o.hedge_min.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hedge_min: must be >= 0 ms, got ", o.hedge_min.count()));
  }
  if (o.hedge_samples < 1 || o.hedge_samples > kFleetHedgeWindow) {
    return absl::InvalidArgumentError(absl::StrCat("hedge_samples: must be in [1, ",
                                                   kFleetHedgeWindow, "], got ",
                                                   o.hedge_samples));
  }
  if (!(o.verify_fraction >= 0 && o.verify_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify_fraction: must be a number in [0, 1], got ", o.verify_fraction));
  }
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(o);
  {
    MutexLock lock(&impl->mu);
    if (impl->o.membership) {
      impl->membership_generation = first.generation;
      // Never reallocated (ApplyMembership): see there.
      impl->nodes.reserve(std::max(kMaxFleetNodes, impl->o.targets.size()));
    }
  }
  for (const std::string& t : impl->o.targets) {
    Node n;
    n.target = t;
    n.client = std::make_unique<Client>(impl->NodeClientOptions(t));
    MutexLock lock(&impl->mu);
    impl->nodes.push_back(std::move(n));
  }
  {
    MutexLock lock(&impl->mu);
    impl->probers.resize(impl->o.targets.size());
  }
  for (size_t i = 0; i < impl->o.targets.size(); ++i) {
    impl->Probe(i, /*check_mix=*/false, /*initial=*/true);
  }
  {
    MutexLock lock(&impl->mu);
    impl->CheckVersionMix();
    impl->StartProbes();  // nodes down at start: re-probed in the background
  }
  return std::unique_ptr<FleetClient>(new FleetClient(std::move(impl)));
}

uint64_t FleetClient::NumBatches(uint64_t epoch) {
  std::shared_ptr<fleet::GlobalPlan> plan = impl_->Plan(epoch);
  return plan ? plan->num_batches() : 0;
}

absl::StatusOr<FleetBatch> FleetClient::ReadBatch(uint64_t epoch, uint64_t batch) {
  const uint64_t end = NumBatches(epoch);
  for (uint64_t g = batch; g < std::min<uint64_t>(end, batch + std::max(1, impl_->o.prefetch));
       ++g) {
    if (!impl_->jobs.count({epoch, g})) {
      Impl* impl = impl_.get();
      impl_->jobs[{epoch, g}] =
          std::async(std::launch::async, [impl, epoch, g] { return impl->Run(epoch, g); })
              .share();
    }
  }
  // Jobs before this batch are not wanted any more (a jump back or ahead).
  for (auto it = impl_->jobs.begin(); it != impl_->jobs.end();) {
    if (it->first < std::make_pair(epoch, batch)) {
      it->second.wait();
      it = impl_->jobs.erase(it);
    } else {
      ++it;
    }
  }
  auto it = impl_->jobs.find({epoch, batch});
  if (it == impl_->jobs.end()) return absl::OutOfRangeError("batch: past the end of the epoch");
  absl::StatusOr<FleetBatch> r = it->second.get();
  impl_->jobs.erase(it);
  return r;
}

FleetClient::Stats FleetClient::stats() const {
  MutexLock lock(&impl_->mu);
  return impl_->stats;
}

}  // namespace nearprep
