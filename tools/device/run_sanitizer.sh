#!/usr/bin/env bash
# Runs a GPU test binary under compute-sanitizer: run_sanitizer.sh TOOL BINARY GTEST_FILTER.
# Exits 77 (ctest: skipped) when there is no GPU or no compute-sanitizer.
set -euo pipefail
tool=$1 binary=$2 filter=$3
if ! command -v compute-sanitizer >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU or no compute-sanitizer"
  exit 77
fi
exec compute-sanitizer --tool "$tool" --error-exitcode 1 "$binary" --gtest_filter="$filter"
