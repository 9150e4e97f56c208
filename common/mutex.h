// nearprep::Mutex, MutexLock and CondVar: a std::mutex and a
// std::condition_variable with Clang's thread-safety annotations (the
// ABSL_* macros), so that `-Wthread-safety` checks every member declared
// ABSL_GUARDED_BY(mu_) and every function declared
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) (scripts/check_thread_safety.sh runs
// that check in CI).
//
// Why not absl::Mutex: Debian's libabsl is built without ThreadSanitizer,
// so TSan cannot see absl::Mutex's lock and unlock (atomics and futex calls
// inside the uninstrumented library) and reports every access it protects
// as a data race. A std::mutex is a pthread mutex, which TSan intercepts:
// the TSan builds (scripts/tsan_tests.sh) see these locks. libstdc++'s
// std::mutex and std::lock_guard carry no annotations, hence the wrappers.
// The names and calls are Abseil's (mu_.Lock(), MutexLock lock(&mu_),
// cv_.Wait(&mu_), cv_.SignalAll()), so code moves between the two freely.
//
// Thread-safety: as std::mutex / std::condition_variable.
#ifndef NEARPREP_COMMON_MUTEX_H_
#define NEARPREP_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace nearprep {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis that the caller holds the lock (no runtime check).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with a Mutex the caller holds. Wakeups may be
// spurious: wait in a loop on the condition.
class CondVar {
 public:
  // Releases `mu`, waits for a Signal (or a spurious wakeup), holds `mu`
  // again.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's
  }
  // The same, until `deadline` at the latest; true when it has passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace nearprep

#endif  // NEARPREP_COMMON_MUTEX_H_
