// nearprep_fuzz_regress: runs every fuzz target deterministically, with any
// compiler (no libFuzzer needed), over
//  1. tests/fuzz/regressions/<target>/* (inputs that once failed),
//  2. seeds generated here: real JPEGs encoded with libjpeg-turbo (all
//     chroma subsamplings, grayscale, CMYK, progressive, restart markers,
//     arithmetic coding, odd sizes); valid serialized StreamBatchesRequests;
//     file lists with good, escaping and malformed lines,
//  3. NEARPREP_FUZZ_ITERS (default per target, below) deterministic
//     mutations of each seed: bit flips, byte sets/insertions/deletions,
//     truncations, SOF dimension patches (65535x65535, 0, random), marker
//     segment duplication, length-field corruption, splices; format-aware
//     ones for requests (appended random fields) and file lists (path
//     tokens such as "../", "/", "#", tabs, NULs, huge labels).
// A failed check fails the test and saves the input under
// $NEARPREP_BINARY_DIR/fuzz-failures/; a crash saves the input being run as
// $NEARPREP_BINARY_DIR/fuzz-failures/crash-<target>.bin (signal handler /
// sanitizer death callback) before the process dies.
// NEARPREP_FUZZ_CORPUS_OUT=<dir> also writes the seeds as <dir>/<target>/
// files, a starting corpus for the libFuzzer binaries.
//
// Thread-safety: single-threaded test.
#include <fcntl.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "gtest/gtest.h"
#include "server/image/jpeg_decoder.h"
#include "tests/fuzz/fuzz_targets.h"
#include "decode_to_rgb.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"
#ifndef NEARPREP_FUZZ_IMAGE_ONLY
#include <spdlog/spdlog.h>
#include "google/protobuf/stubs/logging.h"
#include "nearprep/v1/nearprep.pb.h"
#endif

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>) && \
    defined(NEARPREP_FUZZ_SANITIZED)
#include <sanitizer/common_interface_defs.h>
#define NEARPREP_HAVE_DEATH_CALLBACK 1
#endif
#endif

namespace nearprep {
namespace fuzz {
namespace {

using Bytes = std::vector<uint8_t>;
using TargetFn = int (*)(const uint8_t*, size_t);

// ---------------------------------------------------------------------------
// Failure collection and crash dumps.

std::vector<std::string> g_failures;
void RecordFailure(const char* target, const std::string& what) {
  g_failures.push_back(std::string(target) + ": " + what);
}

std::string FailureDir() {
  return std::string(NEARPREP_BINARY_DIR) + "/fuzz-failures";
}

// The input being run, for the crash handler (plain globals: the handler
// only reads them).
const uint8_t* volatile g_current_data = nullptr;
volatile size_t g_current_size = 0;
char g_crash_path[4096] = {};

void DumpCurrentInput() {
  if (g_crash_path[0] == '\0') return;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < g_current_size) {
    const ssize_t n = ::write(fd, g_current_data + done, g_current_size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kMsg[] = "\nnearprep_fuzz_regress: crashing input saved to ";
  (void)!::write(2, kMsg, sizeof(kMsg) - 1);
  (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
  (void)!::write(2, "\n", 1);
}

void CrashHandler(int sig) {
  DumpCurrentInput();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void InstallCrashHandlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  std::filesystem::create_directories(FailureDir());
#ifdef NEARPREP_HAVE_DEATH_CALLBACK
  // ASan reports end here; UBSan ones (run with abort_on_error=1) reach the
  // SIGABRT handler below instead.
  __sanitizer_set_death_callback(&DumpCurrentInput);
  for (int sig : {SIGABRT}) std::signal(sig, &CrashHandler);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) {
    std::signal(sig, &CrashHandler);
  }
#endif
}

// ---------------------------------------------------------------------------
// Deterministic randomness.

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }
  bool Coin(int one_in) { return Below(static_cast<size_t>(one_in)) == 0; }
};

// ---------------------------------------------------------------------------
// Seeds.

struct JpegOptions {
  int width, height;
  J_COLOR_SPACE in_space;  // JCS_RGB, JCS_GRAYSCALE or JCS_CMYK
  int h0, v0;              // luma sampling factors (chroma 1x1)
  bool progressive = false;
  int restart_interval = 0;
  bool arithmetic = false;
  bool optimize = false;
  int quality = 85;
};

Bytes EncodeJpeg(const JpegOptions& o) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long len = 0;  // NOLINT(runtime/int): libjpeg's type
  jpeg_mem_dest(&cinfo, &buf, &len);
  const int comps = o.in_space == JCS_GRAYSCALE ? 1 : o.in_space == JCS_CMYK ? 4 : 3;
  cinfo.image_width = static_cast<JDIMENSION>(o.width);
  cinfo.image_height = static_cast<JDIMENSION>(o.height);
  cinfo.input_components = comps;
  cinfo.in_color_space = o.in_space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, o.quality, TRUE);
  if (comps == 3) {
    cinfo.comp_info[0].h_samp_factor = o.h0;
    cinfo.comp_info[0].v_samp_factor = o.v0;
  }
  if (o.progressive) jpeg_simple_progression(&cinfo);
  cinfo.restart_interval = static_cast<unsigned int>(o.restart_interval);
  cinfo.arith_code = o.arithmetic ? TRUE : FALSE;
  cinfo.optimize_coding = o.optimize ? TRUE : FALSE;
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(o.width) * comps);
  while (cinfo.next_scanline < cinfo.image_height) {
    const int y = static_cast<int>(cinfo.next_scanline);
    for (int x = 0; x < o.width; ++x) {
      for (int c = 0; c < comps; ++c) {
        // Gradients, a checkerboard and a ring: edges and smooth areas.
        const int ring = ((x - o.width / 2) * (x - o.width / 2) +
                          (y - o.height / 2) * (y - o.height / 2)) / 16;
        row[static_cast<size_t>(x) * comps + c] = static_cast<uint8_t>(
            (x * (37 + 11 * c) + y * (53 - 7 * c) + ((x / 4 + y / 4) % 2) * 90 +
             ring * (c + 1)) & 0xFF);
      }
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes out(buf, buf + len);
  std::free(buf);
  return out;
}

const std::vector<Bytes>& JpegSeeds() {
  static const std::vector<Bytes> seeds = [] {
    std::vector<JpegOptions> opts = {
        {33, 17, JCS_RGB, 1, 1},                // 4:4:4
        {40, 24, JCS_RGB, 2, 1},                // 4:2:2
        {37, 29, JCS_RGB, 2, 2},                // 4:2:0, odd size
        {24, 40, JCS_RGB, 1, 2},                // 4:4:0
        {48, 16, JCS_RGB, 4, 1},                // 4:1:1
        {21, 19, JCS_GRAYSCALE, 1, 1},          // gray
        {20, 12, JCS_CMYK, 1, 1},               // CMYK (Adobe marker)
        {64, 48, JCS_RGB, 2, 2, true},          // progressive 4:2:0
        {30, 22, JCS_GRAYSCALE, 1, 1, true},    // progressive gray
        {64, 40, JCS_RGB, 2, 2, false, 2},      // restart every 2 MCUs
        {56, 24, JCS_RGB, 1, 1, false, 1, false, true},  // RST 1, optimized
        {32, 32, JCS_RGB, 2, 2, false, 0, true},         // arithmetic
        {1, 1, JCS_RGB, 2, 2},                  // 1x1
        {97, 3, JCS_RGB, 2, 1, false, 3},       // thin, restarts
    };
    opts[0].quality = 95;
    opts[2].quality = 40;
    std::vector<Bytes> out;
    for (const JpegOptions& o : opts) out.push_back(EncodeJpeg(o));
    return out;
  }();
  return seeds;
}

#ifndef NEARPREP_FUZZ_IMAGE_ONLY
std::vector<Bytes> RequestSeeds() {
  std::vector<Bytes> out;
  auto add = [&](const v1::StreamBatchesRequest& r) {
    const std::string s = r.SerializeAsString();
    out.emplace_back(s.begin(), s.end());
  };
  v1::StreamBatchesRequest r;
  r.set_dataset("imagenet");
  r.set_batch_size(32);
  r.mutable_transform()->set_height(224);
  r.mutable_transform()->set_width(224);
  add(r);
  r.set_seed(42);
  r.set_epoch(3);
  r.set_shuffle(true);
  r.set_shard_index(1);
  r.set_num_shards(4);
  r.set_start_batch(5);
  r.set_start_position(200);
  r.set_max_batches(10);
  r.set_drop_remainder(true);
  r.set_include_params(true);
  r.set_error_policy(v1::ERROR_POLICY_FAIL_STREAM);
  v1::Transform* t = r.mutable_transform();
  t->set_crop(v1::CROP_MODE_RANDOM_RESIZED);
  t->set_scale_min(0.2f);
  t->set_scale_max(0.9f);
  t->set_ratio_min(0.5f);
  t->set_ratio_max(2.0f);
  t->set_flip_probability(0.5f);
  t->set_brightness_max_delta(0.1f);
  t->set_saturation_lower(0.8f);
  t->set_saturation_upper(1.2f);
  t->set_fidelity(v1::FIDELITY_FAST);
  for (float m : {0.485f, 0.456f, 0.406f}) t->add_mean(m);
  for (float s : {0.229f, 0.224f, 0.225f}) t->add_std(s);
  r.mutable_output()->set_dtype(v1::DTYPE_BFLOAT16);
  r.mutable_output()->set_layout(v1::LAYOUT_NCHW);
  add(r);
  t->set_crop(v1::CROP_MODE_CENTER);
  t->set_center_fraction(0.5f);
  t->set_disable_clip(true);
  r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
  add(r);
  // Near the limits, and just over them.
  v1::StreamBatchesRequest big;
  big.set_dataset("imagenet");
  big.set_batch_size(256);
  big.mutable_transform()->set_height(1024);
  big.mutable_transform()->set_width(1024);
  add(big);
  big.mutable_transform()->set_width(1025);
  add(big);
  big.set_dataset("not-served");
  add(big);
  return out;
}

std::vector<Bytes> FileListSeeds() {
  const std::vector<std::string> texts = {
      "a.jpg 0\nsub/b.jpg 1\nsub/deeper/c.jpg 2\n",
      "# comment\nb c.jpg 3   \n\tdir/d.png\t7 # trailing\n\n",
      "in_link.jpg 0\nsub/up_link.jpg 1\nsub_link/b.jpg 2\n",
      "out_link.jpg 0\nabs_link.jpg 1\nout_dir/secret.jpg 2\n",
      "../outside/secret.jpg 0\n/etc/hostname 1\nsub/../a.jpg 2\n",
      "loop.jpg 0\ndangling.jpg 1\ndir 2\nmissing.jpg 3\n",
      "./a.jpg 0\na.jpg 1\n.//sub//b.jpg 5\n",
      "a.jpg 2147483647\n",
      "a.jpg 2147483648\n",
      "a.jpg -1\n",
      "a.jpg\n",
      "a.jpg 0\r\nsub/b.jpg 1\r\n",
  };
  std::vector<Bytes> out;
  for (const std::string& t : texts) out.emplace_back(t.begin(), t.end());
  return out;
}
#endif  // NEARPREP_FUZZ_IMAGE_ONLY

// ---------------------------------------------------------------------------
// Mutations.

enum class Kind { kJpeg, kProto, kText };

// Marker segments (offset of the 0xFF, length field value) before SOS's data.
struct Segment {
  size_t pos;
  uint8_t marker;
  size_t length;  // includes the 2 length bytes
};

std::vector<Segment> FindSegments(const Bytes& b) {
  std::vector<Segment> segs;
  size_t i = 2;
  while (i + 4 <= b.size() && b[i] == 0xFF) {
    const uint8_t m = b[i + 1];
    const size_t len = (static_cast<size_t>(b[i + 2]) << 8) | b[i + 3];
    segs.push_back({i, m, len});
    if (m == 0xDA || len < 2) break;
    i += 2 + len;
  }
  return segs;
}

bool IsSof(uint8_t m) {
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

// Sets a SOF's height and width; returns false if there is no SOF.
bool PatchSof(Bytes* b, uint16_t height, uint16_t width) {
  for (const Segment& s : FindSegments(*b)) {
    if (IsSof(s.marker) && s.pos + 9 <= b->size()) {
      (*b)[s.pos + 5] = static_cast<uint8_t>(height >> 8);
      (*b)[s.pos + 6] = static_cast<uint8_t>(height);
      (*b)[s.pos + 7] = static_cast<uint8_t>(width >> 8);
      (*b)[s.pos + 8] = static_cast<uint8_t>(width);
      return true;
    }
  }
  return false;
}

void PutVarint(Bytes* b, uint64_t v) {
  while (v >= 0x80) {
    b->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  b->push_back(static_cast<uint8_t>(v));
}

uint64_t InterestingValue(Rng* rng) {
  static const uint64_t kValues[] = {0,          1,          2,
                                     3,          4,          255,
                                     256,        1024,       1025,
                                     16384,      16385,      65535,
                                     0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                                     ~uint64_t{0}};
  return rng->Coin(3) ? rng->Next() : kValues[rng->Below(std::size(kValues))];
}

#ifndef NEARPREP_FUZZ_IMAGE_ONLY
// Parses the bytes as a request and sets one random (possibly nested) field
// to an interesting value through reflection; leaves unparsable bytes alone.
void MutateProtoField(Bytes* b, Rng* rng) {
  using google::protobuf::FieldDescriptor;
  v1::StreamBatchesRequest req;
  if (!req.ParseFromArray(b->data(), static_cast<int>(b->size()))) return;
  google::protobuf::Message* msg = &req;
  for (;;) {
    const auto* desc = msg->GetDescriptor();
    const FieldDescriptor* f = desc->field(static_cast<int>(rng->Below(desc->field_count())));
    const auto* refl = msg->GetReflection();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      msg = refl->MutableMessage(msg, f);
      continue;
    }
    static const float kFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-45f, 1.0001f,
                                    3.4e38f, INFINITY, -INFINITY, NAN, 2.0f, 0.08f};
    const uint64_t v = InterestingValue(rng);
    const float fv = kFloats[rng->Below(std::size(kFloats))];
    if (f->is_repeated()) {
      if (rng->Coin(3)) {
        refl->ClearField(msg, f);
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        refl->AddFloat(msg, f, fv);
      }
      break;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT32: refl->SetUInt32(msg, f, static_cast<uint32_t>(v)); break;
      case FieldDescriptor::CPPTYPE_UINT64: refl->SetUInt64(msg, f, v); break;
      case FieldDescriptor::CPPTYPE_INT32: refl->SetInt32(msg, f, static_cast<int32_t>(v)); break;
      case FieldDescriptor::CPPTYPE_INT64: refl->SetInt64(msg, f, static_cast<int64_t>(v)); break;
      case FieldDescriptor::CPPTYPE_FLOAT: refl->SetFloat(msg, f, fv); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: refl->SetDouble(msg, f, fv); break;
      case FieldDescriptor::CPPTYPE_BOOL: refl->SetBool(msg, f, rng->Coin(2)); break;
      case FieldDescriptor::CPPTYPE_ENUM:
        refl->SetEnumValue(msg, f, static_cast<int>(static_cast<int32_t>(v % 7) - 2));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        refl->SetString(msg, f, rng->Coin(2) ? "imagenet" : (rng->Coin(2) ? "" : "other"));
        break;
      default: break;
    }
    break;
  }
  const std::string out = req.SerializeAsString();
  b->assign(out.begin(), out.end());
}
#else
void MutateProtoField(Bytes*, Rng*) {}
#endif

void MutateOnce(Bytes* b, Kind kind, Rng* rng, const std::vector<Bytes>& pool) {
  const size_t n = b->size();
  switch (rng->Below(kind == Kind::kJpeg ? 12 : 9)) {
    case 0:  // bit flips
      for (int k = 0, m = 1 + static_cast<int>(rng->Below(4)); k < m && n; ++k) {
        (*b)[rng->Below(n)] ^= static_cast<uint8_t>(1u << rng->Below(8));
      }
      break;
    case 1: {  // set a byte to an interesting value
      static const uint8_t kBytes[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xD9, 0xD8};
      if (n) (*b)[rng->Below(n)] = rng->Coin(2) ? kBytes[rng->Below(7)]
                                                : static_cast<uint8_t>(rng->Next());
      break;
    }
    case 2: {  // insert bytes
      const size_t at = rng->Below(n + 1);
      const size_t cnt = 1 + rng->Below(rng->Coin(8) ? 256 : 4);
      Bytes ins(cnt);
      for (uint8_t& v : ins) v = rng->Coin(3) ? 0xFF : static_cast<uint8_t>(rng->Next());
      b->insert(b->begin() + static_cast<ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    case 3: {  // delete a range
      if (!n) break;
      const size_t at = rng->Below(n);
      const size_t cnt = 1 + rng->Below(std::min<size_t>(n - at, 64));
      b->erase(b->begin() + static_cast<ptrdiff_t>(at),
               b->begin() + static_cast<ptrdiff_t>(at + cnt));
      break;
    }
    case 4:  // truncate
      b->resize(rng->Below(n + 1));
      break;
    case 5: {  // duplicate a range in place
      if (!n) break;
      const size_t at = rng->Below(n);
      const size_t cnt = 1 + rng->Below(std::min<size_t>(n - at, 128));
      Bytes copy(b->begin() + static_cast<ptrdiff_t>(at),
                 b->begin() + static_cast<ptrdiff_t>(at + cnt));
      b->insert(b->begin() + static_cast<ptrdiff_t>(rng->Below(n + 1)),
                copy.begin(), copy.end());
      break;
    }
    case 6: {  // splice with another seed
      const Bytes& other = pool[rng->Below(pool.size())];
      const size_t cut = rng->Below(n + 1);
      const size_t from = rng->Below(other.size() + 1);
      b->resize(cut);
      b->insert(b->end(), other.begin() + static_cast<ptrdiff_t>(from), other.end());
      break;
    }
    case 7:  // overwrite 2/4/8 bytes with an interesting integer
      if (n >= 8) {
        const uint64_t v = InterestingValue(rng);
        const size_t w = size_t{2} << rng->Below(3);
        const size_t at = rng->Below(n - w + 1);
        for (size_t k = 0; k < w; ++k) (*b)[at + k] = static_cast<uint8_t>(v >> (8 * k));
      }
      break;
    case 8:  // format-aware
      if (kind == Kind::kProto && rng->Coin(2)) {
        MutateProtoField(b, rng);
      } else if (kind == Kind::kProto) {
        // Append a field with a random number and wire type (last one wins
        // for scalars; unknown fields must be tolerated).
        const uint64_t field = rng->Coin(2) ? 1 + rng->Below(16) : 1 + rng->Below(600);
        const uint64_t wire = rng->Coin(4) ? rng->Below(8) : (rng->Coin(2) ? 0 : 5);
        PutVarint(b, (field << 3) | wire);
        if (wire == 0) PutVarint(b, InterestingValue(rng));
        if (wire == 5 || wire == 1) {
          static const float kFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-45f,
                                          3.4e38f, INFINITY, -INFINITY, NAN, 2.0f};
          const float f = kFloats[rng->Below(std::size(kFloats))];
          uint8_t bytes[4];
          std::memcpy(bytes, &f, 4);
          b->insert(b->end(), bytes, bytes + 4);
          if (wire == 1) b->insert(b->end(), 4, 0);
        }
        if (wire == 2) {
          const size_t len = rng->Below(12);
          PutVarint(b, rng->Coin(6) ? InterestingValue(rng) : len);
          for (size_t k = 0; k < len; ++k) b->push_back(static_cast<uint8_t>(rng->Next()));
        }
      } else if (kind == Kind::kText) {
        static const std::string kTokens[] = {
            "../", "/", "#", " ", "\t", "\n", "\r", std::string(1, '\0'),
            ".", "..", "./", "//", "out_link.jpg", "sub_link/", " 0", " -1",
            " 99999999999999999999", " 2147483648", " 1e3", " 0x10", "\xff\xfe"};
        const std::string& tok = kTokens[rng->Below(std::size(kTokens))];
        const size_t at = rng->Below(n + 1);
        b->insert(b->begin() + static_cast<ptrdiff_t>(at), tok.begin(), tok.end());
      } else {  // kJpeg: SOF dimension patch
        static const uint16_t kDims[] = {65535, 0, 1, 16384, 16385, 8192, 3};
        const uint16_t hh = rng->Coin(2) ? kDims[rng->Below(7)] : static_cast<uint16_t>(rng->Next());
        const uint16_t ww = rng->Coin(2) ? kDims[rng->Below(7)] : static_cast<uint16_t>(rng->Next());
        PatchSof(b, hh, ww);
      }
      break;
    case 9: {  // duplicate a marker segment (DQT/DHT/SOF/SOS/APPn...)
      const std::vector<Segment> segs = FindSegments(*b);
      if (segs.empty()) break;
      const Segment& s = segs[rng->Below(segs.size())];
      const size_t end = std::min(n, s.pos + 2 + s.length);
      Bytes copy(b->begin() + static_cast<ptrdiff_t>(s.pos),
                 b->begin() + static_cast<ptrdiff_t>(end));
      const Segment& where = segs[rng->Below(segs.size())];
      b->insert(b->begin() + static_cast<ptrdiff_t>(where.pos), copy.begin(), copy.end());
      break;
    }
    case 10: {  // corrupt a length field
      const std::vector<Segment> segs = FindSegments(*b);
      if (segs.empty()) break;
      const Segment& s = segs[rng->Below(segs.size())];
      static const uint16_t kLens[] = {0, 1, 2, 3, 0xFFFF, 0x8000};
      uint16_t len = rng->Coin(2) ? kLens[rng->Below(6)]
                                  : static_cast<uint16_t>(s.length + rng->Below(9) - 4);
      (*b)[s.pos + 2] = static_cast<uint8_t>(len >> 8);
      (*b)[s.pos + 3] = static_cast<uint8_t>(len);
      break;
    }
    case 11: {  // corrupt a table/frame byte inside a marker segment
      const std::vector<Segment> segs = FindSegments(*b);
      if (segs.empty()) break;
      const Segment& s = segs[rng->Below(segs.size())];
      if (s.length > 2 && s.pos + 4 < n) {
        const size_t at = s.pos + 4 + rng->Below(std::min(s.length - 2, n - s.pos - 4));
        (*b)[at] = static_cast<uint8_t>(rng->Coin(2) ? InterestingValue(rng) : rng->Next());
      }
      break;
    }
  }
}

Bytes Mutate(const Bytes& seed, Kind kind, Rng* rng, const std::vector<Bytes>& pool) {
  Bytes b = seed;
#ifndef NEARPREP_FUZZ_IMAGE_ONLY
  if (kind == Kind::kProto && rng->Coin(2)) {  // field-level only
    for (int r = 0, m = 1 + static_cast<int>(rng->Below(4)); r < m; ++r) {
      MutateProtoField(&b, rng);
    }
    return b;
  }
#endif
  const int rounds = 1 + static_cast<int>(rng->Below(rng->Coin(4) ? 8 : 3));
  for (int r = 0; r < rounds; ++r) MutateOnce(&b, kind, rng, pool);
  return b;
}

// ---------------------------------------------------------------------------
// Running a target.

#ifndef NEARPREP_FUZZ_DEFAULT_DIVISOR
#define NEARPREP_FUZZ_DEFAULT_DIVISOR 1
#endif

size_t ItersPerSeed(size_t default_iters) {
  const char* env = std::getenv("NEARPREP_FUZZ_ITERS");
  if (env == nullptr || *env == '\0') {
    return default_iters / NEARPREP_FUZZ_DEFAULT_DIVISOR;
  }
  return static_cast<size_t>(std::strtoull(env, nullptr, 10));
}

std::vector<Bytes> RegressionInputs(const std::string& target) {
  std::vector<Bytes> out;
  const std::filesystem::path dir =
      std::filesystem::path(NEARPREP_SOURCE_DIR) / "tests/fuzz/regressions" / target;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return out;
}

void MaybeWriteCorpus(const std::string& target, const std::vector<Bytes>& seeds) {
  const char* dir = std::getenv("NEARPREP_FUZZ_CORPUS_OUT");
  if (dir == nullptr || *dir == '\0') return;
  const std::string d = std::string(dir) + "/" + target;
  std::filesystem::create_directories(d);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(d + "/seed-" + std::to_string(i), std::ios::binary)
        .write(reinterpret_cast<const char*>(seeds[i].data()),
               static_cast<std::streamsize>(seeds[i].size()));
  }
}

struct RunStats {
  size_t inputs = 0;
  size_t failures = 0;
};

// Runs one input; on failed checks records a gtest failure and saves it.
void RunOne(const std::string& target, TargetFn fn, const Bytes& input,
            const std::string& origin, RunStats* stats) {
  ++stats->inputs;
  g_failures.clear();
  static const uint8_t kEmpty = 0;
  g_current_data = input.empty() ? &kEmpty : input.data();
  g_current_size = input.size();
  fn(input.empty() ? &kEmpty : input.data(), input.size());
  if (g_failures.empty()) return;
  ++stats->failures;
  const std::string path = FailureDir() + "/" + target + "-" +
                           std::to_string(stats->inputs) + ".bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()),
             static_cast<std::streamsize>(input.size()));
  if (stats->failures <= 10) {
    std::string all;
    for (const std::string& f : g_failures) all += "\n  " + f;
    ADD_FAILURE() << target << " (" << origin << ", " << input.size()
                  << " bytes, saved to " << path << "):" << all;
  }
}

void RunTarget(const std::string& target, TargetFn fn, const std::vector<Bytes>& seeds,
               Kind kind, size_t default_iters) {
  InstallCrashHandlers();
  SetFailureHandler(&RecordFailure);
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%s.bin",
                FailureDir().c_str(), target.c_str());
  MaybeWriteCorpus(target, seeds);
  const auto start = std::chrono::steady_clock::now();
  RunStats stats;
  const std::vector<Bytes> regressions = RegressionInputs(target);
  // The kernel's regression files and seeds all run on the threaded C
  // simulation too; its mutations, one in FpgaKernelThreadedEvery().
  SetFpgaKernelAllThreaded(true);
  for (size_t i = 0; i < regressions.size(); ++i) {
    RunOne(target, fn, regressions[i], "regression file " + std::to_string(i), &stats);
  }
  for (size_t i = 0; i < seeds.size(); ++i) {
    RunOne(target, fn, seeds[i], "seed " + std::to_string(i), &stats);
  }
  SetFpgaKernelAllThreaded(false);
  const size_t iters = ItersPerSeed(default_iters);
  for (size_t i = 0; i < seeds.size(); ++i) {
    Rng rng(0x6E656172707265ull ^ (static_cast<uint64_t>(i) << 32) ^
            std::hash<std::string>{}(target));
    for (size_t k = 0; k < iters; ++k) {
      RunOne(target, fn, Mutate(seeds[i], kind, &rng, seeds),
             "seed " + std::to_string(i) + " mutation " + std::to_string(k), &stats);
    }
  }
  SetFailureHandler(nullptr);
  g_crash_path[0] = '\0';
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[fuzz] %s: %zu inputs (%zu regression files, %zu seeds x %zu "
              "mutations) in %.2f s, %zu failing\n[fuzz]   outcomes: %s\n",
              target.c_str(), stats.inputs, regressions.size(), seeds.size(), iters,
              secs, stats.failures, OutcomeSummary(target.c_str()).c_str());
}

// ---------------------------------------------------------------------------
// Tests.

TEST(FuzzSeeds, JpegSeedsAreValidAndVaried) {
  // The seeds must themselves decode (else the mutations start from junk),
  // and cover progressive, arithmetic, CMYK and gray.
  DecodeLimits limits;
  int progressive = 0, arithmetic = 0, cmyk = 0, gray = 0;
  for (const Bytes& s : JpegSeeds()) {
    auto header = ReadJpegHeader(s.data(), s.size(), limits);
    ASSERT_TRUE(header.ok()) << header.status();
    progressive += header->progressive;
    arithmetic += header->arithmetic;
    cmyk += header->components == 4;
    gray += header->components == 1;
    auto img = DecodeJpegTfCompat(s.data(), s.size(), limits);
    ASSERT_TRUE(img.ok()) << img.status();
  }
  EXPECT_GE(progressive, 2);
  EXPECT_GE(arithmetic, 1);
  EXPECT_GE(cmyk, 1);
  EXPECT_GE(gray, 2);
}

TEST(FuzzSeeds, MutatorPatchesSof) {
  Bytes b = JpegSeeds()[0];
  ASSERT_TRUE(PatchSof(&b, 60000, 60001));
  DecodeLimits limits;
  auto header = ReadJpegHeader(b.data(), b.size(), limits);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), absl::StatusCode::kResourceExhausted)
      << header.status();
}

// Forged huge headers are refused at the header, quickly, by every decode
// entry point and by the FPGA kernel: 60000x60000 (under libjpeg's own
// 65500-pixel cap: our limit refuses it) and 65535x65535 (libjpeg's cap
// refuses it first); both are limit errors, RESOURCE_EXHAUSTED.
TEST(FuzzHugeHeader, RefusedQuicklyEverywhere) {
  DecodeLimits limits;  // TensorFlow's 2^29
  for (const uint16_t dim : {uint16_t{60000}, uint16_t{65535}}) {
    const absl::StatusCode want = absl::StatusCode::kResourceExhausted;
    for (size_t i = 0; i < JpegSeeds().size(); ++i) {
      Bytes b = JpegSeeds()[i];
      ASSERT_TRUE(PatchSof(&b, dim, dim)) << "seed " << i;
      const auto start = std::chrono::steady_clock::now();
      auto header = ReadJpegHeader(b.data(), b.size(), limits);
      auto tf = DecodeJpegTfCompat(b.data(), b.size(), limits);
      CropBox scaled;
      auto fast = DecodeJpegFast(b.data(), b.size(), limits,
                                 CropBox{0, 0, dim, dim}, 224, 224, &scaled);
      int h = 0, w = 0;
      uint8_t* rgb = nullptr;
      nearprep_fpga::DecodeCycles cyc;
      const uint32_t k = nearprep_fpga::DecodeJpegToRgb(
          b.data(), static_cast<uint32_t>(b.size()), limits.max_decoded_values,
          &h, &w, &rgb, &cyc);
      nearprep_fpga::FreeRgb(rgb);
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start).count();
      const std::string where = "seed " + std::to_string(i) + " at " +
                                std::to_string(dim) + "x" + std::to_string(dim);
      EXPECT_EQ(header.status().code(), want) << where << ": " << header.status();
      EXPECT_EQ(tf.status().code(), want) << where << ": " << tf.status();
      EXPECT_EQ(fast.status().code(), want) << where << ": " << fast.status();
      // The kernel refuses too (TOO_LARGE, or UNSUPPORTED for what it never
      // decodes: progressive, arithmetic, CMYK).
      EXPECT_NE(k, nearprep_fpga::kStatusOk) << where;
      EXPECT_LT(ms, 250.0) << where << ": refusing took " << ms << " ms";
    }
  }
}

TEST(Fuzz, JpegDecode) {
  RunTarget("jpeg_decode", &FuzzJpegDecode, JpegSeeds(), Kind::kJpeg, 2000);
}

TEST(Fuzz, FpgaKernel) {
  RunTarget("fpga_kernel", &FuzzFpgaKernel, JpegSeeds(), Kind::kJpeg, 2000);
}

#ifndef NEARPREP_FUZZ_IMAGE_ONLY
TEST(Fuzz, StreamRequest) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 is logged
  RunTarget("stream_request", &FuzzStreamRequest, RequestSeeds(), Kind::kProto, 20000);
}

TEST(Fuzz, Records) {
  spdlog::set_level(spdlog::level::off);
  RunTarget("records", &FuzzRecords, RecordSeeds(), Kind::kJpeg, 20000);
}

TEST(Fuzz, FileList) {
  spdlog::set_level(spdlog::level::off);  // refusals are logged otherwise
  RunTarget("file_list", &FuzzFileList, FileListSeeds(), Kind::kText, 200);
}
#endif

}  // namespace
}  // namespace fuzz
}  // namespace nearprep
