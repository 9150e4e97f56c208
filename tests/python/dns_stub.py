"""A tiny DNS server for tests (UDP, RFC 1035): answers A queries for the
names it is given with the addresses it is given (TTL 0), an empty NOERROR
answer for other query types of those names (AAAA), NXDOMAIN for any other
name. The answer can be changed while it runs (set()); it counts the
queries it answered per (name, type). Runs on a daemon thread, on
127.0.0.1 and a free port (`server`: "127.0.0.1:PORT").

Message layout (RFC 1035 section 4.1): a 12-byte header (ID, flags,
QDCOUNT, ANCOUNT, NSCOUNT, ARCOUNT, big-endian 16-bit each), the question
(QNAME as length-prefixed labels ending with a zero byte, QTYPE, QCLASS),
then resource records (NAME, TYPE, CLASS, TTL 32-bit, RDLENGTH, RDATA); a
NAME may be a pointer: two bytes 0b11 + 14-bit offset (section 4.1.4), and
the answers point at the question's name (offset 12).
"""

import socket
import struct
import threading

TYPE_A = 1
CLASS_IN = 1
RCODE_NXDOMAIN = 3
RCODE_FORMERR = 1


class DnsStub:
    def __init__(self, records=None):
        self._lock = threading.Lock()
        self._records = {}  # lower-case name without the final dot -> [IPv4 text]
        for name, addrs in (records or {}).items():
            self.set(name, addrs)
        self.queries = {}  # (name, qtype) -> count
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.server = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="dns-stub")
        self._thread.start()

    def set(self, name, addrs):
        """The A records of `name` from now on (a list of dotted quads)."""
        for a in addrs:
            socket.inet_aton(a)  # a typo in a test fails here
        with self._lock:
            self._records[name.lower().rstrip(".")] = list(addrs)

    def count(self, name, qtype=TYPE_A):
        with self._lock:
            return self.queries.get((name.lower().rstrip("."), qtype), 0)

    def close(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()

    def _serve(self):
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self._answer(data)
            if reply is not None:
                self._sock.sendto(reply, peer)

    def _answer(self, data):
        if len(data) < 12:
            return None
        qid, flags, qdcount = struct.unpack(">HHH", data[:6])
        if flags & 0x8000:  # a response, not a query
            return None
        rd = flags & 0x0100
        # The question: labels up to the zero byte (no pointers in a query).
        labels, i = [], 12
        try:
            while True:
                n = data[i]
                i += 1
                if n == 0:
                    break
                if n & 0xC0:
                    raise ValueError("compressed qname")
                labels.append(data[i:i + n].decode("ascii"))
                i += n
            qtype, qclass = struct.unpack(">HH", data[i:i + 4])
        except (IndexError, ValueError, struct.error, UnicodeDecodeError):
            return struct.pack(">HHHHHH", qid, 0x8000 | rd | RCODE_FORMERR, 0, 0, 0, 0)
        question = data[12:i + 4]
        name = ".".join(labels).lower()
        with self._lock:
            addrs = self._records.get(name)
            self.queries[(name, qtype)] = self.queries.get((name, qtype), 0) + 1
        answers = b""
        ancount = 0
        rcode = 0
        if addrs is None or qdcount != 1:
            rcode = RCODE_NXDOMAIN
        elif qtype == TYPE_A and qclass == CLASS_IN:
            for a in addrs:
                answers += struct.pack(">HHHIH", 0xC00C, TYPE_A, CLASS_IN, 0, 4)
                answers += socket.inet_aton(a)
                ancount += 1
        # QR, AA, RD copied, RA; opcode 0 (a standard query).
        header = struct.pack(">HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080 | rcode, 1, ancount,
                             0, 0)
        return header + question + answers
