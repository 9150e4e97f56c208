"""Loop-carried recurrences of the kernel's pipelined loops, read from the
source text, against the clock budget (kernel_checks.py `recurrence`), and
the parser of Vitis HLS csynth.xml reports (kernel_checks.py `csynth`).

A pipelined loop reaches II 1 only if every value it carries from one
iteration to the next (a variable or array declared outside the loop and
written inside it, a struct member, a wide word updated through part
selects) is recomputed from its own previous value within one clock period
less the clock uncertainty. For each such value v this walks one iteration
of the loop body in program order (unrolled inner loops expanded; branches
merged with a multiplexer) and propagates the arrival time of everything
computed from v's register, with the per-operator delays below; v's
recurrence is the arrival time of its value at the end of the iteration.

Per-operator delays (ns): estimates in the style of the operator delays
Vitis HLS prints in its schedule for UltraScale+ -2 parts (UG1399 describes
how the scheduler chains operators within the clock budget; the figures
themselves are this file's reading, NOT numbers from a report or the
guide), for the chained, unregistered operator:
  add / sub       <= 32 bit 0.9, wider 1.2 (carry chain)
  compare         <= 32 bit 0.9, wider 1.1
  and / or / xor / not / logical: 0.3 (one LUT level and its routing)
  select (?:, the merge of an if/else): 0.3
  shift by a constant: 0 (wiring); by a variable: 1.5 (a barrel shifter,
      3 LUT levels of 4:1 muxes for 64 positions)
  multiply 3.0 (a DSP without its pipeline registers), divide / modulo by a
      variable 20
  array read: registers (completely partitioned) 0.3 per 4:1 mux level of
      the index; LUTRAM 1.2 (asynchronous read) plus the select among
      partitions for a run-time first index; BRAM / URAM / default memory
      4.5 (a registered read: its data arrives in the next cycle, so it can
      never close a one-cycle recurrence)
  array write: registers 0.3 (the write enable decode), memory 0
  byte insert at a variable position (SetWordByte, a part-select write):
      0.45 per insert (a compare-driven mux on every byte lane)
  read of a word byte at a variable position (WordByte): 1.5 (a shifter)
  call of another kernel function: 1.0 plus its arguments (unknown body)
Budget = clock period x (1 - 0.27): Vitis' default clock uncertainty for
kernels is 27 % of the period. 225 MHz: 3.24 ns; 250 MHz: 2.92 ns.

Limits (why the timing table keeps an optimistic and an expected column):
the walk does not see logic synthesis merging operators into one LUT, nor
retiming; widths are the declared C types (no range analysis); a call's
body is not analysed; a recurrence spanning two iterations (v -> u -> v) is
not followed. A recurrence within 20 % of the budget is reported "unsure".
"""
import math
import re
import xml.etree.ElementTree as ET

UNCERTAINTY = 0.27
UNSURE_MARGIN = 0.8

D_LOGIC = 0.3
D_SELECT = 0.3
D_ADD32, D_ADD64 = 0.9, 1.2
D_CMP32, D_CMP64 = 0.9, 1.1
D_VSHIFT = 1.5
D_MUL, D_DIV = 3.0, 20.0
D_LUTRAM = 1.2
D_RAM = 4.5
D_REG_WRITE = 0.3
D_INSERT = 0.45
D_BYTE_READ = 1.5
D_CALL = 1.0

TYPE_BITS = {"bool": 1, "uint8_t": 8, "int8_t": 8, "char": 8, "uint16_t": 16, "int16_t": 16,
             "int": 32, "uint32_t": 32, "int32_t": 32, "unsigned": 32, "float": 32,
             "uint64_t": 64, "int64_t": 64, "double": 64, "WideWord": 512, "ScanToken": 16}

TOKEN = re.compile(r"\s*(?:(#[^\n]*)|(\"(?:\\.|[^\"\\])*\")|([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)|"
                   r"(0[xX][0-9a-fA-F]+[uUlL]*|\d+\.?\d*(?:[eE][-+]?\d+)?[fFuUlL]*)|"
                   r"(<<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|"
                   r"[-+*/%&|^~!<>=?:;,.(){}\[\]]))")
KEYWORDS = {"if", "else", "for", "while", "do", "return", "continue", "break", "switch", "case",
            "default", "const", "static", "sizeof"}


def tokenize(text):
    text = re.sub(r"static_cast\s*<[^;()]*?>\s*\(", "__cast(", text)
    text = re.sub(r"reinterpret_cast\s*<[^;()]*?>\s*\(", "__cast(", text)
    out, i = [], 0
    while i < len(text):
        m = TOKEN.match(text, i)
        if not m or m.end() == i:
            if text[i:].strip() == "":
                break
            raise ValueError("cannot tokenize at %r" % text[i:i + 30])
        i = m.end()
        if m.group(1):
            out.append(("pragma", m.group(1)))
        elif m.group(2):
            out.append(("str", m.group(2)))
        elif m.group(3):
            out.append(("id", m.group(3)))
        elif m.group(4):
            out.append(("num", m.group(4)))
        elif m.group(5):
            out.append(("op", m.group(5)))
    return out


# ---- expressions -------------------------------------------------------
BINARY = [("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="), ("?",),
          ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="),
          ("<<", ">>"), ("+", "-"), ("*", "/", "%")]
PREC = {op: i for i, ops in enumerate(BINARY) for op in ops}


class Parser:
    def __init__(self, toks):
        self.t = [x for x in toks if x[0] != "pragma"]
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else ("eof", "")

    def take(self, want=None):
        tok = self.peek()
        if want is not None and tok[1] != want:
            raise ValueError("expected %r, got %r" % (want, tok))
        self.i += 1
        return tok

    def expr(self, min_prec=0):
        lhs = self.unary()
        while True:
            tok = self.peek()
            if tok[0] != "op" or tok[1] not in PREC or PREC[tok[1]] < min_prec:
                return lhs
            op = tok[1]
            p = PREC[op]
            self.take()
            if op == "?":
                a = self.expr(0)
                self.take(":")
                b = self.expr(p)
                lhs = ("tern", lhs, a, b)
            elif p == 0:
                lhs = ("assign", op, lhs, self.expr(0))
            else:
                lhs = ("bin", op, lhs, self.expr(p + 1))

    def unary(self):
        tok = self.peek()
        if tok[0] == "op" and tok[1] in ("-", "+", "!", "~", "&", "*", "++", "--"):
            self.take()
            x = self.unary()
            if tok[1] in ("++", "--"):
                return ("preinc", tok[1], x)
            if tok[1] in ("&", "*", "+"):
                return x
            return ("un", tok[1], x)
        return self.postfix(self.primary())

    def primary(self):
        tok = self.take()
        if tok[0] == "num" or tok[0] == "str":
            return ("num", tok[1])
        if tok[0] == "id":
            if self.peek()[1] == "<" and tok[1] in TYPE_BITS:  # uint64_t{1} handled below
                pass
            return ("id", tok[1])
        if tok[1] == "(":
            e = self.expr(0)
            self.take(")")
            return e
        raise ValueError("unexpected %r" % (tok,))

    def args(self, close):
        out = []
        if self.peek()[1] == close:
            self.take()
            return out
        while True:
            out.append(self.expr(1))
            if self.peek()[1] == ",":
                self.take()
                continue
            self.take(close)
            return out

    def postfix(self, e):
        while True:
            tok = self.peek()
            if tok[1] == "(":
                self.take()
                e = ("call", e, self.args(")"))
            elif tok[1] == "{" and e[0] == "id":
                self.take()
                e = ("call", ("id", "__init"), self.args("}"))
            elif tok[1] == "[":
                self.take()
                idx = self.expr(0)
                self.take("]")
                e = ("index", e, idx)
            elif tok[1] in (".", "->"):
                self.take()
                e = ("member", e, self.take()[1])
            elif tok[1] in ("++", "--"):
                self.take()
                e = ("postinc", tok[1], e)
            else:
                return e


# ---- statements --------------------------------------------------------
def parse_block(toks):
    """[stmt] from tokens: ('expr', e) ('decl', type, [(name, dims, init)])
    ('if', cond, then, else) ('for', init, cond, step, body, pragmas, trips)
    ('while', cond, body, pragmas) ('sim', id, loop-stmt)."""
    p = Parser([])
    p.t = toks
    out = []
    while p.peek()[0] != "eof":
        s = statement(p)
        if s is not None:
            out.append(s)
    return out


def _pragmas_at(p):
    prag = []
    while p.peek()[0] == "pragma":
        prag.append(p.take()[1])
    return prag


def statement(p):
    prag = _pragmas_at(p)
    tok = p.peek()
    if tok[0] == "eof":
        return None
    if tok[1] == ";":
        p.take()
        return None
    if tok[1] == "{":
        p.take()
        body = []
        while p.peek()[1] != "}":
            s = statement(p)
            if s is not None:
                body.append(s)
        p.take("}")
        return ("block", body, prag + _leading(body))
    if tok[0] == "id" and p.peek(1)[1] == ":" and tok[1] not in KEYWORDS:
        p.take()
        p.take()
        return statement(p)
    if tok[1] == "NEARPREP_SIM_LOOP":
        p.take()
        p.take("(")
        sid = p.take()[1].strip('"')
        p.take(")")
        return ("sim", sid, statement(p))
    if tok[1] == "if":
        p.take()
        p.take("(")
        cond = p.expr(0)
        p.take(")")
        then = statement(p)
        els = None
        if p.peek()[1] == "else":
            p.take()
            els = statement(p)
        return ("if", cond, then, els)
    if tok[1] == "for":
        p.take()
        p.take("(")
        init = None if p.peek()[1] == ";" else simple(p)
        p.take(";")
        cond = None if p.peek()[1] == ";" else p.expr(0)
        p.take(";")
        step = None if p.peek()[1] == ")" else p.expr(0)
        p.take(")")
        body = statement(p)
        return ("for", init, cond, step, body, _body_pragmas(body))
    if tok[1] == "while":
        p.take()
        p.take("(")
        cond = p.expr(0)
        p.take(")")
        body = statement(p)
        return ("while", cond, body, _body_pragmas(body))
    if tok[1] == "do":
        p.take()
        body = statement(p)
        p.take("while")
        p.take("(")
        cond = p.expr(0)
        p.take(")")
        p.take(";")
        return ("while", cond, body, _body_pragmas(body))
    if tok[1] in ("continue", "break"):
        p.take()
        p.take(";")
        return (tok[1],)
    if tok[1] == "return":
        p.take()
        e = None if p.peek()[1] == ";" else p.expr(0)
        p.take(";")
        return ("expr", e) if e else None
    s = simple(p)
    p.take(";")
    return s


def _leading(body):
    return []


def _body_pragmas(body):
    return body[2] if body is not None and body[0] == "block" else []


def _is_decl(p):
    """A declaration starts with [const] TYPE NAME (TYPE: ident, maybe templated)."""
    k = 0
    while p.peek(k)[1] in ("const", "static", "constexpr"):
        k += 1
    if p.peek(k)[0] != "id" or p.peek(k)[1] in KEYWORDS:
        return None
    k += 1
    if p.peek(k)[1] == "<":  # template arguments
        depth = 0
        while True:
            v = p.peek(k)[1]
            if v == "<":
                depth += 1
            elif v == ">":
                depth -= 1
            elif v == ">>":
                depth -= 2
            k += 1
            if depth <= 0 or p.peek(k)[0] == "eof":
                break
    while p.peek(k)[1] in ("&", "*"):
        k += 1
    if p.peek(k)[0] == "id" and p.peek(k + 1)[1] in ("=", ";", ",", "[", "{", "("):
        return k
    return None


def simple(p):
    k = _is_decl(p)
    if k is None:
        return ("expr", p.expr(0))
    type_toks = [p.take() for _ in range(k)]
    tname = [t[1] for t in type_toks if t[1] not in ("const", "static", "constexpr")][0]
    decls = []
    while True:
        name = p.take()[1]
        dims = []
        while p.peek()[1] == "[":
            p.take()
            dims.append(p.expr(0))
            p.take("]")
        init = None
        if p.peek()[1] == "=":
            p.take()
            init = p.expr(1)
        elif p.peek()[1] in ("{", "("):
            close = "}" if p.take()[1] == "{" else ")"
            init = ("call", ("id", "__init"), p.args(close))
        decls.append((name, dims, init))
        if p.peek()[1] == ",":
            p.take()
            continue
        return ("decl", tname, decls)


# ---- arrival times -----------------------------------------------------
class Arr:
    """Arrival of a value computed from the tracked register: delay (ns),
    operator count, the operators on the path."""
    __slots__ = ("d", "n", "path")

    def __init__(self, d, n, path):
        self.d, self.n, self.path = d, n, path

    def plus(self, d, what):
        return Arr(self.d + d, self.n + 1, self.path + [what])


def amax(*xs):
    best = None
    for x in xs:
        if x is not None and (best is None or x.d > best.d):
            best = x
    return best


class Context:
    def __init__(self, arrays, bits, consts):
        self.arrays = arrays  # name -> (storage, n_partitions of dim1, entries)
        self.bits = bits      # name -> declared bits
        self.consts = consts  # names treated as constants (loop vars of unrolled loops)


def base_name(e):
    """(variable, member path) of an lvalue / value expression, or (None, None)."""
    members = []
    while True:
        if e[0] == "id":
            return e[1], ".".join(reversed(members))
        if e[0] == "member":
            members.append(e[2])
            e = e[1]
        elif e[0] == "index":
            e = e[1]
        else:
            return None, None


def width(e, ctx):
    names = set()

    def walk(x):
        if x[0] == "id":
            names.add(x[1])
        for c in x[1:]:
            if isinstance(c, tuple):
                walk(c)
            elif isinstance(c, list):
                for y in c:
                    if isinstance(y, tuple):
                        walk(y)
    walk(e)
    return max([ctx.bits.get(n, 32) for n in names] or [32])


def is_const(e, ctx):
    if e[0] == "num":
        return True
    if e[0] == "id":
        return e[1] in ctx.consts or re.match(r"^k[A-Z]", e[1]) is not None
    if e[0] in ("bin", "un"):
        return all(is_const(c, ctx) for c in e[2:] if isinstance(c, tuple))
    if e[0] == "call" and e[1] == ("id", "__cast"):
        return all(is_const(a, ctx) for a in e[2])
    return False


def read_var(env, name, member):
    keys = [k for k in env if k == name or k.startswith(name + ".")]
    if member:
        keys = [k for k in keys if k == name or k == name + "." + member or
                k.startswith(name + "." + member + ".")]
    return amax(*[env[k] for k in keys])


def write_var(env, name, member, a):
    if member:
        env[name + "." + member] = a
    else:
        for k in [k for k in env if k.startswith(name + ".")]:
            del env[k]
        env[name] = a


def array_read(arr, name, idxs, env, ctx):
    storage, parts, entries = ctx.arrays[name]
    ia = amax(*[ev(i, env, ctx) for i in idxs])
    var_idx = [i for i in idxs if not is_const(i, ctx)]
    if storage == "reg":
        levels = math.ceil(math.log(max(entries, 2), 4)) if var_idx else 0
        return amax(arr.plus(0, "wire") if arr and levels == 0 else (
            arr.plus(D_SELECT * levels, "reg-array mux") if arr else None),
            ia.plus(D_SELECT * max(levels, 1), "reg-array mux") if ia else None)
    if storage == "lutram":
        sel = D_SELECT * math.ceil(math.log(max(parts, 2), 4)) if parts > 1 and \
            idxs and not is_const(idxs[0], ctx) else 0
        return amax(arr.plus(D_LUTRAM + sel, "LUTRAM read") if arr else None,
                    ia.plus(D_LUTRAM + sel, "LUTRAM read") if ia else None)
    # a run-time first index of a dim-1-partitioned memory selects among the
    # partitions' outputs (all read at the other indices): a mux after the read
    first = ev(idxs[0], env, ctx) if parts > 1 and idxs else None
    rest = amax(*[ev(i, env, ctx) for i in (idxs[1:] if parts > 1 else idxs)])
    sel = D_SELECT * math.ceil(math.log(max(parts, 2), 4))
    return amax(arr.plus(D_RAM, "RAM read (registered)") if arr else None,
                rest.plus(D_RAM, "RAM read (registered)") if rest else None,
                first.plus(sel, "partition select") if first else None)


def ev(e, env, ctx):
    """Arrival of expression e (None: independent of the tracked register);
    applies side effects (++, assignments) to env."""
    k = e[0]
    if k == "num":
        return None
    if k == "id":
        return read_var(env, e[1], "")
    if k == "member":
        name, member = base_name(e)
        if name is None:
            return ev(e[1], env, ctx)
        idx = _indices(e)
        a = read_var(env, name, member)
        if name in ctx.arrays:
            return array_read(a, name, idx, env, ctx)
        return amax(a, *[ev(i, env, ctx) for i in idx])
    if k == "index":
        name, member = base_name(e)
        idx = _indices(e)
        if name in ctx.arrays:
            return array_read(read_var(env, name, member), name, idx, env, ctx)
        return amax(ev(e[1], env, ctx), *[ev(i, env, ctx) for i in idx])
    if k == "un":
        a = ev(e[2], env, ctx)
        return a.plus(D_LOGIC if e[1] in ("!", "~") else D_ADD32, e[1]) if a else None
    if k == "tern":
        c, a, b = ev(e[1], env, ctx), ev(e[2], env, ctx), ev(e[3], env, ctx)
        m = amax(c, a, b)
        return m.plus(D_SELECT, "select") if m else None
    if k == "bin":
        op, l, r = e[1], e[2], e[3]
        la, ra = ev(l, env, ctx), ev(r, env, ctx)
        m = amax(la, ra)
        if m is None:
            return None
        return m.plus(op_delay(op, l, r, ctx), op)
    if k in ("preinc", "postinc"):
        name, member = base_name(e[2])
        old = ev(e[2], env, ctx)
        new = old.plus(D_ADD32 if width(e[2], ctx) <= 32 else D_ADD64, e[1]) if old else None
        assign(e[2], new, env, ctx)
        return new if k == "preinc" else old
    if k == "assign":
        return do_assign(e, env, ctx)
    if k == "call":
        return call(e, env, ctx)
    raise ValueError("expression kind %s" % k)


def _indices(e):
    idx = []
    while e[0] in ("index", "member"):
        if e[0] == "index":
            idx.append(e[2])
        e = e[1]
    return list(reversed(idx))  # outermost dimension first


def op_delay(op, l, r, ctx):
    if op in ("<<", ">>"):
        return 0.0 if is_const(r, ctx) else D_VSHIFT
    if op in ("&", "|", "^", "&&", "||"):
        return D_LOGIC
    if op in ("+", "-"):
        return D_ADD32 if max(width(l, ctx), width(r, ctx)) <= 32 else D_ADD64
    if op in ("==", "!=", "<", "<=", ">", ">="):
        return D_CMP32 if max(width(l, ctx), width(r, ctx)) <= 32 else D_CMP64
    if op == "*":
        if is_const(l, ctx) and is_const(r, ctx):
            return 0.0
        c = l if l[0] == "num" else (r if r[0] == "num" else None)
        if c is not None:  # by a literal: wiring (a power of two) or one add
            v = int(re.match(r"\d+", c[1]).group(0))
            return 0.0 if v & (v - 1) == 0 else D_ADD32
        return D_MUL
    if op in ("/", "%"):
        return 0.0 if is_const(r, ctx) else D_DIV
    return D_LOGIC


def do_assign(e, env, ctx):
    op, lhs, rhs = e[1], e[2], e[3]
    a = ev(rhs, env, ctx)
    if op != "=":
        old = ev(lhs, env, ctx)
        m = amax(a, old)
        a = m.plus(op_delay(op[:-1], lhs, rhs, ctx), op) if m else None
    assign(lhs, a, env, ctx)
    return a


def assign(lhs, a, env, ctx):
    if lhs[0] == "call" and lhs[1][0] == "member" and lhs[1][2] == "range":
        # a part-select write w.range(hi, lo) = v: the carried word through a
        # mux on every bit lane the (variable) position can select
        base = lhs[1][1]
        old = ev(base, env, ctx)
        ia = amax(*[ev(x, env, ctx) for x in lhs[2]])
        var = not all(is_const(x, ctx) for x in lhs[2])
        m = amax(old, ia, a)
        assign(base, m.plus(D_INSERT, "part-select write at a variable position")
               if m and var else m, env, ctx)
        return
    name, member = base_name(lhs)
    if name is None:
        return
    idx = _indices(lhs)
    if name in ctx.arrays or idx:
        ia = amax(*[ev(i, env, ctx) for i in idx])
        storage = ctx.arrays.get(name, ("reg", 1, 1))[0]
        wd = D_REG_WRITE if storage == "reg" else 0.0
        new = amax(a.plus(wd, "array write") if a else None,
                   ia.plus(wd, "array write") if ia else None)
        # the other elements keep their values: the array's arrival is the
        # latest of its old one and this write
        old = env.get(name + ("." + member if member else ""))
        write_var(env, name, member, amax(old, new))
    else:
        write_var(env, name, member, a)


def call(e, env, ctx):
    f = e[1]
    args = e[2]
    if f[0] == "member":  # method: stream read/write, part select
        meth = f[2]
        if meth == "read":
            return None
        if meth == "write":
            for x in args:
                ev(x, env, ctx)
            return None
        if meth == "range":
            base = ev(f[1], env, ctx)
            ia = amax(*[ev(x, env, ctx) for x in args])
            var = not all(is_const(x, ctx) for x in args)
            m = amax(base, ia)
            return m.plus(D_VSHIFT if var else 0.0, "part select") if m else None
        return amax(ev(f[1], env, ctx), *[ev(x, env, ctx) for x in args])
    fname = f[1] if f[0] == "id" else ""
    if fname in ("__cast", "__init"):
        return amax(*[ev(x, env, ctx) for x in args])
    if fname == "SetWordByte":
        w, i, v = args
        old = ev(w, env, ctx)
        ia, va = ev(i, env, ctx), ev(v, env, ctx)
        d = 0.0 if is_const(i, ctx) else D_INSERT
        m = amax(old, ia, va)
        assign(w, m.plus(d, "byte insert at a variable position") if m and d else m, env, ctx)
        return None
    if fname == "WordByte":
        w, i = args
        m = amax(ev(w, env, ctx), ev(i, env, ctx))
        return m.plus(0.0 if is_const(i, ctx) else D_BYTE_READ, "byte read") if m else None
    if fname == "ClearWord":
        assign(args[0], None, env, ctx)
        return None
    m = amax(*[ev(x, env, ctx) for x in args])
    return m.plus(D_CALL, "call " + fname) if m else None


def trip_count(init, cond, step, consts):
    try:
        if init[0] == "decl":
            var, _, iv = init[2][0]
        else:
            var, iv = init[1][2][1], init[1][3]
        lo = int(iv[1], 0)
        op, bound = cond[1], cond[3]
        b = int(bound[1], 0) if bound[0] == "num" else consts.get(bound[1])
        if b is None:
            return var, None
        down = step[1] == "--" or (step[0] == "assign" and step[1] == "-=")
        n = {"<": b - lo, "<=": b - lo + 1, ">": lo - b, ">=": lo - b + 1}[op]
        return var, max(0, n) if (op in ("<", "<=")) != down else None
    except (TypeError, KeyError, IndexError, ValueError, AttributeError):
        return None, None


def walk(stmts, env, ctx, consts, cond_arr=None):
    for s in stmts:
        walk_one(s, env, ctx, consts)


def walk_one(s, env, ctx, consts):
    k = s[0]
    if k == "block":
        walk(s[1], env, ctx, consts)
    elif k == "sim":
        walk_one(s[2], env, ctx, consts)
    elif k == "expr":
        ev(s[1], env, ctx)
    elif k == "decl":
        for name, dims, init in s[2]:
            if dims:
                continue  # a local array: fresh each iteration
            write_var(env, name, "", ev(init, env, ctx) if init else None)
    elif k == "if":
        c = ev(s[1], env, ctx)
        te, ee = dict(env), dict(env)
        if s[2] is not None:
            walk_one(s[2], te, ctx, consts)
        if s[3] is not None:
            walk_one(s[3], ee, ctx, consts)
        for key in set(te) | set(ee) | set(env):
            a, b, o = te.get(key), ee.get(key), env.get(key)
            if a is o and b is o:
                continue
            m = amax(a, b, c if (a is not o or b is not o) else None)
            if m is None:
                env[key] = None
            elif m.d == 0 and m.n == 0:
                env[key] = m
            else:
                env[key] = m.plus(D_SELECT, "if/else merge")
    elif k == "for":
        init, cond, step, body = s[1], s[2], s[3], s[4]
        var, trips = trip_count(init, cond, step, consts)
        if var is not None and trips is not None and trips <= 64:
            ctx.consts.add(var)
            for _ in range(trips):
                walk_one(body, env, ctx, consts)
            ctx.consts.discard(var)
        else:
            if init is not None:
                walk_one(init, env, ctx, consts)
            walk_one(body, env, ctx, consts)
    elif k == "while":
        walk_one(s[2], env, ctx, consts)


def declared_and_written(stmts, decl, written):
    for s in stmts:
        if s is None:
            continue
        k = s[0]
        if k == "block":
            declared_and_written(s[1], decl, written)
        elif k == "sim":
            declared_and_written([s[2]], decl, written)
        elif k == "decl":
            for name, _, _ in s[2]:
                decl.add(name)
        elif k == "expr":
            _writes(s[1], written)
        elif k == "if":
            _writes(s[1], written)
            declared_and_written([s[2], s[3]], decl, written)
        elif k == "for":
            declared_and_written([s[1], s[4]], decl, written)
            if s[3] is not None:
                _writes(s[3], written)
        elif k == "while":
            _writes(s[1], written)
            declared_and_written([s[2]], decl, written)


def _writes(e, written):
    if not isinstance(e, tuple):
        return
    if e[0] == "assign" or e[0] in ("preinc", "postinc"):
        name, _ = base_name(e[2])
        if name:
            written.add(name)
    if e[0] == "call" and e[1][0] == "id" and e[1][1] == "SetWordByte":
        name, _ = base_name(e[2][0])
        if name:
            written.add(name)
    if e[0] == "assign" and e[2][0] == "call" and e[2][1][0] == "member" and \
            e[2][1][2] == "range":
        name, _ = base_name(e[2][1][1])
        if name:
            written.add(name)
    for c in e[1:]:
        if isinstance(c, tuple):
            _writes(c, written)
        elif isinstance(c, list):
            for y in c:
                _writes(y, written)


def recurrences(loop_text, arrays, bits, consts, independent=()):
    """[(variable, Arr)] of the loop body's carried values, longest first."""
    stmts = parse_block(tokenize(loop_text))
    decl, written = set(), set()
    declared_and_written(stmts, decl, written)
    out = []
    for v in sorted(written - decl - set(independent)):
        ctx = Context(arrays, bits, set())
        env = {v: Arr(0.0, 0, [])}
        walk(stmts, env, ctx, consts)
        a = read_var(env, v, "")
        if a is not None and a.n > 0:
            out.append((v, a))
    return sorted(out, key=lambda x: -x[1].d)


# ---- the kernel's loops ------------------------------------------------
SIM_LOOP = re.compile(r'NEARPREP_SIM_LOOP\(\s*"([^"]+)"\s*\)\s*(?:(\w+)\s*:)?\s*(for|while)\s*\(')
PART = re.compile(r"#\s*pragma\s+HLS\s+ARRAY_PARTITION\s+variable\s*=\s*(\w+)([^\n]*)", re.I)
BIND = re.compile(r"#\s*pragma\s+HLS\s+BIND_STORAGE\s+variable\s*=\s*(\w+)([^\n]*)", re.I)
ARRAY = re.compile(r"\b([A-Za-z_]\w*)\s+(\w+)((?:\s*\[[^\]\n]+\])+)\s*[;,)=]")
FUNC_START = re.compile(r"^(?:inline\s+|static\s+)?[A-Za-z_][\w:<>]*\s+([\w:]+)\s*\(", re.M)
SCALAR = re.compile(r"\b(%s)\s+(\w+)\b" % "|".join(TYPE_BITS))


def _close(code, i, o, c):
    depth = 0
    while i < len(code):
        if code[i] == o:
            depth += 1
        elif code[i] == c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def function_arrays(fn_text, consts):
    """name -> (storage, partitions of dim 1, entries) of the arrays a function
    declares (reg: completely partitioned; lutram; ram)."""
    parts, binds = {}, {}
    for m in PART.finditer(fn_text):
        d = re.search(r"\bdim\s*=\s*(\d+)", m.group(2))
        kind = "complete" if "complete" in m.group(2) else "other"
        parts.setdefault(m.group(1), {})[int(d.group(1)) if d else 1] = kind
    for m in BIND.finditer(fn_text):
        impl = re.search(r"impl\s*=\s*(\w+)", m.group(2))
        binds[m.group(1)] = impl.group(1).lower() if impl else "auto"
    out = {}
    for m in ARRAY.finditer(fn_text):
        if m.group(1) in KEYWORDS or m.group(1) in ("return", "new", "delete"):
            continue
        line = fn_text[fn_text.rfind("\n", 0, m.start(1)) + 1:m.start(1)]
        if "#" in line:  # the last word of a pragma line, then an indexed write
            continue
        dims = re.findall(r"\[([^\]]+)\]", m.group(3))
        sizes = []
        for d in dims:
            expr = re.sub(r"\b([A-Za-z_]\w*)\b", lambda x: str(consts.get(x.group(1), 64)), d)
            sizes.append(int(eval(expr.replace("/", "//")))  # digits and operators only
                         if re.fullmatch(r"[\d\s+\-*/()]+", expr) else 64)
        p = parts.get(m.group(2), {})
        complete = p.get(0) == "complete" or all(p.get(i) == "complete"
                                                 for i in range(1, len(sizes) + 1))
        entries = 1
        for s in sizes:
            entries *= s
        if complete:
            out[m.group(2)] = ("reg", sizes[0], entries)
        elif binds.get(m.group(2)) == "lutram":
            out[m.group(2)] = ("lutram", sizes[0] if p.get(1) == "complete" else 1, entries)
        elif entries * 64 <= 1024 and m.group(2) not in binds:
            out[m.group(2)] = ("reg", sizes[0], entries)  # small: HLS maps it to registers
        else:
            out[m.group(2)] = ("ram", sizes[0] if p.get(1) == "complete" else 1, entries)
    return out


def kernel_loops(texts, consts):
    """[(rel, sim id, loop body text, arrays, bits, pragma II)] of the
    NEARPREP_SIM_LOOP-bracketed loops with a PIPELINE pragma."""
    out = []
    for rel, code in texts:
        for m in SIM_LOOP.finditer(code):
            po = m.end() - 1
            pe = _close(code, po, "(", ")")
            bo = code.index("{", pe)
            be = _close(code, bo, "{", "}")
            body = code[bo + 1:be - 1]
            ii = re.search(r"#\s*pragma\s+HLS\s+PIPELINE(?:\s+II\s*=\s*(\d+))?", body[:400])
            if not ii:
                continue
            # the enclosing function: the last definition at column 0 before the loop
            starts = [x.start() for x in FUNC_START.finditer(code, 0, m.start())
                      if x.group(1) not in KEYWORDS]
            fn_text = code[starts[-1] if starts else 0:be]
            arrays = function_arrays(fn_text, consts)
            # an array parameter takes the partitions its caller declared
            # (same file): without a pragma in the function, the file's
            whole = function_arrays(code, consts)
            for name in arrays:
                if name in whole and not re.search(
                        r"variable\s*=\s*%s\b" % re.escape(name), fn_text):
                    arrays[name] = whole[name]
            bits = {mm.group(2): TYPE_BITS[mm.group(1)] for mm in SCALAR.finditer(fn_text)}
            for mm in re.finditer(r"\b(PartialWord|OutWord)\s+(\w+)", fn_text):
                bits[mm.group(2)] = 512
            # arrays the designer declared free of inter-iteration
            # dependences (DEPENDENCE ... inter false) carry nothing
            indep = set(re.findall(r"#\s*pragma\s+HLS\s+DEPENDENCE\s+variable\s*=\s*(\w+)"
                                   r"[^\n]*\binter\s+false", fn_text, re.I))
            out.append((rel, m.group(1), "{" + body + "}", arrays, bits,
                        int(ii.group(1)) if ii.group(1) else 1, indep))
    return out


TABLE_ROW = re.compile(r'\{\s*"([\w.]+)"\s*,\s*\{\s*(\d+)\s*,\s*(\d+)\s*\}\s*,\s*'
                       r'\{\s*(\d+)\s*,\s*(\d+)\s*\}')


def timing_table(text):
    """{id: (ii_opt, ii_exp, depth_opt, depth_exp)} of loop_timing.cc."""
    return {m.group(1): tuple(int(m.group(i)) for i in range(2, 6))
            for m in TABLE_ROW.finditer(text)}


def budget_ns(mhz):
    return 1000.0 / mhz * (1 - UNCERTAINTY)


def check_recurrences(texts, table, mhz, consts, verbose=True):
    """Findings: a loop whose table row (expected II) is below what its
    longest recurrence needs, or whose recurrence is unsure (within 20 % of
    the budget) while its optimistic and expected columns agree."""
    budget = budget_ns(mhz)
    findings = []
    for rel, sid, body, arrays, bits, pragma_ii, indep in kernel_loops(texts, consts):
        try:
            recs = recurrences(body, arrays, bits, consts, indep)
        except (ValueError, IndexError) as err:
            findings.append("(r) %s %s: cannot read the loop body (%s)" % (rel, sid, err))
            continue
        row = table.get(sid)
        worst = recs[0] if recs else None
        d = worst[1].d if worst else 0.0
        need = max(1, math.ceil(d / budget - 1e-9))
        if verbose:
            print("  %-28s %5.2f ns / %.2f budget -> II %d%s%s" % (
                sid, d, budget, need,
                " (%s: %d ops: %s)" % (worst[0], worst[1].n, " > ".join(worst[1].path[:14]))
                if worst else "", "" if row else " [no table row]"))
        if row is None:
            findings.append("(r) %s %s: pipelined loop without a row in loop_timing.cc" % (rel, sid))
            continue
        ii_opt, ii_exp = row[0], row[1]
        if 1 < ii_exp < need:
            # Declared II > 1: not refused (the walk is an upper bound: every
            # merge of a long if/else chain counts one select, where logic
            # synthesis builds one wider mux); said, so a reader sees it.
            if verbose:
                print("    note: %s expects II %d; the walk's upper bound is II %d (%.2f ns)"
                      % (sid, ii_exp, need, d))
        elif ii_exp < need:
            findings.append(
                "(r) %s %s: the table expects II %d but the recurrence of '%s' is %.2f ns "
                "through %d dependent operators (%s) against a %.2f ns budget at %g MHz: II %d"
                % (rel, sid, ii_exp, worst[0], d, worst[1].n, " > ".join(worst[1].path),
                   budget, mhz, need))
        elif need == 1 and d > UNSURE_MARGIN * budget and ii_opt == ii_exp:
            findings.append(
                "(r) %s %s: recurrence of '%s' is %.2f ns, within 20%% of the %.2f ns budget "
                "(unsure): the optimistic and expected II columns must differ"
                % (rel, sid, worst[0], d, budget))
    return findings


# ---- csynth.xml --------------------------------------------------------
def _int(text):
    if text is None:
        return None
    t = text.strip()
    m = re.match(r"^(\d+)(?:\s*~\s*(\d+))?$", t)
    if not m:
        return None
    return int(m.group(2) or m.group(1))


def parse_csynth(path_or_text):
    """{'top', 'part', 'target_ns', 'uncertainty_ns', 'estimated_ns', 'loops':
    {label: {'ii', 'depth', 'latency'}}} of a Vitis HLS csynth.xml report
    (syn/report/<module>_csynth.xml). A loop is an element under
    PerformanceEstimates/SummaryOfLoopLatency (named by its label, at any
    nesting depth) with a PipelineII and/or PipelineDepth child; its name is
    its <Name> child when present, else its tag. Unpipelined loops report
    their IterationLatency as the depth and no II."""
    text = path_or_text if path_or_text.lstrip().startswith("<") else open(path_or_text).read()
    root = ET.fromstring(text)

    def find(*paths):
        for p in paths:
            x = root.find(p)
            if x is not None and x.text is not None:
                return x.text.strip()
        return None
    out = {"top": find(".//UserAssignments/TopModelName"),
           "part": find(".//UserAssignments/Part"),
           "target_ns": float(find(".//UserAssignments/TargetClockPeriod") or "nan"),
           "uncertainty_ns": float(find(".//UserAssignments/ClockUncertainty") or "nan"),
           "estimated_ns": float(find(".//SummaryOfTimingAnalysis/EstimatedClockPeriod") or "nan"),
           "loops": {}}
    for summary in root.iter("SummaryOfLoopLatency"):
        for el in summary.iter():
            if el is summary:
                continue
            ii = el.find("PipelineII")
            depth = el.find("PipelineDepth")
            it = el.find("IterationLatency")
            if ii is None and depth is None and it is None:
                continue
            name = el.findtext("Name") or el.tag
            out["loops"][name.strip()] = {
                "ii": _int(ii.text) if ii is not None else None,
                "depth": _int(depth.text) if depth is not None else (
                    _int(it.text) if it is not None else None),
                "latency": _int(el.findtext("Latency")),
            }
    return out


def sim_labels(texts):
    """{(process, loop label): sim id} from the kernel sources: the label
    that follows each NEARPREP_SIM_LOOP("Process.x")."""
    out = {}
    for _, code in texts:
        for m in SIM_LOOP.finditer(code):
            if m.group(2):
                out[(m.group(1).split(".")[0], m.group(2))] = m.group(1)
    return out


def compare_report(report, table, labels, process=None, mhz=None):
    """Findings where the timing table is more optimistic than the report:
    a loop's achieved II above the table's expected II, its depth above the
    expected depth, or the estimated clock period over the target less the
    uncertainty (the clock the table assumes is not met)."""
    proc = process or re.sub(r"^synth_", "", report["top"] or "")
    # a label names one loop of the process; a report of a combined top
    # (synth_McuRows) or of a sub-module matches a label unique in the kernel
    by_label = {}
    for (p, label), sid in labels.items():
        by_label.setdefault(label, []).append(sid)
    findings = []
    if report["estimated_ns"] == report["estimated_ns"] and \
            report["target_ns"] == report["target_ns"]:
        unc = report["uncertainty_ns"] if report["uncertainty_ns"] == report["uncertainty_ns"] \
            else report["target_ns"] * UNCERTAINTY
        if report["estimated_ns"] > report["target_ns"] - unc + 1e-9:
            findings.append("(csynth) %s: estimated clock %.3f ns exceeds the target %.3f ns less "
                            "its %.3f ns uncertainty" % (proc, report["estimated_ns"],
                                                         report["target_ns"], unc))
    if mhz is not None and report["target_ns"] == report["target_ns"] and \
            abs(report["target_ns"] - 1000.0 / mhz) > 0.01:
        findings.append("(csynth) %s: the report's target %.3f ns is not the Makefile's %g MHz"
                        % (proc, report["target_ns"], mhz))
    for label, loop in sorted(report["loops"].items()):
        sid = labels.get((proc, label))
        if sid is None and len(by_label.get(label, [])) == 1:
            sid = by_label[label][0]
        if sid is None:
            continue
        row = table.get(sid)
        if row is None:
            findings.append("(csynth) %s: loop %s (%s) has no table row" % (proc, label, sid))
            continue
        if loop["ii"] is not None and loop["ii"] > row[1]:
            findings.append("(csynth) %s: achieved II %d, the table expects %d"
                            % (sid, loop["ii"], row[1]))
        if loop["depth"] is not None and loop["depth"] > row[3]:
            findings.append("(csynth) %s: pipeline depth %d, the table expects %d"
                            % (sid, loop["depth"], row[3]))
    return findings
