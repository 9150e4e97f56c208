// Fleet placements (issue 14): which storage node should hold which
// partitions of a manifest (manifest.h), as an operator-facing, versioned
// document. A placement never enters the epoch plan and never overrides the
// files: a daemon serves the partitions it finds complete on disk and only
// *reports* what its placement assigns it (DatasetInfo.placement_version,
// partitions_assigned), so a rollout from one placement version to the next
// can happen while trainers read. docs/protocol.md ("Placement") is the
// normative description of the text form.
//
// Text form (UTF-8, '\n'-terminated lines, fields separated by one space):
//   nearprep-placement 1
//   version V                      operator's number, >= 1, grows per rollout
//   manifest HASH                  the manifest hash (64 lower-case hex)
//   partitions C                   the manifest's partition count
//   replicas R                     every partition is on exactly R nodes
//   node NAME P,P,...              one per node, sorted by name (byte order);
//                                  partitions ascending, "-" for none
// The placement hash is the SHA-256 of the exact bytes of the text form,
// in lower-case hex; the text is canonical (the parser refuses anything
// SerializePlacement would not write).
//
// ComputePlacement puts each partition on the R nodes with the highest
// rendezvous score RendezvousScore(node, p) (the score the fleet clients use
// to pick a live replica), so adding a node moves only the partitions it
// gains and removing one moves only those it held. With a max_load F >= 1
// (bounded-load rendezvous, `nearprep placement --max-load F`) no node holds
// more than cap = ceil(F * C * R / n) partitions where that is possible:
// partitions 0..C-1 in order, each on the R nodes with the highest (score,
// name) among those holding fewer than cap so far; when fewer than R have
// room, the rest are the highest (score, name) nodes not yet chosen for it,
// past the cap. That never happens when cap * (n - R) >= (C - 1) * R (e.g.
// any F > 1 at C = 16,384, R = 3, n = 1,024: cap >= 49; at F = 1, cap 48,
// it can). Adding or removing a node then
// moves more partitions than pure rendezvous (docs/operations.md).
//
// Thread-safety: pure functions and plain values.
#ifndef NEARPREP_SERVER_FLEET_PLACEMENT_H_
#define NEARPREP_SERVER_FLEET_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/fleet/manifest.h"

namespace nearprep::fleet {

struct Placement {
  uint64_t version = 0;
  std::string manifest_hash;
  uint32_t num_partitions = 0;
  uint32_t replicas = 0;
  // Node name -> its partitions (ascending). Every partition < num_partitions
  // is on exactly `replicas` nodes.
  std::map<std::string, std::vector<uint32_t>> nodes;
  std::string hash;  // SHA-256 (hex) of SerializePlacement()

  // The partitions assigned to `node`, or nullptr when it is not listed.
  const std::vector<uint32_t>* PartitionsOf(const std::string& node) const;
};

// The first 8 bytes of SHA-256(node + "/" + decimal partition), big-endian:
// the fleet clients' rendezvous score (client/python/nearprep/fleet.py,
// client/cpp/fleet/fleet_client.cc).
uint64_t RendezvousScore(absl::string_view node, uint32_t partition);

// The placement of `num_partitions` partitions of manifest `manifest_hash`
// over `nodes` (any order), `replicas` per partition: the nodes with the
// highest (score, name); max_load 0: pure rendezvous, F >= 1: bounded load
// (above). INVALID_ARGUMENT naming the parameter for no nodes, a duplicate
// or malformed node name (empty, whitespace, ','), replicas 0 or more than
// the nodes, version 0, a malformed hash, or a max_load neither 0 nor >= 1.
absl::StatusOr<Placement> ComputePlacement(absl::string_view manifest_hash,
                                           uint32_t num_partitions,
                                           const std::vector<std::string>& nodes,
                                           uint32_t replicas, uint64_t version,
                                           double max_load = 0.0);

// The bounded-load cap: ceil(max_load * C * R / n), evaluated in IEEE
// double in that order (the simulator, bench/fleet/simulate.py, computes
// it the same way).
uint64_t PlacementCap(double max_load, uint32_t num_partitions, uint32_t replicas,
                      size_t num_nodes);

// The text form above.
std::string SerializePlacement(const Placement& p);
// Parses and checks the text form (fills the hash). INVALID_ARGUMENT naming
// the line on any deviation.
absl::StatusOr<Placement> ParsePlacement(absl::string_view text);

// What moves from `before` to `after`, per node (sorted by name; nodes whose
// partitions do not change are left out).
struct PlacementMove {
  std::string node;
  std::vector<uint32_t> gains;   // in `after`, not in `before`
  std::vector<uint32_t> losses;  // in `before`, not in `after`
};
std::vector<PlacementMove> DiffPlacements(const Placement& before,
                                          const Placement& after);

// OK when `next` may follow `previous`: a greater version.
// FAILED_PRECONDITION otherwise ("version 3 is not greater than the
// previous placement's 3").
absl::Status CheckSuccessor(const Placement& previous, const Placement& next);

// The shard file names `node` must hold under `p` (manifest order).
// FAILED_PRECONDITION when `p` is for another manifest (hash or partition
// count), NOT_FOUND when `node` is not in `p`.
absl::StatusOr<std::vector<std::string>> ShardsFor(const Placement& p,
                                                   const Manifest& m,
                                                   const std::string& node);

}  // namespace nearprep::fleet

#endif  // NEARPREP_SERVER_FLEET_PLACEMENT_H_
