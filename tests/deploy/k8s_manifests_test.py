"""Offline validation of deploy/k8s/*.yaml with Debian's python3-kubernetes
(kubectl's dry-run needs an API server).

Each document is deserialized into its API model class (V1DaemonSet, ...):
required fields and types are checked by the models. The models silently
drop keys they do not know, so the object is serialized back and compared
with the YAML: a misspelled key ("imagee", "readinesProbe") shows up as a
difference. python3-kubernetes 22.6 (Debian 12) predates gRPC probes
(Kubernetes 1.24, GRPCAction), so probe.grpc is checked here against the
API's schema (port: int32, required; service: string) and then removed
before the model comparison.

Also checks what docs/architecture.md and docs/operations.md promise: the
probes use the gRPC health service on the gRPC port, and the memory request
covers max_concurrent_streams x per_stream_memory plus 1 GiB.
"""

import glob
import os
import sys

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client import ApiClient  # noqa: E402

ROOT = os.environ.get("NEARPREP_SOURCE_DIR",
                      os.path.join(os.path.dirname(__file__), "..", ".."))
MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "deploy", "k8s", "*.yaml")))
GRPC_ACTION_KEYS = {"port", "service"}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _documents():
    for path in MANIFESTS:
        with open(path) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:
                    yield f"{os.path.basename(path)}#{i}", doc


def _model_class(doc):
    version = doc["apiVersion"].split("/")[-1].capitalize()
    return f"{version}{doc['kind']}"


def _strip_grpc_probes(doc):
    """Checks and removes probe.grpc (see the module docstring)."""
    found = []
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for probe in PROBES:
            p = c.get(probe)
            if p and "grpc" in p:
                g = p.pop("grpc")
                assert set(g) <= GRPC_ACTION_KEYS, f"{probe}.grpc: unknown keys {set(g) - GRPC_ACTION_KEYS}"
                assert isinstance(g.get("port"), int) and 0 < g["port"] < 65536, f"{probe}.grpc.port"
                assert isinstance(g.get("service", ""), str)
                found.append((c["name"], probe, g))
                # A probe needs exactly one handler: give the model a stand-in.
                p["tcpSocket"] = {"port": g["port"]}
    return found


def _normalize(x):
    """YAML scalars as the API serializes them (int-or-string stays as is)."""
    if isinstance(x, dict):
        return {k: _normalize(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_normalize(v) for v in x]
    return x


def _diff(a, b, path=""):
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in b:
                out.append(f"{path}.{k}: in the YAML, dropped by the model (misspelled or unknown)")
            elif k not in a:
                out.append(f"{path}.{k}: added by the model")
            else:
                out += _diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            out += _diff(x, y, f"{path}[{i}]")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")
    return out


def _roundtrip_problems(doc):
    doc = yaml.safe_load(yaml.safe_dump(doc))  # Deep copy.
    _strip_grpc_probes(doc)
    api = ApiClient()
    obj = api._ApiClient__deserialize(doc, _model_class(doc))
    back = api.sanitize_for_serialization(obj)
    return _diff(_normalize(doc), _normalize(back))


def test_there_are_manifests():
    assert MANIFESTS, "no deploy/k8s/*.yaml"


@pytest.mark.parametrize("name,doc", list(_documents()), ids=lambda v: v if isinstance(v, str) else "")
def test_document_round_trips_through_its_model(name, doc):
    problems = _roundtrip_problems(doc)
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_misspelled_keys_are_caught():
    docs = dict(_documents())
    ds = next(d for d in docs.values() if d["kind"] == "DaemonSet")
    bad = yaml.safe_load(yaml.safe_dump(ds))
    c = bad["spec"]["template"]["spec"]["containers"][0]
    c["imagee"] = c.pop("image")
    c["readinesProbe"] = c.pop("readinessProbe")
    problems = _roundtrip_problems(bad)
    assert any(".imagee" in p for p in problems), problems
    assert any(".readinesProbe" in p for p in problems), problems
    # A missing required field fails in the model itself.
    del bad["spec"]["selector"]
    with pytest.raises(ValueError):
        _roundtrip_problems(bad)


def _daemonset_and_config():
    docs = [d for _, d in _documents()]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    return ds, yaml.safe_load(cm["data"]["nearprepd.yaml"])


def test_probes_use_grpc_health_on_the_grpc_port():
    ds, config = _daemonset_and_config()
    c = ds["spec"]["template"]["spec"]["containers"][0]
    grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
    assert grpc_port == config["port"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["grpc"]["port"] == grpc_port, probe


def test_metrics_are_on_and_annotated_for_prometheus():
    ds, config = _daemonset_and_config()
    listen = config["metrics"]["listen"]
    port = int(listen.rsplit(":", 1)[1])
    assert port > 0
    tmpl = ds["spec"]["template"]
    c = tmpl["spec"]["containers"][0]
    assert next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics") == port
    ann = tmpl["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/port"] == str(port)
    assert ann["prometheus.io/path"] == "/metrics"


def _bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    q = str(q)
    for u in sorted(units, key=len, reverse=True):
        if q.endswith(u):
            return int(float(q[: -len(u)]) * units[u])
    return int(q)


def test_memory_request_covers_the_daemons_bound():
    ds, config = _daemonset_and_config()
    c = ds["spec"]["template"]["spec"]["containers"][0]
    limits = config["limits"]
    tensors = limits["max_concurrent_streams"] * _bytes(limits["per_stream_memory"])
    request = _bytes(c["resources"]["requests"]["memory"])
    assert request >= tensors + (1 << 30), (request, tensors)
    # And not wildly more (the request is what the scheduler reserves).
    assert request <= tensors + (2 << 30), (request, tensors)
    assert _bytes(c["resources"]["limits"]["memory"]) >= request


def _flag(args, name):
    return args[args.index(name) + 1]


def test_trainer_job_reads_the_daemonsets_headless_service():
    """deploy/k8s/trainer-job.yaml: the trainers' --targets-dns is the
    headless Service of the DaemonSet (its name, a namespace, its gRPC port),
    and that Service selects the DaemonSet's pods and publishes only ready
    ones (a pod that is not ready is not in the DNS answer)."""
    docs = [d for _, d in _documents()]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    svc = next(d for d in docs if d["kind"] == "Service")
    job = next(d for d in docs if d["kind"] == "Job")
    assert svc["spec"]["clusterIP"] == "None"
    assert not svc["spec"].get("publishNotReadyAddresses", False)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    c = job["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    name, port = _flag(args, "--targets-dns").rsplit(":", 1)
    labels_ = name.split(".")
    assert labels_[0] == svc["metadata"]["name"] and labels_[2:] == ["svc", "cluster", "local"]
    grpc = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert int(port) == grpc["port"]
    # The DaemonSet's config serves the dataset the trainers ask for.
    _, config = _daemonset_and_config()
    assert _flag(args, "--dataset") in {d["name"] for d in config["datasets"]}
    # One trainer rank per pod: the Job's completion index.
    trainers = int(_flag(args, "--trainers"))
    assert job["spec"]["completions"] == trainers and job["spec"]["completionMode"] == "Indexed"
    rank = _flag(args, "--trainer")
    env = {e["name"]: e for e in c["env"]}
    assert rank.startswith("$(") and rank[2:-1] in env
    assert "job-completion-index" in env[rank[2:-1]]["valueFrom"]["fieldRef"]["fieldPath"]
    assert int(_flag(args, "--global-batch")) % trainers == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
