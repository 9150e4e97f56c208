// The C-simulation model of HLS dataflow (fpga_kernels/include/hls_sim.h):
// streams are bounded blocking FIFOs of their declared depth, and a network
// that would hang in hardware is reported as a deadlock instead of passing
// (the first-pass stand-in returned a default value from an empty stream).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hls_compat.h"

namespace {

// Producer writes `n` tokens to `a`, then one to `b`; the consumer reads `b`
// first, then `a`. In hardware this needs a FIFO a of depth >= n.
std::string RunFifoOrder(int n, int* got_sum) {
  hls::stream<int, 4> a("a");
  hls::stream<int, 2> b("b");
  *got_sum = 0;
  hls_sim::Region region("fifo_order");
  region.Spawn([&] {
    for (int i = 0; i < n; ++i) a.write(i + 1);
    b.write(100);
  });
  region.Spawn([&] {
    *got_sum += b.read();
    for (int i = 0; i < n; ++i) *got_sum += a.read();
  });
  return region.Join();
}

TEST(HlsSimTest, StreamHoldsItsDepthAndNoMore) {
  int sum = 0;
  EXPECT_EQ(RunFifoOrder(4, &sum), "");  // depth 4 is enough
  EXPECT_EQ(sum, 100 + 1 + 2 + 3 + 4);
  const std::string report = RunFifoOrder(5, &sum);  // one token too many
  EXPECT_NE(report.find("DEADLOCK"), std::string::npos) << report;
  EXPECT_NE(report.find("'a'"), std::string::npos) << report;
  EXPECT_NE(report.find("write (full)"), std::string::npos) << report;
}

TEST(HlsSimTest, ReaderOfMissingTokenIsADeadlockNotADefaultValue) {
  hls::stream<uint32_t, 8> s("tokens");
  uint32_t got = 0;
  hls_sim::Region region("short_producer");
  region.Spawn([&] { s.write(7); });  // writes one token
  region.Spawn([&] {
    got = s.read();
    got += s.read();  // expects two: hangs in hardware
  });
  const std::string report = region.Join();
  EXPECT_NE(report.find("DEADLOCK"), std::string::npos) << report;
  EXPECT_NE(report.find("'tokens' read (empty)"), std::string::npos) << report;
  EXPECT_EQ(got, 7u);
}

TEST(HlsSimTest, ProcessesRunConcurrently) {
  // A ping-pong between two processes over depth-1 FIFOs only completes if
  // both run at the same time.
  hls::stream<int, 1> ping("ping"), pong("pong");
  int last = 0;
  hls_sim::Region region("ping_pong");
  region.Spawn([&] {
    for (int i = 0; i < 1000; ++i) {
      ping.write(i);
      last = pong.read();
    }
  });
  region.Spawn([&] {
    for (int i = 0; i < 1000; ++i) pong.write(ping.read() + 1);
  });
  EXPECT_EQ(region.Join(), "");
  EXPECT_EQ(last, 1000);
}

TEST(HlsSimTest, BlockingOutsideARegionThrows) {
  hls::stream<int, 2> s("alone");
  s.write(1);
  s.write(2);
  EXPECT_THROW(s.write(3), hls_sim::Deadlock);
  EXPECT_EQ(s.read(), 1);
  EXPECT_EQ(s.read(), 2);
  EXPECT_THROW(s.read(), hls_sim::Deadlock);
}

}  // namespace

namespace {

// Streams of blocks (McuRowReceive => RasterEmit): blocks arrive whole and
// in order, at most DEPTH are in flight, and a consumer that wants a block
// never produced is a deadlock.
typedef int TestBlock[4][8];

TEST(HlsSimTest, StreamOfBlocksHandsOverWholeBlocksInOrder) {
  hls::stream_of_blocks<TestBlock> s("blocks");
  int sums[6] = {0, 0, 0, 0, 0, 0};
  int max_ahead = 0;
  hls_sim::Region region("sob");
  region.Spawn([&] {
    for (int b = 0; b < 6; ++b) {
      hls::write_lock<TestBlock> lock(s);
      TestBlock& blk = lock;
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 8; ++c) blk[r][c] = b * 100 + r * 8 + c;
      }
    }
  });
  region.Spawn([&] {
    for (int b = 0; b < 6; ++b) {
      hls::read_lock<TestBlock> lock(s);
      TestBlock& blk = lock;
      // Two blocks: while this one is held, the producer can fill at most
      // one more.
      const int ahead = static_cast<int>(s.blocks_written()) - b;
      if (ahead > max_ahead) max_ahead = ahead;
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 8; ++c) sums[b] += blk[r][c];
      }
    }
  });
  EXPECT_EQ(region.Join(), "");
  for (int b = 0; b < 6; ++b) EXPECT_EQ(sums[b], b * 100 * 32 + 31 * 32 / 2) << b;
  EXPECT_LE(max_ahead, 2);
  EXPECT_GE(max_ahead, 1);
}

TEST(HlsSimTest, StreamOfBlocksReaderOfMissingBlockIsADeadlock) {
  hls::stream_of_blocks<TestBlock> s("mcu_rows");
  hls_sim::Region region("sob_short");
  region.Spawn([&] {
    hls::write_lock<TestBlock> lock(s);
    TestBlock& blk = lock;
    blk[0][0] = 1;
  });
  region.Spawn([&] {
    { hls::read_lock<TestBlock> a(s); }
    { hls::read_lock<TestBlock> b(s); }  // never written: hangs in hardware
  });
  const std::string report = region.Join();
  EXPECT_NE(report.find("DEADLOCK"), std::string::npos) << report;
  EXPECT_NE(report.find("'mcu_rows' read_lock"), std::string::npos) << report;
}

TEST(HlsSimTest, StreamOfBlocksWriterBeyondDepthIsADeadlock) {
  // Three blocks written before any is read: two fit, the third waits for
  // a reader that waits for something else.
  hls::stream_of_blocks<TestBlock> s("blocks3");
  hls::stream<int, 1> go("go");
  hls_sim::Region region("sob_full");
  region.Spawn([&] {
    for (int b = 0; b < 3; ++b) {
      hls::write_lock<TestBlock> lock(s);
    }
    go.write(1);
  });
  region.Spawn([&] {
    go.read();
    for (int b = 0; b < 3; ++b) {
      hls::read_lock<TestBlock> lock(s);
    }
  });
  const std::string report = region.Join();
  EXPECT_NE(report.find("DEADLOCK"), std::string::npos) << report;
  EXPECT_NE(report.find("'blocks3' write_lock"), std::string::npos) << report;
}

// A nested region (the kernel's DecodeToRgb inside nearprep_preprocess) whose
// processes all wait on a process of the enclosing region that is busy, not
// blocked, for longer than the old 2 s wall-clock grace period: no deadlock.
// The old detector counted only the nested region's own processes and
// declared one, as it did for nearprepd on a loaded machine.
TEST(HlsSimTest, NestedRegionWaitingOnASlowOuterProcessIsNoDeadlock) {
  hls::stream<int, 2> s("s"), back("back");
  int got = -1, echoed = -1;
  std::string inner_report;
  hls_sim::Region outer("outer");
  outer.Spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // busy elsewhere
    s.write(7);
    echoed = back.read();
  });
  outer.Spawn([&] {
    hls_sim::Region inner("inner");
    inner.Spawn([&] { got = s.read(); });
    inner.Spawn([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      back.write(8);
    });
    inner_report = inner.Join();
  });
  EXPECT_EQ(outer.Join(), "");
  EXPECT_EQ(inner_report, "");
  EXPECT_EQ(got, 7);
  EXPECT_EQ(echoed, 8);
}

// A deadlock inside a nested region involving the enclosing region's
// processes is found (the accounting spans both), named, and ends both.
TEST(HlsSimTest, DeadlockAcrossANestedRegionIsReported) {
  hls::stream<int, 1> to_inner("to_inner"), to_outer("to_outer");
  std::string inner_report;
  hls_sim::Region outer("outer");
  outer.Spawn([&] { to_outer.read(); });  // waits for the inner process
  outer.Spawn([&] {
    hls_sim::Region inner("inner");
    inner.Spawn([&] {
      to_inner.read();  // waits for the outer process: neither writes
      to_outer.write(1);
    });
    inner_report = inner.Join();
  });
  const std::string report = outer.Join();
  EXPECT_NE(report.find("DEADLOCK"), std::string::npos) << report;
  EXPECT_NE(report.find("'to_inner' read (empty)"), std::string::npos) << report;
  EXPECT_NE(report.find("'to_outer' read (empty)"), std::string::npos) << report;
  EXPECT_EQ(inner_report, report);
}

// A process still running when all others are blocked keeps the region
// alive however long it runs (no grace period, no wall clock).
TEST(HlsSimTest, LongRunningProcessBesideBlockedOnesIsNoDeadlock) {
  hls::stream<int, 1> a("a"), b("b");
  int sum = 0;
  hls_sim::Region region("slow_head");
  region.Spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    a.write(1);
  });
  region.Spawn([&] { b.write(a.read() + 1); });
  region.Spawn([&] { sum = b.read(); });
  EXPECT_EQ(region.Join(), "");
  EXPECT_EQ(sum, 2);
}

// The DATAFLOW macros of a kernel: a deadlocked region throws the report out
// of the kernel function (nearprepd's simulation hook turns it into a failed
// run and a CPU fallback) instead of aborting the process.
void DeadlockedKernel() {
  hls::stream<int, 1> x("x"), y("y");
  NEARPREP_DATAFLOW_BEGIN("deadlocked_kernel");
  NEARPREP_PROCESS(y.write(x.read()));
  NEARPREP_PROCESS(x.write(y.read()));
  NEARPREP_DATAFLOW_END();
}

TEST(HlsSimTest, DeadlockedDataflowRegionThrowsNotAborts) {
  std::string report;
  try {
    DeadlockedKernel();
  } catch (const hls_sim::Deadlock& d) {
    report = d.report;
  }
  EXPECT_NE(report.find("DEADLOCK in dataflow region 'deadlocked_kernel'"), std::string::npos)
      << report;
  EXPECT_NE(report.find("'x' read (empty)"), std::string::npos) << report;
  EXPECT_NE(report.find("'y' read (empty)"), std::string::npos) << report;
  // The process goes on: a second call of the kernel works the same.
  EXPECT_THROW(DeadlockedKernel(), hls_sim::Deadlock);
}

// ---- Timed C simulation (hls_sim.h, bench/fpga/timed_model.cc) ----

void AddTestTimings() {
  static bool added = false;
  if (added) return;
  added = true;
  auto& t = hls_sim::MutableTimingTable();
  t.push_back({"Test.fast", {1, 1}, {2, 2}, "test: II 1"});
  t.push_back({"Test.slow", {3, 4}, {5, 5}, "test: II 3 / 4"});
  t.push_back({"Test.event", {7, 9}, {0, 0}, "test: an event"});
}

const hls_sim::ProcTiming* Proc(const hls_sim::KernelTiming& t, const std::string& name) {
  for (const auto& p : t.procs) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// One producer at `producer_loop`'s II writes n tokens into a FIFO of depth
// 4, one consumer at `consumer_loop`'s II reads them.
hls_sim::KernelTiming RunTimedPair(const char* producer_loop, const char* consumer_loop, int n) {
  AddTestTimings();
  hls_sim::TakeTiming();
  hls_sim::EnableTiming(true);
  hls::stream<int, 4> s("s");
  int sum = 0;
  {
    hls_sim::Region region("timed_pair");
    region.Spawn("Producer(s)", [&] {
      NEARPREP_SIM_LOOP(producer_loop)
      for (int i = 0; i < n; ++i) {
        NEARPREP_SIM_ITER();
        s.write(i);
      }
    });
    region.Spawn("Consumer(s)", [&] {
      NEARPREP_SIM_LOOP(consumer_loop)
      for (int i = 0; i < n; ++i) {
        NEARPREP_SIM_ITER();
        sum += s.read();
      }
    });
    EXPECT_EQ(region.Join(), "");
  }
  hls_sim::EndKernelCall();
  hls_sim::EnableTiming(false);
  EXPECT_EQ(sum, n * (n - 1) / 2);
  return hls_sim::TakeTiming();
}

TEST(HlsSimTimingTest, SlowConsumerBackPressuresAFastProducerThroughADepth4Fifo) {
  const int n = 200;
  const hls_sim::KernelTiming t = RunTimedPair("Test.fast", "Test.slow", n);
  const hls_sim::ProcTiming* prod = Proc(t, "Producer");
  const hls_sim::ProcTiming* cons = Proc(t, "Consumer");
  ASSERT_NE(prod, nullptr);
  ASSERT_NE(cons, nullptr);
  for (int c = 0; c < hls_sim::kCases; ++c) {
    const uint64_t ii = c == 0 ? 3 : 4;
    // The consumer sets the pace: n x its II plus fill and drain.
    EXPECT_GE(t.cycles[c], ii * n);
    EXPECT_LE(t.cycles[c], ii * n + 20);
    EXPECT_EQ(cons->busy[c], ii * n + 5);  // n iterations + the drain
    EXPECT_LE(cons->stall_in[c], 5u);      // only the first token's latency
    // The producer is held back by the full FIFO: it ends a few tokens
    // before the consumer, not after n cycles.
    EXPECT_GE(prod->stall_out[c], (ii - 1) * n - 30);
    EXPECT_GE(prod->end[c] + 4 * ii + 10, cons->end[c]);
  }
}

TEST(HlsSimTimingTest, FastConsumerStallsOnItsInput) {
  const int n = 200;
  const hls_sim::KernelTiming t = RunTimedPair("Test.slow", "Test.fast", n);
  const hls_sim::ProcTiming* prod = Proc(t, "Producer");
  const hls_sim::ProcTiming* cons = Proc(t, "Consumer");
  ASSERT_NE(prod, nullptr);
  ASSERT_NE(cons, nullptr);
  for (int c = 0; c < hls_sim::kCases; ++c) {
    const uint64_t ii = c == 0 ? 3 : 4;
    EXPECT_EQ(prod->stall_out[c], 0u);  // never full
    EXPECT_GE(cons->stall_in[c], (ii - 1) * n - 10);
    // Each token is available `depth` (5) cycles after its iteration issued.
    EXPECT_GE(cons->end[c], prod->end[c]);
    EXPECT_LE(cons->end[c], prod->end[c] + 5);
  }
}

TEST(HlsSimTimingTest, BlocksAndEventsCarryTheirTimes) {
  AddTestTimings();
  hls_sim::TakeTiming();
  hls_sim::EnableTiming(true);
  hls::stream_of_blocks<int[4][8]> blocks("blocks");
  {
    hls_sim::Region region("timed_blocks");
    region.Spawn("Writer()", [&] {
      for (int b = 0; b < 3; ++b) {
        hls::write_lock<int[4][8]> lock(blocks);
        NEARPREP_SIM_LOOP("Test.slow")
        for (int i = 0; i < 10; ++i) {
          NEARPREP_SIM_ITER();
          lock[0][i % 8] = i;
        }
      }
    });
    region.Spawn("Reader()", [&] {
      NEARPREP_SIM_EVENT("Test.event", 2);  // 14 / 18 cycles before the first block
      for (int b = 0; b < 3; ++b) {
        hls::read_lock<int[4][8]> lock(blocks);
      }
    });
    EXPECT_EQ(region.Join(), "");
  }
  hls_sim::EndKernelCall();
  hls_sim::EnableTiming(false);
  const hls_sim::KernelTiming t = hls_sim::TakeTiming();
  const hls_sim::ProcTiming* w = Proc(t, "Writer");
  const hls_sim::ProcTiming* r = Proc(t, "Reader");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(r, nullptr);
  for (int c = 0; c < hls_sim::kCases; ++c) {
    const uint64_t block = (c == 0 ? 3 : 4) * 10 + 5;  // 10 iterations + drain
    EXPECT_EQ(w->end[c], 3 * block);
    // The reader gets the last block when the writer released it.
    EXPECT_EQ(r->end[c], 3 * block);
    EXPECT_EQ(r->busy[c], c == 0 ? 14u : 18u);
    EXPECT_EQ(r->stall_in[c], 3 * block - r->busy[c]);
  }
}

}  // namespace

namespace {

// A region's processes run on threads kept from earlier regions (issue 23:
// creating 15 threads per kernel call dominated the FPGA fuzz driver): once
// the threads of a first region are idle, later regions - including one
// after a deadlock - create none.
TEST(HlsSimTest, LaterRegionsReuseTheThreadsOfEarlierOnes) {
  const auto ping_pong = [](int rounds) {
    hls::stream<int, 1> ping("ping"), pong("pong");
    hls::stream<int, 2> side("side");
    int seen = 0;
    hls_sim::Region region("reuse");
    region.Spawn([&] {
      for (int i = 0; i < rounds; ++i) {
        ping.write(i);
        seen += pong.read();
      }
    });
    region.Spawn([&] {
      for (int i = 0; i < rounds; ++i) pong.write(ping.read() + 1);
    });
    region.Spawn([&] { side.write(1); });
    region.Spawn([&] { (void)side.read(); });
    EXPECT_EQ(region.Join(), "");
    return seen;
  };
  const auto wait_idle = [](int n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (hls_sim::ProcessThreadsIdle() < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return hls_sim::ProcessThreadsIdle();
  };
  EXPECT_EQ(ping_pong(100), 100 * 101 / 2);
  ASSERT_GE(wait_idle(4), 4);
  const uint64_t created = hls_sim::ProcessThreadsCreated();
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(ping_pong(50), 50 * 51 / 2);
    ASSERT_GE(wait_idle(4), 4);
  }
  int sum = 0;
  EXPECT_NE(RunFifoOrder(5, &sum).find("DEADLOCK"), std::string::npos);
  ASSERT_GE(wait_idle(4), 4);
  EXPECT_EQ(RunFifoOrder(4, &sum), "");
  EXPECT_EQ(sum, 100 + 1 + 2 + 3 + 4);
  ASSERT_GE(wait_idle(4), 4);
  EXPECT_EQ(ping_pong(10), 10 * 11 / 2);
  EXPECT_EQ(hls_sim::ProcessThreadsCreated(), created)
      << "a region created threads although enough were idle";
}

// A feed-forward network (producer -> doubler -> nested region summing ->
// collector, FIFOs far shallower than the traffic): the threaded and the
// sequential run compute the same; the sequential one runs every process on
// the calling thread, in program order.
int FeedForward(std::vector<std::thread::id>* threads) {
  hls::stream<int, 2> raw("raw"), doubled("doubled");
  hls::stream<int, 1> sums("sums");
  int total = 0;
  std::mutex mu;
  const auto note = [&] {
    std::lock_guard<std::mutex> lock(mu);
    threads->push_back(std::this_thread::get_id());
  };
  NEARPREP_DATAFLOW_BEGIN("feed_forward");
  NEARPREP_PROCESS(note(); for (int i = 1; i <= 1000; ++i) raw.write(i));
  NEARPREP_PROCESS(note(); for (int i = 0; i < 1000; ++i) doubled.write(2 * raw.read()));
  NEARPREP_PROCESS({
    note();
    hls::stream<int, 1> partial("partial");
    hls_sim::Region inner("inner");
    inner.Spawn([&] {
      note();
      for (int k = 0; k < 10; ++k) {
        int s = 0;
        for (int i = 0; i < 100; ++i) s += doubled.read();
        partial.write(s);
      }
    });
    inner.Spawn([&] {
      note();
      for (int k = 0; k < 10; ++k) sums.write(partial.read());
    });
    const std::string r = inner.Join();
    if (!r.empty()) throw hls_sim::Deadlock{r};
  });
  NEARPREP_PROCESS(note(); for (int k = 0; k < 10; ++k) total += sums.read());
  NEARPREP_DATAFLOW_END();
  return total;
}

TEST(HlsSimTest, SequentialRunComputesWhatTheThreadedRunComputes) {
  std::vector<std::thread::id> threaded_ids, sequential_ids;
  EXPECT_EQ(FeedForward(&threaded_ids), 1000 * 1001);
  const uint64_t created = hls_sim::ProcessThreadsCreated();
  {
    hls_sim::SequentialScope sequential;
    EXPECT_EQ(FeedForward(&sequential_ids), 1000 * 1001);
  }
  EXPECT_EQ(hls_sim::ProcessThreadsCreated(), created);
  ASSERT_EQ(sequential_ids.size(), 6u);
  for (const std::thread::id& id : sequential_ids) EXPECT_EQ(id, std::this_thread::get_id());
  ASSERT_EQ(threaded_ids.size(), 6u);
  for (const std::thread::id& id : threaded_ids) EXPECT_NE(id, std::this_thread::get_id());
}

// What a sequential run reports, and its one blind spot.
TEST(HlsSimTest, SequentialRunReportsOverReadsButNotShallowFifos) {
  hls_sim::SequentialScope sequential;
  // A FIFO too shallow for its traffic deadlocks the threaded run
  // (StreamHoldsItsDepthAndNoMore) but not the sequential one: the writer
  // runs to its end first.
  int sum = 0;
  EXPECT_EQ(RunFifoOrder(5, &sum), "");
  EXPECT_EQ(sum, 100 + 1 + 2 + 3 + 4 + 5);
  // A reader of a token never written: a deadlock in both.
  {
    hls::stream<uint32_t, 8> s("tokens");
    hls_sim::Region region("short_producer");
    region.Spawn([&] { s.write(7); });
    region.Spawn([&] {
      s.read();
      s.read();
    });
    const std::string report = region.Join();
    EXPECT_NE(report.find("DEADLOCK in dataflow region 'short_producer' (sequential run)"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("'tokens' read (empty)"), std::string::npos) << report;
  }
  // The same for a stream of blocks: the writer gets as many blocks as it
  // fills; a reader of a block never written deadlocks.
  {
    hls::stream_of_blocks<TestBlock> s("mcu_rows");
    int sums = 0;
    hls_sim::Region region("sob");
    region.Spawn([&] {
      for (int b = 0; b < 5; ++b) {
        hls::write_lock<TestBlock> lock(s);
        TestBlock& blk = lock;
        blk[0][0] = b;
      }
    });
    region.Spawn([&] {
      for (int b = 0; b < 6; ++b) {
        hls::read_lock<TestBlock> lock(s);
        TestBlock& blk = lock;
        sums += blk[0][0];
      }
    });
    const std::string report = region.Join();
    EXPECT_EQ(sums, 0 + 1 + 2 + 3 + 4);
    EXPECT_NE(report.find("'mcu_rows' read_lock (no full block)"), std::string::npos)
        << report;
  }
  // A kernel's deadlock leaves it as an exception, as in a threaded run.
  EXPECT_THROW(DeadlockedKernel(), hls_sim::Deadlock);
}

}  // namespace

// The C-simulation WideWord's ap_uint<512>-style operators (PackWords'
// shift-and-mask insert runs on them): whole-byte shifts that drop what
// passes either end, byte-wise logic, and an abort on a shift the stand-in
// cannot represent.
TEST(HlsCompatTest, WideWordShiftsAndMasksLikeAp512) {
  WideWord w;
  for (int i = 0; i < 64; ++i) w.b[i] = static_cast<uint8_t>(i + 1);
  const WideWord l = w << 8 * 3;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(l.b[i], i < 3 ? 0 : i - 3 + 1) << i;
  const WideWord r = w >> 8 * 5;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(r.b[i], i + 5 < 64 ? i + 5 + 1 : 0) << i;
  const WideWord gone = w << 512;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(gone.b[i], 0) << i;
  WideWord m;
  for (int i = 0; i < 64; ++i) m.b[i] = i < 4 ? 0xFF : 0;
  // The PackWords insert: 4 bytes at position 62 keep bytes < 62, replace
  // 62 and 63, and drop the two that pass the top (the spill).
  WideWord c;
  for (int i = 0; i < 64; ++i) c.b[i] = i < 4 ? static_cast<uint8_t>(0xA0 + i) : 0;
  const WideWord ins = (w & ~(m << 8 * 62)) | (c << 8 * 62);
  for (int i = 0; i < 62; ++i) EXPECT_EQ(ins.b[i], i + 1) << i;
  EXPECT_EQ(ins.b[62], 0xA0);
  EXPECT_EQ(ins.b[63], 0xA1);
  const WideWord spill = c >> 8 * 2;
  EXPECT_EQ(spill.b[0], 0xA2);
  EXPECT_EQ(spill.b[1], 0xA3);
  for (int i = 2; i < 64; ++i) EXPECT_EQ(spill.b[i], 0) << i;
}

TEST(HlsCompatDeathTest, WideWordShiftByPartOfAByteAborts) {
  WideWord w{};
  EXPECT_DEATH({ const WideWord x = w << 4; (void)x; }, "whole bytes");
}
