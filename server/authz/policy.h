// Per-dataset authorization (issue 25): who may list, stream or ask about
// which dataset. No gRPC here: the adapter (server/service) extracts the
// caller's Credentials from the call and asks a Policy (usually through the
// Authorizer of authorizer.h, which also audits and counts).
//
// Glossary:
//   identity   the one name a caller is known by: the bearer token's name
//              ("token:NAME", tokens.h) when the call carries one; else the
//              verified client certificate's first SAN URI (SPIFFE-style
//              "spiffe://corp/team/x"), else its first SAN DNS name, else its
//              subject CN. A certificate's identities are tried in that order
//              of preference and only the first present is used: a rule never
//              matches a certificate by a lesser name it also carries.
//   rule       identities (exact, or a prefix ending in '*': "spiffe://corp/
//              team-vision/*") x datasets (names or globs with '*' and '?')
//              x operations (list, stream, info; default all three).
//   policy     the rules; once the `authorization:` section exists, whatever
//              no rule allows is denied (also with no rule at all). Without
//              the section nothing is checked (the daemon's old behaviour).
//
// The gRPC health service is never checked (probes need no identity).
//
// Thread-safety: Policy is immutable once created; the functions are pure.
#ifndef NEARPREP_SERVER_AUTHZ_POLICY_H_
#define NEARPREP_SERVER_AUTHZ_POLICY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/authz/tokens.h"

namespace nearprep {
namespace authz {

enum class Operation { kList, kStream, kInfo };

// "list", "stream", "info".
std::string_view OperationName(Operation op);

// What the transport established about a caller, copied out of the call by
// the adapter.
struct Credentials {
  // From a certificate the TLS handshake verified (empty otherwise).
  std::vector<std::string> san_uris;
  std::vector<std::string> san_dns;
  std::string common_name;
  // The value of the call's `authorization` metadata, when it has one
  // ("Bearer TOKEN"). Never logged.
  bool has_authorization = false;
  std::string authorization;
  // More than one `authorization` entry: refused (which one decides would
  // depend on the proxy in front; RFC 9110 allows one credential).
  bool duplicate_authorization = false;
  // The peer address ("ipv4:10.0.0.7:51234"), for the audit log only.
  std::string peer;
};

struct Rule {
  // Shown in the audit log; "rules[i]" when the config gives none.
  std::string name;
  std::vector<std::string> identities;
  std::vector<std::string> datasets;
  std::vector<Operation> operations;
};

// The `authorization:` section of the daemon config.
struct PolicyConfig {
  // False when the config has no `authorization:` section: nothing checked.
  bool enabled = false;
  std::vector<Rule> rules;
  // File of token hashes (tokens.h); empty = no bearer tokens accepted.
  std::string token_file;
  // JSON lines of the audit log are appended here; empty = the daemon's log.
  std::string audit_log;
  // A stream whose audit record cannot be written to audit_log (a full
  // disk, an I/O error) is refused (UNAVAILABLE) instead of served
  // unaudited. Denials are refused either way.
  bool audit_fail_closed = false;
};

// Parses the `authorization` key of the YAML document `yaml` (a whole daemon
// config; the other keys are ignored). `source` names the document in
// messages. No key: a PolicyConfig with enabled == false. Errors are
// INVALID_ARGUMENT naming the key path and line ("nearprepd.yaml:12:
// authorization.rules[1].operations[0]: unknown operation 'write' (known:
// list, stream, info)").
absl::StatusOr<PolicyConfig> ParsePolicyYaml(const std::string& yaml,
                                             const std::string& source);

// '*' matches any run of characters (also none), '?' one character; every
// other character itself. Used for dataset names.
bool GlobMatch(std::string_view pattern, std::string_view text);

// An identity pattern: exact, or a prefix when it ends in '*'
// ("spiffe://corp/team-vision/*" matches "spiffe://corp/team-vision/job-1").
bool IdentityMatch(std::string_view pattern, std::string_view identity);

// The outcome of a check. `rule` names the rule that allowed it (empty when
// denied or when the policy is disabled).
struct Decision {
  bool allowed = false;
  std::string rule;
};

class Policy {
 public:
  // Checks the config (OK for enabled == false) and keeps the tokens.
  static absl::StatusOr<std::shared_ptr<const Policy>> Create(
      PolicyConfig config, std::vector<TokenEntry> tokens);

  bool enabled() const { return config_.enabled; }
  const PolicyConfig& config() const { return config_; }

  // The caller's identity (see the glossary). UNAUTHENTICATED, saying why
  // without echoing the token, when the call carries an authorization that
  // is not a known bearer token, or carries nothing to identify it.
  absl::StatusOr<std::string> Identify(const Credentials& c) const;

  // Whether `identity` may do `op` on `dataset` (ignored for kInfo). With
  // the policy disabled everything is allowed.
  Decision Check(const std::string& identity, Operation op,
                 const std::string& dataset) const;

 private:
  explicit Policy(PolicyConfig config, std::vector<TokenEntry> tokens)
      : config_(std::move(config)), tokens_(std::move(tokens)) {}

  PolicyConfig config_;
  std::vector<TokenEntry> tokens_;
};

}  // namespace authz
}  // namespace nearprep

#endif  // NEARPREP_SERVER_AUTHZ_POLICY_H_
