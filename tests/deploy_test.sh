#!/usr/bin/env bash
# deploy/: the Kubernetes manifests and what their kustomize base renders validate strictly against
# the Kubernetes API schema (kubernetes-validate), and the daemon config in their ConfigMap is one
# deltatuned accepts.
set -euo pipefail
ROOT=$DELTATUNE_SOURCE_DIR
PY=$DELTATUNE_BINARY_DIR/pyenv/bin/python
if [[ ! -x $PY ]]; then echo "SKIP: $PY missing (run scripts/python-env.sh)"; exit 77; fi
VALIDATE=$DELTATUNE_BINARY_DIR/pyenv/bin/kubernetes-validate
manifests=()
for f in "$ROOT"/deploy/kubernetes/*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] || manifests+=("$f")
done
"$VALIDATE" --strict --no-warn "${manifests[@]}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The kustomize base renders (kubectl's built-in kustomize), and what it renders validates too.
if command -v kubectl >/dev/null; then
  kubectl kustomize "$ROOT/deploy/kubernetes" > "$tmp/rendered.yaml"
  "$VALIDATE" --strict --no-warn "$tmp/rendered.yaml"
  echo "kustomize: $(grep -c '^kind:' "$tmp/rendered.yaml") objects rendered and valid"
else
  echo "kustomize: no kubectl (scripts/install-deps.sh installs one); rendering not checked"
fi
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
