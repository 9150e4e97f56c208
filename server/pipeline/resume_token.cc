#include "server/pipeline/resume_token.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/percent_escape.h"
#include "server/data/dataset.h"

namespace nearprep {
namespace {

constexpr char kMagic[] = "nearprep-resume-1";
// At most this long (a dataset name is short; the rest is numbers).
constexpr size_t kMaxTokenBytes = 4096;

// The dataset name as one field value: percent-escaped, ';' and '=' (the
// token's separators) too. Tokens hold the escaped name and are compared as
// text, so this must keep writing the same bytes (common/percent_escape.h).
std::string Escape(const std::string& s) { return PercentEscape(s, ";="); }

// Fields of a token or binding, in order, after the magic.
bool Split(const std::string& text,
           std::vector<std::pair<std::string, std::string>>* fields) {
  std::vector<std::string> parts = absl::StrSplit(text, ';');
  if (parts.empty() || parts[0] != kMagic) return false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0) return false;
    fields->emplace_back(parts[i].substr(0, eq), parts[i].substr(eq + 1));
  }
  return true;
}

absl::Status Invalid(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("resume_token: ", why));
}

}  // namespace

std::string ResumeBinding(const StreamRequest& r) {
  const WorkContext& c = r.context;
  std::string shuffle = "none";
  if (r.shuffle) {
    shuffle = r.block_shuffle
                  ? absl::StrCat("block:", r.block.block_samples, "/",
                                 r.block.open_blocks, "/", r.block.window)
                  : "global";
  }
  return absl::StrCat(
      kMagic, ";dataset=", c.source ? Escape(c.source->dataset().name()) : "",
      ";listing=", c.source ? c.source->dataset().listing_version() : "",
      ";seed=", c.seed, ";epoch=", c.epoch, ";shuffle=", shuffle,
      ";batch_size=", r.batch_size, ";shard=", r.shard_index, "/",
      r.num_shards);
}

std::string ResumeToken(const std::string& binding, uint64_t next_batch,
                        uint64_t position) {
  return absl::StrCat(binding, ";batch=", next_batch, ";position=", position);
}

absl::Status CheckResumeToken(const std::string& token,
                              const std::string& binding, uint64_t* batch,
                              uint64_t* position) {
  std::vector<std::pair<std::string, std::string>> got, want;
  if (token.size() > kMaxTokenBytes || !Split(token, &got)) {
    return Invalid(
        "not a resume token (send back Batch.resume_token unchanged)");
  }
  if (!Split(binding, &want)) return absl::InternalError("bad binding");
  if (got.size() != want.size() + 2) {
    return Invalid("malformed (want the fields of Batch.resume_token)");
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].first != want[i].first) {
      return Invalid(absl::StrCat("malformed: field ", i + 1, " is '",
                                  got[i].first, "', want '", want[i].first,
                                  "'"));
    }
    if (got[i].second != want[i].second) {
      const std::string& f = want[i].first;
      std::string what = f;
      if (f == "listing") {
        what = "listing (the dataset's samples changed since the token was "
               "issued)";
      }
      return Invalid(absl::StrCat(
          "belongs to another stream: ", what, " is ", got[i].second,
          " in the token, ", want[i].second,
          " in this request (a token resumes only the stream that sent it: "
          "same dataset and listing, seed, epoch, shuffle, batch_size, "
          "shard)"));
    }
  }
  const auto& b = got[want.size()];
  const auto& p = got[want.size() + 1];
  if (b.first != "batch" || !absl::SimpleAtoi(b.second, batch) ||
      p.first != "position" || !absl::SimpleAtoi(p.second, position)) {
    return Invalid("malformed batch or position");
  }
  if (*batch == 0 || *position < *batch) {
    return Invalid(absl::StrCat("batch ", *batch, " cannot begin at position ",
                                *position));
  }
  return absl::OkStatus();
}

}  // namespace nearprep
