#!/usr/bin/python3
"""CI checks for the FPGA kernel sources: what Vitis HLS would refuse or
silently get wrong, found without Vitis.

  ir        compiles every kernel source (SRCS of fpga_kernels/Makefile) with
            clang and exactly the Makefile's HLS_CFLAGS (plus -D__SYNTHESIS__
            and the stub Vitis headers in kernel_checks_stubs/), emits LLVM IR
            and refuses: calls to functions defined nowhere in the kernel
            (memcmp, malloc, __cxa_guard_acquire, ...) other than the Vitis
            library stubs and a few LLVM intrinsics HLS implements; fused
            multiply-add (llvm.fmuladd / llvm.fma); global constructors
            (llvm.global_ctors: a static with a run-time initialiser).
  lint      refuses, in the kernel sources and headers: malloc/free/new/
            delete, std containers and smart pointers, static variables
            that are not constexpr, loops without a LOOP_TRIPCOUNT pragma
            (unless UNROLLed or bounded by a literal / kConstant: HLS knows
            those trip counts; without it the reports have no latency), and
            streams declared in a kernel source without a STREAM pragma
            whose depth is the declared one (streams of blocks take their
            depth from the template only).
  structure (issue 24) what keeps a pipelined loop from its II or the design
            from the device, read from the source text: (a) port budget,
            (b) a call containing a variable-bound loop inside a pipelined
            loop, (c) arrays of structs with array members in RAM, (d) a
            pointer into a partitioned array at a run-time index passed to a
            non-inlined function, (e) URAM/BRAM budget of the KU15P for the
            buffers and FIFOs as declared (and the kMaxWidth that would fit);
            and the ABI table's argument types against the top function's
            parameters, the clock set only in the Makefile.
            See the comment above structure_findings() for the limits.
  recurrence (issue 33) every NEARPREP_SIM_LOOP-bracketed pipelined loop's
            loop-carried recurrences (kernel_recurrence.py: values read,
            transformed and written back in one iteration, through arrays,
            struct members and wide-word part selects), their dependent
            operators and delay against the clock budget of the Makefile's
            KERNEL_MHZ: refuses a loop whose row in
            fpga_kernels/host/loop_timing.cc expects II 1 while its
            recurrence exceeds the budget, and a loop within 20 % of the
            budget whose optimistic and expected II agree (unsure).
  csynth REPORT.xml...  parses Vitis HLS csynth.xml reports (per-loop
            achieved II and depth, estimated clock) and refuses where the
            timing table is more optimistic than a report.
  selftest  plants one violation of each kind in a scratch source and checks
            that `ir` / `lint` / `structure` / `recurrence` catch it (and
            that the clean variants pass), and parses a hand-made csynth.xml
            fixture.

Exit status 0 when clean; 1 with one line per finding otherwise.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_recurrence as recur  # noqa: E402
STUBS = os.path.join(HERE, "kernel_checks_stubs")

# LLVM intrinsics HLS implements (everything else must be defined in the
# kernel). llvm.fmuladd / llvm.fma are refused separately.
ALLOWED_INTRINSIC = re.compile(
    r"^llvm\.(memcpy|memmove|memset|lifetime|dbg|assume|experimental\.noalias|"
    r"floor|ceil|round|trunc|fabs|sqrt|minnum|maxnum|smax|smin|umax|umin|abs|"
    r"ctlz|cttz|ctpop|bswap|fshl|fshr|sadd|uadd|ssub|usub|smul|umul|expect|"
    r"var\.annotation|sideeffect|is\.constant)\b")
FMA = re.compile(r"@llvm\.(fmuladd|fma)\.")
# Functions of the stub Vitis headers (hls::, ap_uint, ap_int): provided by
# the HLS tool, so declared-only calls to them are fine.
ALLOWED_MANGLED = re.compile(r"^_Z(N|NK)\d*(3hls|7ap_uint|6ap_int)")
# The C++ unwinder's personality routine: referenced by the cleanup landing
# pads clang emits for the destructors of the stream-of-blocks locks around
# calls. Nothing in the kernel throws (the lint refuses throw/try, and
# __cxa_throw would be an external call), so no landing pad is ever taken.
ALLOWED_EXTERNAL = {"__gxx_personality_v0"}

# Files of fpga_kernels/include that are C-simulation models, not kernel code
# (their synthesis branch only includes the Vitis headers).
LINT_SKIP = {"hls_compat.h", "hls_sim.h"}

LINT_RULES = [
    (re.compile(r"\b(malloc|calloc|realloc|free|aligned_alloc|posix_memalign)\s*\("),
     "heap allocation (malloc/free): no heap in hardware"),
    (re.compile(r"\bnew\b|\bdelete\b"), "new/delete: no heap in hardware"),
    (re.compile(r"\bstd::(vector|deque|list|map|set|unordered_\w+|string|"
                r"unique_ptr|shared_ptr|function|thread|mutex)\b"),
     "std container / smart pointer / thread: not synthesisable"),
    (re.compile(r"#\s*include\s*<(vector|deque|list|map|set|unordered_map|"
                r"unordered_set|string|memory|functional|thread|mutex)>"),
     "include of a std container/thread header"),
    (re.compile(r"#\s*include\s*\"server/"), "kernel includes server/ code"),
    (re.compile(r"\bthrow\b|\btry\s*\{|\bcatch\s*\("), "exceptions: none in hardware"),
]
STATIC_VAR = re.compile(r"\bstatic\b(?!_)(?!\s+constexpr\b)")
STATIC_FUNC = re.compile(r"\bstatic\s+(inline\s+)?[\w:<>,\s\*&]+?\b\w+\s*\(")


def makefile_vars(makefile):
    """HLS_CFLAGS, SRCS and SYNTH_TOPS (optional: the per-process extern "C"
    synthesis tops, compiled and linted like the kernel) of the Makefile."""
    text = open(makefile).read().replace("\\\n", " ")
    out = {}
    for name in ("HLS_CFLAGS", "SRCS", "SYNTH_TOPS"):
        m = re.search(r"^%s\s*:?=\s*(.*)$" % name, text, re.M)
        if not m and name == "SYNTH_TOPS":
            out[name] = []
            continue
        if not m:
            raise SystemExit("kernel_checks: %s not found in %s" % (name, makefile))
        out[name] = shlex.split(m.group(1))
    return out


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', src)


def compile_ir(clang, cflags, src, workdir, cwd):
    out = os.path.join(workdir, os.path.basename(src) + ".ll")
    cmd = [clang] + cflags + ["-D__SYNTHESIS__", "-I", STUBS, "-O0", "-S",
                              "-emit-llvm", "-Wno-unknown-pragmas", "-o", out, src]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "compile failed: %s\n%s" % (" ".join(cmd), r.stderr.strip())
    return open(out).read(), None


def scan_ir(modules):
    """modules: {name: ir text}. Returns findings."""
    defined, declared, findings = set(), {}, []
    for name, ir in modules.items():
        for m in re.finditer(r"^define [^@]*@\"?([\w.$]+)\"?\(", ir, re.M):
            defined.add(m.group(1))
        for m in re.finditer(r"^declare [^@]*@\"?([\w.$]+)\"?\(", ir, re.M):
            declared.setdefault(m.group(1), name)
        if FMA.search(ir):
            findings.append("%s: fused multiply-add (llvm.fmuladd/fma) in the IR" % name)
        if "@llvm.global_ctors" in ir:
            findings.append("%s: global constructor (a static with a run-time "
                            "initialiser)" % name)
    for fn, where in sorted(declared.items()):
        if fn in defined:
            continue
        if fn.startswith("llvm."):
            if FMA.search("@" + fn + "."):
                continue  # reported above
            if not ALLOWED_INTRINSIC.match(fn):
                findings.append("%s: intrinsic %s" % (where, fn))
            continue
        if ALLOWED_MANGLED.match(fn) or fn in ALLOWED_EXTERNAL:
            continue
        findings.append("%s: call to external function %s (not in the kernel)" % (where, fn))
    return findings


def run_ir(clang, makefile):
    v = makefile_vars(makefile)
    kdir = os.path.dirname(os.path.abspath(makefile))
    findings, modules = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for src in v["SRCS"] + v["SYNTH_TOPS"]:
            ir, err = compile_ir(clang, v["HLS_CFLAGS"], src, tmp, kdir)
            if err:
                findings.append("%s: %s" % (src, err))
            else:
                modules[src] = ir
    return findings + scan_ir(modules)


def lint_text(name, text):
    findings = []
    code = strip_comments(text)
    for ln, line in enumerate(code.split("\n"), 1):
        for rx, why in LINT_RULES:
            if rx.search(line):
                findings.append("%s:%d: %s: %s" % (name, ln, why, line.strip()))
        if STATIC_VAR.search(line) and not STATIC_FUNC.search(line):
            findings.append("%s:%d: non-constexpr static variable: %s" % (name, ln, line.strip()))
    return findings


LOOP_HEAD = re.compile(r"\b(for|while)\s*\(|\bdo\s*\{")
CONST_BOUND = re.compile(r"^\s*\w+\s*(<|<=|>|>=)\s*(\d+|k[A-Z]\w*)\s*$")
TRIPCOUNT = re.compile(r"#\s*pragma\s+HLS\s+(LOOP_TRIPCOUNT|UNROLL)\b", re.I)
STREAM_DECL = re.compile(r"\bhls::stream<[^;>]*?,\s*(\w+)\s*>\s+([^;]*);")
STREAM_PRAGMA = re.compile(r"#\s*pragma\s+HLS\s+STREAM\s+variable\s*=\s*(\w+)"
                           r"(?:\s+type\s*=\s*\w+)?(?:\s+depth\s*=\s*(\w+))?", re.I)


def _close(code, i, open_ch, close_ch):
    """Index just past the bracket matching code[i] (an open_ch)."""
    depth = 0
    for k in range(i, len(code)):
        if code[k] == open_ch:
            depth += 1
        elif code[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def lint_loops(name, code):
    """Loops whose body does not start with a LOOP_TRIPCOUNT (or UNROLL)
    pragma, except for-loops with a literal / kConstant bound."""
    findings = []
    for m in LOOP_HEAD.finditer(code):
        ln = code.count("\n", 0, m.start()) + 1
        if m.group(0).startswith("do"):
            body = m.end()
        else:
            end = _close(code, code.index("(", m.start()), "(", ")")
            rest = code[end:].lstrip()
            if rest.startswith(";"):
                continue  # the while of a do-while
            if m.group(1) == "for":
                header = code[code.index("(", m.start()) + 1:end - 1].split(";")
                if len(header) == 3 and CONST_BOUND.match(header[1]):
                    continue
            if not rest.startswith("{"):
                findings.append("%s:%d: loop without braces (no room for LOOP_TRIPCOUNT): %s"
                                % (name, ln, code[m.start():end].strip()))
                continue
            body = end + code[end:].index("{") + 1
        # The pragmas right at the start of the body.
        ok = False
        for line in code[body:].split("\n"):
            t = line.strip()
            if not t:
                continue
            if not t.startswith("#"):
                break
            if TRIPCOUNT.search(t):
                ok = True
        if not ok:
            head = code[m.start():code.find("\n", m.start())].strip()
            findings.append("%s:%d: loop without LOOP_TRIPCOUNT: %s" % (name, ln, head))
    return findings


def lint_streams(name, code):
    """Every hls::stream / stream of blocks declared in `code` has a STREAM
    pragma naming it, whose depth (if the declaration has one) is the
    declared depth."""
    pragmas = {}
    for m in STREAM_PRAGMA.finditer(code):
        pragmas[m.group(1)] = m.group(2)
    findings = []
    for m in STREAM_DECL.finditer(code):
        depth = m.group(1)
        names = re.findall(r"(\w+)\s*\(\s*\"", m.group(2))
        ln = code.count("\n", 0, m.start()) + 1
        for n in names:
            if n not in pragmas:
                findings.append("%s:%d: stream %s without a STREAM pragma" % (name, ln, n))
            elif depth and pragmas[n] != depth:
                findings.append("%s:%d: stream %s: STREAM depth %s, declared %s"
                                % (name, ln, n, pragmas[n], depth))
    return findings


def run_lint(makefile):
    kdir = os.path.dirname(os.path.abspath(makefile))
    v = makefile_vars(makefile)
    files = [os.path.join(kdir, s) for s in v["SRCS"] + v["SYNTH_TOPS"]]
    inc = os.path.join(kdir, "include")
    files += [os.path.join(inc, f) for f in sorted(os.listdir(inc))
              if f.endswith(".h") and f not in LINT_SKIP]
    findings = []
    for f in files:
        text = open(f).read()
        rel = os.path.relpath(f, kdir)
        findings += lint_text(rel, text)
        code = _strip_keep_strings(text)
        findings += lint_loops(rel, code)
        findings += lint_streams(rel, code)
    return findings


def _strip_keep_strings(src):
    """Comments removed, string literals kept (stream names)."""
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)



# ---------------------------------------------------------------------------
# Structure checks (issue 24), on the kernel sources as text (comments
# stripped): what keeps a pipelined loop from its II or the design from the
# device, as a reviewer reads it. Heuristics with stated limits: accesses
# inside inlined callees are not counted (a callee's own pipelined loops are
# checked in the callee), and pragmas apply to the function they are in.
#  (a) port budget: an array accessed more than twice per iteration of a
#      pipelined loop in one memory bank (accesses grouped by the index text
#      of its partitioned dimensions; an access in an unrolled inner loop
#      counts once per copy unless the unrolled variable indexes a
#      partitioned dimension); a completely partitioned array is registers;
#  (b) a call inside a pipelined loop to a kernel function that (itself or
#      through its callees) contains a loop with a variable bound and no
#      UNROLL: HLS builds no pipeline around it;
#  (c) a local array of structs that have array members, not completely
#      partitioned: HLS splits the struct per member (per byte) in RAM;
#  (d) a pointer into a partitioned array at a run-time index (&a[i], or a
#      sub-array a[i] of a multi-dimensional a partitioned on dim 1) passed
#      to a function without INLINE;
#  (e) resources: see resource_budget().

CONTROL_WORDS = {"if", "for", "while", "switch", "return", "sizeof", "catch", "do"}
FUNC_DEF = re.compile(r'^[A-Za-z_][\w:<>,\s\*&"]*?\b([A-Za-z_]\w*)\s*\(', re.M)
PRAGMA = re.compile(r"#\s*pragma\s+HLS\s+(\w+)([^\n]*)", re.I)
INT_OR_CONST = re.compile(r"^\s*(\d+|k[A-Z]\w*)\s*$")


def parse_functions(code):
    """{name: {params, body, start}} for the definitions at column 0."""
    fns = {}
    for m in FUNC_DEF.finditer(code):
        name = m.group(1)
        if name in CONTROL_WORDS:
            continue
        po = code.index("(", m.end() - 1)
        pe = _close(code, po, "(", ")")
        mm = re.match(r"\s*(const\s*)?\{", code[pe:])
        if not mm:
            continue
        bo = pe + mm.end() - 1
        be = _close(code, bo, "{", "}")
        fns[name] = {"params": code[po + 1:pe - 1], "body": code[bo + 1:be - 1], "start": bo + 1,
                     "code": code}
    return fns


def _leading_pragmas(text):
    out = []
    for line in text.split("\n"):
        t = line.strip()
        if not t:
            continue
        if not t.startswith("#"):
            break
        out.append(t)
    return out


def is_inline(fn):
    return any(re.search(r"HLS\s+INLINE\b(?!\s+off)", p, re.I) for p in _leading_pragmas(fn["body"]))


def loops(body):
    """(kind, header, body text, offset, pragmas, is_const, var, trips) for every loop; a
    brace-less body runs to its ';'."""
    out = []
    for m in LOOP_HEAD.finditer(body):
        if m.group(0).startswith("do"):
            bo = m.end() - 1
            be = _close(body, bo, "{", "}")
            text = body[bo + 1:be - 1]
            out.append(("do", "", text, bo + 1, _leading_pragmas(text), False, None, None))
            continue
        po = body.index("(", m.start())
        pe = _close(body, po, "(", ")")
        rest = body[pe:]
        if rest.lstrip().startswith(";"):
            continue  # the while of a do-while
        header = body[po + 1:pe - 1]
        if rest.lstrip().startswith("{"):
            bo = pe + rest.index("{")
            be = _close(body, bo, "{", "}")
            text = body[bo + 1:be - 1]
            start = bo + 1
        else:
            text = rest[:rest.index(";") + 1]
            start = pe
        const, var, trips = False, None, None
        if m.group(1) == "for":
            parts = header.split(";")
            if len(parts) == 3:
                cm = CONST_BOUND.match(parts[1])
                vm = re.search(r"(\w+)\s*=", parts[0])
                var = vm.group(1) if vm else None
                if cm:
                    const = True
                    trips = int(cm.group(2)) if cm.group(2).isdigit() else None
        out.append((m.group(1), header, text, start, _leading_pragmas(text), const, var, trips))
    return out


def pipelined(lp):
    return any(re.search(r"HLS\s+PIPELINE\b", p, re.I) for p in lp[4])


def unrolled(lp):
    return lp[5] or any(re.search(r"HLS\s+UNROLL\b", p, re.I) for p in lp[4])


def partitions(body):
    """{array: {dim: kind}} from the ARRAY_PARTITION pragmas (dim 0: all)."""
    out = {}
    for m in PRAGMA.finditer(body):
        if m.group(1).upper() != "ARRAY_PARTITION":
            continue
        args = m.group(2)
        v = re.search(r"variable\s*=\s*(\w+)", args)
        if not v:
            continue
        kind = "complete" if re.search(r"\bcomplete\b", args) else (
            "cyclic" if re.search(r"\bcyclic\b", args) else "block")
        d = re.search(r"\bdim\s*=\s*(\d+)", args)
        out.setdefault(v.group(1), {})[int(d.group(1)) if d else 1] = kind
    return out


def bindings(body):
    out = {}
    for m in PRAGMA.finditer(body):
        if m.group(1).upper() != "BIND_STORAGE":
            continue
        v = re.search(r"variable\s*=\s*(\w+)", m.group(2))
        impl = re.search(r"impl\s*=\s*(\w+)", m.group(2))
        if v:
            out[v.group(1)] = impl.group(1).lower() if impl else "auto"
    return out


ARRAY_DECL = re.compile(r"(?:^|[;{}(,])\s*(?:const\s+)?(?!(?:return|else|case|do|goto)\b)"
                        r"([A-Za-z_][\w:]*(?:<[^;<>()]*>)?)(?:\s+|\s*&\s*)"
                        r"(\w+)\s*((?:\[[^\]\n]*\])+)\s*(?=[;,)=])", re.M)
TYPEDEF_ARRAY = re.compile(r"typedef\s+(\w+)\s+(\w+)\s*((?:\[[^\]]*\])+)\s*;")
TYPEDEF_REF = re.compile(r"\b(\w+)\s*&\s*(\w+)\b")


def arrays_of(fn, typedefs):
    """{name: (elem type, [dim texts])} declared in the function or its parameters."""
    out = {}
    for text in (fn["params"], fn["body"]):
        for m in ARRAY_DECL.finditer(text):
            if m.group(1) in ("return", "delete", "new"):
                continue
            out[m.group(2)] = (m.group(1), re.findall(r"\[([^\]]*)\]", m.group(3)))
        for m in TYPEDEF_REF.finditer(text):
            if m.group(1) in typedefs:
                out[m.group(2)] = typedefs[m.group(1)]
    return out


def accesses(text, name):
    """(offset, [index texts]) of every `name[..]..` in text."""
    out = []
    for m in re.finditer(r"(?<![\w.>])%s\s*\[" % re.escape(name), text):
        i = m.end() - 1
        idx = []
        while i < len(text) and text[i] == "[":
            e = _close(text, i, "[", "]")
            idx.append(text[i + 1:e - 1].strip())
            j = e
            while j < len(text) and text[j] in " \t":
                j += 1
            i = j
        out.append((m.start(), idx))
    return out


def fully_partitioned(parts, ndims):
    if not parts:
        return False
    if parts.get(0) == "complete":
        return True
    return all(parts.get(d) == "complete" for d in range(1, ndims + 1))


def check_ports(rel, fn, typedefs):
    findings = []
    arrays = arrays_of(fn, typedefs)
    # A parameter array takes the partitions its caller declared (same file).
    parts = dict(partitions(fn["code"]))
    parts.update(partitions(fn["body"]))
    for lp in loops(fn["body"]):
        if not pipelined(lp):
            continue
        text = lp[2]
        inner = [l for l in loops(text) if unrolled(l)]
        for name, (_, dims) in arrays.items():
            p = parts.get(name, {})
            if fully_partitioned(p, len(dims)):
                continue
            banks = {}
            for off, idx in accesses(text, name):
                mult, uvars = 1, set()
                for il in inner:
                    if il[3] <= off < il[3] + len(il[2]) and il[6]:
                        uvars.add(il[6])
                        mult *= il[7] or 2
                key, distinct = [], False
                for d, ix in enumerate(idx, 1):
                    if p.get(d) or p.get(0):
                        key.append(ix)
                        if any(re.search(r"\b%s\b" % v, ix) for v in uvars):
                            distinct = True
                    else:
                        key.append("-")
                n = 1 if distinct else mult
                k = tuple(key)
                banks[k] = banks.get(k, 0) + n
            for k, n in banks.items():
                if n > 2:
                    ln = fn["code"].count("\n", 0, fn["start"] + lp[3]) + 1
                    findings.append("%s:%d: (a) port budget: array %s accessed %d times per "
                                    "iteration of a pipelined loop in one bank (%s); 2 ports"
                                    % (rel, ln, name, n, "][".join(k)))
    return findings


def _has_variable_loop(name, fns, seen, depth=0):
    if name in seen or name not in fns or depth > 6:
        return None
    seen.add(name)
    for lp in loops(fns[name]["body"]):
        if not unrolled(lp):
            return name
    for c in set(re.findall(r"\b([A-Z]\w*)\s*\(", fns[name]["body"])):
        r = _has_variable_loop(c, fns, seen, depth + 1)
        if r:
            return r
    return None


def check_calls_in_pipelines(rel, fn, fns):
    findings = []
    for lp in loops(fn["body"]):
        if not pipelined(lp):
            continue
        for c in sorted(set(re.findall(r"\b([A-Z]\w*)\s*\(", lp[2]))):
            r = _has_variable_loop(c, fns, set())
            if r:
                ln = fn["code"].count("\n", 0, fn["start"] + lp[3]) + 1
                findings.append("%s:%d: (b) call of %s inside a pipelined loop: %s has a loop "
                                "with a variable bound (no pipeline is built)" % (rel, ln, c, r))
    return findings


STRUCT_DEF = re.compile(r"\bstruct\s+(\w+)\s*\{([^{}]*)\}\s*;")


def structs_with_arrays(code):
    return {m.group(1) for m in STRUCT_DEF.finditer(code) if "[" in m.group(2)}


def check_struct_arrays(rel, fn, struct_arrays, typedefs):
    findings = []
    parts = partitions(fn["body"])
    for m in ARRAY_DECL.finditer(fn["body"]):
        t, name = m.group(1), m.group(2)
        if t not in struct_arrays:
            continue
        dims = re.findall(r"\[([^\]]*)\]", m.group(3))
        if fully_partitioned(parts.get(name, {}), len(dims)):
            continue
        ln = fn["code"].count("\n", 0, fn["start"] + m.start()) + 1
        findings.append("%s:%d: (c) array %s of struct %s (which has array members) in RAM: "
                        "HLS splits it per member; pack the entries into one word"
                        % (rel, ln, name, t))
    return findings


def _split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def check_partition_pointers(rel, fn, fns, typedefs):
    findings = []
    arrays = arrays_of(fn, typedefs)
    parts = partitions(fn["body"])
    for m in re.finditer(r"\b([A-Z]\w*)\s*\(", fn["body"]):
        callee = m.group(1)
        if callee not in fns or is_inline(fns[callee]):
            continue
        po = m.end() - 1
        args = _split_args(fn["body"][po + 1:_close(fn["body"], po, "(", ")") - 1])
        for a in args:
            am = re.match(r"^(&\s*)?(\w+)\s*\[(.*)\]$", a)
            if not am or am.group(2) not in arrays:
                continue
            name = am.group(2)
            n_idx = len(accesses(a.lstrip("& "), name)[0][1]) if accesses(a.lstrip("& "), name) else 1
            pointer = am.group(1) is not None or n_idx < len(arrays[name][1])
            p = parts.get(name, {})
            first = accesses(a.lstrip("& "), name)[0][1][0]
            if pointer and (p.get(1) or p.get(0)) and not INT_OR_CONST.match(first):
                ln = fn["code"].count("\n", 0, fn["start"] + m.start()) + 1
                findings.append("%s:%d: (d) %s passes a pointer into partitioned array %s at a "
                                "run-time index (%s) to %s, which is not INLINE"
                                % (rel, ln, "call", name, first, callee))
    return findings


def kernel_texts(makefile):
    """[(rel, code)] of the kernel sources and headers (comments stripped,
    strings kept)."""
    kdir = os.path.dirname(os.path.abspath(makefile))
    files = [os.path.join(kdir, s) for s in makefile_vars(makefile)["SRCS"]]
    inc = os.path.join(kdir, "include")
    files += [os.path.join(inc, f) for f in sorted(os.listdir(inc))
              if f.endswith(".h") and f not in LINT_SKIP]
    return [(os.path.relpath(f, kdir), _strip_keep_strings(open(f).read())) for f in files]


def structure_findings(texts):
    alltext = "\n".join(c for _, c in texts)
    typedefs = {m.group(2): (m.group(1), re.findall(r"\[([^\]]*)\]", m.group(3)))
                for m in TYPEDEF_ARRAY.finditer(alltext)}
    struct_arrays = structs_with_arrays(alltext)
    fns, per_file = {}, []
    for rel, code in texts:
        f = parse_functions(code)
        per_file.append((rel, f))
        fns.update(f)
    findings = []
    for rel, f in per_file:
        for name, fn in f.items():
            findings += check_ports(rel, fn, typedefs)
            findings += check_calls_in_pipelines(rel, fn, fns)
            findings += check_struct_arrays(rel, fn, struct_arrays, typedefs)
            findings += check_partition_pointers(rel, fn, fns, typedefs)
    return findings


# (e) Resource budget of the buffers and FIFOs as declared, on the KU15P
# (xcku15p: 128 URAM, 984 BRAM36). Per local array: the partitioned
# dimensions give banks (complete: one per index, cyclic/block: factor); a
# completely partitioned array is registers; a struct element is split per
# member (Vitis disaggregates structs in local arrays; an array member gives
# one memory per element - Rgb's c[3] is three byte arrays); a bank is URAM
# when bound to URAM (72 bits x 4096 per URAM), LUTRAM when bound to LUTRAM
# (no BRAM) or when it holds <= 1024 bits, else BRAM36 in the cheapest of
# its aspect ratios (1x32K ... 72x512). Streams of blocks: the block type x
# the depth (2). FIFOs: depth x token bits; <= 32 deep or <= 16 Kbit: SRL,
# else BRAM. Limits: token and struct widths are the C member widths (no
# ap_uint narrowing), FIFO implementation thresholds are Vitis defaults as
# read in UG1399, not a synthesis report.
URAM_LIMIT, BRAM_LIMIT = 128, 984
SCALAR_BITS = {"bool": 1, "char": 8, "uint8_t": 8, "int8_t": 8, "uint16_t": 16, "int16_t": 16,
               "int": 32, "unsigned": 32, "uint32_t": 32, "int32_t": 32, "float": 32,
               "uint64_t": 64, "int64_t": 64, "double": 64, "WideWord": 512, "ScanToken": 16}
BRAM_SHAPES = [(1, 32768), (2, 16384), (4, 8192), (9, 4096), (18, 2048), (36, 1024), (72, 512)]
CONSTEXPR = re.compile(r"constexpr\s+(?:int|uint32_t|uint64_t|int64_t)\s+(\w+)\s*=\s*([^;]+);")


def constants(alltext, overrides=None):
    raw = {m.group(1): m.group(2) for m in CONSTEXPR.finditer(alltext)}
    raw.update({k: str(v) for k, v in (overrides or {}).items()})
    vals = {}
    for _ in range(10):
        for k, e in raw.items():
            if k in vals:
                continue
            expr = re.sub(r"\b([A-Za-z_]\w*)\b",
                          lambda m: str(vals[m.group(1)]) if m.group(1) in vals else m.group(0), e)
            expr = expr.replace("/", "//")
            if re.fullmatch(r"[\d\s+\-*/()]+", expr):
                vals[k] = int(eval(expr))  # digits and operators only
    return vals


def struct_members(alltext):
    """{struct: [(type, [dims])]}"""
    out = {}
    for m in STRUCT_DEF.finditer(alltext):
        members = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            dm = re.match(r"^([A-Za-z_][\w:]*)\s+(.+)$", decl)
            if not dm or "(" in decl:
                continue
            for name in dm.group(2).split(","):
                members.append((dm.group(1), re.findall(r"\[([^\]]*)\]", name)))
        out[m.group(1)] = members
    return out


def _eval_dim(d, consts):
    expr = re.sub(r"\b([A-Za-z_]\w*)\b",
                  lambda m: str(consts[m.group(1)]) if m.group(1) in consts else m.group(0), d)
    expr = expr.replace("/", "//")
    if re.fullmatch(r"[\d\s+\-*/()]+", expr):
        return int(eval(expr))
    return None


def element_memories(t, structs, consts):
    """[(bits, copies)] of the memories one array element of type t becomes."""
    if t in SCALAR_BITS:
        return [(SCALAR_BITS[t], 1)]
    if t in structs:
        out = []
        for mt, dims in structs[t]:
            n = 1
            for d in dims:
                n *= _eval_dim(d, consts) or 1
            for bits, copies in element_memories(mt, structs, consts):
                out.append((bits, copies * n))
        return out
    return [(32, 1)]


def bram36(depth, bits):
    return min(-(-bits // w) * -(-depth // d) for w, d in BRAM_SHAPES)


def memory_cost(depth, bits, impl):
    if impl == "uram":
        return -(-bits // 72) * -(-depth // 4096), 0
    if impl == "lutram" or depth * bits <= 1024:
        return 0, 0
    return 0, bram36(depth, bits)


def resource_budget(texts, overrides=None):
    """(uram, bram36, [(what, uram, bram)])"""
    alltext = "\n".join(c for _, c in texts)
    consts = constants(alltext, overrides)
    structs = struct_members(alltext)
    typedefs = {m.group(2): (m.group(1), re.findall(r"\[([^\]]*)\]", m.group(3)))
                for m in TYPEDEF_ARRAY.finditer(alltext)}
    sob = {m.group(3): (m.group(1), int(m.group(2) or 2)) for m in re.finditer(
        r"typedef\s+hls::stream_of_blocks<\s*(\w+)\s*(?:,\s*(\d+)\s*)?>\s*(\w+)\s*;", alltext)}
    items = []

    def add_array(what, t, dims, parts, impl, copies=1):
        sizes = [_eval_dim(d, consts) for d in dims]
        if any(s is None for s in sizes):
            items.append((what + " (size unknown)", 0, 0))
            return
        if fully_partitioned(parts, len(sizes)):
            return
        banks, depth = 1, 1
        for d, n in enumerate(sizes, 1):
            kind = parts.get(d) or parts.get(0)
            if kind == "complete":
                banks *= n
            else:
                depth *= n
        u = b = 0
        for bits, per in element_memories(t, structs, consts):
            cu, cb = memory_cost(depth, bits, impl)
            u += cu * banks * per * copies
            b += cb * banks * per * copies
        items.append((what, u, b))

    for rel, code in texts:
        for name, fn in parse_functions(code).items():
            parts_all = partitions(fn["body"])
            binds = bindings(fn["body"])
            for m in ARRAY_DECL.finditer(fn["body"]):
                t, var = m.group(1), m.group(2)
                if t in ("return", "new", "delete"):
                    continue
                add_array("%s %s::%s" % (rel, name, var), t,
                          re.findall(r"\[([^\]]*)\]", m.group(3)), parts_all.get(var, {}),
                          binds.get(var, "auto"))
            for m in re.finditer(r"\b(\w+)\s+([^;]*);", fn["body"]):
                if m.group(1) not in sob:
                    continue
                block, depth = sob[m.group(1)]
                et, dims = typedefs.get(block, ("uint8_t", []))
                for var in re.findall(r"(\w+)\s*\(\s*\"", m.group(2)):
                    add_array("%s %s::%s (stream of blocks x%d)" % (rel, name, var, depth),
                              et, dims, {}, binds.get(var, "auto"), copies=depth)
            for m in STREAM_DECL.finditer(fn["body"]):
                tm = re.match(r"\bhls::stream<\s*([\w:]+)", m.group(0))
                depth = _eval_dim(m.group(1), consts) or 2
                for var in re.findall(r"(\w+)\s*\(\s*\"", m.group(2)):
                    bits = sum(b * c for b, c in element_memories(tm.group(1), structs, consts))
                    if depth <= 32 or depth * bits <= 16384:
                        continue
                    items.append(("%s %s::%s (FIFO %d x %d bit)" % (rel, name, var, depth, bits),
                                  0, bram36(depth, bits)))
    return sum(u for _, u, _ in items), sum(b for _, _, b in items), items


# The device as a whole (issue 33 item 6): every compute unit of
# connectivity.cfg (nk=kernel:N) plus the platform shell's share, against
# the xcku15p's totals. The shell figures are an ASSUMPTION, not read from
# the platform: the SmartSSD's xilinx_u2_gen3x4_xdma_gc_2_202110_1 static
# region holds the XDMA PCIe bridge, the DDR4 controller of bank0, the P2P
# BAR bridge and the management / firewall logic. No public document of this
# workplace gives its utilisation; Vitis Libraries' tables list an Alveo
# XDMA platform's own row at ~375 BRAM36 / 162k LUT / 7 DSP on a device with
# HBM and four DDR-class interfaces; a one-bank gen3x4 shell is taken here
# at ~40 % of that: 150 BRAM36, 0 URAM, 16 DSP, 100k LUT. `platforminfo -p
# <platform>` or the first v++ link's utilisation report replaces them.
# LUT and DSP of the kernel are not estimated here (no synthesis report):
# only the shell's LUT/DSP are checked against the totals, and the report
# says so.
DEVICE_TOTALS = {"BRAM36": 984, "URAM": 128, "DSP": 1968, "LUT": 523000}
SHELL_SHARE = {"BRAM36": 150, "URAM": 0, "DSP": 16, "LUT": 100000}


def compute_units(connectivity):
    """[cu names] of connectivity.cfg's nk=kernel:N[:name1.name2...] lines
    (default names kernel_1 ... kernel_N, as v++ gives them)."""
    out = []
    for m in re.finditer(r"^\s*nk\s*=\s*(\w+)\s*:\s*(\d+)(?:\s*:\s*([\w.]+))?", connectivity,
                         re.M):
        n = int(m.group(2))
        names = m.group(3).split(".") if m.group(3) else []
        out += names[:n] + ["%s_%d" % (m.group(1), i) for i in range(len(names) + 1, n + 1)]
    return out


def check_device(uram, bram, cus, shell=None):
    """Findings where `cus` compute units of (uram, bram) each plus the
    shell's share exceed the KU15P's totals."""
    shell = SHELL_SHARE if shell is None else shell
    need = {"URAM": cus * uram + shell["URAM"], "BRAM36": cus * bram + shell["BRAM36"],
            "DSP": shell["DSP"], "LUT": shell["LUT"]}
    return ["(e) device: %d compute units x %d %s + the shell's %d = %d, over the KU15P's %d"
            % (cus, {"URAM": uram, "BRAM36": bram}.get(k, 0), k, shell[k], need[k],
               DEVICE_TOTALS[k])
            for k in ("URAM", "BRAM36", "DSP", "LUT") if need[k] > DEVICE_TOTALS[k]], need


def check_resources(texts):
    uram, bram, items = resource_budget(texts)
    findings = []
    if uram > URAM_LIMIT or bram > BRAM_LIMIT:
        findings.append("(e) resources: %d URAM (limit %d), %d BRAM36 (limit %d) for the buffers "
                        "and FIFOs as declared" % (uram, URAM_LIMIT, bram, BRAM_LIMIT))
        for what, u, b in sorted(items, key=lambda x: -(x[1] * 10 + x[2]))[:6]:
            findings.append("    %s: %d URAM, %d BRAM36" % (what, u, b))
        consts = constants("\n".join(c for _, c in texts))
        w = consts.get("kMaxWidth")
        while w and w > 64:
            w //= 2
            u2, b2, _ = resource_budget(texts, {"kMaxWidth": w})
            if u2 <= URAM_LIMIT and b2 <= BRAM_LIMIT:
                findings.append("    fits with kMaxWidth = %d (%d URAM, %d BRAM36)" % (w, u2, b2))
                break
    return findings, uram, bram, items

# Each planted violation: (label, source, check) where check is "ir" or "lint".
PLANTED = [
    ("memcmp", '#include <cstring>\nint F(const char* s) { return std::memcmp(s, "Adobe", 5); }\n',
     "ir"),
    ("function-local static with constructor",
     "struct T { int v[4]; T() { for (int i = 0; i < 4; ++i) v[i] = i * i; } };\n"
     "int F(int i) { static const T t; return t.v[i & 3]; }\n", "ir"),
    ("global constructor", "struct T { int v; T() : v(3) {} };\nT g;\nint F() { return g.v; }\n",
     "ir"),
    ("malloc", "#include <cstdlib>\nint* F() { return static_cast<int*>(std::malloc(4)); }\n",
     "ir"),
    ("fused multiply-add without -ffp-contract=off",
     "float F(float a, float b, float c) { return a * b + c; }\n", "ir-contract-on"),
    ("inline constexpr under -std=c++14", "inline constexpr int kX = 1;\nint F() { return kX; }\n",
     "ir"),
    ("malloc in source", "void F() { void* p = malloc(4); free(p); }\n", "lint"),
    ("new", "int* F() { return new int[4]; }\n", "lint"),
    ("std::vector", "#include <vector>\nint F() { std::vector<int> v(3); return v[0]; }\n",
     "lint"),
    ("non-constexpr static", "int F() { static int calls = 0; return ++calls; }\n", "lint"),
    ("throw", "int F(int x) { if (x < 0) throw 1; return x; }\n", "lint"),
    ("for loop without LOOP_TRIPCOUNT",
     "int F(int n) {\n  int s = 0;\n  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
     "    s += i;\n  }\n  return s;\n}\n", "lint"),
    ("while loop without LOOP_TRIPCOUNT",
     "int F(int n) {\n  while (n > 1) {\n    n >>= 1;\n  }\n  return n;\n}\n", "lint"),
    ("loop without braces", "int F(int n) {\n  int s = 0;\n  for (int i = 0; i < n; ++i) s += i;\n"
     "  return s;\n}\n", "lint"),
    ("stream without STREAM pragma",
     "void F() {\n  hls::stream<int, kDepth> s(\"s\");\n}\n", "lint"),
    ("STREAM depth other than the declared one",
     "void F() {\n  hls::stream<int, kDepth> s(\"s\");\n#pragma HLS STREAM variable = s depth = 2\n}\n",
     "lint"),
]

# Loops and streams the lint must accept.
CLEAN_LOOPS = (
    "int F(int n, const int* a) {\n  int s = 0;\nrows:\n  for (int i = 0; i < n; ++i) {\n"
    "#pragma HLS PIPELINE II = 1\n#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16\n    s += a[i];\n  }\n"
    "  for (int k = 0; k < 8; ++k) s += k;\n  for (int l = 16; l >= kMin; --l) s -= l;\n"
    "  for (int u = 0; u < n; ++u) {\n#pragma HLS UNROLL\n    s ^= u;\n  }\n"
    "  do {\n#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4\n    --n;\n  } while (n > 0);\n"
    "  hls::stream<int, kDepth> q(\"q\");\n#pragma HLS STREAM variable = q depth = kDepth\n"
    "  return s;\n}\n")


# Each planted structure violation: (label, source, clean variant). The
# violation must be caught, the clean variant must pass.
PLANTED_STRUCTURE = [
    ("(a) array read 3 times per pipelined iteration",
     "void F(hls::stream<int, 4>& s, int n) {\n  int a[64];\nloop:\n"
     "  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
     "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 60\n    s.write(a[i] + a[i + 1] + a[i + 2]);\n  }\n}\n",
     "void F(hls::stream<int, 4>& s, int n) {\n  int a[64];\n"
     "#pragma HLS ARRAY_PARTITION variable = a cyclic factor = 4\nloop:\n"
     "  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
     "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 60\n    s.write(a[i] + a[i + 1] + a[i + 2]);\n  }\n}\n"),
    ("(a) 8 byte writes per iteration (unrolled inner loop)",
     "void F(uint8_t row[4][64], int n) {\n  for (int i = 0; i < n; ++i) {\n"
     "#pragma HLS PIPELINE II = 1\n#pragma HLS LOOP_TRIPCOUNT min = 1 max = 8\n"
     "    for (int k = 0; k < 8; ++k) row[0][i * 8 + k] = k;\n  }\n}\n",
     "void F(uint64_t row[4][8], int n) {\n  for (int i = 0; i < n; ++i) {\n"
     "#pragma HLS PIPELINE II = 1\n#pragma HLS LOOP_TRIPCOUNT min = 1 max = 8\n"
     "    row[0][i] = 0x0706050403020100ull;\n  }\n}\n"),
    ("(b) call with a variable-bound loop inside a pipelined loop",
     "void G(int* o, int n) {\n  for (int k = 0; k < n; ++k) {\n"
     "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4\n    o[k] = 0;\n  }\n}\n"
     "void F(int* o, int n) {\n  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
     "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4\n    G(o, i);\n  }\n}\n",
     "void G(int* o, int n) {\n  for (int k = 0; k < 4; ++k) {\n#pragma HLS UNROLL\n"
     "    if (k < n) o[k] = 0;\n  }\n}\n"
     "void F(int* o, int n) {\n  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
     "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4\n    G(o, i);\n  }\n}\n"),
    ("(c) array of structs with an array member in RAM",
     "struct P {\n  uint8_t c[3];\n};\nvoid F(int x) {\n  P line[1024];\n  line[x].c[0] = 1;\n}\n",
     "struct P {\n  uint8_t c[3];\n};\nvoid F(int x) {\n  uint32_t line[1024];\n  line[x] = 1;\n}\n"),
    ("(d) pointer into a partitioned array at a run-time index, callee not INLINE",
     "void G(int* a) {\n  a[0] = 1;\n}\nvoid F(int c) {\n  int t[4][16];\n"
     "#pragma HLS ARRAY_PARTITION variable = t complete dim = 1\n  G(&t[c][0]);\n}\n",
     "void G(int* a) {\n#pragma HLS INLINE\n  a[0] = 1;\n}\nvoid F(int c) {\n  int t[4][16];\n"
     "#pragma HLS ARRAY_PARTITION variable = t complete dim = 1\n  G(&t[c][0]);\n}\n"),
    ("(e) 144 URAM: Rgb line buffers split per byte",
     "struct Rgb {\n  uint8_t c[3];\n};\nconstexpr int kW = 16384;\nvoid F() {\n"
     "  Rgb lines[4][3][kW];\n#pragma HLS ARRAY_PARTITION variable = lines complete dim = 1\n"
     "#pragma HLS ARRAY_PARTITION variable = lines complete dim = 2\n"
     "#pragma HLS BIND_STORAGE variable = lines type = ram_2p impl = uram\n}\n",
     "constexpr int kW = 16384;\nvoid F() {\n"
     "  uint32_t lines[4][3][kW];\n#pragma HLS ARRAY_PARTITION variable = lines complete dim = 1\n"
     "#pragma HLS ARRAY_PARTITION variable = lines complete dim = 2\n"
     "#pragma HLS BIND_STORAGE variable = lines type = ram_2p impl = uram\n}\n"),
    ("(e) BRAM over 984: a 40 Mbit buffer",
     "constexpr int kN = 655360;\nvoid F() {\n  uint64_t big[kN];\n}\n",
     "constexpr int kN = 65536;\nvoid F() {\n  uint64_t big[kN];\n}\n"),
]


# (f') The kernel's ABI table (nearprep_kernel_abi.h kKernelArgs: what the
# host and the test xclbin believe) against the top function's parameters,
# and the clock set in one place (the Makefile's KERNEL_MHZ, not again in
# connectivity.cfg).
C_TYPE_NAMES = {"WideWord": "ap_uint<512>", "uint32_t": "unsigned int", "uint8_t": "unsigned char",
                "uint64_t": "unsigned long", "int": "int", "float": "float"}


def abi_findings(top_code, abi_code, connectivity=""):
    findings = []
    m = re.search(r"void\s+nearprep_preprocess\s*\(([^)]*)\)", top_code)
    table = re.findall(r"\{\s*\"(\w+)\"\s*,\s*\d+\s*,\s*\"\w+\"\s*,\s*\"([^\"]+)\"", abi_code)
    if not m or not table:
        return ["(abi) top function or kKernelArgs not found"]
    params = []
    for p in _split_args(m.group(1)):
        pm = re.match(r"^(?:const\s+)?(\w+)\s*(\*?)\s*(\w+)$", p.strip())
        if pm:
            params.append((pm.group(3), C_TYPE_NAMES.get(pm.group(1), pm.group(1)) + pm.group(2)))
    if [n for n, _ in params] != [n for n, _ in table]:
        findings.append("(abi) argument names/order differ: kernel %s, kKernelArgs %s"
                        % ([n for n, _ in params], [n for n, _ in table]))
    for (n, t), (_, want) in zip(params, table):
        if t.replace(" ", "") != want.replace(" ", ""):
            findings.append("(abi) argument %s: the kernel's type is %s, kKernelArgs says %s"
                            % (n, t, want))
    # connectivity.cfg's sp= lines map global-memory arguments to banks: each
    # must name a pointer argument of the table (a stale line, e.g. the
    # `scratch` of ABI version 1, fails v++ link), and once there are any,
    # every pointer argument needs one.
    kinds = dict(re.findall(r"\{\s*\"(\w+)\"\s*,\s*(\d+)\s*,", abi_code))
    mapped = re.findall(r"^\s*sp\s*=\s*\w+\.(\w+)\s*:", connectivity, re.M)
    for arg in mapped:
        if kinds.get(arg) != "1":
            findings.append("(abi) connectivity.cfg maps '%s', which is not a global memory "
                            "argument of kKernelArgs" % arg)
    if mapped:
        for arg, kind in kinds.items():
            if kind == "1" and arg not in mapped:
                findings.append("(abi) connectivity.cfg maps no bank for the pointer "
                                "argument '%s'" % arg)
    # per compute unit: every CU that nk= declares maps every pointer
    # argument (a CU without its sp= lines would get the platform's default
    # bank, not the P2P bank), and no sp= line names an undeclared CU
    cus = compute_units(connectivity)
    per_cu = re.findall(r"^\s*sp\s*=\s*(\w+)\.(\w+)\s*:", connectivity, re.M)
    if cus and per_cu:
        for cu in cus:
            for arg, kind in kinds.items():
                if kind == "1" and (cu, arg) not in per_cu:
                    findings.append("(abi) connectivity.cfg maps no bank for '%s' of compute "
                                    "unit %s" % (arg, cu))
        for cu in sorted({c for c, _ in per_cu} - set(cus)):
            findings.append("(abi) connectivity.cfg maps compute unit %s, which nk= does not "
                            "declare" % cu)
    if re.search(r"^\s*\[clock\]|freqHz", connectivity, re.M | re.I):
        findings.append("(abi) connectivity.cfg sets a clock: the clock is set in one place, "
                        "KERNEL_MHZ in the Makefile (--kernel_frequency)")
    return findings


def run_structure(makefile):
    texts = kernel_texts(makefile)
    kdir = os.path.dirname(os.path.abspath(makefile))
    findings = structure_findings(texts)
    conn = os.path.join(kdir, "connectivity.cfg")
    findings += abi_findings(strip_comments_keep(os.path.join(kdir, "src", "preprocess_kernel.cc")),
                             open(os.path.join(kdir, "include", "nearprep_kernel_abi.h")).read(),
                             open(conn).read() if os.path.exists(conn) else "")
    res, uram, bram, _ = check_resources(texts)
    print("resources as declared: %d URAM (limit %d), %d BRAM36 (limit %d)"
          % (uram, URAM_LIMIT, bram, BRAM_LIMIT))
    cus = compute_units(open(conn).read() if os.path.exists(conn) else "") or ["(one)"]
    dev, need = check_device(uram, bram, len(cus))
    print("device: %d compute units (%s) + the shell's assumed share (%s): %s; kernel LUT/DSP "
          "not estimated (no synthesis report)"
          % (len(cus), " ".join(cus), ", ".join("%s %d" % (k, SHELL_SHARE[k]) for k in SHELL_SHARE),
             ", ".join("%s %d of %d" % (k, need[k], DEVICE_TOTALS[k]) for k in DEVICE_TOTALS)))
    return findings + res + dev


def strip_comments_keep(path):
    return _strip_keep_strings(open(path).read())


ABI_TOP = ('extern "C" void nearprep_preprocess(const WideWord* jpeg, const uint32_t* desc, '
           'uint32_t num_images) {}\n')
ABI_GOOD = ('{"jpeg", 1, "M_AXI_GMEM0", "ap_uint<512>*", 8}, {"desc", 1, "M_AXI_GMEM1", '
            '"unsigned int*", 8}, {"num_images", 0, "S_AXI_CONTROL", "unsigned int", 4},')
ABI_POINTERS = ("jpeg", "desc")


def selftest_structure():
    failures = []
    planted_abi = [
        ("(abi) jpeg declared unsigned char* while the port is ap_uint<512>*",
         ABI_TOP, ABI_GOOD.replace('"ap_uint<512>*"', '"unsigned char*"'), ""),
        ("(abi) a clock in connectivity.cfg", ABI_TOP, ABI_GOOD,
         "[connectivity]\nnk=k:1\n[clock]\ndefaultFreqHz=250000000\n"),
        ("(abi) connectivity maps an argument the kernel lacks", ABI_TOP, ABI_GOOD,
         "[connectivity]\nnk=k:1\nsp=k_1.jpeg:bank0\nsp=k_1.desc:bank0\n"
         "sp=k_1.scratch:bank0\n"),
        ("(abi) connectivity misses a pointer argument", ABI_TOP, ABI_GOOD,
         "[connectivity]\nnk=k:1\nsp=k_1.jpeg:bank0\n"),
    ]
    planted_abi.append(
        ("(abi) the second CU of nk=k:2 maps no bank", ABI_TOP, ABI_GOOD,
         "[connectivity]\nnk=k:2:k_1.k_2\n" + "".join(
             "sp=k_1.%s:bank0\n" % a for a in ABI_POINTERS)))
    for label, top, abi, conn in planted_abi:
        found = abi_findings(top, abi, conn)
        print("planted %-45s -> %s" % (label[:45], "caught" if found else "MISSED"))
        if not found:
            failures.append("planted violation not caught: " + label)
    ok = abi_findings(ABI_TOP, ABI_GOOD, "[connectivity]\nnk=k:1\n")
    ok += abi_findings(ABI_TOP, ABI_GOOD,
                       "[connectivity]\nnk=k:1\nsp=k_1.jpeg:bank0\nsp=k_1.desc:bank0\n")
    ok += abi_findings(ABI_TOP, ABI_GOOD, "[connectivity]\nnk=k:2:k_1.k_2\n" + "".join(
        "sp=%s.%s:bank0\n" % (c, a) for c in ("k_1", "k_2") for a in ABI_POINTERS))
    if ok:
        failures.append("clean ABI flagged: " + "; ".join(ok))
    # the device budget: two CUs of the kernel's size plus the shell fit;
    # two CUs of 420 BRAM36 (+150 shell = 990) or of 70 URAM do not
    if compute_units("nk=k:2\n") != ["k_1", "k_2"] or \
            compute_units("nk=k:2:a.b\n") != ["a", "b"]:
        failures.append("compute_units() misreads nk= lines")
    for label, (u, b, n), bad in [("two CUs of 48 URAM / 350 BRAM36", (48, 350, 2), False),
                                  ("two CUs of 420 BRAM36", (48, 420, 2), True),
                                  ("two CUs of 70 URAM", (70, 350, 2), True),
                                  ("three CUs of 350 BRAM36", (48, 350, 3), True)]:
        found = check_device(u, b, n)[0]
        print("device %-45s -> %s" % (label, found[0] if found else "fits"))
        if bool(found) != bad:
            failures.append("device budget wrong for " + label)
    for label, bad, clean in PLANTED_STRUCTURE:
        found = structure_findings([("planted.cc", _strip_keep_strings(bad))])
        found += check_resources([("planted.cc", _strip_keep_strings(bad))])[0]
        print("planted %-45s -> %s" % (label[:45], "caught" if found else "MISSED"))
        for f in found[:2]:
            print("    " + f.splitlines()[0])
        if not found:
            failures.append("planted violation not caught: " + label)
        ok = structure_findings([("clean.cc", _strip_keep_strings(clean))])
        ok += check_resources([("clean.cc", _strip_keep_strings(clean))])[0]
        if ok:
            failures.append("clean variant flagged (%s): %s" % (label, "; ".join(ok)))
    return failures


def kernel_mhz(makefile):
    """KERNEL_MHZ of the Makefile (its default when it is a ?= variable)."""
    m = re.search(r"^KERNEL_MHZ\s*[?:]?=\s*([\d.]+)", open(makefile).read(), re.M)
    if not m:
        raise SystemExit("kernel_checks: KERNEL_MHZ not found in %s" % makefile)
    return float(m.group(1))


def timing_table_path(makefile):
    return os.path.join(os.path.dirname(os.path.abspath(makefile)), "host", "loop_timing.cc")


def run_recurrence(makefile):
    texts = kernel_texts(makefile)
    consts = constants("\n".join(c for _, c in texts))
    table = recur.timing_table(open(timing_table_path(makefile)).read())
    mhz = kernel_mhz(makefile)
    print("recurrences at %g MHz (budget %.2f ns = period less %d%% uncertainty):"
          % (mhz, recur.budget_ns(mhz), round(recur.UNCERTAINTY * 100)))
    return recur.check_recurrences(texts, table, mhz, consts)


def run_csynth(makefile, reports):
    texts = kernel_texts(makefile)
    table = recur.timing_table(open(timing_table_path(makefile)).read())
    labels = recur.sim_labels(texts)
    findings = []
    for path in reports:
        rep = recur.parse_csynth(path)
        print("%s: top %s, part %s, target %.3f ns, estimated %.3f ns, %d loops"
              % (path, rep["top"], rep["part"], rep["target_ns"], rep["estimated_ns"],
                 len(rep["loops"])))
        findings += recur.compare_report(rep, table, labels, mhz=kernel_mhz(makefile))
    return findings


FIXTURES = os.path.join(HERE, "recurrence_fixtures")

# A loop whose recurrence (a 64-bit add, a 64-bit compare, a select) is just
# under the budget at 225 MHz: unsure, so its table columns must differ.
UNSURE_LOOP = (
    "void U(hls::stream<uint64_t, 4>& in, int n) {\n  uint64_t start = 0;\n  int m = 0;\n"
    "  NEARPREP_SIM_LOOP(\"U.gather\")\nloop:\n  for (int i = 0; i < n; ++i) {\n"
    "#pragma HLS PIPELINE II = 1\n#pragma HLS LOOP_TRIPCOUNT min = 1 max = 64\n"
    "    const uint64_t a = in.read();\n    if (a == start + m) {\n      ++m;\n    }\n  }\n}\n")


# A carried 512-bit word written through 8 part selects at a run-time
# position per iteration (8 dependent inserts: caught at II 1), and its clean
# variant (one part select at a constant position per iteration).
PART_SELECT_LOOP = (
    "void P(hls::stream<uint8_t, 4>& in, hls::stream<ap_uint<512>, 4>& out, int n) {\n"
    "  ap_uint<512> w = 0;\n  int pos = 0;\n  NEARPREP_SIM_LOOP(\"P.bytes\")\nloop:\n"
    "  for (int i = 0; i < n; ++i) {\n#pragma HLS PIPELINE II = 1\n"
    "#pragma HLS LOOP_TRIPCOUNT min = 1 max = 64\n    const uint8_t x = in.read();\n"
    "    for (int b = 0; b < 8; ++b) {\n#pragma HLS UNROLL\n"
    "      w.range(8 * (pos + b) + 7, 8 * (pos + b)) = x;\n    }\n"
    "    pos = (pos + 8) & 63;\n    if (pos == 0) out.write(w);\n  }\n}\n")
PART_SELECT_CLEAN = PART_SELECT_LOOP.replace(
    "    for (int b = 0; b < 8; ++b) {\n#pragma HLS UNROLL\n"
    "      w.range(8 * (pos + b) + 7, 8 * (pos + b)) = x;\n    }\n",
    "    w = w >> 8;\n    w.range(511, 504) = x;\n")


def function_source(path, name):
    """The text of function `name` (its signature to its closing brace) in the
    C++ file `path`: the clean cases check the kernel as it is, not a copy."""
    text = open(path).read()
    start = text.index("void %s(" % name)
    depth, i = 0, text.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1] + "\n"
        i += 1


def selftest_recurrence():
    failures = []
    mhz = 225.0

    def check(label, rel, table, want):
        code = _strip_keep_strings(open(os.path.join(FIXTURES, rel)).read()) \
            if rel.endswith(".cc") else _strip_keep_strings(rel)
        texts = [(label, code)]
        found = recur.check_recurrences(texts, table, mhz, constants(code), verbose=False)
        print("%s %-45s -> %s" % ("planted" if want else "clean  ", label[:45],
                                  "caught" if found else "passed"))
        for f in found[:1]:
            print("    " + f[:200])
        if want and not found:
            failures.append("planted recurrence not caught: " + label)
        if not want and found:
            failures.append("clean recurrence flagged (%s): %s" % (label, "; ".join(found)))

    row = lambda ii_opt, ii_exp: (ii_opt, ii_exp, 4, 6)  # noqa: E731
    check("(r) PackWords, third pass, declared II 1", "packwords_pass3.cc",
          {"PackWords.chunks": row(1, 1)}, True)
    check("(r) HuffmanDecode, third pass, declared II 1", "huffman_pass3.cc",
          {"HuffmanDecode.symbols": row(1, 1)}, True)
    check("(r) PackWords, fourth pass (the kernel's), declared II 1",
          function_source(os.path.join(HERE, "..", "..", "..", "fpga_kernels", "src",
                                       "stages_output.cc"), "PackWords"),
          {"PackWords.chunks": row(1, 1)}, False)
    check("(r) HuffmanDecode, third pass, declared II 2", "huffman_pass3.cc",
          {"HuffmanDecode.symbols": row(1, 2)}, False)
    check("(r) unsure recurrence, columns equal", UNSURE_LOOP, {"U.gather": row(1, 1)}, True)
    check("(r) unsure recurrence, columns differ", UNSURE_LOOP, {"U.gather": row(1, 2)}, False)
    check("(r) loop without a table row", UNSURE_LOOP, {}, True)
    check("(r) 8 part-select writes at a run-time position", PART_SELECT_LOOP,
          {"P.bytes": row(1, 1)}, True)
    check("(r) one part-select write at a constant position", PART_SELECT_CLEAN,
          {"P.bytes": row(1, 1)}, False)

    # The csynth.xml parser on its hand-made fixture.
    rep = recur.parse_csynth(os.path.join(FIXTURES, "csynth_HuffmanDecode.xml"))
    want = {"top": "HuffmanDecode", "part": "xcku15p-ffva1156-2LV-e", "target_ns": 4.44,
            "uncertainty_ns": 1.2, "estimated_ns": 3.105}
    for k, v in want.items():
        if rep[k] != v:
            failures.append("csynth fixture: %s = %r, want %r" % (k, rep[k], v))
    loops = rep["loops"]
    if loops.get("symbols") != {"ii": 2, "depth": 9, "latency": 800007}:
        failures.append("csynth fixture: symbols = %r" % loops.get("symbols"))
    if loops.get("lookahead", {}).get("ii") != 1 or "images" in loops:
        failures.append("csynth fixture: nested loops read wrong: %r" % sorted(loops))
    labels = {("HuffmanDecode", "symbols"): "HuffmanDecode.symbols",
              ("HuffmanDecode", "lookahead"): "HuffmanDecode.lookahead"}
    cases = [
        ("table expects II 1, report II 2", rep,
         {"HuffmanDecode.symbols": (1, 1, 8, 10), "HuffmanDecode.lookahead": (1, 1, 6, 8)}, True),
        ("table expects depth 8, report 9", rep,
         {"HuffmanDecode.symbols": (1, 2, 8, 8), "HuffmanDecode.lookahead": (1, 1, 6, 8)}, True),
        ("estimated clock over target less uncertainty",
         dict(rep, estimated_ns=3.5),
         {"HuffmanDecode.symbols": (1, 2, 8, 10), "HuffmanDecode.lookahead": (1, 1, 6, 8)}, True),
        ("table agrees with the report", rep,
         {"HuffmanDecode.symbols": (1, 2, 8, 10), "HuffmanDecode.lookahead": (1, 1, 6, 8)}, False),
    ]
    for label, r, table, want in cases:
        found = recur.compare_report(r, table, labels, mhz=225.0)
        print("%s csynth %-37s -> %s" % ("planted" if want else "clean  ", label[:37],
                                          "caught" if found else "passed"))
        if want != bool(found):
            failures.append("csynth compare (%s): %r" % (label, found))
    return failures


def selftest(clang, makefile):
    v = makefile_vars(makefile)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, src, check in PLANTED:
            path = os.path.join(tmp, "planted.cc")
            open(path, "w").write(src)
            if check == "lint":
                code = _strip_keep_strings(src)
                found = (lint_text("planted.cc", src) + lint_loops("planted.cc", code) +
                         lint_streams("planted.cc", code))
            else:
                flags = list(v["HLS_CFLAGS"])
                if check == "ir-contract-on":
                    flags = [f for f in flags if not f.startswith("-ffp-contract")]
                    flags.append("-ffp-contract=on")
                ir, err = compile_ir(clang, flags, path, tmp, tmp)
                found = [err] if err else scan_ir({"planted.cc": ir})
            print("planted %-45s -> %s" % (label, "caught" if found else "MISSED"))
            for f in found[:2]:
                print("    " + f.splitlines()[0])
            if not found:
                failures.append("planted violation not caught: " + label)
        # The same float expression under the Makefile's own flags: no fma.
        path = os.path.join(tmp, "fma.cc")
        open(path, "w").write("float F(float a, float b, float c) { return a * b + c; }\n")
        ir, err = compile_ir(clang, v["HLS_CFLAGS"], path, tmp, tmp)
        if err or scan_ir({"fma.cc": ir}):
            failures.append("the Makefile's HLS_CFLAGS let clang fuse a*b+c")
        # Clean code passes both checks (no false positives on the basics).
        clean = ("constexpr int kT[3] = {1, 2, 3};\nstatic_assert(kT[0] == 1, \"\");\n"
                 "namespace { int G(int x) { return x + kT[x & 1]; } }\n"
                 "static int H(int x) { return G(x) * 2; }\n"
                 "int F(int x) { static constexpr int kY = 4; return H(x) + kY; }\n")
        path = os.path.join(tmp, "clean.cc")
        open(path, "w").write(clean)
        ir, err = compile_ir(clang, v["HLS_CFLAGS"], path, tmp, tmp)
        bad = ([err] if err else scan_ir({"clean.cc": ir})) + lint_text("clean.cc", clean)
        code = _strip_keep_strings(CLEAN_LOOPS)
        bad += lint_loops("clean_loops.cc", code) + lint_streams("clean_loops.cc", code)
        if bad:
            failures.append("clean code flagged: " + "; ".join(bad))
    return failures + selftest_structure() + selftest_recurrence()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["ir", "lint", "structure", "recurrence", "csynth",
                                     "selftest", "selftest-recurrence"])
    ap.add_argument("reports", nargs="*", help="csynth.xml reports (mode csynth)")
    ap.add_argument("--makefile", required=True)
    ap.add_argument("--clang", default="clang++")
    a = ap.parse_intermixed_args()
    if a.mode == "csynth" and not a.reports:
        ap.error("csynth needs at least one report")
    if a.mode == "ir":
        findings = run_ir(a.clang, a.makefile)
    elif a.mode == "lint":
        findings = run_lint(a.makefile)
    elif a.mode == "structure":
        findings = run_structure(a.makefile)
    elif a.mode == "recurrence":
        findings = run_recurrence(a.makefile)
    elif a.mode == "csynth":
        findings = run_csynth(a.makefile, a.reports)
    elif a.mode == "selftest-recurrence":
        findings = selftest_recurrence()
    else:
        findings = selftest(a.clang, a.makefile)
    for f in findings:
        print(f)
    print("kernel_checks %s: %s" % (a.mode, "%d finding(s)" % len(findings) if findings else "clean"))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
