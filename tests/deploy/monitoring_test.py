"""Offline checks of the monitoring files in deploy/:

- deploy/prometheus/*.yml with promtool (Debian package prometheus):
  `check config`, `check rules`, and `test rules` (every alert fires on a
  synthetic series and stays quiet on a healthy one); the Kubernetes job with
  kubernetes_sd_configs swapped for an empty static_configs (Debian's
  promtool has no Kubernetes discovery).
- deploy/grafana/nearprep-dashboard.json: every panel has queries, and every
  metric a query (or an alert rule) names is one nearprepd exports: the
  names come from a real scrape of the built daemon (--metrics-listen on
  port 0), so renaming a metric without updating the dashboard fails here.

Tests needing promtool or nearprepd skip with the reason when they are absent.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

ROOT = os.environ.get("NEARPREP_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
PROM = os.path.join(ROOT, "deploy", "prometheus")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "nearprep-dashboard.json")
PROMTOOL = shutil.which("promtool")
NEARPREPD = os.environ.get("NEARPREPD")

TOKEN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# Metrics a query may name that nearprepd does not export: Prometheus's own.
PROMETHEUS_OWN = {"up"}


def metric_names(expr):
    """The nearprep_* / process_* metric names in a PromQL expression
    (recording-rule names such as instance:nearprep_x:rate1m are skipped:
    they hold colons)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    return {t for t in TOKEN.findall(expr)
            if ":" not in t and (t.startswith("nearprep_") or t.startswith("process_")
                                 or t in PROMETHEUS_OWN)}


def need_promtool():
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")


def promtool(*args, cwd=PROM):
    p = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def test_scrape_config_is_valid():
    need_promtool()
    rc, out = promtool("check", "config", "prometheus.yml")
    assert rc == 0, out


def test_kubernetes_scrape_job_is_valid(tmp_path):
    need_promtool()
    with open(os.path.join(PROM, "prometheus-kubernetes.yml")) as f:
        config = yaml.safe_load(f)
    job = config["scrape_configs"][0]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    # The relabelling reads the annotations the DaemonSet sets.
    sources = {s for r in job["relabel_configs"] for s in r.get("source_labels", [])}
    for a in ("scrape", "port", "path"):
        assert f"__meta_kubernetes_pod_annotation_prometheus_io_{a}" in sources
    del job["kubernetes_sd_configs"]
    job["static_configs"] = [{"targets": []}]
    (tmp_path / "k8s.yml").write_text(yaml.safe_dump(config))
    shutil.copy(os.path.join(PROM, "nearprepd.rules.yml"), tmp_path)
    rc, out = promtool("check", "config", "k8s.yml", cwd=tmp_path)
    assert rc == 0, out


def test_alert_rules_are_valid_and_fire_as_tested():
    need_promtool()
    rc, out = promtool("check", "rules", "nearprepd.rules.yml")
    assert rc == 0, out
    rc, out = promtool("test", "rules", "nearprepd.rules.test.yml")
    assert rc == 0, out


def test_rule_tests_can_fail(tmp_path):
    """A rule test expecting an alert that does not fire is reported."""
    need_promtool()
    with open(os.path.join(PROM, "nearprepd.rules.test.yml")) as f:
        tests = yaml.safe_load(f)
    # The healthy node now expected to alert too.
    first = tests["tests"][0]["alert_rule_test"][0]
    first["exp_alerts"].append({"exp_labels": {"severity": "page", "job": "nearprepd",
                                               "instance": "good:9464"}})
    tests["rule_files"] = [os.path.join(PROM, "nearprepd.rules.yml")]
    (tmp_path / "t.yml").write_text(yaml.safe_dump(tests))
    rc, out = promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert rc != 0, out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every series name a freshly started nearprepd exports."""
    if not NEARPREPD or not os.access(NEARPREPD, os.X_OK):
        pytest.skip("nearprepd not built (NEARPREPD)")
    work = tmp_path_factory.mktemp("monitoring")
    os.makedirs(work / "data" / "a")
    (work / "data" / "a" / "x.jpg").write_bytes(b"listing does not decode")
    proc = subprocess.Popen(
        [NEARPREPD, "--dataset", f"d={work / 'data'}", "--listen", "127.0.0.1",
         "--port", "0", "--workers", "1", "--log-level", "warn",
         "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(work / "mport")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        port = None
        while time.monotonic() < deadline and port is None:
            assert proc.poll() is None, proc.stderr.read().decode()
            p = work / "mport"
            if p.exists() and p.read_text().strip():
                port = int(p.read_text())
            else:
                time.sleep(0.02)
        assert port, "metrics port file not written"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(TOKEN.match(line).group(0))
        elif line.startswith("# TYPE "):
            # Declared families without a series here (nearprep_fleet_
            # partitions has series only for fleet datasets).
            names.add(line.split()[2])
    assert "nearprep_samples_sent_total" in names
    return names


def _dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    panels = dash["panels"]
    assert panels, "no panels"
    return dash, [(p["title"], [t["expr"] for t in p.get("targets", [])]) for p in panels]


def test_dashboard_panels_query_exported_metrics(exported):
    dash, panels = _dashboard_exprs()
    titles = {t for t, _ in panels}
    for wanted in ("Images/s per node", "Stall fraction per node", "Errors by kind",
                   "Backend fallbacks", "Memory (RSS) per node"):
        assert wanted in titles, wanted
    assert any(t.startswith("Stage time") for t in titles)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    missing = []
    for title, exprs in panels:
        assert exprs, f"panel {title!r} has no query"
        for e in exprs:
            names = metric_names(e)
            assert names, f"panel {title!r}: no metric in {e!r}"
            missing += [(title, n) for n in names - exported - PROMETHEUS_OWN]
    assert not missing, f"metrics the daemon does not export: {missing}"


def test_alert_rules_query_exported_metrics(exported):
    with open(os.path.join(PROM, "nearprepd.rules.yml")) as f:
        rules = yaml.safe_load(f)
    missing = []
    for g in rules["groups"]:
        for r in g["rules"]:
            names = metric_names(r["expr"])
            assert names, r
            missing += [(r.get("alert") or r.get("record"), n)
                        for n in names - exported - PROMETHEUS_OWN]
    assert not missing, missing


def test_name_check_can_fail(exported):
    assert metric_names('rate(nearprep_samples_sent_total{dataset="nearprep_x"}[1m])') == {
        "nearprep_samples_sent_total"}
    assert metric_names("instance:nearprep_images_per_second:rate1m") == set()
    assert "nearprep_no_such_metric_total" not in exported


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
