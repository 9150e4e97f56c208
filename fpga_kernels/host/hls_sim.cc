// C-simulation dataflow regions; see hls_sim.h.
#include "hls_sim.h"

#include <cstdlib>
#include <string>

namespace hls_sim {

Region*& CurrentRegion() {
  thread_local Region* region = nullptr;
  return region;
}

namespace {
std::vector<Wakeable*>& Deferred() {
  thread_local std::vector<Wakeable*> deferred;
  return deferred;
}
}  // namespace

void DeferWake(Wakeable* w) { Deferred().push_back(w); }

void SendDeferredWakes() {
  std::vector<Wakeable*>& d = Deferred();
  for (Wakeable* w : d) w->SendDeferredWake();
  d.clear();
}

namespace {
std::mutex& WorkMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::pair<std::string, Work>>& WorkTable() {
  static std::vector<std::pair<std::string, Work>> table;
  return table;
}
}  // namespace

void AddWork(const char* stage, uint64_t iterations, uint64_t loop_entries) {
  std::lock_guard<std::mutex> lock(WorkMutex());
  for (auto& e : WorkTable()) {
    if (e.first == stage) {
      ++e.second.images;
      e.second.iterations += iterations;
      e.second.loop_entries += loop_entries;
      return;
    }
  }
  Work w;
  w.images = 1;
  w.iterations = iterations;
  w.loop_entries = loop_entries;
  WorkTable().emplace_back(stage, w);
}

std::vector<std::pair<std::string, Work>> TakeWork() {
  std::lock_guard<std::mutex> lock(WorkMutex());
  std::vector<std::pair<std::string, Work>> out;
  out.swap(WorkTable());
  return out;
}

int64_t TimeoutMs() {
  static const int64_t ms = [] {
    const char* e = std::getenv("NEARPREP_HLS_SIM_TIMEOUT_MS");
    const long long v = e != nullptr ? std::atoll(e) : 0;
    return v > 0 ? static_cast<int64_t>(v) : int64_t{120000};
  }();
  return ms;
}

void Region::Spawn(std::function<void()> process) {
  live_.fetch_add(1);
  threads_.emplace_back([this, process = std::move(process)] {
    CurrentRegion() = this;
    try {
      process();
    } catch (const Deadlock& d) {
      Declare(d.report);
    }
    SendDeferredWakes();
    live_.fetch_sub(1);
    CurrentRegion() = nullptr;
  });
}

std::string Region::Join() {
  if (!joined_) {
    for (std::thread& t : threads_) t.join();
    joined_ = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

std::string Region::Waits() {
  std::lock_guard<std::mutex> g(mu_);
  std::string out;
  for (const std::string& w : waits_) out += (out.empty() ? "" : "; ") + w;
  return out;
}

void Region::Declare(const std::string& report) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (report_.empty()) report_ = report;
  }
  aborted_.store(true);
}

void Region::Wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                  const std::function<bool()>& ready, const char* stream, const char* op) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point all_blocked_since = Clock::time_point::min();
  const std::string what = std::string("'") + stream + "' " + op;
  {
    std::lock_guard<std::mutex> g(mu_);
    waits_.push_back(what);
  }
  struct Unregister {
    Region* r;
    const std::string& what;
    ~Unregister() {
      std::lock_guard<std::mutex> g(r->mu_);
      for (size_t i = 0; i < r->waits_.size(); ++i) {
        if (r->waits_[i] == what) {
          r->waits_.erase(r->waits_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
  } unregister{this, what};
  blocked_.fetch_add(1);
  while (!ready()) {
    if (aborted_.load()) {
      blocked_.fetch_sub(1);
      throw Deadlock{std::string()};
    }
    cv.wait_for(lock, std::chrono::milliseconds(20));
    if (ready()) break;
    const Clock::time_point now = Clock::now();
    if (blocked_.load() == live_.load()) {
      if (all_blocked_since == Clock::time_point::min()) all_blocked_since = now;
      if (now - all_blocked_since > std::chrono::milliseconds(kStallGraceMs)) {
        Declare(std::string("DEADLOCK in dataflow region '") + name_ + "': all " +
                std::to_string(live_.load()) + " live processes blocked: " + Waits());
      }
    } else {
      all_blocked_since = Clock::time_point::min();
    }
    if (now - start > std::chrono::milliseconds(TimeoutMs())) {
      Declare(std::string("DEADLOCK (timeout) in dataflow region '") + name_ + "': stream '" +
              stream + "' " + op + " blocked for " + std::to_string(TimeoutMs()) + " ms");
    }
  }
  blocked_.fetch_sub(1);
}

}  // namespace hls_sim
