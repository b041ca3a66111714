#!/usr/bin/env bash
# Installs what is missing, builds pagedattn (Release, in build/) and runs `build/pagedattn demo`.
# Extra arguments go to the demo, e.g. ./scripts/demo.sh --requests 200 --kv-dtype fp8_e4m3
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

ensure_packages
# A build/ already configured (by scripts/test.sh, whose list adds sm_80) keeps its CUDA
# architectures unless PAGEDATTN_CUDA_ARCHS is set, so the demo does not recompile every kernel.
arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
if [[ -f build/CMakeCache.txt && -z ${PAGEDATTN_CUDA_ARCHS:-} ]]; then arch_args=(); fi
configure build -DCMAKE_BUILD_TYPE=Release "${arch_args[@]}"
build build pagedattn_cli
log "build/pagedattn demo $*"
build/pagedattn demo "$@"
