"""Checks a daemon address before anything dials it.

gRPC takes "127.0.0.1" without a port and dials a default port (0 or 443),
then retries silently until the reconnect deadline: a typo costs a minute of
nothing. check_target() refuses such an address at once, with the same rules
as the C++ client (nearprep::ValidateTarget): HOST:PORT, [IPV6]:PORT,
dns:[//AUTHORITY/]HOST:PORT, ipv4:/ipv6: lists of HOST:PORT, unix: paths.

Thread-safety: pure functions.
"""

from nearprep.errors import InvalidArgumentError

_HINT = "; expected HOST:PORT, e.g. localhost:7070 or [::1]:7070"


def _bad(target, why, field):
    return InvalidArgumentError(f"{field}: {target!r} {why}{_HINT}", field=field)


def _host_port(target, hp, field):
    if hp.startswith("["):
        close = hp.find("]")
        if close < 0:
            raise _bad(target, "has a '[' without ']'", field)
        host = hp[1:close]
        if not hp[close + 1:close + 2] == ":":
            raise _bad(target, "has no port", field)
        port = hp[close + 2:]
    else:
        if ":" not in hp:
            raise _bad(target, "has no port", field)
        if hp.count(":") > 1:
            raise _bad(target, "is an IPv6 address without brackets "
                       "(write [ADDRESS]:PORT)", field)
        host, port = hp.rsplit(":", 1)
    if not host:
        raise _bad(target, "has no host", field)
    if not port:
        raise _bad(target, "has no port", field)
    if len(port) > 5 or not port.isdigit() or not port.isascii():
        raise _bad(target, f"has a port that is not a number: {port!r}", field)
    if not 1 <= int(port) <= 65535:
        raise _bad(target, "has a port outside 1..65535", field)


def check_target(target, field="target"):
    """Raises InvalidArgumentError naming `field` unless gRPC can dial
    `target` (a str)."""
    if not target:
        raise _bad(target, "is empty", field)
    for scheme in ("unix:", "unix-abstract:", "vsock:"):
        if target.startswith(scheme):
            if len(target) == len(scheme):
                raise _bad(target, "has no path", field)
            return
    if target.startswith(("ipv4:", "ipv6:")):
        for hp in target[5:].split(","):
            _host_port(target, hp, field)
        return
    rest = target
    if rest.startswith("dns:"):
        rest = rest[4:]
        if rest.startswith("//"):
            slash = rest.find("/", 2)
            if slash < 0:
                raise _bad(target, "has no host", field)
            rest = rest[slash + 1:]
    _host_port(target, rest, field)
