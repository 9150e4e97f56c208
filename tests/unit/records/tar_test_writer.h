// A minimal ustar writer for tests of tar shards: each member is a 512-byte
// header, its data, and zero padding to the next 512-byte block, in the
// order given (so a test decides whether a .cls comes before or after its
// image); Finish appends the two zero blocks that end an archive.
#ifndef NEARPREP_TESTS_UNIT_RECORDS_TAR_TEST_WRITER_H_
#define NEARPREP_TESTS_UNIT_RECORDS_TAR_TEST_WRITER_H_

#include <cstdio>
#include <cstring>
#include <string>

namespace nearprep::tartest {

// Appends member `name` (at most 99 bytes) holding `data`; returns the
// offset of its data in *tar.
inline size_t AppendMember(const std::string& name, const std::string& data,
                           std::string* tar) {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), name.size() < 99 ? name.size() : 99);
  std::memcpy(&h[100], "0000644", 7);
  std::memcpy(&h[108], "0000000", 7);
  std::memcpy(&h[116], "0000000", 7);
  char size[16];
  std::snprintf(size, sizeof(size), "%011zo", data.size());
  std::memcpy(&h[124], size, 11);
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = '0';
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char check[8];
  std::snprintf(check, sizeof(check), "%06o", sum);
  std::memcpy(&h[148], check, 7);
  *tar += h;
  const size_t at = tar->size();
  *tar += data;
  tar->append((512 - data.size() % 512) % 512, '\0');
  return at;
}

inline void Finish(std::string* tar) { tar->append(1024, '\0'); }

}  // namespace nearprep::tartest

#endif  // NEARPREP_TESTS_UNIT_RECORDS_TAR_TEST_WRITER_H_
