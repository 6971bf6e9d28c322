#!/usr/bin/env bash
# deploy/: the Kubernetes manifests, and what the base and each overlay (one-machine, cluster)
# render, validate strictly against the Kubernetes API schema (kubernetes-validate); the daemon
# config in their ConfigMap is one deltatuned accepts; supervisor and agents agree on paths.
set -euo pipefail
ROOT=$DELTATUNE_SOURCE_DIR
PY=$DELTATUNE_BINARY_DIR/pyenv/bin/python
if [[ ! -x $PY ]]; then echo "SKIP: $PY missing (run scripts/python-env.sh)"; exit 77; fi
VALIDATE=$DELTATUNE_BINARY_DIR/pyenv/bin/kubernetes-validate
K=$ROOT/deploy/kubernetes
"$VALIDATE" --strict --no-warn "$K/base/deltatune.yaml" "$K/base/agents.yaml"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Each kustomization renders (kubectl's built-in kustomize), and what it renders validates too.
if command -v kubectl >/dev/null; then
  for k in . overlays/one-machine overlays/cluster; do
    out=$tmp/$(echo "$k" | tr / _).yaml
    kubectl kustomize "$K/$k" > "$out"
    "$VALIDATE" --strict --no-warn "$out"
    echo "kustomize $k: $(grep -c '^kind:' "$out") objects rendered and valid"
  done
else
  echo "kustomize: no kubectl (scripts/install-deps.sh --tests installs one); rendering not checked"
  cat "$K/base/deltatune.yaml" <(echo ---) "$K/base/agents.yaml" > "$tmp/overlays_cluster.yaml"
fi
"$PY" - "$K/base/deltatune.yaml" "$tmp/daemon.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
open(sys.argv[2], "w").write(docs[0]["data"]["daemon.yaml"])
PY
"$DELTATUNE_BINARY_DIR/daemon/deltatuned" --config "$tmp/daemon.yaml" --check
# The ServiceMonitor (a Prometheus-operator CRD, outside the core schema) selects the supervisor's
# Service and names a port it has.
"$PY" - "$K/base/deltatune.yaml" "$K/prometheus-operator/servicemonitor.yaml" <<'PY'
import sys, yaml
svc = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Service")
sm = yaml.safe_load(open(sys.argv[2]))
want = sm["spec"]["selector"]["matchLabels"]
assert all(svc["metadata"]["labels"].get(k) == v for k, v in want.items()), (want, svc["metadata"])
ports = {p["name"] for p in svc["spec"]["ports"]}
assert all(e["port"] in ports for e in sm["spec"]["endpoints"]), (sm["spec"]["endpoints"], ports)
print("servicemonitor: selects", svc["metadata"]["name"], "port", sm["spec"]["endpoints"][0]["port"])
PY
# In the cluster overlay as rendered, supervisor and agents agree on every root: each of the
# supervisor's roots lies under a mount of a PersistentVolumeClaim that the agents mount at the
# same path, and the agents register with the Service's gRPC port.
"$PY" - "$tmp/overlays_cluster.yaml" <<'PY'
import sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
def statefulset(name):
    return next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == name)
def pod(name):
    return statefulset(name)["spec"]["template"]["spec"]
def claim_mounts(name):
    """mountPath -> the claim behind it (a per-pod volumeClaimTemplate is "per-pod NAME")."""
    spec = pod(name)
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    for t in statefulset(name)["spec"].get("volumeClaimTemplates", []):
        claims[t["metadata"]["name"]] = "per-pod " + t["metadata"]["name"]
    return {m["mountPath"]: claims[m["name"]] for c in spec["containers"] for m in c["volumeMounts"] if m["name"] in claims}
config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["daemon.yaml"])
supervisor, agent = claim_mounts("deltatune"), claim_mounts("deltatune-agent")
for kind, paths in config["roots"].items():
    for path in paths:
        mount = max((m for m in supervisor if path.startswith(m.rstrip("/") + "/")), key=len, default=None)
        assert mount, f"roots.{kind} {path}: on no volume of the supervisor"
        assert agent.get(mount) == supervisor[mount], \
            f"roots.{kind} {path}: the supervisor's {mount} is claim {supervisor[mount]}, the agents' {agent.get(mount)}"
svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "deltatune")
grpc_port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
args = pod("deltatune-agent")["containers"][0]["args"]
supervisor_arg = args[args.index("--supervisor") + 1]
assert supervisor_arg == f"deltatune:{grpc_port}", (supervisor_arg, grpc_port)
print("roots: every root on a claim the agents mount at the same path; agents register with", supervisor_arg)
PY
