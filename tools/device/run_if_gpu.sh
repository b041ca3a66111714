#!/usr/bin/env bash
# Runs a command when this machine has a usable GPU; exits 77 (ctest: skipped) otherwise.
set -euo pipefail
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 77
fi
exec "$@"
