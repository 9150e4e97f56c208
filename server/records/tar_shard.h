// Tar shards in the WebDataset convention: members are grouped into samples
// by key (the member's path up to the first dot of its base name:
// "train/n01440764_10026.jpg" has key "train/n01440764_10026"); consecutive
// members with the same key form one sample. The image is the member whose
// extension (after the first dot, case-insensitive) is jpg or jpeg; the
// label is the .cls member's decimal text. Other members are ignored.
//
// The shard is scanned with libarchive (ustar, pax and GNU long names) only
// to learn each member's name, size and data offset; payloads are later read
// with pread at that offset, so serving never goes through libarchive.
//
// The label a sample is served with is checked against its .cls member
// whenever the sample is read (CheckTarLabel): the shard index that says
// which label a sample has is a cache anyone who can write it can forge
// (its checksum is a CRC), so the .cls bytes themselves decide.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_RECORDS_TAR_SHARD_H_
#define NEARPREP_SERVER_RECORDS_TAR_SHARD_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/records/range_reader.h"

namespace nearprep::records {

struct TarMember {
  std::string name;  // As stored (pax: UTF-8; else the raw bytes).
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;
  uint64_t size = 0;
  bool regular = true;  // Directories, links, devices: false.
};

struct TarScan {
  std::vector<TarMember> members;  // In archive order, all kinds.
  // OK, or DATA_LOSS naming the offset where the archive could not be read
  // further (truncated or damaged); members before it are listed and lie
  // wholly inside the file.
  absl::Status damage;
  uint64_t damaged_at = 0;
};

// Lists the members of the tar file `name` of `file_size` bytes, read
// through `read` (uncompressed tar only; anything else is INVALID_ARGUMENT
// with a message saying so). Payloads are skipped, not read.
TarScan ScanTarMembers(const std::string& name, uint64_t file_size,
                       const RangeReader& read);

// One WebDataset sample of a shard.
struct TarSample {
  std::string key;
  uint64_t image_offset = 0;  // Data offset of the image member.
  uint64_t image_size = 0;
  bool has_label = false;
  int64_t label = 0;
  // OK, or DATA_LOSS for a .cls that is not a decimal integer (the sample is
  // still listed so that it fails deterministically where it is served).
  absl::Status status;
  // The .cls member's data [cls_offset, cls_offset + cls_size), if any.
  bool has_cls = false;
  uint64_t cls_offset = 0;
  uint64_t cls_size = 0;
};

// A .cls member longer than this is not a label (DATA_LOSS for its sample).
inline constexpr uint64_t kMaxClassLabelBytes = 64;

// Groups members into samples. `read_cls(offset, size, &text)` reads a .cls
// payload (small). Keys without an image member are dropped and counted in
// *without_image.
std::vector<TarSample> GroupWebDataset(
    const std::vector<TarMember>& members,
    const std::function<absl::Status(uint64_t, uint64_t, std::string*)>&
        read_cls,
    uint64_t* without_image);

// The WebDataset key and extension of a member path.
void SplitWebDatasetName(const std::string& path, std::string* key,
                         std::string* ext);

// Parses a .cls payload: optional blanks, an optional '-', decimal digits,
// optional blanks/newline; INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> ParseClassLabel(const std::string& text);

// What a tar sample's index entry says about its label (index version 3):
// the .cls member's data [cls_offset, cls_offset + cls_bytes) of `shard`
// holds a decimal label that, plus label_offset, is `label` (the label the
// sample is served with).
struct TarLabelClaim {
  absl::string_view shard;  // for messages
  uint64_t cls_offset = 0;
  uint64_t cls_bytes = 0;
  int64_t label = 0;
  int64_t label_offset = 0;
};

// Bytes CheckTarLabel reads when the .cls is not in hand: the aligned page
// that holds it (a .cls of at most kMaxClassLabelBytes starts a 512-byte
// tar block, so it never crosses a page), into an aligned buffer, so that
// a file opened with O_DIRECT can be read too.
inline constexpr uint64_t kTarLabelReadBytes = 4096;

// Checks a claim when the sample is served. The .cls bytes are taken from
// [have, have + have_bytes), which holds bytes [have_offset, have_offset +
// have_bytes) of the shard (a block already read; `have` may be null), when
// they lie inside it; else `read` reads the kTarLabelReadBytes page that
// holds them (one read). OK when the .cls parses (ParseClassLabel) to the
// claimed label. Otherwise DATA_LOSS "SHARD offset CLS_OFFSET: ...": the
// .cls says another label or none (*index_does_not_hold = true: the index
// was edited or the shard rewritten since it was indexed), or it was cut
// short (the shard shrank); a read error keeps its code.
absl::Status CheckTarLabel(const TarLabelClaim& claim, const uint8_t* have,
                           uint64_t have_offset, uint64_t have_bytes,
                           const RangeReader& read, bool* index_does_not_hold);

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_TAR_SHARD_H_
