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
  selftest  plants one violation of each kind in a scratch source and checks
            that `ir` / `lint` catch it (and that the clean kernel passes).

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
    """HLS_CFLAGS and SRCS of the Makefile, as lists."""
    text = open(makefile).read().replace("\\\n", " ")
    out = {}
    for name in ("HLS_CFLAGS", "SRCS"):
        m = re.search(r"^%s\s*:?=\s*(.*)$" % name, text, re.M)
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
        for src in v["SRCS"]:
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
    files = [os.path.join(kdir, s) for s in makefile_vars(makefile)["SRCS"]]
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
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["ir", "lint", "selftest"])
    ap.add_argument("--makefile", required=True)
    ap.add_argument("--clang", default="clang++")
    a = ap.parse_args()
    if a.mode == "ir":
        findings = run_ir(a.clang, a.makefile)
    elif a.mode == "lint":
        findings = run_lint(a.makefile)
    else:
        findings = selftest(a.clang, a.makefile)
    for f in findings:
        print(f)
    print("kernel_checks %s: %s" % (a.mode, "%d finding(s)" % len(findings) if findings else "clean"))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
