// See mkdataset.h.
#include "cli/mkdataset/mkdataset.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nearprep {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kSubsamplings[4] = {TJSAMP_420, TJSAMP_422, TJSAMP_444,
                                  TJSAMP_GRAY};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Portable draws (std::uniform_*_distribution are not specified bit for bit).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int Int(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(gen_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  double Range(double lo, double hi) { return lo + (hi - lo) * Unit(); }

 private:
  std::mt19937_64 gen_;
};

struct Rgb {
  uint8_t r, g, b;
};

uint8_t ToByte(double v) {
  return static_cast<uint8_t>(std::clamp(std::lround(v * 255.0), 0L, 255L));
}

Rgb Hsv(double h, double s, double v) {
  h = h - std::floor(h);
  const double c = v * s;
  const double hp = h * 6.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(hp) % 6) {
    case 0:
      r = c;
      g = x;
      break;
    case 1:
      r = x;
      g = c;
      break;
    case 2:
      g = c;
      b = x;
      break;
    case 3:
      g = x;
      b = c;
      break;
    case 4:
      r = x;
      b = c;
      break;
    default:
      r = c;
      b = x;
      break;
  }
  const double m = v - c;
  return {ToByte(r + m), ToByte(g + m), ToByte(b + m)};
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3) {}
  int w() const { return w_; }
  int h() const { return h_; }
  const uint8_t* data() const { return px_.data(); }
  void Set(int x, int y, Rgb c) {
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }
  uint8_t* Pixel(int x, int y) {
    return &px_[(static_cast<size_t>(y) * w_ + x) * 3];
  }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

enum Shape { kCircle, kRing, kRect, kTriangle, kStripes, kNumShapes };

void Gradient(Canvas* cv, Rgb a, Rgb b, double angle) {
  const double ca = std::cos(angle), sa = std::sin(angle);
  const double span = std::fabs(ca) * cv->w() + std::fabs(sa) * cv->h();
  const double off = std::min(0.0, ca * cv->w()) + std::min(0.0, sa * cv->h());
  for (int y = 0; y < cv->h(); ++y) {
    for (int x = 0; x < cv->w(); ++x) {
      const double t = std::clamp((x * ca + y * sa - off) / span, 0.0, 1.0);
      cv->Set(x, y,
              Rgb{static_cast<uint8_t>(a.r + (b.r - a.r) * t),
                  static_cast<uint8_t>(a.g + (b.g - a.g) * t),
                  static_cast<uint8_t>(a.b + (b.b - a.b) * t)});
    }
  }
}

void DrawShape(Canvas* cv, Shape shape, Rgb color, Rgb color2, Rgb bg,
               Rng* rng) {
  const int w = cv->w(), h = cv->h();
  const int m = std::min(w, h);
  switch (shape) {
    case kCircle:
    case kRing: {
      const int r = rng->Int(std::max(2, m / 12), std::max(3, m / 3));
      const int cx = rng->Int(0, w - 1), cy = rng->Int(0, h - 1);
      const double inner = shape == kRing ? 0.6 * r : -1.0;
      for (int y = std::max(0, cy - r); y <= std::min(h - 1, cy + r); ++y) {
        for (int x = std::max(0, cx - r); x <= std::min(w - 1, cx + r); ++x) {
          const double d = std::hypot(x - cx, y - cy);
          if (d <= r && d >= inner) cv->Set(x, y, color);
        }
      }
      break;
    }
    case kRect: {
      const int x0 = rng->Int(0, w - 2), y0 = rng->Int(0, h - 2);
      const int x1 = std::min(w - 1, x0 + rng->Int(2, std::max(2, m / 2)));
      const int y1 = std::min(h - 1, y0 + rng->Int(2, std::max(2, m / 2)));
      for (int y = y0; y <= y1; ++y)
        for (int x = x0; x <= x1; ++x) cv->Set(x, y, color);
      break;
    }
    case kTriangle: {
      const double px[3] = {rng->Range(0, w), rng->Range(0, w),
                            rng->Range(0, w)};
      const double py[3] = {rng->Range(0, h), rng->Range(0, h),
                            rng->Range(0, h)};
      const int x0 =
          std::max(0, static_cast<int>(*std::min_element(px, px + 3)));
      const int x1 =
          std::min(w - 1, static_cast<int>(*std::max_element(px, px + 3)));
      const int y0 =
          std::max(0, static_cast<int>(*std::min_element(py, py + 3)));
      const int y1 =
          std::min(h - 1, static_cast<int>(*std::max_element(py, py + 3)));
      auto edge = [&](int i, int j, double x, double y) {
        return (px[j] - px[i]) * (y - py[i]) - (py[j] - py[i]) * (x - px[i]);
      };
      for (int y = y0; y <= y1; ++y) {
        for (int x = x0; x <= x1; ++x) {
          const double e0 = edge(0, 1, x, y), e1 = edge(1, 2, x, y),
                       e2 = edge(2, 0, x, y);
          if ((e0 >= 0 && e1 >= 0 && e2 >= 0) ||
              (e0 <= 0 && e1 <= 0 && e2 <= 0)) {
            cv->Set(x, y, color);
          }
        }
      }
      break;
    }
    case kStripes: {
      const double angle = rng->Range(0, kPi);
      const double period = rng->Range(4, std::max(5, m / 6));
      const double ca = std::cos(angle), sa = std::sin(angle);
      const int x0 = rng->Int(0, w / 2), y0 = rng->Int(0, h / 2);
      const int x1 = rng->Int(x0 + 1, w - 1), y1 = rng->Int(y0 + 1, h - 1);
      for (int y = y0; y <= y1; ++y) {
        for (int x = x0; x <= x1; ++x) {
          const long band =
              static_cast<long>(std::floor((x * ca + y * sa) / period));
          cv->Set(x, y, (band % 2 == 0) ? color : color2);
        }
      }
      (void)bg;
      break;
    }
    default:
      break;
  }
}

// One procedural picture; `hue` and `favourite` are the class's look.
Canvas Render(int w, int h, double hue, Shape favourite, Rng* rng) {
  Canvas cv(w, h);
  const Rgb a = Hsv(hue + rng->Range(-0.08, 0.08), rng->Range(0.2, 0.8),
                    rng->Range(0.2, 0.9));
  const Rgb b = Hsv(hue + rng->Range(-0.08, 0.08) + 0.5, rng->Range(0.1, 0.6),
                    rng->Range(0.3, 1.0));
  Gradient(&cv, a, b, rng->Range(0, 2 * kPi));
  const int shapes = rng->Int(3, 8);
  for (int i = 0; i < shapes; ++i) {
    const Shape s = rng->Unit() < 0.6
                        ? favourite
                        : static_cast<Shape>(rng->Int(0, kNumShapes - 1));
    const Rgb c1 = Hsv(hue + rng->Range(-0.15, 0.15), rng->Range(0.4, 1.0),
                       rng->Range(0.3, 1.0));
    const Rgb c2 = Hsv(hue + rng->Range(0.3, 0.7), rng->Range(0.2, 1.0),
                       rng->Range(0.2, 1.0));
    DrawShape(&cv, s, c1, c2, a, rng);
  }
  const int noise = rng->Int(0, 24);
  if (noise > 0) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        uint8_t* p = cv.Pixel(x, y);
        for (int c = 0; c < 3; ++c) {
          const int v = p[c] + rng->Int(-noise, noise);
          p[c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
        }
      }
    }
  }
  return cv;
}

absl::Status Encode(const Canvas& cv, int subsampling, int quality,
                    bool progressive, std::vector<uint8_t>* out) {
  tjhandle tj = tjInitCompress();
  if (tj == nullptr) return absl::InternalError("tjInitCompress failed");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(tj, cv.data(), cv.w(), 0, cv.h(), TJPF_RGB, &buf, &size,
                  subsampling, quality, progressive ? TJFLAG_PROGRESSIVE : 0);
  absl::Status status;
  if (rc != 0) {
    status =
        absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(tj)));
  } else {
    out->assign(buf, buf + size);
  }
  tjFree(buf);
  tjDestroy(tj);
  return status;
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", path.string(),
                                            ": ", std::strerror(errno)));
  }
  const size_t n =
      bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fclose(f) == 0;
  if (!ok) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(),
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

uint16_t Be16(const std::vector<uint8_t>& b, size_t i) {
  return static_cast<uint16_t>((b[i] << 8) | b[i + 1]);
}

// Offsets of the first SOF marker and of the first byte of entropy-coded
// data (after the SOS header) in a JPEG we just encoded.
bool FindSegments(const std::vector<uint8_t>& b, size_t* sof, size_t* scan) {
  *sof = 0;
  size_t pos = 2;
  while (pos + 4 <= b.size()) {
    if (b[pos] != 0xFF) return false;
    const uint8_t m = b[pos + 1];
    const size_t len = Be16(b, pos + 2);
    const bool is_sof =
        m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (is_sof && *sof == 0) *sof = pos;
    if (m == 0xDA) {
      *scan = pos + 2 + len;
      return *sof != 0 && *scan < b.size();
    }
    pos += 2 + len;
  }
  return false;
}

// Offset of the next SOS marker at or after `from` (inside entropy-coded
// data, where 0xFF is always followed by 0x00 or a marker), or 0.
size_t FindNextScan(const std::vector<uint8_t>& b, size_t from) {
  for (size_t i = from; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xDA) return i;
  }
  return 0;
}

// Bad files are named bad_*.jpg; they sort before the class's img_* files.
constexpr char kBadPrefix[] = "bad_";

absl::Status WriteBadFiles(const std::filesystem::path& root,
                           const std::string& cls, uint64_t seed,
                           MkDatasetSummary* summary) {
  const std::filesystem::path dir = root / cls;
  Rng rng(SplitMix64(seed ^ 0xBADF11E5ull));
  Canvas cv = Render(96, 80, 0.6, kCircle, &rng);
  std::vector<uint8_t> good;
  absl::Status s = Encode(cv, TJSAMP_420, 85, false, &good);
  if (!s.ok()) return s;
  size_t sof = 0, scan = 0;
  if (!FindSegments(good, &sof, &scan)) {
    return absl::InternalError("unexpected JPEG layout from tjCompress2");
  }
  const size_t scan_len = good.size() - 2 - scan;  // up to EOI

  // corrupt.jpg: a progressive JPEG whose headers up to the first scan are
  // intact; the first scan's entropy-coded data is overwritten with noise
  // (libjpeg only warns about that) and the second scan's header says
  // Ss=64 > Se, which every libjpeg decoder stops on (fatal error
  // "Invalid progressive parameters").
  std::vector<uint8_t> corrupt;
  s = Encode(cv, TJSAMP_420, 85, true, &corrupt);
  if (!s.ok()) return s;
  size_t csof = 0, cscan = 0;
  const bool parsed = FindSegments(corrupt, &csof, &cscan);
  const size_t second = parsed ? FindNextScan(corrupt, cscan) : 0;
  if (second <= cscan + 8) {
    return absl::InternalError("unexpected progressive JPEG layout");
  }
  size_t begin = cscan + (second - cscan) / 8;
  if (corrupt[begin - 1] == 0xFF) ++begin;  // keep a stuffed 0xFF00 whole
  const size_t end = cscan + (second - cscan) * 7 / 8;
  for (size_t i = begin; i < end; ++i) {
    corrupt[i] = static_cast<uint8_t>(rng.Int(0, 0xFE));  // no markers
  }
  const size_t ss = second + 5 + 2 * corrupt[second + 4];  // after Ns pairs
  corrupt[ss] = 64;
  std::vector<uint8_t> truncated(good.begin(),
                                 good.begin() + scan + scan_len / 2);
  std::vector<uint8_t> huge = good;
  for (size_t off : {sof + 5, sof + 7}) {  // height, width
    huge[off] = 0xFD;                      // 65000 = 0xFDE8
    huge[off + 1] = 0xE8;
  }
  const std::string text =
      "This is not a JPEG file: nearprep mkdataset wrote it to test how a "
      "decoder refuses input that is not an image.\n";
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"corrupt.jpg", corrupt},
      {"truncated.jpg", truncated},
      {"empty.jpg", {}},
      {"not_a_jpeg.jpg", std::vector<uint8_t>(text.begin(), text.end())},
      {"huge_header.jpg", huge},
  };
  for (const auto& [name, bytes] : files) {
    s = WriteFile(dir / (kBadPrefix + name), bytes);
    if (!s.ok()) return s;
    summary->bad_files.push_back(cls + "/" + kBadPrefix + name);
    summary->total_bytes += bytes.size();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MakeSyntheticDataset(const MkDatasetOptions& o) {
  MkDatasetSummary unused;
  return MakeSyntheticDataset(o, &unused);
}

absl::Status MakeSyntheticDataset(const MkDatasetOptions& o,
                                  MkDatasetSummary* summary) {
  if (o.output_dir.empty()) {
    return absl::InvalidArgumentError("output_dir: must not be empty");
  }
  if (o.num_classes < 1 || o.num_classes > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes: must be in [1, 1000], got ", o.num_classes));
  }
  if (o.images_per_class < 1 || o.images_per_class > 100000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "images_per_class: must be in [1, 100000], got ", o.images_per_class));
  }
  if (o.min_side < 8 || o.max_side > 8192 || o.min_side > o.max_side) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_side/max_side: need 8 <= min <= max <= 8192, got ",
                     o.min_side, "/", o.max_side));
  }
  *summary = MkDatasetSummary();
  const std::filesystem::path root(o.output_dir);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", o.output_dir, ": ", ec.message()));
  }
  for (int c = 0; c < o.num_classes; ++c) {
    const std::string cls = absl::StrFormat("class_%03d", c);
    std::filesystem::create_directories(root / cls, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          "cannot create ", (root / cls).string(), ": ", ec.message()));
    }
    const double hue = std::fmod(c * 0.6180339887498949, 1.0);
    const Shape favourite = static_cast<Shape>(c % kNumShapes);
    for (int k = 0; k < o.images_per_class; ++k) {
      const uint64_t g = static_cast<uint64_t>(c) * o.images_per_class + k;
      Rng rng(SplitMix64(o.seed * 0x100000001B3ull + g));
      MkDatasetSummary::Image img;
      img.label = c;
      img.width = rng.Int(o.min_side, o.max_side);
      img.height = rng.Int(o.min_side, o.max_side);
      img.quality = rng.Int(50, 95);
      img.subsampling = kSubsamplings[g % 4];
      img.progressive = g % 5 == 3;
      const char* ext = g % 8 == 7 ? ".JPEG" : ".jpg";
      img.path = absl::StrFormat("%s/img_%05d%s", cls, k, ext);
      Canvas cv = Render(img.width, img.height, hue, favourite, &rng);
      std::vector<uint8_t> jpeg;
      absl::Status s =
          Encode(cv, img.subsampling, img.quality, img.progressive, &jpeg);
      if (!s.ok()) return s;
      s = WriteFile(root / img.path, jpeg);
      if (!s.ok()) return s;
      img.bytes = jpeg.size();
      summary->total_bytes += jpeg.size();
      summary->images.push_back(std::move(img));
    }
  }
  if (o.with_bad_files) {
    // Inside the first class (not a folder of their own, which an image
    // folder scan would take for one more class).
    absl::Status s = WriteBadFiles(root, "class_000", o.seed, summary);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace nearprep
