#!/usr/bin/env bash
# Installs aotc in place for a GPU session, with its dependencies when an index is reachable and
# without them otherwise (a device machine is often offline); never fatal: the preflight
# (python3 -m aotc.bench.gpu_preflight) then says exactly what is missing. Log: $1 (default stderr).
log="${1:-/dev/stderr}"
cd "$(dirname "$0")/.."
if python3 -m pip install -q --no-build-isolation --retries 1 --timeout 15 -e . >>"$log" 2>&1; then
  echo "aotc installed (with dependencies)"
elif python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . >>"$log" 2>&1; then
  echo "aotc installed without dependencies (no index reachable): the preflight lists what is missing"
else
  echo "pip install failed (see $log): the binding builds the runtime with cc on first use"
fi
