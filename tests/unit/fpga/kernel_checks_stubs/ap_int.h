// Stand-in for Vitis' ap_int.h used only by kernel_checks.py's IR scan:
// declarations without bodies, so that calls into the Vitis library show up
// in the IR as external calls with names the scan recognises (ap_uint, ap_int)
// and allows. Never linked, never run.
#ifndef NEARPREP_KERNEL_CHECKS_STUB_AP_INT_H_
#define NEARPREP_KERNEL_CHECKS_STUB_AP_INT_H_

template <int N>
class ap_uint {
 public:
  ap_uint();
  ap_uint(unsigned long long v);  // NOLINT
  operator unsigned long long() const;
  ap_uint& operator=(unsigned long long v);
  bool operator[](int bit) const;
  class range_ref {
   public:
    range_ref& operator=(unsigned long long v);
    operator unsigned long long() const;
  };
  ap_uint operator<<(int bits) const;
  ap_uint operator>>(int bits) const;
  ap_uint operator&(const ap_uint& o) const;
  ap_uint operator|(const ap_uint& o) const;
  ap_uint operator~() const;
  unsigned long long range(int hi, int lo) const;
  range_ref range(int hi, int lo);

 private:
  unsigned char bytes_[(N + 7) / 8];
};

template <int N>
class ap_int {
 public:
  ap_int();
  ap_int(long long v);  // NOLINT
  operator long long() const;
  ap_int& operator=(long long v);

 private:
  unsigned char bytes_[(N + 7) / 8];
};

#endif  // NEARPREP_KERNEL_CHECKS_STUB_AP_INT_H_
