// See membership.h.
#include "client/cpp/fleet/membership.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/mutex.h"
#include "nearprep/client.h"

namespace nearprep {

absl::StatusOr<std::vector<std::string>> ParseTargetsFile(const std::string& text) {
  std::set<std::string> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string t(line);
    if (t.find_first_of(" \t,") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": one HOST:PORT per line, got '", t, "'"));
    }
    if (absl::Status s = ValidateTarget(t); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", s.message()));
    }
    out.insert(t);
  }
  return std::vector<std::string>(out.begin(), out.end());
}

namespace {

// Parses "IP:PORT" (IPv4) into *sa.
bool ParseServer(const std::string& s, sockaddr_in* sa) {
  const size_t colon = s.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(s.substr(colon + 1), &port) ||
      port == 0 || port > 65535) {
    return false;
  }
  *sa = sockaddr_in{};
  sa->sin_family = AF_INET;
  sa->sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, s.substr(0, colon).c_str(), &sa->sin_addr) == 1;
}

// One query of `type` (ns_t_a or ns_t_aaaa): adds the addresses to *out.
// Returns the resolver's h_errno (0: an answer was parsed).
int Query(res_state st, const std::string& name, int type, uint16_t port,
          std::set<std::string>* out) {
  std::vector<unsigned char> buf(65536);
  const int n = res_nsearch(st, name.c_str(), ns_c_in, type, buf.data(),
                            static_cast<int>(buf.size()));
  if (n < 0) return st->res_h_errno != 0 ? st->res_h_errno : NO_RECOVERY;
  ns_msg msg;
  if (ns_initparse(buf.data(), n, &msg) != 0) return NO_RECOVERY;
  for (int i = 0; i < ns_msg_count(msg, ns_s_an); ++i) {
    ns_rr rr;
    if (ns_parserr(&msg, ns_s_an, i, &rr) != 0) return NO_RECOVERY;
    char text[INET6_ADDRSTRLEN] = {0};
    if (ns_rr_type(rr) == ns_t_a && ns_rr_rdlen(rr) == 4) {
      inet_ntop(AF_INET, ns_rr_rdata(rr), text, sizeof(text));
      out->insert(absl::StrCat(text, ":", port));
    } else if (ns_rr_type(rr) == ns_t_aaaa && ns_rr_rdlen(rr) == 16) {
      inet_ntop(AF_INET6, ns_rr_rdata(rr), text, sizeof(text));
      out->insert(absl::StrCat("[", text, "]:", port));
    }  // CNAMEs and other records: the addresses follow them
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveTargets(const std::string& name, uint16_t port,
                                                        const std::string& dns_server) {
  if (name.empty()) return absl::InvalidArgumentError("dns name: empty");
  if (port == 0) return absl::InvalidArgumentError("dns port: must be in [1, 65535]");
  sockaddr_in server{};
  if (!dns_server.empty() && !ParseServer(dns_server, &server)) {
    return absl::InvalidArgumentError("dns server: expected IPv4:PORT, got '" + dns_server + "'");
  }
  // A resolver state of our own (res_ninit): thread-safe, and its
  // nameservers can be replaced without touching the process's _res.
  struct __res_state st;
  std::memset(&st, 0, sizeof(st));
  if (res_ninit(&st) != 0) return absl::UnavailableError("dns: res_ninit failed");
  if (!dns_server.empty()) {
    st.nscount = 1;
    st.nsaddr_list[0] = server;
    st.retrans = 1;  // seconds per try: a local server answers at once
    st.retry = 2;
  }
  std::set<std::string> found;
  const int e4 = Query(&st, name, ns_t_a, port, &found);
  const int e6 = Query(&st, name, ns_t_aaaa, port, &found);
  res_nclose(&st);
  if (!found.empty()) return std::vector<std::string>(found.begin(), found.end());
  auto absent = [](int e) { return e == 0 || e == HOST_NOT_FOUND || e == NO_DATA; };
  const std::string what = absl::StrCat("dns ", name, ": ");
  if (absent(e4) && absent(e6)) return absl::NotFoundError(what + "no A or AAAA record");
  return absl::UnavailableError(
      what + "lookup failed (" + hstrerror(absent(e4) ? e6 : e4) + ")");
}

struct Membership::Impl {
  MembershipOptions o;
  mutable Mutex mu;
  Snapshot current ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  CondVar stop_cv;
  std::string last_error;  // the re-resolution thread's only
  std::thread thread;

  std::string Describe() const {
    return o.file.empty() ? absl::StrCat("dns ", o.dns_name, ":", o.dns_port)
                          : "targets file " + o.file;
  }

  absl::StatusOr<std::vector<std::string>> Lookup() const {
    if (o.file.empty()) return ResolveTargets(o.dns_name, o.dns_port, o.dns_server);
    std::ifstream f(o.file, std::ios::binary);
    if (!f) return absl::InvalidArgumentError(o.file + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    absl::StatusOr<std::vector<std::string>> t = ParseTargetsFile(ss.str());
    if (!t.ok()) return absl::InvalidArgumentError(o.file + ": " + std::string(t.status().message()));
    if (t->empty()) return absl::NotFoundError(o.file + ": no targets");
    return t;
  }

  // Looks up again every interval until stopping; a changed answer is a new
  // generation, a failed or empty one keeps the set.
  void Loop() {
    while (true) {
      {
        MutexLock lock(&mu);
        const auto next = std::chrono::steady_clock::now() + o.interval;
        while (!stopping && !stop_cv.WaitUntil(&mu, next)) {
        }
        if (stopping) return;
      }
      absl::StatusOr<std::vector<std::string>> t = Lookup();
      if (!t.ok()) {
        const std::string why = t.status().ToString();
        if (why != last_error && o.on_event) {
          o.on_event(absl::StrCat("membership (", Describe(), "): ", why, "; keeping the last ",
                                  "answer"));
        }
        last_error = why;
        continue;
      }
      last_error.clear();
      MutexLock lock(&mu);
      if (*t != current.targets) {
        current.targets = std::move(*t);
        ++current.generation;
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(MembershipOptions o) {
  if (o.file.empty() == o.dns_name.empty()) {
    return absl::InvalidArgumentError("membership: give exactly one of a DNS name or a file");
  }
  if (!o.dns_name.empty() && o.dns_port == 0) {
    return absl::InvalidArgumentError("membership: the DNS name needs a port (NAME:PORT)");
  }
  if (o.interval.count() <= 0) {
    o.interval = o.file.empty() ? std::chrono::milliseconds(30000)
                                : std::chrono::milliseconds(1000);
  }
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(o);
  absl::StatusOr<std::vector<std::string>> first = impl->Lookup();
  if (!first.ok()) return first.status();
  {
    MutexLock lock(&impl->mu);
    impl->current.generation = 1;
    impl->current.targets = std::move(*first);
  }
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->Loop(); });
  return std::unique_ptr<Membership>(new Membership(std::move(impl)));
}

Membership::Membership(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Membership::~Membership() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.SignalAll();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Membership::Snapshot Membership::Current() const {
  MutexLock lock(&impl_->mu);
  return impl_->current;
}

std::string Membership::Describe() const { return impl_->Describe(); }

}  // namespace nearprep
