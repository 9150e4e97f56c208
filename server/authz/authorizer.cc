#include "server/authz/authorizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace nearprep {
namespace authz {
namespace {

void AppendJsonString(std::string* out, const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          // Bytes outside printable ASCII (names are bytes, maybe not
          // UTF-8): \u00XX keeps every line valid JSON.
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// -1 for no path.
absl::StatusOr<int> OpenAuditLog(const std::string& path) {
  if (path.empty()) return -1;
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        "authorization.audit_log: cannot open '" + path +
        "' for appending: " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

std::string AuditJson(const AuditRecord& r) {
  std::string out = "{";
  const auto field = [&out](const char* key, const std::string& value) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(&out, key);
    out.push_back(':');
    AppendJsonString(&out, value);
  };
  field("time", r.time);
  field("identity", r.identity);
  field("peer", r.peer);
  field("dataset", r.dataset);
  field("operation", std::string(OperationName(r.operation)));
  field("decision", r.decision);
  field("rule", r.rule);
  out.push_back('}');
  return out;
}

absl::StatusOr<std::shared_ptr<const Policy>> LoadPolicy(
    const PolicyConfig& config) {
  std::vector<TokenEntry> tokens;
  if (!config.token_file.empty()) {
    absl::StatusOr<std::vector<TokenEntry>> t =
        LoadTokenFile(config.token_file);
    if (!t.ok()) return t.status();
    tokens = std::move(*t);
  }
  return Policy::Create(config, std::move(tokens));
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(
    const PolicyConfig& config, std::vector<std::string> datasets) {
  std::unique_ptr<Authorizer> a(new Authorizer());
  a->datasets_ = std::move(datasets);
  absl::StatusOr<std::shared_ptr<const Policy>> p = LoadPolicy(config);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> f = OpenAuditLog(config.audit_log);
  if (!f.ok()) return f.status();
  MutexLock l(&a->mu_);
  a->policy_ = std::move(*p);
  a->audit_fd_ = *f;
  a->audit_path_ = config.audit_log;
  return a;
}

Authorizer::~Authorizer() {
  MutexLock l(&mu_);
  if (audit_fd_ >= 0) ::close(audit_fd_);
}

absl::Status Authorizer::Reload(const PolicyConfig& config) {
  absl::StatusOr<std::shared_ptr<const Policy>> p = LoadPolicy(config);
  absl::StatusOr<int> f =
      p.ok() ? OpenAuditLog(config.audit_log) : absl::StatusOr<int>(-1);
  MutexLock l(&mu_);
  if (!p.ok() || !f.ok()) {
    ++reloads_failed_;
    return p.ok() ? f.status() : p.status();
  }
  if (policy_->enabled() && !(*p)->enabled()) {
    spdlog::warn("authorization: the reloaded config has no authorization "
                 "section: every client may now read every dataset");
  }
  policy_ = std::move(*p);
  if (audit_fd_ >= 0) ::close(audit_fd_);
  audit_fd_ = *f;
  audit_path_ = config.audit_log;
  ++reloads_ok_;
  return absl::OkStatus();
}

std::shared_ptr<const Policy> Authorizer::policy() const {
  MutexLock l(&mu_);
  return policy_;
}

bool Authorizer::enabled() const { return policy()->enabled(); }

bool Authorizer::WriteAuditLine(const std::string& line) {
  std::string buf = line;
  buf.push_back('\n');
  size_t done = 0;
  int error = 0;
  while (done < buf.size()) {
    const ssize_t n = ::write(audit_fd_, buf.data() + done, buf.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    if (n == 0) {
      error = ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  const absl::Time now = absl::Now();
  if (error == 0) {
    if (audit_failures_in_run_ > 0) {
      spdlog::warn(
          "audit log '{}' written again; {} audit record(s) were lost "
          "(nearprep_authz_audit_write_failures_total)",
          audit_path_, audit_failures_in_run_);
      audit_failures_in_run_ = 0;
      audit_failures_unlogged_ = 0;
      audit_error_logged_ = absl::InfinitePast();
    }
    return true;
  }
  // O_APPEND: the offset is the end of what this call wrote. Cut a partial
  // line away so that every line of the file stays one JSON record.
  if (done > 0) {
    const off_t end = ::lseek(audit_fd_, 0, SEEK_CUR);
    if (end >= static_cast<off_t>(done)) {
      (void)::ftruncate(audit_fd_, end - static_cast<off_t>(done));
    }
  }
  ++audit_write_failures_;
  ++audit_failures_in_run_;
  ++audit_failures_unlogged_;
  if (now - audit_error_logged_ >= kAuditErrorLogInterval) {
    const bool closed = policy_->config().audit_fail_closed;
    spdlog::error(
        "audit log '{}' cannot be written ({}): {} audit record(s) lost "
        "since the last report; {} (nearprep_authz_audit_write_failures_"
        "total counts every one, this is logged at most every {}s)",
        audit_path_, std::strerror(error), audit_failures_unlogged_,
        closed ? "streams are refused (audit_fail_closed)"
               : "streams are served unaudited",
        absl::ToInt64Seconds(kAuditErrorLogInterval));
    audit_failures_unlogged_ = 0;
    audit_error_logged_ = now;
  }
  return false;
}

bool Authorizer::Record(const Credentials& c, const std::string& identity,
                        Operation op, const std::string& dataset,
                        const std::string& decision, const std::string& rule,
                        bool refuse_if_lost) {
  AuditRecord r;
  r.time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                            absl::UTCTimeZone());
  r.identity = identity;
  r.peer = c.peer;
  r.dataset = dataset;
  r.operation = op;
  r.decision = decision;
  r.rule = rule;
  const std::string line = AuditJson(r);
  std::string label;
  if (!dataset.empty()) {
    label = std::find(datasets_.begin(), datasets_.end(), dataset) !=
                    datasets_.end()
                ? dataset
                : "(other)";
  }
  MutexLock l(&mu_);
  bool written = true;
  if (audit_fd_ >= 0) {
    written = WriteAuditLine(line);
  } else {
    spdlog::info("audit {}", line);
  }
  if (!written && refuse_if_lost) {
    ++audit_refusals_;  // not opened: not an "allow" decision
  } else {
    ++counts_[{decision, label}];
  }
  return written;
}

absl::Status Authorizer::Authorize(const Credentials& c, Operation op,
                                   const std::string& dataset) {
  std::shared_ptr<const Policy> p = policy();
  if (!p->enabled()) return absl::OkStatus();
  const std::string shown = op == Operation::kInfo ? "" : dataset;
  absl::StatusOr<std::string> identity = p->Identify(c);
  if (!identity.ok()) {
    Record(c, "", op, shown, "unauthenticated", "");
    return identity.status();
  }
  const Decision d = p->Check(*identity, op, dataset);
  if (!d.allowed) {
    Record(c, *identity, op, shown, "deny", "");
    if (op == Operation::kInfo) {
      return absl::PermissionDeniedError(absl::StrCat(
          "identity '", *identity,
          "' may not call GetServerInfo (no authorization rule gives it "
          "operation info)"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "identity '", *identity, "' may not ", std::string(OperationName(op)),
        " dataset '", dataset,
        "' (no authorization rule allows it)"));
  }
  const bool fail_closed = p->config().audit_fail_closed;
  if (op == Operation::kStream &&
      !Record(c, *identity, op, shown, "allow", d.rule, fail_closed) &&
      fail_closed) {
    return absl::UnavailableError(absl::StrCat(
        "the audit log cannot be written and authorization.audit_fail_closed "
        "is set: stream of dataset '",
        dataset, "' refused (try again later)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::function<bool(const std::string&)>> Authorizer::ListFilter(
    const Credentials& c) {
  std::shared_ptr<const Policy> p = policy();
  if (!p->enabled()) {
    return std::function<bool(const std::string&)>(
        [](const std::string&) { return true; });
  }
  absl::StatusOr<std::string> identity = p->Identify(c);
  if (!identity.ok()) {
    Record(c, "", Operation::kList, "", "unauthenticated", "");
    return identity.status();
  }
  return std::function<bool(const std::string&)>(
      [p, id = *identity](const std::string& name) {
        return p->Check(id, Operation::kList, name).allowed;
      });
}

std::map<std::pair<std::string, std::string>, uint64_t>
Authorizer::decision_counts() const {
  MutexLock l(&mu_);
  return counts_;
}

uint64_t Authorizer::reloads_failed() const {
  MutexLock l(&mu_);
  return reloads_failed_;
}

uint64_t Authorizer::reloads_ok() const {
  MutexLock l(&mu_);
  return reloads_ok_;
}

uint64_t Authorizer::audit_write_failures() const {
  MutexLock l(&mu_);
  return audit_write_failures_;
}

uint64_t Authorizer::audit_refusals() const {
  MutexLock l(&mu_);
  return audit_refusals_;
}

}  // namespace authz
}  // namespace nearprep
