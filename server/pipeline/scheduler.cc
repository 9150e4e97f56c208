#include "server/pipeline/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <utility>

namespace nearprep {

Scheduler::Scheduler(const PipelineOptions& options,
                     std::shared_ptr<Backend> backend)
    : options_(options), backend_(std::move(backend)) {}

void Scheduler::StartWorkers() {
  {
    MutexLock lock(&mu_);
    running_workers_ = options_.workers;
  }
  for (int i = 0; i < options_.workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

void Scheduler::Shutdown() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    MutexLock lock(&mu_);
    streams = streams_;
  }
  for (auto& s : streams) Cancel(*s);
  {
    MutexLock lock(&mu_);
    shutdown_ = true;
  }
  work_cv_.SignalAll();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Scheduler::Add(const std::shared_ptr<Stream>& stream) {
  Callbacks fire;  // nobody waits yet
  {
    MutexLock lock(&mu_);
    StreamAssembler& a = Locked(*stream).assembler;
    if (a.request().account_until_released) {
      a.SetReleaseNotifier([self = weak_from_this()] {
        if (std::shared_ptr<Scheduler> s = self.lock()) s->OnBatchReleased();
      });
    }
    streams_.push_back(stream);
    a.Start(a.NeedsValidation() ? validity_.Get(a.request()) : nullptr);
    SettleLocked(*stream, &fire);
  }
  work_cv_.SignalAll();
}

void Scheduler::Next(Stream& stream, BatchStream::NextCallback done) {
  BatchStream::NextResult result;
  {
    MutexLock lock(&mu_);
    Stream::Guarded& g = Locked(stream);
    assert(!g.pending && "one Next at a time");
    if (!g.assembler.HasResult()) {
      g.pending = std::move(done);
      g.pending_since = std::chrono::steady_clock::now();
      return;
    }
    counters_.next_wait_seconds.Observe(0.0);
    result = g.assembler.Take(StreamAssembler::Clock::now());
  }
  if (result.ok() && *result != nullptr) work_cv_.SignalAll();  // window moved
  std::move(done)(std::move(result));
}

void Scheduler::OnBatchReleased() {
  // Taking mu_ orders the release after any worker's CanDispatch check
  // under the lock: the worker is either before its check (and sees the
  // moved window) or already waiting (and gets the signal).
  { MutexLock lock(&mu_); }
  work_cv_.SignalAll();
}

void Scheduler::Cancel(Stream& stream) {
  Callbacks fire;
  {
    MutexLock lock(&mu_);
    Stream::Guarded& g = Locked(stream);
    g.assembler.Cancel();
    SettleLocked(stream, &fire);
    // Callbacks run on a pipeline thread, not inside the caller's Cancel.
    if (running_workers_ > 0) {
      for (auto& f : fire) tasks_.push_back(std::move(f));
      fire.clear();
    }
  }
  work_cv_.SignalAll();
  RunCallbacks(&fire);
}

void Scheduler::RetireLocked(Stream& s) {
  Stream::Guarded& g = Locked(s);
  if (g.retired) return;
  g.retired = true;
  auto it = std::find_if(streams_.begin(), streams_.end(),
                         [&](const std::shared_ptr<Stream>& p) {
                           return p.get() == &s;
                         });
  if (it != streams_.end()) {
    const size_t idx = static_cast<size_t>(it - streams_.begin());
    streams_.erase(it);
    if (rr_ > idx) --rr_;
    if (rr_ >= streams_.size()) rr_ = 0;
  }
}

void Scheduler::SettleLocked(Stream& s, Callbacks* fire) {
  Stream::Guarded& g = Locked(s);
  if (g.assembler.Terminal()) RetireLocked(s);
  if (g.pending && g.assembler.HasResult()) {
    counters_.next_wait_seconds.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                      g.pending_since)
            .count());
    fire->push_back(
        [done = std::move(g.pending),
         result = g.assembler.Take(StreamAssembler::Clock::now())]() mutable {
          std::move(done)(std::move(result));
        });
    g.pending = nullptr;
  }
}

size_t Scheduler::RunnableStreams() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& s : streams_) {
    if (Locked(*s).assembler.HasDispatchableWork()) ++n;
  }
  return n;
}

size_t Scheduler::ProducingStreams() const {
  MutexLock lock(&mu_);
  return streams_.size();
}

std::shared_ptr<Scheduler::Stream> Scheduler::PickLocked() {
  const size_t n = streams_.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (rr_ + i) % n;
    if (Locked(*streams_[idx]).assembler.CanDispatch()) {
      rr_ = (idx + 1) % n;
      return streams_[idx];
    }
  }
  return nullptr;
}

void Scheduler::RunCallbacks(Callbacks* fire) {
  for (Callback& f : *fire) std::move(f)();
  fire->clear();
}

void Scheduler::WorkerLoop() {
  Callbacks fire;
  Chunk chunk;
  const size_t chunk_size = static_cast<size_t>(options_.chunk_size);
  mu_.Lock();
  while (true) {
    if (!tasks_.empty()) {
      {
        Callback task = std::move(tasks_.front());
        tasks_.pop_front();
        mu_.Unlock();
        std::move(task)();
        // `task` (and any batch it still holds, whose release takes mu_)
        // is destroyed here, before the lock is taken again.
      }
      mu_.Lock();
      continue;
    }
    std::shared_ptr<Stream> pick = PickLocked();
    if (!pick) {
      if (shutdown_) break;
      work_cv_.Wait(&mu_);
      continue;
    }
    const bool taken = Locked(*pick).assembler.TakeChunk(chunk_size, &chunk);
    if (!taken) {
      SettleLocked(*pick, &fire);
      pick.reset();
      mu_.Unlock();
      RunCallbacks(&fire);
      mu_.Lock();
      continue;
    }
    mu_.Unlock();
    counters_.busy_workers.fetch_add(1, std::memory_order_relaxed);
    const auto busy_from = std::chrono::steady_clock::now();
    backend_->Process(pick->context(), chunk.works.data(), chunk.works.size());
    counters_.busy_nanos.fetch_add(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - busy_from)
                                  .count()),
        std::memory_order_relaxed);
    counters_.busy_workers.fetch_sub(1, std::memory_order_relaxed);
    mu_.Lock();
    Locked(*pick).assembler.CompleteChunk(&chunk);
    SettleLocked(*pick, &fire);
    pick.reset();
    if (!fire.empty()) {
      mu_.Unlock();
      RunCallbacks(&fire);
      mu_.Lock();
    }
    // A completed chunk may have opened the window for other workers.
    work_cv_.SignalAll();
  }
  --running_workers_;
  mu_.Unlock();
}

}  // namespace nearprep
