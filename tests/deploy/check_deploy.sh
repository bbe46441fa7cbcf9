#!/usr/bin/env bash
# CTest deploy_check (label deploy): the files in deploy/ checked by the
# tools that would read them. Kubernetes manifests against the API schemas
# of the oldest and newest Kubernetes we claim (kubernetes-validate, strict:
# an unknown field fails; its schemas are bundled, nothing is fetched); the
# systemd units with systemd-analyze verify (ExecStart pointed at this
# build's daemons, since verify insists that the program exists; any
# warning fails); the Grafana dashboard as JSON (tests/cluster/
# test_dashboard.py checks its queries against a live controller).
set -euo pipefail
root="${CW_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
py="${CW_PYTHON:-$root/.venv/bin/python}"
bin="${CW_BIN_DIR:-$root/build/release/bin}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for k in 1.27.0 1.37.0; do
  "$(dirname "$py")/kubernetes-validate" --strict --quiet -k "$k" "$root"/deploy/kubernetes/*.yaml
  echo "kubernetes $k: $(ls "$root"/deploy/kubernetes/*.yaml | wc -l) files valid"
done

for unit in "$root"/deploy/systemd/*.service; do
  grep -q '^ExecStart=/opt/causeway/venv/bin/causeway-' "$unit" ||
    { echo "$unit: ExecStart is not the wheel's command" >&2; exit 1; }
  sed "s|/opt/causeway/venv/bin/|$bin/|" "$unit" > "$work/$(basename "$unit")"
done
out="$(systemd-analyze verify "$work"/*.service 2>&1)" || { echo "$out" >&2; exit 1; }
[ -z "$out" ] || { echo "systemd-analyze verify warned:" >&2; echo "$out" >&2; exit 1; }
echo "systemd: $(ls "$work"/*.service | wc -l) units verified"

"$py" -m json.tool "$root/deploy/grafana/causeway.json" > /dev/null
echo "grafana: deploy/grafana/causeway.json is JSON"
echo "deploy_check: passed"
