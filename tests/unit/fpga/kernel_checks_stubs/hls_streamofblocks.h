// Stand-in for Vitis' hls_streamofblocks.h used only by kernel_checks.py's IR
// scan (see ap_int.h here): declarations of hls::stream_of_blocks and its
// locks without bodies.
#ifndef NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAMOFBLOCKS_H_
#define NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAMOFBLOCKS_H_

namespace hls {

template <typename T, int DEPTH = 2>
class stream_of_blocks {
 public:
  stream_of_blocks();
  explicit stream_of_blocks(const char* name);
  stream_of_blocks(const stream_of_blocks&) = delete;
  stream_of_blocks& operator=(const stream_of_blocks&) = delete;
  bool empty() const;
  bool full() const;
};

template <typename T>
class write_lock {
 public:
  explicit write_lock(stream_of_blocks<T>& s) noexcept;
  ~write_lock();
  operator T&() noexcept;
};

template <typename T>
class read_lock {
 public:
  explicit read_lock(stream_of_blocks<T>& s) noexcept;
  ~read_lock();
  operator T&() noexcept;
};

}  // namespace hls

#endif  // NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAMOFBLOCKS_H_
