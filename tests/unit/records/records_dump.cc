// nearprep_records_dump: prints what server/records finds in a shard, one
// line per member/record, for tests/python/test_records.py to compare with
// Python's tarfile and with records it wrote itself.
//   nearprep_records_dump tar FILE        -> "member NAME DATA_OFFSET SIZE REGULAR"
//                                            "sample KEY IMG_OFF IMG_SIZE LABEL|- STATUS"
//   nearprep_records_dump tfrecord FILE   -> "record OFFSET LENGTH CRC_OK"
// then "damage CODE OFFSET MESSAGE" or "damage OK".
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "server/records/tar_shard.h"
#include "server/records/tfrecord.h"

using namespace nearprep::records;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s tar|tfrecord FILE\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[1], path = argv[2];
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    std::perror(path.c_str());
    return 1;
  }
  RangeReader read = [fd](uint64_t off, size_t n,
                          uint8_t* dst) -> absl::StatusOr<size_t> {
    const ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(off));
    if (r < 0) return absl::DataLossError("pread failed");
    return static_cast<size_t>(r);
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  absl::Status damage;
  uint64_t damaged_at = 0;
  if (kind == "tar") {
    TarScan scan = ScanTarMembers(path, size, read);
    for (const auto& m : scan.members) {
      std::printf("member %s %llu %llu %d\n", m.name.c_str(),
                  static_cast<unsigned long long>(m.data_offset),
                  static_cast<unsigned long long>(m.size), m.regular ? 1 : 0);
    }
    uint64_t without_image = 0;
    auto samples = GroupWebDataset(
        scan.members,
        [&](uint64_t off, uint64_t n, std::string* text) -> absl::Status {
          text->resize(n);
          auto r = read(off, n, reinterpret_cast<uint8_t*>(text->data()));
          if (!r.ok()) return r.status();
          text->resize(*r);
          return absl::OkStatus();
        },
        &without_image);
    for (const auto& s : samples) {
      std::printf("sample %s %llu %llu %s %s %s\n", s.key.c_str(),
                  static_cast<unsigned long long>(s.image_offset),
                  static_cast<unsigned long long>(s.image_size),
                  s.has_label ? std::to_string(s.label).c_str() : "-",
                  s.status.ok() ? "OK" : "ERROR",
                  s.has_cls ? (std::to_string(s.cls_offset) + " " +
                               std::to_string(s.cls_size)).c_str()
                            : "- -");
    }
    std::printf("without_image %llu\n",
                static_cast<unsigned long long>(without_image));
    damage = scan.damage;
    damaged_at = scan.damaged_at;
  } else if (kind == "tfrecord") {
    TfRecordScan scan = ScanTfRecords(
        path, size, read,
        [](const RecordSpan& s, const uint8_t*, const absl::Status& crc) {
          std::printf("record %llu %llu %d\n",
                      static_cast<unsigned long long>(s.offset),
                      static_cast<unsigned long long>(s.length),
                      crc.ok() ? 1 : 0);
        });
    damage = scan.damage;
    damaged_at = scan.damaged_at;
  } else {
    std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
    return 2;
  }
  if (damage.ok()) {
    std::printf("damage OK\n");
  } else {
    std::printf("damage %s %llu %s\n",
                absl::StatusCodeToString(damage.code()).c_str(),
                static_cast<unsigned long long>(damaged_at),
                std::string(damage.message()).c_str());
  }
  ::close(fd);
  return 0;
}
