// nearprep_bench_fleet_plan: the cost of fleet::GlobalPlan::At() (one call
// per position of every batch a fleet trainer reads), in ns per call.
//
//   nearprep_bench_fleet_plan [--partitions C] [--samples N] [--repeat R]
//                             [--plan-version V] [--slice-partitions K]
//                             [--slice-samples L] [--trainer-slices T]
//                             [--local-batch S]
//
// (--plan-version 2 or 3: nearprep-fleet-plan/2 or /3 with K, default 4, and
// L, default 128.)
//
// A plan over C partitions of about N samples each (sizes vary by +-10%),
// G = 1024. Walks, each timed R times (the median is printed):
//   seq      one thread, positions 0, 1, 2, ... (a trainer reading batches)
//   seq x8   8 threads sharing the plan, each walking its own eighth in order
//            (the C++ FleetClient's prefetch threads)
//   jump x8  8 threads, a stride of about N*C/7 between calls: nearly every
//            call misses the plan's round cache (the worst case)
// With --trainer-slices T, instead: a trainer's real access pattern. G =
// T * S (S = --local-batch, default 128); for each of 5 trainers k spread
// over [0, T), a fresh plan (each trainer process has its own) and At() on
// trainer k's slice of every global batch of the epoch, in position order;
// prints the median (and min, max) over those trainers of ns per position,
// and per trainer the windows and block permutations its plan made (step 1
// is computed per window: W draws per window, ceil(n_p / B) per partition).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "server/fleet/global_plan.h"

namespace {

using nearprep::fleet::GlobalPlan;

double Walk(const GlobalPlan& plan, int threads, uint64_t stride, uint64_t calls) {
  const uint64_t n = plan.size();
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (int t = 0; t < threads; ++t) {
    th.emplace_back([&, t] {
      uint64_t acc = 0;
      const uint64_t lo = calls * static_cast<uint64_t>(t) / static_cast<uint64_t>(threads);
      const uint64_t hi = calls * static_cast<uint64_t>(t + 1) / static_cast<uint64_t>(threads);
      for (uint64_t k = lo; k < hi; ++k) acc += plan.At((k * stride) % n).sample_id;
      sink[static_cast<size_t>(t)] = acc;
    });
  }
  for (std::thread& x : th) x.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (std::accumulate(sink.begin(), sink.end(), uint64_t{0}) == 1) std::puts("");
  return s * 1e9 / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  uint64_t c = 64, per = 20000;
  int repeat = 5;
  uint32_t version = 1;
  uint64_t k_parts = 4, l_slice = 128;
  uint64_t trainer_slices = 0, local_batch = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--partitions")) c = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--samples")) per = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--plan-version")) version = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--slice-partitions")) k_parts = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--slice-samples")) l_slice = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--trainer-slices")) trainer_slices = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--local-batch")) local_batch = std::strtoull(argv[i + 1], nullptr, 10);
    else { std::fprintf(stderr, "unknown flag %s\n", argv[i]); return 2; }
  }
  std::vector<uint64_t> starts = {0};
  for (uint64_t p = 0; p < c; ++p) starts.push_back(starts.back() + per * 9 / 10 + (p * 7919) % (per / 5 + 1));
  nearprep::fleet::PlanParams params;
  params.seed = 1;
  params.global_batch = trainer_slices > 0 ? trainer_slices * local_batch : 1024;
  params.version = version;
  params.slice_partitions = k_parts;
  params.slice_samples = l_slice;
  auto plan = GlobalPlan::Create(starts, params);
  if (!plan.ok()) { std::fprintf(stderr, "%s\n", plan.status().ToString().c_str()); return 1; }
  const uint64_t n = (*plan)->size();
  uint64_t jump = n / 7 + 1;
  while (std::gcd(jump, n) != 1) ++jump;
  std::printf("plan: %s, %llu partitions, %llu positions\n",
              nearprep::fleet::PlanAlgorithm(params), static_cast<unsigned long long>(c),
              static_cast<unsigned long long>(n));
  if (trainer_slices > 0) {
    const uint64_t t = trainer_slices;
    std::vector<double> ns;
    for (uint64_t i = 0; i < 5; ++i) {
      const uint32_t k = static_cast<uint32_t>((t - 1) * i / 4);
      const auto t0 = std::chrono::steady_clock::now();
      auto fresh = GlobalPlan::Create(starts, params);
      const auto t1 = std::chrono::steady_clock::now();
      uint64_t acc = 0, calls = 0;
      for (uint64_t g = 0; g < (*fresh)->num_batches(); ++g) {
        const auto [a, b] = (*fresh)->Slice(g, k, static_cast<uint32_t>(t));
        for (uint64_t x = a; x < b; ++x) acc += (*fresh)->At(x).sample_id;
        calls += b - a;
      }
      const auto t2 = std::chrono::steady_clock::now();
      if (acc == 1) std::puts("");
      const double per = 1e9 / static_cast<double>(std::max<uint64_t>(calls, 1));
      ns.push_back(std::chrono::duration<double>(t2 - t0).count() * per);
      const GlobalPlan::CacheCounters cc = (*fresh)->cache_counters();
      std::printf("trainer %u of %llu: %llu positions, %.1f ns/position (Create %.1f, At %.1f); "
                  "%llu windows, %llu block permutations made\n",
                  k, static_cast<unsigned long long>(t), static_cast<unsigned long long>(calls),
                  ns.back(), std::chrono::duration<double>(t1 - t0).count() * per,
                  std::chrono::duration<double>(t2 - t1).count() * per,
                  static_cast<unsigned long long>(cc.windows_made),
                  static_cast<unsigned long long>(cc.blocks_made));
    }
    std::sort(ns.begin(), ns.end());
    std::printf("trainer slices (G = %llu): %.1f ns/position incl. Create (median of %zu "
                "trainers, min %.1f, max %.1f)\n",
                static_cast<unsigned long long>(params.global_batch), ns[ns.size() / 2],
                ns.size(), ns.front(), ns.back());
    return 0;
  }
  struct Case { const char* name; int threads; uint64_t stride; uint64_t calls; };
  const Case cases[] = {{"seq", 1, 1, std::min<uint64_t>(n, 1000000)},
                        {"seq x8", 8, 1, std::min<uint64_t>(n, 1000000)},
                        {"jump x8", 8, jump, std::min<uint64_t>(n, 200000)}};
  for (const Case& k : cases) {
    std::vector<double> ns;
    for (int r = 0; r < repeat; ++r) {
      // A fresh plan each time: the first walk pays for filling the caches.
      auto fresh = GlobalPlan::Create(starts, params);
      ns.push_back(Walk(**fresh, k.threads, k.stride, k.calls));
    }
    std::sort(ns.begin(), ns.end());
    std::printf("%-8s %8.1f ns/At (median of %d, min %.1f, max %.1f)\n", k.name,
                ns[ns.size() / 2], repeat, ns.front(), ns.back());
  }
  return 0;
}
