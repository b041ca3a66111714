#!/usr/bin/env bash
# Installs what is missing, builds pagedattn (Release, in build/) and runs `build/pagedattn demo`.
# Extra arguments go to the demo, e.g. ./scripts/demo.sh --requests 200 --kv-dtype fp8_e4m3
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

ensure_packages
configure build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS"
build build pagedattn_cli
log "build/pagedattn demo $*"
build/pagedattn demo "$@"
