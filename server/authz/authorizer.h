// The daemon's live authorization: the current Policy (policy.h), replaced
// whole by Reload (SIGHUP) while calls are checked, the audit log and the
// decision counters (metric nearprep_authz_decisions_total).
//
// Reload semantics: a call is checked once, when it starts. A stream already
// open keeps running after a reload that would now deny it; the next call
// sees the new policy. A reload that fails (the YAML, a rule, the token file
// or the audit log) changes nothing: the old policy stays in force and the
// error is returned for the caller to log.
//
// Audit: one JSON line per stream opened and per denial (any operation),
// e.g.
//   {"time":"2026-11-27T17:02:03.120Z","identity":"spiffe://corp/team-a/job",
//    "peer":"ipv4:10.0.0.7:51234","dataset":"imagenet","operation":"stream",
//    "decision":"allow","rule":"team-a"}
// decision: allow | deny | unauthenticated. Appended to
// authorization.audit_log (reopened by each reload, for log rotation), else
// written to the daemon's log as "audit {...}". Tokens never appear.
//
// Audit write failures (a full disk, an I/O error): each record is one
// write(2) of the whole line; a record cut short is truncated away, so the
// file holds whole lines only. Every lost record is counted
// (audit_write_failures, metric nearprep_authz_audit_write_failures_total)
// and the daemon's log says so at once, then at most once per
// kAuditErrorLogInterval (how many were lost since), then once when a
// write succeeds again. With authorization.audit_fail_closed a stream
// whose "allow" record was lost is refused (UNAVAILABLE) and counted in
// audit_refusals instead of being served unaudited.
//
// Thread-safety: every method may be called concurrently.
#ifndef NEARPREP_SERVER_AUTHZ_AUTHORIZER_H_
#define NEARPREP_SERVER_AUTHZ_AUTHORIZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "absl/time/time.h"
#include "server/authz/policy.h"

namespace nearprep {
namespace authz {

// One audited decision.
struct AuditRecord {
  std::string time;  // RFC 3339, UTC
  std::string identity;  // empty when none could be established
  std::string peer;
  std::string dataset;  // empty for info (and list without identity)
  Operation operation = Operation::kStream;
  std::string decision;  // allow | deny | unauthenticated
  std::string rule;      // the rule that allowed it; empty otherwise
};

// The record as one line of JSON (no newline).
std::string AuditJson(const AuditRecord& r);

// Builds a policy from its config: loads the token file.
absl::StatusOr<std::shared_ptr<const Policy>> LoadPolicy(
    const PolicyConfig& config);

class Authorizer {
 public:
  // `datasets`: the names the daemon serves (the metric's dataset label is
  // "(other)" for any other name a client asks for, so a client cannot
  // grow the label set). Errors: those of LoadPolicy, or an audit log that
  // cannot be opened (naming authorization.audit_log).
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(
      const PolicyConfig& config, std::vector<std::string> datasets);
  ~Authorizer();

  // Replaces the policy (see the header comment). On error nothing changes.
  absl::Status Reload(const PolicyConfig& config);

  // Whether a policy is enforced now.
  bool enabled() const;

  // Checks one call: OK, UNAUTHENTICATED (no identity) or PERMISSION_DENIED
  // naming the operation, the dataset and the identity the server saw.
  // Audits and counts stream opens and every denial.
  absl::Status Authorize(const Credentials& c, Operation op,
                         const std::string& dataset);

  // For ListDatasets: which names the caller may see (op list). An error
  // (UNAUTHENTICATED, audited) when the policy is enforced and the caller
  // has no identity.
  absl::StatusOr<std::function<bool(const std::string&)>> ListFilter(
      const Credentials& c);

  // (decision, dataset label) -> decisions so far.
  std::map<std::pair<std::string, std::string>, uint64_t> decision_counts()
      const;

  // Reloads that failed (the old policy stayed) and that succeeded.
  uint64_t reloads_failed() const;
  uint64_t reloads_ok() const;

  // Audit records that could not be written to authorization.audit_log,
  // and streams refused because of it (audit_fail_closed).
  uint64_t audit_write_failures() const;
  uint64_t audit_refusals() const;

  // How often a run of audit write failures is logged.
  static constexpr absl::Duration kAuditErrorLogInterval = absl::Seconds(60);

 private:
  Authorizer() = default;

  std::shared_ptr<const Policy> policy() const;
  // Audits one decision and counts it. Returns false when the record could
  // not be written; with `refuse_if_lost` the caller then refuses the call,
  // counted as an audit refusal instead of a decision.
  bool Record(const Credentials& c, const std::string& identity, Operation op,
              const std::string& dataset, const std::string& decision,
              const std::string& rule, bool refuse_if_lost = false);
  // Appends `line` and a newline to audit_fd_ in one write; on failure
  // leaves no partial line behind, counts and (rate-limited) logs it.
  bool WriteAuditLine(const std::string& line)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::string> datasets_;
  mutable Mutex mu_;
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
  // authorization.audit_log, open for appending; -1 when unset.
  int audit_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::string audit_path_ ABSL_GUARDED_BY(mu_);
  uint64_t audit_write_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t audit_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  // Failures not yet reported in the daemon's log, and when the last report
  // was made (InfinitePast: none in this run of failures).
  uint64_t audit_failures_unlogged_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t audit_failures_in_run_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time audit_error_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<std::pair<std::string, std::string>, uint64_t> counts_
      ABSL_GUARDED_BY(mu_);
  uint64_t reloads_failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reloads_ok_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace authz
}  // namespace nearprep

#endif  // NEARPREP_SERVER_AUTHZ_AUTHORIZER_H_
