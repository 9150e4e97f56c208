// hls_sim.h: the C-simulation model of a Vitis HLS DATAFLOW region, used
// when the kernel is compiled by a host compiler (not under __SYNTHESIS__).
//
//  - hls::stream<T, DEPTH> is a bounded blocking FIFO of DEPTH elements (the
//    depth the synthesised FIFO gets): write() blocks while it is full,
//    read() blocks while it is empty, exactly as the hardware handshake does.
//  - hls_sim::Region runs each dataflow process on its own thread
//    (NEARPREP_PROCESS in hls_compat.h) and joins them. A process that blocks
//    while every other live process of the region is blocked too, with no
//    stream operation completing for kStallGraceMs, is a deadlock: the region
//    records which stream and operation it was, wakes every process with an
//    hls_sim::Deadlock exception and Join() returns the report. This is what
//    an undersized FIFO or a process that reads more tokens than its producer
//    writes does in hardware (the compute unit hangs), found in C simulation.
//  - A backstop timeout (NEARPREP_HLS_SIM_TIMEOUT_MS, default 120000) turns
//    any single blocking operation that never completes into the same report.
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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hls_sim {

// Thrown inside a process when its region is declared deadlocked.
struct Deadlock {
  std::string report;
};

class Region;

// The region of the calling thread (set for a process's thread).
Region*& CurrentRegion();

class Region {
 public:
  explicit Region(const char* name) : name_(name) {}
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Join(); }

  // Starts `process` on its own thread.
  void Spawn(std::function<void()> process);

  // Waits for every process. Returns "" or the deadlock report (also kept in
  // report()).
  std::string Join();

  const std::string& report() const { return report_; }

  // Stream side. Called with no stream lock held.
  void OnProgress() { progress_.fetch_add(1, std::memory_order_relaxed); }
  // Blocks on `ready` (checked under `lock`) with deadlock detection.
  void Wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
            const std::function<bool()>& ready, const char* stream, const char* op);

 private:
  static constexpr int kStallGraceMs = 1000;
  void Declare(const std::string& report);

  const char* name_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::string report_;
  std::atomic<int> live_{0};
  std::atomic<int> blocked_{0};
  std::atomic<uint64_t> progress_{0};
  std::atomic<bool> aborted_{false};
  bool joined_ = false;
};

// Backstop timeout for one blocking operation (ms).
int64_t TimeoutMs();

}  // namespace hls_sim

namespace hls {

template <typename T, int DEPTH = 2>
class stream {
  static_assert(DEPTH >= 1, "a FIFO holds at least one element");

 public:
  stream() : name_("stream") {}
  explicit stream(const char* name) : name_(name) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  void write(const T& v) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      Block(lock, [this] { return q_.size() < static_cast<size_t>(DEPTH); }, "write (full)");
      q_.push_back(v);
      if (q_.size() > max_fill_) max_fill_ = q_.size();
      ++writes_;
    }
    cv_.notify_all();
    Progress();
  }
  T read() {
    T v;
    {
      std::unique_lock<std::mutex> lock(mu_);
      Block(lock, [this] { return !q_.empty(); }, "read (empty)");
      v = q_.front();
      q_.pop_front();
      ++reads_;
    }
    cv_.notify_all();
    Progress();
    return v;
  }
  bool read_nb(T& v) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (q_.empty()) return false;
      v = q_.front();
      q_.pop_front();
      ++reads_;
    }
    cv_.notify_all();
    Progress();
    return true;
  }
  bool write_nb(const T& v) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (q_.size() >= static_cast<size_t>(DEPTH)) return false;
      q_.push_back(v);
      ++writes_;
    }
    cv_.notify_all();
    Progress();
    return true;
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
  template <typename Ready>
  void Block(std::unique_lock<std::mutex>& lock, Ready ready, const char* op) {
    if (ready()) return;
    hls_sim::Region* r = hls_sim::CurrentRegion();
    if (r != nullptr) {
      r->Wait(lock, cv_, ready, name_, op);
      return;
    }
    // Outside a region (a single-threaded caller): blocking can never end.
    throw hls_sim::Deadlock{std::string("stream '") + name_ + "': " + op +
                            " outside a dataflow region would block forever"};
  }
  static void Progress() {
    hls_sim::Region* r = hls_sim::CurrentRegion();
    if (r != nullptr) r->OnProgress();
  }

  const char* name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
  size_t max_fill_ = 0;
  uint64_t writes_ = 0, reads_ = 0;
};

}  // namespace hls

#endif  // NEARPREP_FPGA_KERNELS_HLS_SIM_H_
