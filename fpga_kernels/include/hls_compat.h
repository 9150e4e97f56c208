// hls_compat.h: the few Vitis HLS types and constructs the nearprep kernel
// uses, with one spelling for synthesis and C simulation.
//
// Under Vitis HLS (__SYNTHESIS__ defined) this pulls in the real headers
// (hls_stream.h, ap_int.h) and NEARPREP_PROCESS(call) is just the call: the
// calls of a DATAFLOW region in program order, as HLS wants them. Everywhere
// else (g++ C simulation, unit tests, the host library that runs the C-sim
// kernel) it provides std-based stand-ins with the same member names:
// hls::stream is a bounded blocking FIFO of the stream's depth and every
// NEARPREP_PROCESS runs on its own thread (hls_sim.h), so a dataflow network
// that would deadlock in hardware deadlocks (and is reported) in C simulation.
//
// Thread-safety: see hls_sim.h (one producer and one consumer per stream).
#ifndef NEARPREP_FPGA_KERNELS_HLS_COMPAT_H_
#define NEARPREP_FPGA_KERNELS_HLS_COMPAT_H_

#include <cstdint>

#ifdef __SYNTHESIS__
#include <ap_int.h>
#include <hls_stream.h>
#include <hls_streamofblocks.h>

// One 512-bit memory word (the m_axi data width of the JPEG and tensor ports).
typedef ap_uint<512> WideWord;
inline uint8_t WordByte(const WideWord& w, int i) {
  return static_cast<uint8_t>(w.range(8 * i + 7, 8 * i));
}
inline void SetWordByte(WideWord& w, int i, uint8_t b) { w.range(8 * i + 7, 8 * i) = b; }

#define NEARPREP_DATAFLOW_BEGIN(name)
#define NEARPREP_PROCESS(...) __VA_ARGS__
#define NEARPREP_DATAFLOW_END()
#define NEARPREP_SIM_LOOP(id)
#define NEARPREP_SIM_ITER()
#define NEARPREP_SIM_EVENT(id, n)
#else
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hls_sim.h"

// The C-simulation 512-bit word: 64 bytes, with the few ap_uint<512>
// operators the kernel uses on whole words (PackWords' shift-and-mask
// insert). Shifts move whole bytes only (a multiple of 8 bits; anything else
// aborts) and, like ap_uint<512>, drop what passes either end.
struct WideWord {
  uint8_t b[64];
  WideWord operator<<(int bits) const {
    WideWord r;
    const int s = ByteShift(bits);
    for (int i = 0; i < 64; ++i) r.b[i] = i >= s ? b[i - s] : 0;
    return r;
  }
  WideWord operator>>(int bits) const {
    WideWord r;
    const int s = ByteShift(bits);
    for (int i = 0; i < 64; ++i) r.b[i] = i + s < 64 ? b[i + s] : 0;
    return r;
  }
  WideWord operator&(const WideWord& o) const {
    WideWord r;
    for (int i = 0; i < 64; ++i) r.b[i] = static_cast<uint8_t>(b[i] & o.b[i]);
    return r;
  }
  WideWord operator|(const WideWord& o) const {
    WideWord r;
    for (int i = 0; i < 64; ++i) r.b[i] = static_cast<uint8_t>(b[i] | o.b[i]);
    return r;
  }
  WideWord operator~() const {
    WideWord r;
    for (int i = 0; i < 64; ++i) r.b[i] = static_cast<uint8_t>(~b[i]);
    return r;
  }
  static int ByteShift(int bits) {
    if (bits < 0 || bits % 8 != 0) {
      std::fprintf(stderr, "WideWord: shift by %d bits (C simulation supports whole bytes)\n",
                   bits);
      std::abort();
    }
    return bits / 8 < 64 ? bits / 8 : 64;
  }
};
inline uint8_t WordByte(const WideWord& w, int i) { return w.b[i]; }
inline void SetWordByte(WideWord& w, int i, uint8_t b) { w.b[i] = b; }

// A DATAFLOW region: each NEARPREP_PROCESS on its own thread; the END joins
// them and throws hls_sim::Deadlock with the report if the network
// deadlocked (a kernel that hangs in hardware must not pass C simulation).
// The exception leaves the kernel's top function: the caller (a test, or
// nearprepd's simulation hook, which turns it into a failed run and so a
// CPU fallback) decides; a nested region's END throws into its process,
// which ends the enclosing region the same way.
#define NEARPREP_DATAFLOW_BEGIN(name) ::hls_sim::Region nearprep_region_(name);
#define NEARPREP_PROCESS(...) nearprep_region_.Spawn(#__VA_ARGS__, [&] { __VA_ARGS__; })

// Timed C simulation (hls_sim.h; nothing under __SYNTHESIS__):
//   NEARPREP_SIM_LOOP("Process.loop") label: for (...) {
//   #pragma HLS PIPELINE II = 1
//     NEARPREP_SIM_ITER();
//     ...
// brackets exactly the loop statement that follows (an if/else whose
// condition declares the scope object), NEARPREP_SIM_ITER() charges one
// iteration at the loop's II, NEARPREP_SIM_EVENT("Process.event", n) n units
// of a sequential event; the cycles come from fpga_kernels/host/loop_timing.cc.
#define NEARPREP_SIM_LOOP(id) \
  if (::hls_sim::LoopScope nearprep_loop_scope_{id}) { \
  } else
#define NEARPREP_SIM_ITER() ::hls_sim::Iter()
#define NEARPREP_SIM_EVENT(id, n) ::hls_sim::Event(id, n)
#define NEARPREP_DATAFLOW_END()                                        \
  do {                                                                 \
    const std::string nearprep_report_ = nearprep_region_.Join();      \
    if (!nearprep_report_.empty()) throw ::hls_sim::Deadlock{nearprep_report_}; \
  } while (0)

// ap_uint<N> / ap_int<N> stand-ins for N <= 64: value kept in the smallest
// fitting std integer, wrapped to N bits on every assignment.
template <int N>
class ap_uint {
  static_assert(N > 0 && N <= 64, "ap_uint stand-in supports 1..64 bits");

 public:
  using Rep = uint64_t;
  ap_uint() = default;
  ap_uint(uint64_t v) : v_(Wrap(v)) {}  // NOLINT: implicit like Vitis.
  operator uint64_t() const { return v_; }
  ap_uint& operator=(uint64_t v) { v_ = Wrap(v); return *this; }
  bool operator[](int bit) const { return (v_ >> bit) & 1; }
  uint64_t range(int hi, int lo) const {
    const int w = hi - lo + 1;
    const uint64_t mask = w >= 64 ? ~uint64_t{0} : ((uint64_t{1} << w) - 1);
    return (v_ >> lo) & mask;
  }

 private:
  static uint64_t Wrap(uint64_t v) {
    return N == 64 ? v : (v & ((uint64_t{1} << (N % 64)) - 1));
  }
  uint64_t v_ = 0;
};

template <int N>
class ap_int {
  static_assert(N > 0 && N <= 64, "ap_int stand-in supports 1..64 bits");

 public:
  ap_int() = default;
  ap_int(int64_t v) : v_(Wrap(v)) {}  // NOLINT: implicit like Vitis.
  operator int64_t() const { return v_; }
  ap_int& operator=(int64_t v) { v_ = Wrap(v); return *this; }

 private:
  static int64_t Wrap(int64_t v) {
    if (N == 64) return v;
    const uint64_t m = (uint64_t{1} << N) - 1;
    uint64_t u = static_cast<uint64_t>(v) & m;
    if (u >> (N - 1)) u |= ~m;  // sign-extend
    return static_cast<int64_t>(u);
  }
  int64_t v_ = 0;
};
#endif  // __SYNTHESIS__

#endif  // NEARPREP_FPGA_KERNELS_HLS_COMPAT_H_
