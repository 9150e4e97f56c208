"""Fleet membership from the orchestrator (issue 31, item 4): the node set a
FleetClient reads from, taken from a DNS name (a Kubernetes headless
Service of the nearprepd DaemonSet: one A / AAAA record per ready pod) or
a targets file (one HOST:PORT per line, `#` comments), and followed as it
changes. The twin of client/cpp/fleet/membership.h; docs/operations.md
("Fleet membership") says how the client applies a change and what a node's
identity is.

A membership looks up once when made (no first answer, or an empty one, is
an error: the client has nothing to start with), then again every
`interval` s on a daemon thread of its own, so a slow DNS server never
holds up a batch. current() returns (generation, targets): the last good
answer, sorted, and a number that grows when it changes. A failed or empty
later answer keeps the last set (reported through on_event once per
distinct error): nodes that are really gone are dead to the client anyway,
and a transient DNS fault must not drop the whole fleet.

DNS: `resolver(name, port)` (default socket.getaddrinfo, with
SOCK_STREAM: the system resolver, so /etc/hosts, nsswitch and
/etc/resolv.conf's search list apply) gives A and AAAA addresses; each
becomes "ADDR:PORT" ("[ADDR]:PORT" for IPv6). SRV records are not read
(the Python standard library has no SRV lookup): the port is the one given.

Thread-safety: current() from any thread; close() stops the thread.
"""

import socket
import threading
from typing import Callable, List, Optional, Sequence, Tuple

from nearprep.target import check_target

DNS_INTERVAL = 30.0
FILE_INTERVAL = 1.0


def parse_targets_file(text: str) -> List[str]:
    """The targets of a targets file: one HOST:PORT per line (checked as a
    target), `#` to the end of a line a comment, blank lines and surrounding
    whitespace ignored, duplicates kept once; sorted. ValueError names the
    line."""
    out = set()
    for no, line in enumerate(text.split("\n"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if any(c in line for c in " \t,"):
            raise ValueError(f"line {no}: one HOST:PORT per line, got {line!r}")
        try:
            check_target(line)
        except Exception as e:  # noqa: BLE001 - InvalidArgumentError: name the line
            raise ValueError(f"line {no}: {e}") from None
        out.add(line)
    return sorted(out)


def resolve_targets(name: str, port: int,
                    getaddrinfo: Callable = socket.getaddrinfo) -> List[str]:
    """Every A / AAAA address of `name` as "ADDR:PORT", sorted. OSError
    (socket.gaierror) when the lookup fails."""
    infos = getaddrinfo(name, port, type=socket.SOCK_STREAM)
    addrs = {i[4][0] for i in infos if i[0] in (socket.AF_INET, socket.AF_INET6)}
    return sorted(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addrs)


class Membership:
    """A node set that follows a DNS name (`dns="NAME:PORT"`) or a targets
    file (`file=PATH`): module docstring. interval: s between lookups
    (None: 30 for DNS, 1 for a file). resolver: for DNS, a
    socket.getaddrinfo-like function (tests inject one)."""

    def __init__(self, *, dns: Optional[str] = None, file: Optional[str] = None,
                 interval: Optional[float] = None, resolver: Optional[Callable] = None,
                 on_event: Optional[Callable[[str], None]] = None):
        if (dns is None) == (file is None):
            raise ValueError("membership: give exactly one of dns='NAME:PORT' or file=PATH")
        if dns is not None:
            name, _, port = str(dns).rpartition(":")
            if not name or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"targets_dns: expected NAME:PORT, got {dns!r}")
            self._name, self._port = name, int(port)
            self.describe = f"dns {dns}"
        else:
            self._file = str(file)
            self.describe = f"targets file {file}"
        self._dns = dns is not None
        self._resolver = resolver or socket.getaddrinfo
        if interval is None:
            interval = DNS_INTERVAL if self._dns else FILE_INTERVAL
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
                or not interval > 0:
            raise ValueError(f"membership_interval: must be a number of seconds > 0, "
                             f"got {interval!r}")
        self.interval = float(interval)
        self.on_event = on_event or (lambda msg: None)
        self._lock = threading.Lock()
        self._generation, self._targets = 1, self._lookup()  # raises: no first answer
        self._last_error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="nearprep-fleet-membership")
        self._thread.start()

    def _lookup(self) -> List[str]:
        if self._dns:
            try:
                t = resolve_targets(self._name, self._port, self._resolver)
            except OSError as e:
                raise LookupError(f"{self.describe}: lookup failed: {e}") from None
            if not t:
                raise LookupError(f"{self.describe}: no A or AAAA record")
            return t
        try:
            with open(self._file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise LookupError(f"{self._file}: cannot read: {e}") from None
        try:
            t = parse_targets_file(text)
        except ValueError as e:
            raise LookupError(f"{self._file}: {e}") from None
        if not t:
            raise LookupError(f"{self._file}: no targets")
        return t

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                t = self._lookup()
            except LookupError as e:
                if str(e) != self._last_error:
                    self.on_event(f"membership ({self.describe}): {e}; keeping the last answer")
                self._last_error = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - a resolver's own error: keep the set
                self._last_error = f"{type(e).__name__}: {e}"
                continue
            self._last_error = None
            with self._lock:
                if t != self._targets:
                    self._targets = t
                    self._generation += 1

    def current(self) -> Tuple[int, List[str]]:
        """(generation, sorted targets) of the last good answer."""
        with self._lock:
            return self._generation, list(self._targets)

    def close(self):
        self._stop.set()


def make_membership(targets_dns=None, targets_file=None, interval=None, resolver=None,
                    on_event=None) -> Optional[Membership]:
    """FleetClient's keywords to a Membership (None: neither given)."""
    if targets_dns is None and targets_file is None:
        return None
    return Membership(dns=targets_dns, file=targets_file, interval=interval,
                      resolver=resolver, on_event=on_event)


__all__: Sequence[str] = ("Membership", "make_membership", "parse_targets_file",
                          "resolve_targets")
