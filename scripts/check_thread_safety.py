#!/usr/bin/python3
"""Clang's thread-safety analysis over the daemon and the C++ client.

Every member a mutex protects is declared ABSL_GUARDED_BY(mu_) and every
function that needs a lock held ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)
(common/mutex.h, absl::Mutex); clang checks each access against them with
-Wthread-safety. GCC ignores the annotations, so this script runs clang on
every source file of server/, client/cpp/, cli/, common/ and proto/options/ with
`-fsyntax-only -Wthread-safety -Werror=thread-safety` (the analysis runs in
clang's front end: no code generation, about two minutes on 2 cores).

  check_thread_safety.py check --build DIR [-j N]
      DIR: a build tree configured with clang and
      CMAKE_EXPORT_COMPILE_COMMANDS=ON whose generated headers exist
      (scripts/check_thread_safety.sh makes one). Fails, listing the
      diagnostics, when any file has a thread-safety warning or does not
      compile.
  check_thread_safety.py selftest [--clang clang++]
      Compiles planted snippets with the same flags: an access to a guarded
      member without its lock, a call of a lock-requiring function without
      it, and a lock not released must each fail the check; the same code
      written correctly must pass. Registered as ctest thread_safety_selftest.

Standard library only; run with /usr/bin/python3.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKED = ("server/", "client/cpp/", "cli/", "common/", "proto/options/")
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]


def syntax_only(args):
    """A compile command turned into a syntax-only run with the analysis."""
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        # Only thread-safety warnings are errors here (clang warns about
        # more than GCC, e.g. in protoc's generated headers).
        if a in ("-c", "-MD", "-MMD", "-Werror") or a.startswith("-fdiagnostics-color"):
            continue
        out.append(a)
    return out[:1] + FLAGS + out[1:]


def run(args, cwd):
    p = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.returncode, p.stdout


def check(build, jobs):
    db_path = os.path.join(build, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except OSError as e:
        sys.exit(f"check_thread_safety: {db_path}: {e} (configure with "
                 "CMAKE_EXPORT_COMPILE_COMMANDS=ON: scripts/check_thread_safety.sh)")
    entries = {}
    for e in db:
        rel = os.path.relpath(os.path.normpath(e["file"]), ROOT)
        if rel.startswith(CHECKED) and rel.endswith(".cc"):
            entries.setdefault(rel, e)  # one command per file is enough
    if not entries:
        sys.exit(f"check_thread_safety: no server/, client/cpp/, cli/, common/ or proto/options/ sources in {db_path}")
    compiler = shlex.split(next(iter(entries.values())).get("command", "x"))[0] \
        if "command" in next(iter(entries.values())) else \
        next(iter(entries.values()))["arguments"][0]
    if "clang" not in os.path.basename(compiler):
        sys.exit(f"check_thread_safety: {build} is configured with {compiler}, not clang")
    start = time.monotonic()
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {}
        for rel, e in sorted(entries.items()):
            args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
            futs[pool.submit(run, syntax_only(args), e["directory"])] = rel
        for fut in concurrent.futures.as_completed(futs):
            rc, out = fut.result()
            if rc != 0:
                failed.append((futs[fut], out))
    secs = time.monotonic() - start
    for rel, out in sorted(failed):
        print(f"--- {rel}\n{out}", end="" if out.endswith("\n") else "\n")
    print(f"thread safety: {len(entries)} files of server/, client/cpp/, cli/, common/, proto/options/ in "
          f"{secs:.0f} s: {len(failed)} failing")
    return 1 if failed else 0


# Planted snippets: (name, code, must_fail, expected text in the diagnostics).
_PRELUDE = """
#include "common/mutex.h"
namespace {
class Counter {
 public:
  void Good() { nearprep::MutexLock l(&mu_); ++n_; Locked(); }
  %s
 private:
  void Locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++n_; }
  nearprep::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
}  // namespace
int main() { Counter c; c.Good(); return 0; }
"""
SNIPPETS = [
    ("unguarded_write", "void Bad() { ++n_; }", True,
     "writing variable 'n_' requires holding mutex 'mu_' exclusively"),
    ("unguarded_read", "int Bad() { return n_; }", True,
     "reading variable 'n_' requires holding mutex 'mu_'"),
    ("call_without_lock", "void Bad() { Locked(); }", True,
     "calling function 'Locked' requires holding mutex 'mu_' exclusively"),
    ("lock_not_released", "void Bad() { mu_.Lock(); ++n_; }", True,
     "mutex 'mu_' is still held at the end of function"),
    ("guarded_correctly", "void Fine() { mu_.Lock(); ++n_; mu_.Unlock(); }", False, ""),
]


def selftest(clang):
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, body, must_fail, text in SNIPPETS:
            src = os.path.join(tmp, name + ".cc")
            with open(src, "w") as f:
                f.write(_PRELUDE % body)
            args = [clang, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", ROOT, src]
            rc, out = run(syntax_only(args), tmp)
            if must_fail and (rc == 0 or text not in out):
                print(f"FAIL {name}: expected the check to fail with \"{text}\"; "
                      f"exit {rc}:\n{out}")
                bad += 1
            elif not must_fail and rc != 0:
                print(f"FAIL {name}: expected the check to pass; exit {rc}:\n{out}")
                bad += 1
            else:
                print(f"ok   {name}: {'refused' if must_fail else 'accepted'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--build", required=True)
    c.add_argument("-j", type=int, default=os.cpu_count() or 2)
    s = sub.add_parser("selftest")
    s.add_argument("--clang", default="clang++")
    a = ap.parse_args()
    if a.cmd == "check":
        return check(os.path.abspath(a.build), a.j)
    return selftest(a.clang)


if __name__ == "__main__":
    sys.exit(main())
