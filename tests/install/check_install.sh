#!/usr/bin/env bash
# Installs a build tree into a scratch prefix, then configures, builds and runs a separate
# project that finds it with find_package(pagedattn): check_install.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DEXAMPLE_SOURCE="$src/examples/readme_example.cpp" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
