#include "cli/npy.h"

#include <cctype>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace nearprep {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;

// Element size encoded in a descr like "<f4" / "|u1".
size_t DescrSize(std::string_view descr) {
  if (descr.size() < 3) return 0;
  size_t n = 0;
  for (char c : descr.substr(2)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return 0;
    n = n * 10 + static_cast<size_t>(c - '0');
    if (n > 64) return 0;
  }
  return n;
}

// Minimal cursor over the header dict.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n')) ++i_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Quoted(std::string* out) {
    SkipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  bool Word(std::string* out) {
    SkipSpace();
    size_t start = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_])))
      ++i_;
    *out = std::string(s_.substr(start, i_ - start));
    return !out->empty();
  }
  bool Number(uint64_t* out) {
    SkipSpace();
    size_t start = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      const uint64_t d = static_cast<uint64_t>(s_[i_] - '0');
      if (v > (UINT64_MAX - d) / 10) return false;
      v = v * 10 + d;
      ++i_;
    }
    *out = v;
    return i_ > start;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<std::string> NpyDescr(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return std::string("<f4");
    case v1::DTYPE_FLOAT16: return std::string("<f2");
    case v1::DTYPE_BFLOAT16: return std::string("<u2");
    case v1::DTYPE_UINT8: return std::string("|u1");
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor.dtype: unknown dtype ", static_cast<int>(dtype)));
}

size_t WireDTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return 4;
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16: return 2;
    case v1::DTYPE_UINT8: return 1;
    default: return 0;
  }
}

absl::StatusOr<std::string> NpyPreamble(std::string_view descr,
                                        const std::vector<uint64_t>& shape) {
  std::string dict = absl::StrCat("{'descr': '", std::string(descr),
                                  "', 'fortran_order': False, 'shape': (");
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StrAppend(&dict, shape[i], i + 1 < shape.size() ? ", " : "");
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // magic(6) + version(2) + len(2) + dict + padding + '\n' = k * 64.
  const size_t unpadded = kMagicLen + 4 + dict.size() + 1;
  const size_t total = (unpadded + kAlign - 1) / kAlign * kAlign;
  const size_t header_len = total - kMagicLen - 4;
  if (header_len > 0xFFFF) {
    return absl::InvalidArgumentError("npy: header too long for format 1.0");
  }
  std::string out(kMagic, kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_len & 0xFF));
  out.push_back(static_cast<char>(header_len >> 8));
  out += dict;
  out.append(total - unpadded, ' ');
  out.push_back('\n');
  return out;
}

absl::Status WriteNpy(const std::string& path, std::string_view descr,
                      const std::vector<uint64_t>& shape, const void* data,
                      size_t size) {
  const size_t elem = DescrSize(descr);
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat("npy: bad descr ", std::string(descr)));
  }
  uint64_t count = 1;
  for (uint64_t d : shape) {
    if (d != 0 && count > UINT64_MAX / d) {
      return absl::InvalidArgumentError("npy: shape overflows");
    }
    count *= d;
  }
  if (count > UINT64_MAX / elem || count * elem != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: ", size, " data bytes do not match shape x ", elem, " bytes"));
  }
  absl::StatusOr<std::string> pre = NpyPreamble(descr, shape);
  if (!pre.ok()) return pre.status();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"),
                                          &std::fclose);
  if (!f) return absl::InternalError(absl::StrCat("cannot create ", path));
  if (std::fwrite(pre->data(), 1, pre->size(), f.get()) != pre->size() ||
      (size > 0 && std::fwrite(data, 1, size, f.get()) != size)) {
    return absl::InternalError(absl::StrCat("write failed: ", path));
  }
  if (std::fclose(f.release()) != 0) {
    return absl::InternalError(absl::StrCat("close failed: ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteTensorNpy(const std::string& path, const v1::Tensor& tensor) {
  absl::StatusOr<std::string> descr = NpyDescr(tensor.dtype());
  if (!descr.ok()) return descr.status();
  std::vector<uint64_t> shape(tensor.shape().begin(), tensor.shape().end());
  return WriteNpy(path, *descr, shape, tensor.data().data(),
                  tensor.data().size());
}

absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes) {
  auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("npy: ", std::string(why)));
  };
  if (bytes.size() < kMagicLen + 4 ||
      bytes.substr(0, kMagicLen) != std::string_view(kMagic, kMagicLen)) {
    return bad("missing magic");
  }
  NpyHeader h;
  h.major = static_cast<unsigned char>(bytes[6]);
  h.minor = static_cast<unsigned char>(bytes[7]);
  size_t len = 0, pos = 0;
  auto b = [&](size_t i) {
    return static_cast<size_t>(static_cast<unsigned char>(bytes[i]));
  };
  if (h.major == 1) {
    len = b(8) | (b(9) << 8);
    pos = 10;
  } else if (h.major == 2 || h.major == 3) {
    if (bytes.size() < 12) return bad("truncated length");
    len = b(8) | (b(9) << 8) | (b(10) << 16) | (b(11) << 24);
    pos = 12;
  } else {
    return bad("unsupported version");
  }
  if (len > bytes.size() - pos) return bad("truncated header");
  h.data_offset = pos + len;
  Cursor c(bytes.substr(pos, len));
  if (!c.Eat('{')) return bad("header is not a dict");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!c.Eat('}')) {
    std::string key;
    if (!c.Quoted(&key) || !c.Eat(':')) return bad("bad key");
    if (key == "descr") {
      if (!c.Quoted(&h.descr)) return bad("bad descr");
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string w;
      if (!c.Word(&w) || (w != "True" && w != "False")) {
        return bad("bad fortran_order");
      }
      h.fortran_order = w == "True";
      have_order = true;
    } else if (key == "shape") {
      if (!c.Eat('(')) return bad("bad shape");
      while (!c.Eat(')')) {
        uint64_t d = 0;
        if (!c.Number(&d)) return bad("bad shape element");
        h.shape.push_back(d);
        if (h.shape.size() > 64) return bad("too many dimensions");
        c.Eat(',');
      }
      have_shape = true;
    } else {
      return bad(absl::StrCat("unknown key ", key));
    }
    c.Eat(',');
  }
  if (!have_descr || !have_order || !have_shape) return bad("missing key");
  return h;
}

}  // namespace nearprep
