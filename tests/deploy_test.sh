#!/usr/bin/env bash
# deploy/: the Kubernetes manifests validate strictly against the Kubernetes API schema
# (kubernetes-validate), and the daemon config in their ConfigMap is one deltatuned accepts.
set -euo pipefail
ROOT=$DELTATUNE_SOURCE_DIR
PY=$DELTATUNE_BINARY_DIR/pyenv/bin/python
if [[ ! -x $PY ]]; then echo "SKIP: $PY missing (run scripts/python-env.sh)"; exit 77; fi
"$DELTATUNE_BINARY_DIR/pyenv/bin/kubernetes-validate" --strict --no-warn "$ROOT"/deploy/kubernetes/*.yaml
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" - "$ROOT/deploy/kubernetes/deltatune.yaml" "$tmp/daemon.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
open(sys.argv[2], "w").write(docs[0]["data"]["daemon.yaml"])
PY
"$DELTATUNE_BINARY_DIR/daemon/deltatuned" --config "$tmp/daemon.yaml" --check
# The ServiceMonitor (a Prometheus-operator CRD, outside the core schema) selects the supervisor's
# Service and names a port it has.
"$PY" - "$ROOT/deploy/kubernetes/deltatune.yaml" "$ROOT/deploy/kubernetes/prometheus-operator/servicemonitor.yaml" <<'PY'
import sys, yaml
svc = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Service")
sm = yaml.safe_load(open(sys.argv[2]))
want = sm["spec"]["selector"]["matchLabels"]
assert all(svc["metadata"]["labels"].get(k) == v for k, v in want.items()), (want, svc["metadata"])
ports = {p["name"] for p in svc["spec"]["ports"]}
assert all(e["port"] in ports for e in sm["spec"]["endpoints"]), (sm["spec"]["endpoints"], ports)
print("servicemonitor: selects", svc["metadata"]["name"], "port", sm["spec"]["endpoints"][0]["port"])
PY
