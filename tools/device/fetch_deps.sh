#!/usr/bin/env bash
# Downloads the Debian packages the build needs into .deps/ (git-ignored), for GPU machines that
# have no package registry: run_gpu_suite.sh unpacks them there when the packages are missing.
# Run on a machine with apt (the development machine).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .deps
cd .deps
apt-get download libhwy-dev libhwy1 libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 \
  libgtest-dev googletest libdlpack-dev
ls -1
