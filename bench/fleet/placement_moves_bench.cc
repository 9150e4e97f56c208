// nearprep_bench_placement_moves: how much a placement moves when one node
// is added or removed, pure rendezvous against bounded load
// (server/fleet/placement.h, `nearprep placement [--max-load F]`).
//
//   nearprep_bench_placement_moves [--partitions C] [--replicas R]
//                                  [--nodes N] [--max-load F,F,...]
//
// Nodes are named node0000, node0001, ...; "add" places over N + 1 nodes
// (node N joins), "remove" over N - 1 (node N/2 leaves). For each rule
// (max-load 0: pure rendezvous) it prints the partitions per node
// (max / mean) and, for add and remove, the partition copies to make (the
// gains of DiffPlacements, what `nearprep placement --previous` prints) as
// a count and as a fraction of the C * R copies, and the partitions whose
// holder set changed; the minimum, for comparison, is what the joining
// node takes (C * R / (N + 1)) or the leaving node held.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/fleet/placement.h"

namespace {

using nearprep::fleet::Placement;

std::string Name(int i) {
  char b[32];
  std::snprintf(b, sizeof b, "node%04d", i);
  return b;
}

Placement Compute(uint32_t c, const std::vector<std::string>& nodes, uint32_t r, double f,
                  double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Placement> p =
      nearprep::fleet::ComputePlacement(std::string(64, 'a'), c, nodes, r, 1, f);
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(p);
}

void Move(const char* what, const Placement& a, const Placement& b, uint64_t c, uint32_t r,
          uint64_t floor) {
  uint64_t copies = 0;
  std::set<uint32_t> changed;
  for (const auto& m : nearprep::fleet::DiffPlacements(a, b)) {
    copies += m.gains.size();
    changed.insert(m.gains.begin(), m.gains.end());
    changed.insert(m.losses.begin(), m.losses.end());
  }
  std::printf("  %-6s copies %7llu = %6.3f%% of C*R (minimum %llu = %.3f%%), partitions "
              "changed %llu = %.2f%%\n",
              what, static_cast<unsigned long long>(copies), 100.0 * copies / (c * r),
              static_cast<unsigned long long>(floor), 100.0 * floor / (c * r),
              static_cast<unsigned long long>(changed.size()), 100.0 * changed.size() / c);
}

void Held(const char* what, const Placement& p) {
  size_t most = 0, total = 0;
  for (const auto& [n, parts] : p.nodes) {
    most = std::max(most, parts.size());
    total += parts.size();
  }
  std::printf("  %-6s partitions per node max %zu, mean %.2f, max/mean %.3f\n", what, most,
              static_cast<double>(total) / p.nodes.size(),
              most * static_cast<double>(p.nodes.size()) / total);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t c = 16384, r = 3;
  int n = 1024;
  std::vector<double> loads = {0.0, 1.0, 1.05, 1.1};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    const char* v = argv[i + 1];
    bool ok = true;
    if (!std::strcmp(k, "--partitions")) {
      ok = absl::SimpleAtoi(v, &c);
    } else if (!std::strcmp(k, "--replicas")) {
      ok = absl::SimpleAtoi(v, &r);
    } else if (!std::strcmp(k, "--nodes")) {
      ok = absl::SimpleAtoi(v, &n) && n >= 2;
    } else if (!std::strcmp(k, "--max-load")) {
      loads.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        double f = 0;
        ok = ok && absl::SimpleAtod(s, &f);
        loads.push_back(f);
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "usage: %s [--partitions C] [--replicas R] [--nodes N] "
                   "[--max-load F,F,...] (bad %s %s)\n", argv[0], k, v);
      return 2;
    }
  }
  std::vector<std::string> base, add, remove;
  for (int i = 0; i < n; ++i) base.push_back(Name(i));
  add = base;
  add.push_back(Name(n));
  remove = base;
  remove.erase(remove.begin() + n / 2);
  std::printf("C = %u, R = %u, N = %d; add %s, remove %s\n", c, r, n, Name(n).c_str(),
              Name(n / 2).c_str());
  for (double f : loads) {
    double secs = 0;
    const Placement p0 = Compute(c, base, r, f, &secs);
    const Placement pa = Compute(c, add, r, f, &secs);
    const Placement pr = Compute(c, remove, r, f, &secs);
    if (f == 0) {
      std::printf("pure rendezvous:\n");
    } else {
      std::printf("--max-load %g (cap %llu at N, %llu at N+1, %llu at N-1):\n", f,
                  static_cast<unsigned long long>(nearprep::fleet::PlacementCap(f, c, r, n)),
                  static_cast<unsigned long long>(nearprep::fleet::PlacementCap(f, c, r, n + 1)),
                  static_cast<unsigned long long>(nearprep::fleet::PlacementCap(f, c, r, n - 1)));
    }
    Held("N", p0);
    Move("add", p0, pa, c, r, pa.PartitionsOf(Name(n))->size());
    Move("remove", p0, pr, c, r, p0.PartitionsOf(Name(n / 2))->size());
    std::printf("  (3 placements in %.1f s)\n", secs);
    std::fflush(stdout);
  }
  return 0;
}
