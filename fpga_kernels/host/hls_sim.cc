// C-simulation dataflow regions; see hls_sim.h.
#include "hls_sim.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// ---- Timed simulation ----
namespace {
struct TimingState {
  std::mutex mu;
  KernelTiming total;
  uint64_t call_end[kCases] = {0, 0};  // latest process end in the current call
};
TimingState& Timing() {
  static TimingState* s = new TimingState();
  return *s;
}
}  // namespace


ProcClock*& CurrentClock() {
  thread_local ProcClock* clock = nullptr;
  return clock;
}

const LoopTiming* FindTiming(const char* id) {
  for (const LoopTiming& t : TimingTable()) {
    if (std::strcmp(t.id, id) == 0) return &t;
  }
  std::fprintf(stderr,
               "hls_sim: no timing entry for loop/event '%s' in fpga_kernels/host/loop_timing.cc\n",
               id);
  std::abort();
}

void OverrideTiming(const char* id, uint32_t opt, uint32_t exp) {
  // Before a run only (the table is read without a lock while processes run).
  for (LoopTiming& t : MutableTimingTable()) {
    if (std::strcmp(t.id, id) == 0) {
      t.ii[0] = opt;
      t.ii[1] = exp;
      return;
    }
  }
  std::fprintf(stderr, "hls_sim: OverrideTiming: no entry '%s'\n", id);
  std::abort();
}

const std::vector<LoopTiming>& TimingTable() { return MutableTimingTable(); }

void Event(const char* id, uint64_t n) {
  ProcClock* pc = CurrentClock();
  if (pc == nullptr || n == 0) return;
  const LoopTiming* t = FindTiming(id);
  for (int c = 0; c < kCases; ++c) pc->Advance(c, n * t->ii[c]);
}

void RecordClock(const ProcClock& pc) {
  TimingState& st = Timing();
  std::lock_guard<std::mutex> g(st.mu);
  ProcTiming* p = nullptr;
  for (ProcTiming& e : st.total.procs) {
    if (e.name == pc.name) p = &e;
  }
  if (p == nullptr) {
    st.total.procs.emplace_back();
    p = &st.total.procs.back();
    p->name = pc.name;
  }
  for (int c = 0; c < kCases; ++c) {
    p->busy[c] += pc.busy[c];
    p->stall_in[c] += pc.stall_in[c];
    p->stall_out[c] += pc.stall_out[c];
    p->end[c] += pc.t[c];
    if (pc.t[c] > st.call_end[c]) st.call_end[c] = pc.t[c];
  }
}

void EndKernelCall() {
  TimingState& st = Timing();
  std::lock_guard<std::mutex> g(st.mu);
  for (int c = 0; c < kCases; ++c) {
    st.total.cycles[c] += st.call_end[c];
    st.call_end[c] = 0;
  }
  ++st.total.calls;
}

KernelTiming TakeTiming() {
  TimingState& st = Timing();
  std::lock_guard<std::mutex> g(st.mu);
  KernelTiming out = st.total;
  st.total = KernelTiming();
  return out;
}

namespace {
constexpr size_t kMaxCachedBlockBytes = size_t{64} << 20;
std::mutex& BlockMutex() {
  static std::mutex mu;
  return mu;
}
// Free blocks by size, and their total (guarded by BlockMutex()).
std::vector<std::pair<size_t, void*>>& FreeBlocks() {
  static auto* blocks = new std::vector<std::pair<size_t, void*>>;
  return *blocks;
}
size_t g_cached_block_bytes = 0;
}  // namespace

void* TakeBlock(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(BlockMutex());
    std::vector<std::pair<size_t, void*>>& free = FreeBlocks();
    for (size_t i = free.size(); i-- > 0;) {
      if (free[i].first == bytes) {
        void* b = free[i].second;
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
        g_cached_block_bytes -= bytes;
        return b;
      }
    }
  }
  return ::operator new(bytes);
}

void GiveBlock(void* block, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(BlockMutex());
    if (g_cached_block_bytes + bytes <= kMaxCachedBlockBytes) {
      FreeBlocks().emplace_back(bytes, block);
      g_cached_block_bytes += bytes;
      return;
    }
  }
  ::operator delete(block);
}

int64_t TimeoutMs() {
  static const int64_t ms = [] {
    const char* e = std::getenv("NEARPREP_HLS_SIM_TIMEOUT_MS");
    const long long v = e != nullptr ? std::atoll(e) : 0;
    return v > 0 ? static_cast<int64_t>(v) : int64_t{0};
  }();
  return ms;
}

namespace {

// The threads that run processes, reused across regions. Run() hands a
// process to an idle thread or, when none is idle, to a new one: a process
// never waits for a thread (the processes of a region wait for each other,
// so a bounded pool could deadlock). Never destroyed (threads may still
// wait in it at exit).
class ProcessThreads {
 public:
  static ProcessThreads& Get() {
    static ProcessThreads* const threads = new ProcessThreads;
    return *threads;
  }

  void Run(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_ > 0) {  // an idle thread takes it (idle_: waiting - queued)
        --idle_;
        tasks_.push_back(std::move(task));
        cv_.notify_one();
        return;
      }
      ++created_;
    }
    std::thread([this, task = std::move(task)]() mutable { Loop(std::move(task)); }).detach();
  }

  uint64_t created() {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }
  int idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return idle_;
  }

 private:
  void Loop(std::function<void()> task) {
    for (;;) {
      task();
      task = nullptr;
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      if (!cv_.wait_for(lock, std::chrono::seconds(kIdleThreadSeconds),
                        [this] { return !tasks_.empty(); })) {
        --idle_;  // nothing queued: no Run() counted on this thread
        return;
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  int idle_ = 0;                             // guarded by mu_
  uint64_t created_ = 0;                     // guarded by mu_
};

}  // namespace

namespace {
bool& SequentialFlag() {
  thread_local bool sequential = false;
  return sequential;
}
}  // namespace

SequentialScope::SequentialScope() : previous_(SequentialFlag()) { SequentialFlag() = true; }
SequentialScope::~SequentialScope() { SequentialFlag() = previous_; }

uint64_t ProcessThreadsCreated() { return ProcessThreads::Get().created(); }
int ProcessThreadsIdle() { return ProcessThreads::Get().idle(); }

Region::Region(const char* name) : name_(name), sequential_(SequentialFlag()) {
  Region* enclosing = CurrentRegion();
  // Nested: the creating thread is a process of the enclosing region, already
  // counted as runnable at the root.
  root_ = enclosing != nullptr ? enclosing->root_ : this;
}

void Region::Spawn(const char* name, std::function<void()> process) {
  if (sequential_) {
    // Runs the process now, to its end, on this thread (after a deadlock,
    // like the aborted processes of a threaded run, not at all).
    ++spawned_;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      ++finished_;
    }
    if (root_->aborted_.load()) return;
    struct Current {  // SequentialLimit passes through
      Region* const caller = CurrentRegion();
      explicit Current(Region* r) { CurrentRegion() = r; }
      ~Current() { CurrentRegion() = caller; }
    } current(this);
    try {
      process();
    } catch (const Deadlock& d) {
      Declare(d.report);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> g(live_mu_);
    ++live_;
  }
  root_->Unblock();  // the new process can run
  // The process's name: the call text up to its '(' ("Fn(args)" -> "Fn").
  std::string pname(name);
  const size_t paren = pname.find('(');
  if (paren != std::string::npos) pname.resize(paren);
  while (!pname.empty() && (pname.back() == ' ' || pname.back() == '\n')) pname.pop_back();
  while (!pname.empty() && (pname.front() == ' ' || pname.front() == '\n')) pname.erase(0, 1);
  ++spawned_;
  ProcessThreads::Get().Run([this, process = std::move(process), pname] {
    CurrentRegion() = this;
    ProcClock clock;
    clock.name = pname;
    if (TimingEnabled()) CurrentClock() = &clock;
    try {
      process();
    } catch (const Deadlock& d) {
      Declare(d.report);
    }
    if (CurrentClock() != nullptr) {
      RecordClock(clock);
      CurrentClock() = nullptr;
    }
    SendDeferredWakes();
    ProcessEnded();
    CurrentRegion() = nullptr;
    // The last use of this region by this thread: notified under the lock,
    // so Join() cannot return (and the region go away) before it is done.
    std::lock_guard<std::mutex> lock(done_mu_);
    ++finished_;
    done_cv_.notify_all();
  });
}

void Region::ProcessEnded() {
  {
    std::lock_guard<std::mutex> g(live_mu_);
    if (--live_ == 0 && creator_waiting_) {
      creator_waiting_ = false;
      root_->Unblock();  // Join() can return: before this process leaves the count
    }
  }
  root_->Block(name_);
}

std::string Region::Join() {
  if (!joined_) {
    {
      // Under live_mu_: the last process's Unblock() for the creator must
      // come after this Block() (else the creator stays counted as blocked
      // while it runs, and a later count of zero is no deadlock). Block()
      // may declare a deadlock: the processes all wait on streams only the
      // creator could feed. (Lock order: live_mu_, then the root's mu_.)
      std::lock_guard<std::mutex> g(live_mu_);
      if (live_ > 0) {
        creator_waiting_ = true;
        root_->Block(name_);
      }
    }
    {
      std::unique_lock<std::mutex> lock(done_mu_);
      done_cv_.wait(lock, [this] { return finished_ == spawned_; });
    }
    joined_ = true;
  }
  return report();
}

std::string Region::report() {
  std::lock_guard<std::mutex> lock(root_->mu_);
  return root_->report_;
}

std::string Region::Waits() {
  std::lock_guard<std::mutex> g(mu_);
  std::string out;
  for (const std::string& w : waits_) out += (out.empty() ? "" : "; ") + w;
  return out;
}

void Region::Block(const char* where) {
  // Root only. Zero runnable: every live process waits on a condition that
  // only another (equally blocked) process could make true.
  if (runnable_.fetch_sub(1) == 1 && !aborted_.load()) {
    size_t n;
    {
      std::lock_guard<std::mutex> g(mu_);
      n = waits_.size();
    }
    Declare(std::string("DEADLOCK in dataflow region '") + where + "': all " +
            std::to_string(n) + " live processes blocked: " + Waits());
  }
}

void Region::SequentialDeadlock(const char* kind, const char* stream, const char* op) {
  const std::string report = std::string("DEADLOCK in dataflow region '") + root_->name_ +
                             "' (sequential run): " + kind + " '" + stream + "' " + op +
                             ": its consumer reads more than its producer wrote";
  Declare(report);
  throw Deadlock{report};
}

void Region::Declare(const std::string& report) {
  Region* root = root_;
  {
    std::lock_guard<std::mutex> lock(root->mu_);
    if (root->report_.empty()) root->report_ = report;
  }
  root->aborted_.store(true);
}

void Region::Wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                  const std::function<bool()>& ready, const char* stream, const char* op,
                  Waiter* waiter) {
  // The condition may have come true while the caller had released `lock`
  // (hls::stream_of_blocks::Acquire sends its deferred wakes unlocked): the
  // other side's Waiter::Ready() then found nothing to mark, so counting this
  // process as blocked now would lower the count below the truth.
  if (ready()) return;
  using Clock = std::chrono::steady_clock;
  Region* root = root_;
  const Clock::time_point start = Clock::now();
  const std::string what = std::string("'") + stream + "' " + op;
  {
    std::lock_guard<std::mutex> g(root->mu_);
    root->waits_.push_back(what);
  }
  struct Unregister {
    Region* root;
    const std::string& what;
    ~Unregister() {
      std::lock_guard<std::mutex> g(root->mu_);
      for (size_t i = 0; i < root->waits_.size(); ++i) {
        if (root->waits_[i] == what) {
          root->waits_.erase(root->waits_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
  } unregister{root, what};
  // Under the stream's lock, with the condition false: the other side's
  // next operation on this stream marks this process ready (Waiter::Ready).
  waiter->root = root;
  waiter->counted = true;
  root->Block(name_);
  while (!ready()) {
    if (root->aborted_.load()) {
      waiter->Ready();  // keep the count balanced; the process ends
      throw Deadlock{std::string()};
    }
    // The poll bounds the latency of a deferred wake (hls::stream); it plays
    // no part in deadlock detection.
    cv.wait_for(lock, std::chrono::milliseconds(20));
    if (TimeoutMs() > 0 && !ready() &&
        Clock::now() - start > std::chrono::milliseconds(TimeoutMs())) {
      Declare(std::string("DEADLOCK (timeout) in dataflow region '") + name_ + "': stream '" +
              stream + "' " + op + " blocked for " + std::to_string(TimeoutMs()) +
              " ms (NEARPREP_HLS_SIM_TIMEOUT_MS)");
    }
  }
  waiter->Ready();  // normally done by the other side already
}

}  // namespace hls_sim
