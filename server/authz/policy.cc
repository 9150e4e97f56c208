#include "server/authz/policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace nearprep {
namespace authz {

std::string_view OperationName(Operation op) {
  switch (op) {
    case Operation::kList:
      return "list";
    case Operation::kStream:
      return "stream";
    case Operation::kInfo:
      return "info";
  }
  return "?";
}

bool GlobMatch(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point (the last '*'): linear in
  // practice, no recursion on hostile patterns.
  size_t p = 0, t = 0;
  size_t star = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool IdentityMatch(std::string_view pattern, std::string_view identity) {
  if (!pattern.empty() && pattern.back() == '*') {
    const std::string_view prefix = pattern.substr(0, pattern.size() - 1);
    return identity.substr(0, prefix.size()) == prefix;
  }
  return pattern == identity;
}

namespace {

// Identities of bearer tokens: "token:NAME" (a certificate name may not
// start with it: Policy::Identify).
constexpr char kTokenPrefix[] = "token:";

absl::Status Bad(const std::string& source, const YAML::Node& node,
                 const std::string& key, const std::string& what) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", key, ": ", what));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", m.line + 1, ": ", key, ": ", what));
}

absl::Status CheckKeys(const YAML::Node& node, const std::string& source,
                       const std::string& where,
                       const std::set<std::string>& known) {
  if (!node.IsMap()) return Bad(source, node, where, "must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (known.count(key) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Bad(source, kv.first, where + "." + key,
                 "unknown key (known: " + list + ")");
    }
  }
  return absl::OkStatus();
}

// A scalar string, or an error naming `key`.
absl::StatusOr<std::string> Scalar(const YAML::Node& n,
                                   const std::string& source,
                                   const std::string& key) {
  if (!n.IsScalar()) return Bad(source, n, key, "must be a string");
  return n.Scalar();
}

// A list of non-empty strings (a single string is taken as a list of one).
absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& n,
                                                    const std::string& source,
                                                    const std::string& key) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    out.push_back(n.Scalar());
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string k = absl::StrCat(key, "[", i, "]");
      absl::StatusOr<std::string> s = Scalar(n[i], source, k);
      if (!s.ok()) return s.status();
      if (s->empty()) return Bad(source, n[i], k, "must not be empty");
      out.push_back(*s);
    }
  } else {
    return Bad(source, n, key, "must be a list of strings");
  }
  if (out.empty()) return Bad(source, n, key, "must not be empty");
  return out;
}

}  // namespace

absl::StatusOr<PolicyConfig> ParsePolicyYaml(const std::string& yaml,
                                             const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                     ": not valid YAML: ", e.msg));
  }
  PolicyConfig config;
  try {
    if (!root.IsMap() || !root["authorization"]) return config;
    const YAML::Node a = root["authorization"];
    config.enabled = true;
    if (a.IsNull()) return config;  // "authorization:" alone: deny all.
    if (absl::Status st = CheckKeys(
            a, source, "authorization",
            {"rules", "token_file", "audit_log", "audit_fail_closed"});
        !st.ok()) {
      return st;
    }
    if (const YAML::Node n = a["token_file"]) {
      absl::StatusOr<std::string> s =
          Scalar(n, source, "authorization.token_file");
      if (!s.ok()) return s.status();
      config.token_file = *s;
    }
    if (const YAML::Node n = a["audit_log"]) {
      absl::StatusOr<std::string> s =
          Scalar(n, source, "authorization.audit_log");
      if (!s.ok()) return s.status();
      config.audit_log = *s;
    }
    if (const YAML::Node n = a["audit_fail_closed"]) {
      absl::StatusOr<std::string> s =
          Scalar(n, source, "authorization.audit_fail_closed");
      if (!s.ok()) return s.status();
      if (*s != "true" && *s != "false") {
        return Bad(source, n, "authorization.audit_fail_closed",
                   "must be true or false");
      }
      config.audit_fail_closed = *s == "true";
      if (config.audit_fail_closed && config.audit_log.empty()) {
        return Bad(source, n, "authorization.audit_fail_closed",
                   "needs authorization.audit_log (records written to the "
                   "daemon's log are not checked)");
      }
    }
    const YAML::Node rules = a["rules"];
    if (rules && !rules.IsNull()) {
      if (!rules.IsSequence()) {
        return Bad(source, rules, "authorization.rules",
                   "must be a list of rules");
      }
      std::set<std::string> names;
      for (size_t i = 0; i < rules.size(); ++i) {
        const YAML::Node r = rules[i];
        const std::string at = absl::StrCat("authorization.rules[", i, "]");
        if (absl::Status st =
                CheckKeys(r, source, at,
                          {"name", "identities", "datasets", "operations"});
            !st.ok()) {
          return st;
        }
        Rule rule;
        rule.name = absl::StrCat("rules[", i, "]");
        if (const YAML::Node n = r["name"]) {
          absl::StatusOr<std::string> s = Scalar(n, source, at + ".name");
          if (!s.ok()) return s.status();
          if (s->empty())
            return Bad(source, n, at + ".name", "must not be empty");
          rule.name = *s;
        }
        if (!names.insert(rule.name).second) {
          return Bad(source, r, at + ".name",
                     "'" + rule.name + "' names an earlier rule too");
        }
        if (!r["identities"]) {
          return Bad(source, r, at + ".identities",
                     "required (who the rule is for: exact names or "
                     "prefixes ending in '*')");
        }
        absl::StatusOr<std::vector<std::string>> ids =
            StringList(r["identities"], source, at + ".identities");
        if (!ids.ok()) return ids.status();
        for (size_t k = 0; k < ids->size(); ++k) {
          const std::string& id = (*ids)[k];
          const size_t star = id.find('*');
          if (star != std::string::npos && star + 1 != id.size()) {
            return Bad(source, r["identities"],
                       absl::StrCat(at, ".identities[", k, "]"),
                       "'" + id + "': '*' only at the end (a prefix)");
          }
          if (id == "*") {
            return Bad(source, r["identities"],
                       absl::StrCat(at, ".identities[", k, "]"),
                       "'*' alone would match every identity; name them, or "
                       "give a prefix such as 'spiffe://corp/*'");
          }
        }
        rule.identities = std::move(*ids);
        if (const YAML::Node n = r["operations"]) {
          absl::StatusOr<std::vector<std::string>> ops =
              StringList(n, source, at + ".operations");
          if (!ops.ok()) return ops.status();
          for (size_t k = 0; k < ops->size(); ++k) {
            const std::string op = absl::AsciiStrToLower((*ops)[k]);
            if (op == "list") {
              rule.operations.push_back(Operation::kList);
            } else if (op == "stream") {
              rule.operations.push_back(Operation::kStream);
            } else if (op == "info") {
              rule.operations.push_back(Operation::kInfo);
            } else {
              return Bad(source, n, absl::StrCat(at, ".operations[", k, "]"),
                         "unknown operation '" + (*ops)[k] +
                             "' (known: list, stream, info)");
            }
          }
        } else {
          rule.operations = {Operation::kList, Operation::kStream,
                             Operation::kInfo};
        }
        bool only_info = true;
        for (Operation op : rule.operations) {
          only_info = only_info && op == Operation::kInfo;
        }
        if (const YAML::Node n = r["datasets"]) {
          absl::StatusOr<std::vector<std::string>> ds =
              StringList(n, source, at + ".datasets");
          if (!ds.ok()) return ds.status();
          rule.datasets = std::move(*ds);
        } else if (!only_info) {
          return Bad(source, r, at + ".datasets",
                     "required (dataset names or globs such as 'imagenet-*'; "
                     "only a rule for operations [info] alone may leave it "
                     "out)");
        }
        config.rules.push_back(std::move(rule));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": authorization: ", e.msg));
  }
  return config;
}

absl::StatusOr<std::shared_ptr<const Policy>> Policy::Create(
    PolicyConfig config, std::vector<TokenEntry> tokens) {
  return std::shared_ptr<const Policy>(
      new Policy(std::move(config), std::move(tokens)));
}

absl::StatusOr<std::string> Policy::Identify(const Credentials& c) const {
  if (c.duplicate_authorization) {
    return absl::UnauthenticatedError(
        "the call carries more than one authorization header: send one");
  }
  if (c.has_authorization) {
    // RFC 6750: "Bearer" (scheme case-insensitive), one space, the token.
    std::string_view v = c.authorization;
    constexpr std::string_view kScheme = "bearer ";
    const std::string scheme = absl::AsciiStrToLower(
        std::string(v.substr(0, std::min(v.size(), kScheme.size()))));
    if (v.size() <= kScheme.size() || scheme != kScheme) {
      return absl::UnauthenticatedError(
          "the call's authorization metadata is not 'Bearer TOKEN'");
    }
    std::string_view token = v.substr(kScheme.size());
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
      token.remove_prefix(1);
    }
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) {
      token.remove_suffix(1);
    }
    if (tokens_.empty()) {
      return absl::UnauthenticatedError(
          "bearer token not accepted: this daemon has no "
          "authorization.token_file");
    }
    std::optional<std::string> name = FindToken(tokens_, token);
    if (!name) {
      return absl::UnauthenticatedError(
          "bearer token not recognised (not in authorization.token_file)");
    }
    return std::string(kTokenPrefix) + *name;
  }
  // Certificate names never enter the bearer tokens' namespace: a CN or
  // SAN DNS name "token:ci" would otherwise get the rules written for the
  // token named ci.
  std::string cert;
  if (!c.san_uris.empty()) {
    cert = c.san_uris.front();
  } else if (!c.san_dns.empty()) {
    cert = c.san_dns.front();
  } else {
    cert = c.common_name;
  }
  if (absl::StartsWithIgnoreCase(cert, kTokenPrefix)) {
    return absl::UnauthenticatedError(
        "client certificate name starts with 'token:', the bearer tokens' "
        "namespace: refused (rename the certificate's subject)");
  }
  if (!cert.empty()) return cert;
  return absl::UnauthenticatedError(
      "no client identity: present a client certificate (mutual TLS, "
      "tls.client_ca) or a bearer token (authorization: Bearer ...)");
}

Decision Policy::Check(const std::string& identity, Operation op,
                       const std::string& dataset) const {
  if (!config_.enabled) return Decision{true, ""};
  for (const Rule& r : config_.rules) {
    bool op_ok = false;
    for (Operation o : r.operations) op_ok = op_ok || o == op;
    if (!op_ok) continue;
    bool id_ok = false;
    for (const std::string& p : r.identities) {
      id_ok = id_ok || IdentityMatch(p, identity);
    }
    if (!id_ok) continue;
    if (op == Operation::kInfo) return Decision{true, r.name};
    for (const std::string& d : r.datasets) {
      if (GlobMatch(d, dataset)) return Decision{true, r.name};
    }
  }
  return Decision{false, ""};
}

}  // namespace authz
}  // namespace nearprep
