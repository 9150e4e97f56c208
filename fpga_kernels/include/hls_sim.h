// hls_sim.h: the C-simulation model of a Vitis HLS DATAFLOW region, used
// when the kernel is compiled by a host compiler (not under __SYNTHESIS__).
//
//  - hls::stream<T, DEPTH> is a bounded blocking FIFO of DEPTH elements (the
//    depth the synthesised FIFO gets): write() blocks while it is full,
//    read() blocks while it is empty, exactly as the hardware handshake does.
//  - hls_sim::Region runs each dataflow process on its own thread
//    (NEARPREP_PROCESS in hls_compat.h) and waits for them. The threads come
//    from a process-wide set that is reused from region to region (a kernel
//    call is 15 processes; creating 15 threads per call dominated the
//    fuzzing driver's time): a process never waits for a thread (one is
//    created when none is idle), and a thread idle for kIdleThreadSeconds
//    ends. A region created
//    inside a process of another region (the kernel's DecodeToRgb) is nested:
//    its processes join the accounting of the outermost (root) region, since
//    streams cross the boundary (an inner process may wait for an outer one).
//  - Deadlock detection is exact and independent of timing: the root counts
//    the processes that can run (started and not ended, not blocked on a
//    stream, or blocked but already made ready by the other side's operation,
//    which clears the blocked mark under the stream's lock; a process waiting
//    in Join() for its nested region counts as blocked until its last process
//    ends). The count drops to zero only when every live process waits on a
//    condition no other process can change: a deadlock, found at the moment
//    it happens and never merely because threads are slow or starved of CPU
//    (an earlier wall-clock grace period fired on a loaded machine). The
//    region then records which streams and operations it was, wakes every
//    process with an hls_sim::Deadlock exception and Join() returns the
//    report. This is what an undersized FIFO or a process that reads more
//    tokens than its producer writes does in hardware (the compute unit
//    hangs), found in C simulation.
//  - Sequential (untimed) runs: inside a SequentialScope, a region created
//    by the thread runs each process to its end, in program order, on that
//    thread; streams and streams of blocks grow instead of blocking a writer,
//    and a read of an empty one is reported as a deadlock (the consumer reads
//    more than its producer wrote). The kernel's processes use only blocking
//    reads and writes (a Kahn network) and its regions are feed-forward in
//    program order, so a sequential run computes exactly what a threaded run
//    computes - without the thread switches of every FIFO handoff, which
//    cost about 3.5 ms of CPU per kernel call. What it cannot see is a FIFO
//    too shallow for its traffic (a writer blocked on a full FIFO while its
//    reader waits elsewhere): that needs the threaded run. A sequential run
//    holds a whole image in its FIFOs: past kSequentialMaxTokens tokens in
//    one stream or kSequentialMaxBlocks blocks in a stream of blocks it
//    throws SequentialLimit out of the kernel (run that call threaded). The
//    fuzz driver
//    runs a sample of its inputs threaded and the rest sequentially
//    (docs/fuzzing.md).
//  - An optional backstop (NEARPREP_HLS_SIM_TIMEOUT_MS, off unless set) turns
//    any single blocking operation that lasts longer into the same report; a
//    debugging aid only (wall clock: it fires spuriously under load).
//
// Thread-safety: a stream is used by exactly one producer thread and one
// consumer thread (the HLS rule); its operations are synchronised. A Region
// is used by the thread that created it; its processes run on their own
// threads. Not part of the kernel: never synthesised, skipped by the kernel
// lint (tests/unit/fpga/kernel_checks.py).
#ifndef NEARPREP_FPGA_KERNELS_HLS_SIM_H_
#define NEARPREP_FPGA_KERNELS_HLS_SIM_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace hls_sim {

// Thrown inside a process when its region is declared deadlocked.
struct Deadlock {
  std::string report;
};

// Thrown out of a sequential run grown past these bounds (see above).
struct SequentialLimit {};
constexpr size_t kSequentialMaxTokens = size_t{1} << 20;
constexpr size_t kSequentialMaxBlocks = 120;

class Region;

// The region of the calling thread (set for a process's thread).
Region*& CurrentRegion();

// Wake-ups a thread has put off (see hls::stream): sent before the thread
// blocks, when its process ends, and at the latest by the waiter's own poll.
class Wakeable {
 public:
  virtual void SendDeferredWake() = 0;

 protected:
  ~Wakeable() = default;
};
void DeferWake(Wakeable* w);
void SendDeferredWakes();

class Region;

// One side (reader or writer) of a stream that may block: `counted` is true
// while the process is blocked and its condition is false. Guarded by the
// stream's lock.
struct Waiter {
  Region* root = nullptr;
  bool counted = false;
  // The other side made this side's condition true: it can run again.
  void Ready();
};

// While one lives, regions created by this thread run sequentially (see
// above). Nests.
class SequentialScope {
 public:
  SequentialScope();
  ~SequentialScope();
  SequentialScope(const SequentialScope&) = delete;
  SequentialScope& operator=(const SequentialScope&) = delete;

 private:
  bool previous_;
};

class Region {
 public:
  explicit Region(const char* name);
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Join(); }

  // Starts `process` on its own thread; `name` (the process's call text,
  // "Fn(args)") names its clock in the timed simulation.
  void Spawn(std::function<void()> process) { Spawn("process", std::move(process)); }
  void Spawn(const char* name, std::function<void()> process);

  // Waits for every process. Returns "" or the deadlock report of the root
  // region (also kept in report()).
  std::string Join();

  std::string report();

  // Blocks on `ready` (checked under `lock`; returns at once if true) with
  // deadlock detection; `waiter` is the stream side's mark.
  void Wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
            const std::function<bool()>& ready, const char* stream, const char* op,
            Waiter* waiter);

  // True for a region of a SequentialScope.
  bool sequential() const { return sequential_; }
  // A sequential run's stream operation that could never complete: declares
  // the deadlock and throws it into the process.
  [[noreturn]] void SequentialDeadlock(const char* kind, const char* stream, const char* op);

  // Root accounting (see the top of this file).
  void Unblock() { runnable_.fetch_add(1); }
  void Block(const char* where);

 private:
  void Declare(const std::string& report);
  void ProcessEnded();

  std::string Waits();  // the blocked operations, for the report

  const char* name_;
  Region* root_;  // this, or the root of the enclosing region
  const bool sequential_;
  // Processes started, and those whose thread has let go of this region
  // (after that the thread never touches it again: Join() may return).
  int spawned_ = 0;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  int finished_ = 0;  // guarded by done_mu_
  // This region's processes not yet ended, and whether the creating thread
  // waits for them in Join() (counted as blocked at the root meanwhile).
  std::mutex live_mu_;
  int live_ = 0;
  bool creator_waiting_ = false;
  bool joined_ = false;
  // Root only.
  std::mutex mu_;
  std::string report_;
  std::vector<std::string> waits_;  // guarded by mu_: "'stream' op" per blocked process
  std::atomic<int> runnable_{1};    // the creating thread, then the processes
  std::atomic<bool> aborted_{false};
};

inline void Waiter::Ready() {
  if (counted) {
    counted = false;
    root->Unblock();
  }
}

// Seconds a pooled process thread waits for its next process before it
// ends.
constexpr int kIdleThreadSeconds = 5;
// Threads created for processes so far, and those idle now (tests: reuse
// across regions).
uint64_t ProcessThreadsCreated();
int ProcessThreadsIdle();

// Storage for the blocks of streams of blocks, kept for reuse: the kernel's
// MCU-row buffer is 32 rows of 16 KiB, and writing into a freshly allocated
// one faults in a page per row (92% of the page faults of a fuzzing run,
// most of its system time). Up to 64 MiB is kept; TakeBlock's memory is
// uninitialised, like a hardware buffer bank.
void* TakeBlock(size_t bytes);
void GiveBlock(void* block, size_t bytes);

// Optional backstop timeout for one blocking operation (ms; 0: none).
int64_t TimeoutMs();

// ---------------------------------------------------------------------------
// Timed C simulation (bench/fpga/timed_model.cc; off unless EnableTiming).
// Each dataflow process has its own clock, one per case (optimistic and
// expected IIs, kCases). A pipelined loop of the kernel is bracketed by
// NEARPREP_SIM_LOOP(id) (hls_compat.h; nothing under __SYNTHESIS__) and each
// of its iterations starts with NEARPREP_SIM_ITER(): an iteration advances
// the clock by the loop's II, the end of the loop by its pipeline depth
// (drain); a value written inside the loop is available to its reader
// `depth` cycles after the iteration issued. The II and depth of every loop,
// and the cycles of the sequential events (NEARPREP_SIM_EVENT: DDR burst
// latency, segment parsing, ...), come from one reviewed table,
// fpga_kernels/host/loop_timing.cc, each entry with its reason.
// hls::stream tokens carry the time they become available; a reader stalls
// until then (stall_in); a writer into a FIFO of DEPTH tokens stalls until
// the token DEPTH places earlier was read (back-pressure, stall_out). Blocks
// of a stream_of_blocks carry the time they were released. A stream
// operation outside any loop costs one cycle (an FSM state).
constexpr int kCases = 2;  // 0: optimistic, 1: expected
struct Stamp {
  uint64_t t[kCases] = {0, 0};
};

struct LoopTiming {
  const char* id;             // "Process.loop" or "Process.event"
  uint32_t ii[kCases];        // loop: initiation interval; event: cycles per unit
  uint32_t depth[kCases];     // loop: pipeline depth (fill/drain); event: unused
  const char* reason;         // why these values (the review)
};
// The table (loop_timing.cc). Find aborts on an id it lacks: every loop the
// kernel brackets has a reviewed entry.
const std::vector<LoopTiming>& TimingTable();
std::vector<LoopTiming>& MutableTimingTable();  // loop_timing.cc
const LoopTiming* FindTiming(const char* id);
// Overrides an entry's cycles (e.g. DDR latency from the command line).
void OverrideTiming(const char* id, uint32_t opt, uint32_t exp);

struct ProcClock {
  std::string name;
  uint64_t t[kCases] = {0, 0};
  uint64_t busy[kCases] = {0, 0}, stall_in[kCases] = {0, 0}, stall_out[kCases] = {0, 0};
  const LoopTiming* loop = nullptr;  // innermost bracketed loop running
  bool pending = false;              // its drain not yet paid

  uint32_t Depth(int c) const { return loop != nullptr && pending ? loop->depth[c] : 0; }
  void Advance(int c, uint64_t n) {
    t[c] += n;
    busy[c] += n;
  }
  // A token written now: available to the reader at the returned time.
  // `freed`: when the slot it needs was freed (the read DEPTH tokens back).
  Stamp OnWrite(const Stamp* freed) {
    Stamp s;
    for (int c = 0; c < kCases; ++c) {
      if (loop == nullptr || !pending) Advance(c, 1);
      const uint64_t d = Depth(c);
      if (freed != nullptr && freed->t[c] + 1 > t[c] + d) {
        stall_out[c] += freed->t[c] + 1 - d - t[c];
        t[c] = freed->t[c] + 1 - d;
      }
      s.t[c] = t[c] + d;
    }
    return s;
  }
  // A token available at `avail` read now; returns the read time.
  Stamp OnRead(const Stamp& avail) {
    Stamp s;
    for (int c = 0; c < kCases; ++c) {
      if (loop == nullptr || !pending) Advance(c, 1);
      if (avail.t[c] > t[c]) {
        stall_in[c] += avail.t[c] - t[c];
        t[c] = avail.t[c];
      }
      s.t[c] = t[c];
    }
    return s;
  }
  // Waits for a block released at `at` (input side or output side).
  void WaitFor(const Stamp& at, bool input) {
    for (int c = 0; c < kCases; ++c) {
      if (at.t[c] > t[c]) {
        (input ? stall_in : stall_out)[c] += at.t[c] - t[c];
        t[c] = at.t[c];
      }
    }
  }
  Stamp Now() const {
    Stamp s;
    for (int c = 0; c < kCases; ++c) s.t[c] = t[c] + Depth(c);
    return s;
  }
};

// Timing on or off (a relaxed atomic: set by the caller between kernel
// calls, never while a kernel runs). Off, the streams keep no stamps.
inline std::atomic<bool>& TimingFlag() {
  static std::atomic<bool> on{false};
  return on;
}
inline void EnableTiming(bool on) { TimingFlag().store(on); }
inline bool TimingEnabled() { return TimingFlag().load(std::memory_order_relaxed); }
// The clock of the calling process's thread; nullptr when timing is off or
// the caller is no dataflow process.
ProcClock*& CurrentClock();

// A bracketed loop (NEARPREP_SIM_LOOP): scoped to the loop statement.
class LoopScope {
 public:
  explicit LoopScope(const char* id) : pc_(CurrentClock()) {
    if (pc_ == nullptr) return;
    prev_ = pc_->loop;
    prev_pending_ = pc_->pending;
    pc_->loop = FindTiming(id);
    pc_->pending = true;
  }
  ~LoopScope() {
    if (pc_ == nullptr) return;
    for (int c = 0; c < kCases; ++c) pc_->Advance(c, pc_->Depth(c));  // drain
    pc_->loop = prev_;
    pc_->pending = prev_pending_;
  }
  LoopScope(const LoopScope&) = delete;
  LoopScope& operator=(const LoopScope&) = delete;
  explicit operator bool() const { return false; }  // for the macro's if/else

 private:
  ProcClock* pc_;
  const LoopTiming* prev_ = nullptr;
  bool prev_pending_ = false;
};

// One iteration of the innermost bracketed loop: its II.
inline void Iter() {
  ProcClock* pc = CurrentClock();
  if (pc == nullptr || pc->loop == nullptr) return;
  for (int c = 0; c < kCases; ++c) pc->Advance(c, pc->loop->ii[c]);
}
// `n` units of a sequential event of the table.
void Event(const char* id, uint64_t n);

// Per process (summed over the kernel calls since the last TakeTiming) and
// the kernel's end: the latest end of any process, per call, summed.
struct ProcTiming {
  std::string name;
  uint64_t busy[kCases] = {0, 0}, stall_in[kCases] = {0, 0}, stall_out[kCases] = {0, 0};
  uint64_t end[kCases] = {0, 0};  // summed over calls
};
struct KernelTiming {
  std::vector<ProcTiming> procs;
  uint64_t cycles[kCases] = {0, 0};  // sum over calls of the last process end
  uint64_t calls = 0;
};
// Called by the bench after each kernel call: folds that call's clocks in.
void EndKernelCall();
KernelTiming TakeTiming();
// A process's thread ended: its clock joins the current call's accounting.
void RecordClock(const ProcClock& pc);

}  // namespace hls_sim

namespace hls {

// Speed: a blocked writer is woken once the FIFO is half empty, a blocked
// reader once it is half full, or earlier when the other side blocks or ends
// (a C-simulation economy of thread switches; the blocking semantics, and so
// any deadlock, are those of the FIFO).
template <typename T, int DEPTH = 2>
class stream final : public hls_sim::Wakeable {
  static_assert(DEPTH >= 1, "a FIFO holds at least one element");
  static constexpr size_t kHalf = DEPTH >= 8 ? DEPTH / 2 : 1;

 public:
  stream() : name_("stream") {}
  explicit stream(const char* name) : name_(name) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  void write(const T& v) {
    std::unique_lock<std::mutex> lock(mu_);
    Block(lock, [this] { return q_.size() < static_cast<size_t>(DEPTH); }, "write (full)",
          &writer_waiting_, &writer_);
    q_.push_back(v);
    StampWrite();
    if (q_.size() > max_fill_) max_fill_ = q_.size();
    ++writes_;
    reader_.Ready();
    if (reader_waiting_) Wake(lock, q_.size() >= kHalf);
  }
  T read() {
    std::unique_lock<std::mutex> lock(mu_);
    Block(lock, [this] { return !q_.empty(); }, "read (empty)", &reader_waiting_, &reader_);
    T v = q_.front();
    q_.pop_front();
    StampRead();
    ++reads_;
    writer_.Ready();
    if (writer_waiting_) Wake(lock, q_.size() + kHalf <= static_cast<size_t>(DEPTH));
    return v;
  }
  bool read_nb(T& v) {
    std::unique_lock<std::mutex> lock(mu_);
    if (q_.empty()) return false;
    v = q_.front();
    q_.pop_front();
    StampRead();
    ++reads_;
    writer_.Ready();
    if (writer_waiting_) Wake(lock, true);
    return true;
  }
  bool write_nb(const T& v) {
    std::unique_lock<std::mutex> lock(mu_);
    if (q_.size() >= static_cast<size_t>(DEPTH)) return false;
    q_.push_back(v);
    StampWrite();
    ++writes_;
    reader_.Ready();
    if (reader_waiting_) Wake(lock, true);
    return true;
  }
  void SendDeferredWake() override {
    std::lock_guard<std::mutex> lock(mu_);
    deferred_ = false;
    cv_.notify_all();
  }
  bool empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return q_.empty();
  }
  bool full() const {
    std::lock_guard<std::mutex> lock(mu_);
    return q_.size() >= static_cast<size_t>(DEPTH);
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return q_.size();
  }
  // C-simulation statistics.
  uint64_t writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  size_t max_fill() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_fill_;
  }
  static constexpr int depth() { return DEPTH; }
  stream& operator<<(const T& v) {
    write(v);
    return *this;
  }
  stream& operator>>(T& v) {
    v = read();
    return *this;
  }

 private:
  // Timed simulation (hls_sim::ProcClock): every token carries the time it
  // is available; `freed_` holds the read times of the tokens read and not
  // yet matched by a later write (the write DEPTH tokens on needs the slot
  // the read freed). Nothing when timing is off (streams live for one kernel
  // call; timing is switched between calls).
  void StampWrite() {
    if (!hls_sim::TimingEnabled()) return;
    hls_sim::ProcClock* pc = hls_sim::CurrentClock();
    hls_sim::Stamp freed;
    bool have_freed = false;
    if (stamped_writes_ >= static_cast<uint64_t>(DEPTH) && !freed_.empty()) {
      freed = freed_.front();
      freed_.pop_front();
      have_freed = true;
    }
    ++stamped_writes_;
    stamps_.push_back(pc != nullptr ? pc->OnWrite(have_freed ? &freed : nullptr)
                                    : hls_sim::Stamp());
  }
  void StampRead() {
    if (!hls_sim::TimingEnabled() || stamps_.empty()) return;
    hls_sim::ProcClock* pc = hls_sim::CurrentClock();
    const hls_sim::Stamp avail = stamps_.front();
    stamps_.pop_front();
    freed_.push_back(pc != nullptr ? pc->OnRead(avail) : hls_sim::Stamp());
  }
  void Wake(std::unique_lock<std::mutex>& lock, bool now) {
    if (now) {
      cv_.notify_all();
    } else if (!deferred_) {
      deferred_ = true;
      lock.unlock();
      hls_sim::DeferWake(this);
    }
  }
  template <typename Ready>
  void Block(std::unique_lock<std::mutex>& lock, Ready ready, const char* op, bool* waiting,
             hls_sim::Waiter* waiter) {
    if (ready()) return;
    hls_sim::Region* r = hls_sim::CurrentRegion();
    if (r != nullptr && r->sequential()) {
      // No other process runs meanwhile: a full FIFO grows (the reader runs
      // later), an empty one stays empty.
      if (waiter != &writer_) r->SequentialDeadlock("stream", name_, op);
      if (q_.size() >= hls_sim::kSequentialMaxTokens) throw hls_sim::SequentialLimit{};
      return;
    }
    if (r != nullptr) {
      lock.unlock();
      hls_sim::SendDeferredWakes();  // this thread is about to block
      lock.lock();
      if (ready()) return;
      *waiting = true;
      try {
        r->Wait(lock, cv_, ready, name_, op, waiter);
      } catch (...) {
        *waiting = false;
        throw;
      }
      *waiting = false;
      return;
    }
    // Outside a region (a single-threaded caller): blocking can never end.
    throw hls_sim::Deadlock{std::string("stream '") + name_ + "': " + op +
                            " outside a dataflow region would block forever"};
  }

  const char* name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
  std::deque<hls_sim::Stamp> stamps_, freed_;
  uint64_t stamped_writes_ = 0;
  size_t max_fill_ = 0;
  uint64_t writes_ = 0, reads_ = 0;
  bool reader_waiting_ = false, writer_waiting_ = false;  // for the wake economy
  hls_sim::Waiter reader_, writer_;                       // for deadlock detection
  bool deferred_ = false;  // in some thread's deferred-wake list
};

// hls::stream_of_blocks<T, DEPTH> (Vitis' hls_streamofblocks.h): DEPTH
// blocks of array type T passed from one producer process to one consumer
// process. The producer acquires an empty block with hls::write_lock, fills
// it and releases it (the lock's destructor); the consumer acquires the
// oldest full block with hls::read_lock and releases it when done. An
// acquire blocks while no block is available, with the deadlock detection
// of hls::stream. Blocks are heap-allocated here (large on-chip buffers would
// not fit a thread's stack); in hardware they are the buffer's DEPTH banks.
template <typename T, int DEPTH = 2>
class stream_of_blocks final : public hls_sim::Wakeable {
  static_assert(DEPTH >= 2, "a stream of blocks has at least two blocks");
  static_assert(std::is_trivial<T>::value && alignof(T) <= alignof(std::max_align_t),
                "blocks are raw reused storage");

 public:
  stream_of_blocks() : stream_of_blocks("stream_of_blocks") {}
  explicit stream_of_blocks(const char* name) : name_(name) {
    for (int i = 0; i < DEPTH; ++i) {
      blocks_.push_back(static_cast<T*>(hls_sim::TakeBlock(sizeof(T))));
      free_.push_back(i);
    }
    stamp_.resize(DEPTH);
  }
  ~stream_of_blocks() {
    for (T* b : blocks_) hls_sim::GiveBlock(b, sizeof(T));
  }
  stream_of_blocks(const stream_of_blocks&) = delete;
  stream_of_blocks& operator=(const stream_of_blocks&) = delete;

  bool empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return full_.empty();
  }
  bool full() const {
    std::lock_guard<std::mutex> lock(mu_);
    return free_.empty();
  }
  void SendDeferredWake() override {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  // C-simulation statistics: blocks released by the producer.
  uint64_t blocks_written() const {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }

  // For hls::write_lock / hls::read_lock.
  int Acquire(bool for_write) {
    std::unique_lock<std::mutex> lock(mu_);
    std::deque<int>& q = for_write ? free_ : full_;
    hls_sim::Region* r = hls_sim::CurrentRegion();
    if (q.empty() && r != nullptr && r->sequential()) {
      // A sequential run: one more block for the writer (the reader runs
      // later); a reader without a full block waits forever.
      if (!for_write) r->SequentialDeadlock("stream_of_blocks", name_, "read_lock (no full block)");
      if (blocks_.size() >= hls_sim::kSequentialMaxBlocks) throw hls_sim::SequentialLimit{};
      blocks_.push_back(static_cast<T*>(hls_sim::TakeBlock(sizeof(T))));
      stamp_.emplace_back();
      free_.push_back(static_cast<int>(blocks_.size()) - 1);
    }
    if (q.empty()) {
      const char* op = for_write ? "write_lock (no free block)" : "read_lock (no full block)";
      if (r == nullptr) {
        throw hls_sim::Deadlock{std::string("stream_of_blocks '") + name_ + "': " + op +
                                " outside a dataflow region would block forever"};
      }
      lock.unlock();
      hls_sim::SendDeferredWakes();
      lock.lock();
      r->Wait(lock, cv_, [&q] { return !q.empty(); }, name_, op,
              for_write ? &writer_ : &reader_);
    }
    const int b = q.front();
    q.pop_front();
    // Timed simulation: a block is usable once the other side released it.
    if (hls_sim::ProcClock* pc = hls_sim::CurrentClock()) pc->WaitFor(stamp_[static_cast<size_t>(b)], !for_write);
    return b;
  }
  void Release(int b, bool from_write) {
    std::lock_guard<std::mutex> lock(mu_);
    hls_sim::ProcClock* pc = hls_sim::CurrentClock();
    stamp_[static_cast<size_t>(b)] = pc != nullptr ? pc->Now() : hls_sim::Stamp();
    (from_write ? full_ : free_).push_back(b);
    if (from_write) ++written_;
    (from_write ? reader_ : writer_).Ready();
    cv_.notify_all();
  }
  T& block(int b) { return *blocks_[static_cast<size_t>(b)]; }

 private:
  const char* name_;
  // DEPTH blocks; more only in a sequential run (a single thread).
  std::vector<T*> blocks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> free_, full_;  // block indices: empty ones, filled ones in order
  // Timed simulation: when each block was released (one per block, so
  // also for a sequential run's extra blocks).
  std::vector<hls_sim::Stamp> stamp_;
  hls_sim::Waiter reader_, writer_;
  uint64_t written_ = 0;
};

// hls::write_lock / hls::read_lock: acquire a block in the constructor,
// release it in the destructor.
template <typename T, bool kWrite>
class block_lock {
 public:
  explicit block_lock(stream_of_blocks<T>& s) : s_(s), b_(s.Acquire(kWrite)) {}
  block_lock(const block_lock&) = delete;
  block_lock& operator=(const block_lock&) = delete;
  ~block_lock() { s_.Release(b_, kWrite); }
  operator T&() { return s_.block(b_); }
  auto& operator[](size_t i) { return s_.block(b_)[i]; }

 private:
  stream_of_blocks<T>& s_;
  int b_;
};
template <typename T>
using write_lock = block_lock<T, true>;
template <typename T>
using read_lock = block_lock<T, false>;

}  // namespace hls

#endif  // NEARPREP_FPGA_KERNELS_HLS_SIM_H_
