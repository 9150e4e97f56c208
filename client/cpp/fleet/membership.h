// Fleet membership from the orchestrator (issue 31, item 4): the node set a
// FleetClient reads from, taken from a DNS name (a Kubernetes headless
// Service of the nearprepd DaemonSet: one A / AAAA record per ready pod) or
// from a targets file (one HOST:PORT per line, `#` comments), and followed
// as it changes. docs/operations.md ("Fleet membership") says how the
// client applies a change and what a node's identity is.
//
// A Membership resolves (or reads) once in Create() (an empty or failed
// first answer is an error there: the client has nothing to start with),
// then again every `interval` on a thread of its own, so a slow DNS server
// never holds up a batch. Current() returns the last good answer and a
// generation number that grows when the set changes. A failed or empty
// later answer keeps the last set (reported through on_event once per
// distinct error): nodes that are really gone are dead to the client
// anyway, and a transient DNS fault must not drop the whole fleet.
//
// DNS: the name is looked up with glibc's resolver (res_nsearch: the
// nameservers, search list and ndots of /etc/resolv.conf, as a pod's DNS
// policy sets them; /etc/hosts is not read), A and AAAA records; each
// address becomes "ADDR:PORT" ("[ADDR]:PORT" for IPv6, inet_ntop's
// spelling), sorted by bytes. SRV records are not read: the port is the
// one given. `dns_server` ("IP:PORT", IPv4) replaces resolv.conf's
// nameservers (tests point it at a local stub server; a cluster need not).
//
// Thread-safety: Current() and Describe() from any thread; the destructor
// stops the re-resolution thread (waiting for a lookup in flight).
#ifndef NEARPREP_CLIENT_CPP_FLEET_MEMBERSHIP_H_
#define NEARPREP_CLIENT_CPP_FLEET_MEMBERSHIP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nearprep {

// The targets of a targets file: one HOST:PORT per line (checked as a
// `--targets` entry), `#` to the end of a line a comment, blank lines and
// surrounding whitespace ignored, duplicates kept once; sorted by bytes.
// Errors name the line ("line 3: ...").
absl::StatusOr<std::vector<std::string>> ParseTargetsFile(const std::string& text);

// One lookup of `name` (A and AAAA) with the resolver described above:
// "ADDR:PORT" strings, sorted, without duplicates. NOT_FOUND when the name
// has no address; UNAVAILABLE when the lookup failed (no answer, SERVFAIL).
absl::StatusOr<std::vector<std::string>> ResolveTargets(const std::string& name, uint16_t port,
                                                        const std::string& dns_server = "");

struct MembershipOptions {
  // Exactly one source: dns_name (with dns_port) or file.
  std::string dns_name;
  uint16_t dns_port = 0;
  std::string dns_server;  // "IP:PORT": instead of resolv.conf's nameservers
  std::string file;
  // Re-resolution (or re-read) period; 0: 30 s for DNS, 1 s for a file.
  std::chrono::milliseconds interval{0};
  // Failed or empty answers after the first (once per distinct message),
  // from the re-resolution thread.
  std::function<void(const std::string&)> on_event;
};

class Membership {
 public:
  // Resolves or reads once; INVALID_ARGUMENT (bad options, a file that does
  // not parse or cannot be read), NOT_FOUND / UNAVAILABLE (DNS) when there
  // is no first answer.
  static absl::StatusOr<std::unique_ptr<Membership>> Create(MembershipOptions options);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  struct Snapshot {
    uint64_t generation = 0;  // 1 for the first answer, +1 per change
    std::vector<std::string> targets;  // sorted
  };
  Snapshot Current() const;
  // "dns NAME:PORT" or "targets file PATH": for events.
  std::string Describe() const;

  struct Impl;

 private:
  explicit Membership(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_FLEET_MEMBERSHIP_H_
