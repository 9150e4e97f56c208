// Stand-in for Vitis' hls_stream.h used only by kernel_checks.py's IR scan
// (see ap_int.h here): declarations of hls::stream without bodies.
#ifndef NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAM_H_
#define NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAM_H_

namespace hls {

template <typename T, int DEPTH = 0>
class stream {
 public:
  stream();
  explicit stream(const char* name);
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  void write(const T& v) noexcept;
  T read() noexcept;
  bool read_nb(T& v) noexcept;
  bool empty() const;
  bool full() const;
};

}  // namespace hls

#endif  // NEARPREP_KERNEL_CHECKS_STUB_HLS_STREAM_H_
