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
            delete, std containers and smart pointers, and static variables
            that are not constexpr.
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
        if ALLOWED_MANGLED.match(fn):
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


def run_lint(makefile):
    kdir = os.path.dirname(os.path.abspath(makefile))
    files = [os.path.join(kdir, s) for s in makefile_vars(makefile)["SRCS"]]
    inc = os.path.join(kdir, "include")
    files += [os.path.join(inc, f) for f in sorted(os.listdir(inc))
              if f.endswith(".h") and f not in LINT_SKIP]
    findings = []
    for f in files:
        findings += lint_text(os.path.relpath(f, kdir), open(f).read())
    return findings


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
]


def selftest(clang, makefile):
    v = makefile_vars(makefile)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, src, check in PLANTED:
            path = os.path.join(tmp, "planted.cc")
            open(path, "w").write(src)
            if check == "lint":
                found = lint_text("planted.cc", src)
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
