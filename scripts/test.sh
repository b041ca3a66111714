#!/usr/bin/env bash
# Installs what is missing, builds everything (Release, in build/) and runs the whole test suite;
# then builds an AddressSanitizer + UndefinedBehaviorSanitizer Debug configuration (build-asan/)
# and runs its tests in quick mode. Exits non-zero on the first failure.
set -euo pipefail
# The tests' build also compiles every generic CUDA kernel for sm_80 (Ampere; sm_89 takes the same
# code paths), so a change that breaks the non-Hopper build fails here and not on a user's machine.
# The Hopper-only kernels are compiled for sm_90a either way.
export PAGEDATTN_CUDA_ARCHS="${PAGEDATTN_CUDA_ARCHS:-80;90}"
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

ensure_packages

configure build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS"
build build
# Tests run two at a time on few cores: OpenMP workers that spin while waiting would steal the
# cores their peers need, so they sleep instead.
export OMP_WAIT_POLICY=PASSIVE
log "ctest (Release)"
ctest --test-dir build --output-on-failure -j "$JOBS"

# The sanitizers check host code; CUDA stays off here (device code has compute-sanitizer), which
# also keeps this second build short.
configure build-asan -DCMAKE_BUILD_TYPE=Debug -DPAGEDATTN_SANITIZE=ON -DPAGEDATTN_CUDA=OFF
build build-asan
log "ctest (ASan + UBSan, quick)"
PAGEDATTN_QUICK_TESTS=1 ctest --test-dir build-asan --output-on-failure -j "$JOBS"

log "all tests passed; the program is build/pagedattn"
