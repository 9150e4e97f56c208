// See fleet_client.h.
#include "client/cpp/fleet/fleet_client.h"

#include <algorithm>
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

  void MarkDead(size_t i, const absl::Status& why) {
    MutexLock lock(&mu);
    if (nodes[i].alive) {
      Event(absl::StrCat("node ", nodes[i].target, " marked dead: ", why.ToString()));
    }
    nodes[i].alive = false;
    nodes[i].dead_since = Clock::now();
    nodes[i].last_error = why.ToString();
    ++stats.failovers;
    StartProbes();
  }

  // Live replica for partition p (highest score), or -1. Under mu.
  int Assign(uint32_t p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int best = -1;
    uint64_t best_score = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].alive || !nodes[i].partitions.count(p)) continue;
      const uint64_t s = fleet::RendezvousScore(nodes[i].target, p);
      if (best < 0 || s > best_score ||
          (s == best_score && nodes[i].target > nodes[static_cast<size_t>(best)].target)) {
        best = static_cast<int>(i);
        best_score = s;
      }
    }
    return best;
  }

  // One request to `node` for `items`; a status the table says to retry
  // (FleetStatusAction) asks the node again for what it still owes, at most
  // kFleetSameNodeRetries times. A malformed message (CheckAnswer) ends the
  // request with DATA_LOSS and is dropped whole; what earlier messages
  // delivered is kept.
  NodeResult Fetch(size_t node, uint64_t epoch, const std::vector<Item>& items) {
    NodeResult r;
    const std::string& target = TargetOf(node);
    for (int attempt = 0;; ++attempt) {
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
        return r;
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
        for (size_t i = 0; i < n; ++i) {
          FleetSample s;
          s.sample_id = b.sample_ids(static_cast<int>(i));
          s.label = b.labels(static_cast<int>(i));
          s.tensor = absl::string_view(buffer.get() + i * row, row);
          s.storage = storage;
          s.node = target;
          r.ok[s.sample_id] = std::move(s);
        }
        for (const v1::SampleError& e : b.errors()) {
          r.bad[e.sample_id()] = FleetSampleError{0, e.sample_id(), e.code(), e.message()};
        }
      }
      if (!malformed.ok()) {
        r.status = absl::DataLossError(
            absl::StrCat(target, ": malformed answer: ", malformed.message()));
        return r;
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
        return r;
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
    const Clock::time_point t0 = Clock::now();
    {
      MutexLock lock(&mu);
      StartProbes();
    }
    while (true) {
      std::map<size_t, std::vector<Item>> by_node;
      std::set<uint32_t> orphans;
      {
        MutexLock lock(&mu);
        for (const auto& [p, it] : want) {
          if (ok.count(p) || bad.count(p)) continue;
          const int n = Assign(it.partition);
          if (n < 0) {
            orphans.insert(it.partition);
          } else {
            by_node[static_cast<size_t>(n)].push_back(it);
          }
        }
      }
      if (by_node.empty() && orphans.empty()) break;
      std::vector<std::pair<size_t, std::future<NodeResult>>> futs;
      for (auto& [n, items] : by_node) {
        futs.emplace_back(n, std::async(std::launch::async, [this, n = n, epoch, items = items] {
                            return Fetch(n, epoch, items);
                          }));
      }
      for (auto& [n, f] : futs) {
        NodeResult r = f.get();
        // A retry status here has had its retries on the node: fail over.
        if (!r.status.ok() && FleetStatusAction(r.status.code()) == FleetAction::kRaise) {
          return r.status;
        }
        if (!r.status.ok()) MarkDead(n, r.status);
        // What the node delivered is kept even when it then failed (a
        // sample's bytes depend only on (seed, epoch, sample id), not on the
        // replica); only the positions still empty are requested again.
        uint64_t kept = 0;
        for (auto& [sid, s] : r.ok) {
          const uint64_t p = pos_of.at(sid);  // Fetch kept only ids it asked for
          if (ok.count(p) || bad.count(p)) {
            MutexLock lock(&mu);
            ++stats.duplicates_dropped;
            continue;
          }
          s.position = p;
          ok[p] = std::move(s);
          ++kept;
        }
        for (auto& [sid, e] : r.bad) {
          const uint64_t p = pos_of.at(sid);
          if (ok.count(p) || bad.count(p)) continue;
          e.position = p;
          bad[p] = std::move(e);
          ++kept;
        }
        if (!r.status.ok() && kept > 0) {
          MutexLock lock(&mu);
          stats.kept_partial += kept;
        }
      }
      if (!orphans.empty() && futs.empty()) {
        {
          MutexLock lock(&mu);
          ++stats.waits;
        }
        Event(absl::StrCat("epoch ", epoch, " batch ", g, ": no live replica for partitions ",
                           absl::StrJoin(orphans, ","), "; waiting"));
        if (o.max_wait.count() > 0 && Clock::now() - t0 > o.max_wait) {
          return absl::DeadlineExceededError(absl::StrCat(
              "no live replica for partitions ", absl::StrJoin(orphans, ","), " within max_wait"));
        }
        // Dead nodes are probed in the background (ProbeLoop): a node that
        // answers is assigned on the next pass.
        std::this_thread::sleep_for(o.probe_interval);
      }
    }
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
