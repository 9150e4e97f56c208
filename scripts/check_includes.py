#!/usr/bin/python3
"""Checks nearprep's layering: which folder may include which.

Every quoted #include of a project header in the checked folders is mapped to
the layer it belongs to (server/<part>, common, proto, the C++ client's API,
the FPGA kernels' headers, bench, tests) and compared with RULES below. An
include that the table does not allow is reported as FILE:LINE and the check
fails. Third-party headers (absl/, spdlog/, <...>) are not checked.

The same table is in docs/architecture.md between the include-rules markers;
`check` also fails when the document's copy differs from RULES (`table`
prints the block to paste).

  check_includes.py check [--root DIR]   # the source tree (default: repo)
  check_includes.py table                # the markdown table of RULES
  check_includes.py selftest             # proves check fails on a bad include

Run with /usr/bin/python3 (standard library only). Registered as the ctest
tests include_rules_check and include_rules_selftest.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Source folder -> layers it may include, besides its own. Order: bottom up.
RULES = [
    ("common", [],
     "code shared by the daemon and the C++ client (PEM reader, uint8 tensor "
     "codec, the annotated mutex of common/mutex.h, the %XX escaping of "
     "resume tokens and shard indexes)"),
    ("proto/options", ["proto"],
     "hand-written code over the generated messages (no other nearprep "
     "code): the (nearprep.v1.range) option's check, shared by the daemon's "
     "validation and the CLI"),
    ("server/spec", [], "plain types shared by the server's layers"),
    ("server/metrics", ["common"],
     "counters, histograms, Prometheus exposition and its HTTP endpoint "
     "(the annotated mutex of common/mutex.h)"),
    ("server/records", ["common"],
     "record formats: TFRecord, tar, shard indexes (their fields escaped "
     "by common/percent_escape.h)"),
    ("server/storage", ["server/records", "common"],
     "the storage seam: sample listings and reads"),
    ("server/plan", [],
     "the plan core: Philox, the counter-tag registry, the protocol's "
     "Fisher-Yates, portable math (below data and fleet)"),
    ("server/data",
     ["server/spec", "server/storage", "server/records", "server/fleet",
      "server/metrics", "server/plan", "common"],
     "the catalogue (Dataset), its reads (SampleStore: storage, record and "
     "digest checks, block cache, read counters), per-stream sample sources, "
     "the decoded-image cache, epoch plan (manifest datasets read "
     "server/fleet's manifests)"),
    ("server/fleet", ["server/storage", "server/records", "server/plan",
                      "common"],
     "fleet manifests (target nearprep_manifest, below data) and the global "
     "plan (target nearprep_fleet_plan, on the plan core; nothing of data)"),
    ("server/image", ["server/spec"], "decode and TF / torchvision ops"),
    ("server/backend",
     ["server/spec", "server/data", "server/image", "server/metrics"],
     "the Backend interface and the CPU backend"),
    ("server/fpga",
     ["server/spec", "server/data", "server/storage", "server/image",
      "server/backend", "server/metrics", "fpga_kernels", "common"],
     "the FPGA backend (XRT only here; the kernels' ABI headers)"),
    ("server/pipeline",
     ["server/spec", "server/data", "server/backend", "server/metrics",
      "server/plan", "common"],
     "streams, worker pool, batch assembly (and the batch compression of "
     "common/tensor_codec, shared with the C++ client; batch MixUp / CutMix "
     "draws from the plan core's Philox)"),
    ("server/authz", ["common"],
     "who may read what: identities, rules, token hashes, audit log (no "
     "gRPC; the annotated mutex of common/mutex.h)"),
    ("server/service",
     ["server/spec", "server/data", "server/storage", "server/records",
      "server/fleet", "server/backend", "server/pipeline", "server/metrics",
      "server/authz", "common", "proto", "proto/options"],
     "the gRPC adapter (the only gRPC code, listed below) over the "
     "service without gRPC (service_core: listing, ServerInfo, counters; "
     "validation; the stream registry), server lifecycle"),
    ("server/daemon",
     ["server/spec", "server/data", "server/backend", "server/fpga",
      "server/pipeline", "server/authz", "server/service", "server/metrics",
      "common"],
     "nearprepd: config, signals, the choice of backend"),
    ("fpga_kernels", [],
     "HLS kernels and their test-xclbin writer (xclbin_gen/): nothing from "
     "server/"),
    ("client/cpp", ["common", "proto", "client_api"],
     "the trainer's C++ libraries: the client and the fleet client "
     "(nothing of the CLI or bench)"),
    ("client/python/native", ["proto", "client_api"],
     "the Python client's native receive path"),
    ("cli", ["client/cpp", "client_api", "server/fleet", "common", "proto",
             "proto/options"],
     "the `nearprep` command-line tool over the client libraries (fleet "
     "commands build manifests and plans; nothing includes the CLI but "
     "tests)"),
]

# Files allowed one include beyond their folder's rule, with the reason.
EXCEPTIONS = [
    ("cli/load_verify.cc", "server/data",
     "verifies streams against the epoch plan (header-only math)"),
    ("cli/pack", "server/data", "`nearprep pack` lists datasets"),
    ("cli/pack", "server/records", "`nearprep pack` writes shards"),
    ("client/cpp/fleet", "server/fleet",
     "the fleet client reads manifests and the global plan"),
    ("cli/commands/bench.cc", "bench",
     "`nearprep bench` runs bench/pipeline in process"),
]

# Layers that other folders may reach only through some of their headers.
NARROW = {
    "server/fpga": ["server/fpga/fpga_factory.h", "server/fpga/fpga_options.h"],
    # The read room's insides (sample_store.h, block_cache.h) stay in data:
    # other layers read through a SampleSource, and reach the store only as
    # an object (Dataset::store(), SampleSource::store()).
    "server/data": ["server/data/block_shuffle.h", "server/data/dataset.h",
                    "server/data/decoded_cache.h", "server/data/epoch_order_cache.h",
                    "server/data/epoch_plan.h", "server/data/sample_source.h"],
}

# Narrower still for one folder: (folder, layer) -> the only headers of that
# layer it may include.
NARROW_FOR = {
    # Backends see a stream's data only through its source (WorkContext).
    ("server/backend", "server/data"): [
        "server/data/decoded_cache.h", "server/data/epoch_plan.h",
        "server/data/sample_source.h"],
    ("server/fpga", "server/data"): [
        "server/data/epoch_plan.h", "server/data/sample_source.h"],
}

# The only files (or folders) that may include a gRPC header (<grpc/...>,
# <grpcpp/...>, "nearprep/v1/*.grpc.pb.h"); any other file of a checked
# folder is refused one, so the server's gRPC stays in its adapter.
GRPC = [
    ("server/service/preprocessor_service.h",
     "the adapter: raw callback methods, one reactor per stream"),
    ("server/service/preprocessor_service.cc", "the adapter"),
    ("server/service/batch_serializer.h",
     "a batch as a grpc::ByteBuffer over the pipeline's memory"),
    ("server/service/batch_serializer.cc", "the same"),
    ("server/service/server.cc",
     "the lifecycle: builder, credentials, resource quota, in-process "
     "channel"),
    ("client/cpp", "the C++ client's channels and stubs"),
]

# Only .cc/.h files of the checked folders; tests/ and bench/ may include
# anything.
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp")
SKIP_DIRS = {"build", ".git", "__pycache__"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
GRPC_INCLUDE_RE = re.compile(
    r'^\s*#\s*include\s+[<"]((?:grpc|grpcpp)/[^>"]+|[^>"]*\.grpc\.pb\.h)[>"]')
DOC_PATH = os.path.join("docs", "architecture.md")
DOC_BEGIN = "<!-- include-rules:begin (scripts/check_includes.py table) -->"
DOC_END = "<!-- include-rules:end -->"


def kernel_headers(root):
    """Basenames of the headers under fpga_kernels/ (included unprefixed)."""
    names = set()
    for d, dirs, files in os.walk(os.path.join(root, "fpga_kernels")):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        names.update(f for f in files if f.endswith((".h", ".hpp")))
    return names


def layer_of_include(path, kernel_names):
    """The layer a quoted include names, or None for a non-project header."""
    parts = path.split("/")
    if parts[0] == "server" and len(parts) > 2:
        return "server/" + parts[1]
    if parts[0] == "proto" and len(parts) > 2:
        return "proto/" + parts[1]
    if parts[0] == "nearprep" and len(parts) > 1:
        return "proto" if parts[1] == "v1" else "client_api"
    if parts[0] in ("common", "bench", "tests", "cli"):
        return parts[0]
    if parts[0] == "client" and len(parts) > 2:
        return "client/" + parts[1]
    if parts[0] == "fpga_kernels" or (len(parts) == 1 and path in kernel_names):
        return "fpga_kernels"
    return None


def folder_of_file(rel):
    """The RULES folder a source file belongs to (longest match), or None."""
    best = None
    for folder, _, _ in RULES:
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(rel, folder, layer, inc):
    if layer == folder:
        return True
    if layer in NARROW and inc not in NARROW[layer]:
        return False
    if (folder, layer) in NARROW_FOR and inc not in NARROW_FOR[(folder, layer)]:
        return False
    for f, layers, _ in RULES:
        if f == folder and layer in layers:
            return True
    for prefix, extra, _ in EXCEPTIONS:
        if (rel == prefix or rel.startswith(prefix + "/")) and layer == extra:
            return True
    return False


def grpc_allowed(rel):
    return any(rel == p or rel.startswith(p + "/") for p, _ in GRPC)


def check_tree(root):
    """Returns the list of violations (strings)."""
    kernel_names = kernel_headers(root)
    bad = []
    for folder, _, _ in RULES:
        base = os.path.join(root, folder)
        for d, dirs, files in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(d, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if folder_of_file(rel) != folder:
                    continue  # a nested folder with its own rule
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        g = GRPC_INCLUDE_RE.match(line)
                        if g and not grpc_allowed(rel):
                            bad.append(f"{rel}:{n}: only the gRPC adapter "
                                       f'may include "{g.group(1)}" (gRPC)')
                            continue
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if (folder != "fpga_kernels" and "/" not in inc and
                                inc in kernel_names and
                                os.path.exists(os.path.join(d, inc))):
                            continue  # a sibling header of the same name
                        layer = layer_of_include(inc, kernel_names)
                        if layer is None or allowed(rel, folder, layer, inc):
                            continue
                        bad.append(f"{rel}:{n}: {folder} may not include "
                                   f'"{inc}" ({layer})')
    return bad


def table():
    """The markdown block of RULES and EXCEPTIONS for docs/architecture.md."""
    out = [DOC_BEGIN, "",
           "| folder | holds | may include (besides itself) |",
           "|---|---|---|"]
    for folder, layers, what in RULES:
        inc = ", ".join(f"`{x}`" for x in layers) if layers else "nothing of nearprep"
        out.append(f"| `{folder}` | {what} | {inc} |")
    for layer, headers in NARROW.items():
        out += ["", f"Other folders reach `{layer}` only through "
                + ", ".join(f"`{h}`" for h in headers) + "."]
    for (folder, layer), headers in NARROW_FOR.items():
        out += ["", f"`{folder}` reaches `{layer}` only through "
                + ", ".join(f"`{h}`" for h in headers) + "."]
    out += ["", "Only these may include a gRPC header (`<grpc/...>`, "
            "`<grpcpp/...>`, `*.grpc.pb.h`):", ""]
    for prefix, why in GRPC:
        out.append(f"- `{prefix}`: {why}")
    out += ["", "Exceptions (one file or tool folder, one more layer):", ""]
    for prefix, extra, why in EXCEPTIONS:
        out.append(f"- `{prefix}` -> `{extra}`: {why}")
    out += ["", "`proto` is the generated `nearprep/v1/*.pb.h`; `client_api` is "
            "the C++ client's public headers (`nearprep/*.h`); `fpga_kernels` "
            "is the kernels' headers (`nearprep_kernel_abi.h`, ...). "
            "`tests/` and `bench/` may include anything.", "", DOC_END]
    return "\n".join(out)


def check_doc(root):
    path = os.path.join(root, DOC_PATH)
    if not os.path.exists(path):
        return []  # a tree without docs (the self-test's)
    text = open(path, encoding="utf-8").read()
    i, j = text.find(DOC_BEGIN), text.find(DOC_END)
    if i < 0 or j < 0:
        return [f"{DOC_PATH}: include-rules markers not found"]
    if text[i:j + len(DOC_END)] != table():
        return [f"{DOC_PATH}: the include table differs from "
                "scripts/check_includes.py (run it with `table` and paste)"]
    return []


def cmd_check(root):
    bad = check_tree(root) + check_doc(root)
    for b in bad:
        print(b)
    if bad:
        print(f"include rules: {len(bad)} violation(s)")
        return 1
    print("include rules: ok")
    return 0


def cmd_selftest():
    """A clean tree passes; each planted forbidden include is reported."""
    me = os.path.abspath(__file__)
    planted = {
        "server/pipeline/bad_a.cc": '#include "server/fpga/fpga_backend.h"\n',
        "server/backend/bad_b.h": '#include "server/pipeline/pipeline.h"\n',
        "fpga_kernels/bad_c.cc": '#include "server/image/preprocess.h"\n',
        "server/image/bad_d.cc": '#include "nearprep/v1/nearprep.pb.h"\n',
        "server/daemon/bad_e.cc": '#include "server/fpga/fpga_backend.h"\n',
        "server/service/bad_f.cc": "#include <grpcpp/grpcpp.h>\n",
        "server/service/bad_g.h": '#include "nearprep/v1/nearprep.grpc.pb.h"\n',
        "server/pipeline/bad_h.cc": "#include <grpc/grpc.h>\n",
        "server/pipeline/bad_i.cc": '#include "proto/options/field_range.h"\n',
        "proto/options/bad_j.cc": '#include "server/spec/types.h"\n',
        "server/pipeline/bad_k.cc": '#include "server/data/sample_store.h"\n',
        "server/backend/bad_l.cc": '#include "server/data/dataset.h"\n',
        "client/cpp/src/bad_m.cc": '#include "cli/request_flags.h"\n',
        "client/cpp/fleet/bad_n.cc": '#include "bench/pipeline/pipeline_bench.h"\n',
        "cli/bad_o.cc": '#include "server/data/dataset.h"\n',
        "client/cpp/src/bad_p.cc": '#include "proto/options/field_range.h"\n',
    }
    clean = {
        "server/pipeline/ok.cc": '#include "server/backend/backend.h"\n'
                                 '#include "absl/status/status.h"\n',
        "server/fpga/ok.cc": '#include "nearprep_kernel_abi.h"\n'
                             '#include "server/backend/cpu_backend.h"\n'
                             '#include "server/data/sample_source.h"\n',
        "fpga_kernels/include/nearprep_kernel_abi.h": "// abi\n",
        "cli/pack/ok.cc": '#include "server/records/tfrecord.h"\n',
        "server/daemon/ok.cc": '#include "server/fpga/fpga_factory.h"\n',
        "server/service/preprocessor_service.cc":
            "#include <grpcpp/grpcpp.h>\n"
            '#include "nearprep/v1/nearprep.grpc.pb.h"\n',
        "server/service/ok.cc": '#include "nearprep/v1/nearprep.pb.h"\n'
                                '#include "proto/options/field_range.h"\n',
        "proto/options/ok.cc": '#include "nearprep/v1/nearprep.pb.h"\n'
                               '#include "proto/options/field_range.h"\n',
        "cli/ok2.cc": '#include "proto/options/field_range.h"\n'
                      '#include "client/cpp/fleet/fleet_client.h"\n',
        "cli/commands/bench.cc": '#include "bench/pipeline/pipeline_bench.h"\n',
        "client/cpp/src/ok.cc": "#include <grpcpp/grpcpp.h>\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in clean.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        bad = check_tree(tmp)
        if bad:
            print("selftest: a clean tree was refused:", *bad, sep="\n  ")
            return 1
        for rel, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        # Through the command line, as ctest runs it: must exit non-zero.
        r = subprocess.run([sys.executable, me, "check", "--root", tmp],
                           capture_output=True, text=True)
        if r.returncode == 0:
            print("selftest: check passed a tree with forbidden includes")
            return 1
        missing = [rel for rel in planted if rel + ":1:" not in r.stdout]
        if missing:
            print("selftest: not reported:", missing, "\n", r.stdout)
            return 1
    # A doc whose table differs is refused too.
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, DOC_PATH), "w") as f:
            f.write(table().replace("server/records", "server/recordz", 1))
        if not check_doc(tmp):
            print("selftest: a stale doc table was accepted")
            return 1
    print(f"selftest: ok ({len(planted)} planted includes reported, "
          "clean tree and doc checks behave)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["check", "table", "selftest"])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    a = ap.parse_args()
    if a.command == "table":
        print(table())
        return 0
    if a.command == "selftest":
        return cmd_selftest()
    return cmd_check(a.root)


if __name__ == "__main__":
    sys.exit(main())
