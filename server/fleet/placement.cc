// See placement.h.
#include "server/fleet/placement.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace nearprep::fleet {
namespace {

constexpr uint64_t kMaxPartitions = uint64_t{1} << 24;

absl::Status Bad(size_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("placement line ", line, ": ", what));
}

// A node name: non-empty, printable ASCII or UTF-8 bytes, no whitespace or
// ',' (the text form separates fields by spaces and partitions by commas).
bool GoodNodeName(absl::string_view n) {
  if (n.empty()) return false;
  for (char ch : n) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f || c == ',') return false;
  }
  return true;
}

bool GoodHash(absl::string_view h) {
  return h.size() == 64 && std::all_of(h.begin(), h.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

const std::vector<uint32_t>* Placement::PartitionsOf(const std::string& node) const {
  auto it = nodes.find(node);
  return it == nodes.end() ? nullptr : &it->second;
}

uint64_t RendezvousScore(absl::string_view node, uint32_t partition) {
  const std::string key = absl::StrCat(node, "/", partition);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | digest[i];
  return v;
}

uint64_t PlacementCap(double max_load, uint32_t num_partitions, uint32_t replicas,
                      size_t num_nodes) {
  const double cap = std::ceil(max_load * static_cast<double>(num_partitions) *
                               static_cast<double>(replicas) / static_cast<double>(num_nodes));
  // More than C never binds (a node holds each partition at most once).
  return cap >= static_cast<double>(num_partitions) ? num_partitions
                                                      : static_cast<uint64_t>(cap);
}

absl::StatusOr<Placement> ComputePlacement(absl::string_view manifest_hash,
                                           uint32_t num_partitions,
                                           const std::vector<std::string>& nodes,
                                           uint32_t replicas, uint64_t version,
                                           double max_load) {
  if (!GoodHash(manifest_hash)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest hash: expected 64 lower-case hex digits, got '", manifest_hash, "'"));
  }
  if (num_partitions == 0 || num_partitions > kMaxPartitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("partitions: must be in [1, 2^24], got ", num_partitions));
  }
  if (nodes.empty()) return absl::InvalidArgumentError("nodes: none given");
  std::set<std::string> seen;
  for (const std::string& n : nodes) {
    if (!GoodNodeName(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nodes: '", n, "' is not a node name (non-empty, no spaces or commas)"));
    }
    if (!seen.insert(n).second) {
      return absl::InvalidArgumentError(absl::StrCat("nodes: '", n, "' is listed twice"));
    }
  }
  if (replicas == 0 || replicas > nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas: R = ", replicas, " must be in [1, ", nodes.size(),
        "] (the number of nodes)"));
  }
  if (version == 0) return absl::InvalidArgumentError("version: must be >= 1");
  if (max_load != 0.0 && !(max_load >= 1.0 && std::isfinite(max_load))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max-load: F = ", max_load, " must be >= 1 (a node holds at most ceil(F * C * R / n) "
        "partitions; F = 1 is the tightest)"));
  }
  Placement p;
  p.version = version;
  p.manifest_hash = std::string(manifest_hash);
  p.num_partitions = num_partitions;
  p.replicas = replicas;
  for (const std::string& n : nodes) p.nodes[n];
  std::vector<std::pair<uint64_t, const std::string*>> ranked(nodes.size());
  // Highest (score, name) first: the clients' tie-break.
  const auto higher = [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return *a.second > *b.second;
  };
  if (max_load != 0.0) {
    // Bounded load: walk each partition's ranking, taking nodes with room.
    const uint64_t cap = PlacementCap(max_load, num_partitions, replicas, nodes.size());
    std::vector<uint64_t> load(nodes.size(), 0);  // by index in `nodes`
    std::vector<const std::string*> chosen;
    for (uint32_t part = 0; part < num_partitions; ++part) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        ranked[i] = {RendezvousScore(nodes[i], part), &nodes[i]};
      }
      std::sort(ranked.begin(), ranked.end(), higher);
      chosen.clear();
      for (const auto& [score, name] : ranked) {
        if (chosen.size() == replicas) break;
        if (load[name - nodes.data()] < cap) chosen.push_back(name);
      }
      for (const auto& [score, name] : ranked) {  // fewer than R with room
        if (chosen.size() == replicas) break;
        if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) {
          chosen.push_back(name);
        }
      }
      for (const std::string* name : chosen) {
        ++load[name - nodes.data()];
        p.nodes[*name].push_back(part);
      }
    }
    p.hash = Sha256Hex(SerializePlacement(p));
    return p;
  }
  for (uint32_t part = 0; part < num_partitions; ++part) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      ranked[i] = {RendezvousScore(nodes[i], part), &nodes[i]};
    }
    std::partial_sort(ranked.begin(), ranked.begin() + replicas, ranked.end(), higher);
    for (uint32_t r = 0; r < replicas; ++r) p.nodes[*ranked[r].second].push_back(part);
  }
  p.hash = Sha256Hex(SerializePlacement(p));
  return p;
}

std::string SerializePlacement(const Placement& p) {
  std::string out = absl::StrCat("nearprep-placement 1\nversion ", p.version, "\nmanifest ",
                                 p.manifest_hash, "\npartitions ", p.num_partitions,
                                 "\nreplicas ", p.replicas, "\n");
  for (const auto& [name, parts] : p.nodes) {
    absl::StrAppend(&out, "node ", name, " ",
                    parts.empty() ? std::string("-") : absl::StrJoin(parts, ","), "\n");
  }
  return out;
}

absl::StatusOr<Placement> ParsePlacement(absl::string_view text) {
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("placement: empty or not newline-terminated");
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  if (lines[0] != "nearprep-placement 1") {
    return Bad(1, absl::StrCat("expected 'nearprep-placement 1', got '", lines[0], "'"));
  }
  const auto header = [&](size_t i, absl::string_view key,
                          absl::string_view* value) -> absl::Status {
    if (i >= lines.size()) return Bad(i + 1, absl::StrCat("missing '", key, "'"));
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    if (f.size() != 2 || f[0] != key) {
      return Bad(i + 1, absl::StrCat("expected '", key, " VALUE', got '", lines[i], "'"));
    }
    *value = f[1];
    return absl::OkStatus();
  };
  const auto number = [&](size_t i, absl::string_view key, uint64_t min, uint64_t max,
                          uint64_t* v) -> absl::Status {
    absl::string_view s;
    if (absl::Status st = header(i, key, &s); !st.ok()) return st;
    if (!absl::SimpleAtoi(s, v) || *v < min || *v > max) {
      return Bad(i + 1, absl::StrCat("expected '", key, " NUMBER' in [", min, ", ", max,
                                     "], got '", lines[i], "'"));
    }
    return absl::OkStatus();
  };
  Placement p;
  if (auto s = number(1, "version", 1, ~uint64_t{0}, &p.version); !s.ok()) return s;
  absl::string_view hash;
  if (auto s = header(2, "manifest", &hash); !s.ok()) return s;
  if (!GoodHash(hash)) return Bad(3, "the manifest hash must be 64 lower-case hex digits");
  p.manifest_hash = std::string(hash);
  uint64_t c = 0, r = 0;
  if (auto s = number(3, "partitions", 1, kMaxPartitions, &c); !s.ok()) return s;
  p.num_partitions = static_cast<uint32_t>(c);
  if (auto s = number(4, "replicas", 1, ~uint32_t{0}, &r); !s.ok()) return s;
  p.replicas = static_cast<uint32_t>(r);
  std::vector<uint32_t> copies(p.num_partitions, 0);
  std::string last;
  for (size_t i = 5; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    if (f.size() != 3 || f[0] != "node" || !GoodNodeName(f[1]) || f[2].empty()) {
      return Bad(i + 1, absl::StrCat("expected 'node NAME P,P,...' (or 'node NAME -'), got '",
                                     lines[i], "'"));
    }
    const std::string name(f[1]);
    if (i > 5 && !(last < name)) {
      return Bad(i + 1, "nodes must be listed once each, sorted by name");
    }
    last = name;
    std::vector<uint32_t>& parts = p.nodes[name];
    if (f[2] != "-") {
      for (absl::string_view t : absl::StrSplit(f[2], ',')) {
        uint64_t v = 0;
        if (!absl::SimpleAtoi(t, &v) || v >= p.num_partitions ||
            (!parts.empty() && v <= parts.back())) {
          return Bad(i + 1, absl::StrCat("partition '", t, "' of node ", name,
                                         ": expected ascending partitions < ",
                                         p.num_partitions));
        }
        parts.push_back(static_cast<uint32_t>(v));
        ++copies[v];
      }
    }
  }
  if (p.nodes.empty()) return Bad(lines.size() + 1, "no nodes");
  if (p.replicas > p.nodes.size()) {
    return Bad(5, absl::StrCat("replicas ", p.replicas, " is more than the ",
                               p.nodes.size(), " nodes"));
  }
  for (uint32_t part = 0; part < p.num_partitions; ++part) {
    if (copies[part] != p.replicas) {
      return Bad(lines.size() + 1, absl::StrCat("partition ", part, " is on ", copies[part],
                                                " nodes, replicas is ", p.replicas));
    }
  }
  p.hash = Sha256Hex(text);
  if (SerializePlacement(p) != text) {
    return absl::InvalidArgumentError(
        "placement: not in canonical form (write it with `nearprep placement`)");
  }
  return p;
}

std::vector<PlacementMove> DiffPlacements(const Placement& before, const Placement& after) {
  std::set<std::string> names;
  for (const auto& [n, _] : before.nodes) names.insert(n);
  for (const auto& [n, _] : after.nodes) names.insert(n);
  static const std::vector<uint32_t> kNone;
  std::vector<PlacementMove> out;
  for (const std::string& n : names) {
    const std::vector<uint32_t>* b = before.PartitionsOf(n);
    const std::vector<uint32_t>* a = after.PartitionsOf(n);
    if (b == nullptr) b = &kNone;
    if (a == nullptr) a = &kNone;
    PlacementMove m;
    m.node = n;
    std::set_difference(a->begin(), a->end(), b->begin(), b->end(),
                        std::back_inserter(m.gains));
    std::set_difference(b->begin(), b->end(), a->begin(), a->end(),
                        std::back_inserter(m.losses));
    if (!m.gains.empty() || !m.losses.empty()) out.push_back(std::move(m));
  }
  return out;
}

absl::Status CheckSuccessor(const Placement& previous, const Placement& next) {
  if (next.version <= previous.version) {
    return absl::FailedPreconditionError(
        absl::StrCat("version ", next.version, " is not greater than the previous placement's ",
                     previous.version));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ShardsFor(const Placement& p, const Manifest& m,
                                                   const std::string& node) {
  if (p.manifest_hash != m.hash || p.num_partitions != m.num_partitions) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the placement is for manifest ", p.manifest_hash, " (", p.num_partitions,
        " partitions), this manifest is ", m.hash, " (", m.num_partitions, " partitions)"));
  }
  const std::vector<uint32_t>* parts = p.PartitionsOf(node);
  if (parts == nullptr) {
    std::vector<std::string> names;
    for (const auto& [n, _] : p.nodes) names.push_back(n);
    return absl::NotFoundError(absl::StrCat("node '", node, "' is not in the placement (nodes: ",
                                            absl::StrJoin(names, ", "), ")"));
  }
  std::vector<std::string> out;
  for (uint32_t part : *parts) {
    for (uint32_t s = m.partition_shard[part]; s < m.partition_shard[part + 1]; ++s) {
      out.push_back(m.shards[s].name);
    }
  }
  return out;
}

}  // namespace nearprep::fleet
