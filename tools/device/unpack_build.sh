#!/usr/bin/env bash
# Unpacks an archive made by tools/device/pack_build.sh into this checkout and rewrites its
# ctest files' absolute paths (the packing checkout's) to this one's:
#   tools/device/unpack_build.sh ARCHIVE
# Prints the build directory it unpacked. Its programs find their shared libraries through
# BUILD_DIR/carried-libs, which run_gpu_suite.sh puts on LD_LIBRARY_PATH.
set -euo pipefail
archive=$(realpath "${1:?usage: unpack_build.sh ARCHIVE}")
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=$(tar -tJf "$archive" | awk -F/ 'NR == 1 { print $1 }')
tar -xJf "$archive"
old_root=$(cat "$build/carried-source-root")
if [[ $old_root != "$PWD" ]]; then
  # A literal replacement (the paths may hold characters sed would read as pattern syntax).
  find "$build" \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -print0 \
    | xargs -0 python3 -c '
import sys
old, new = sys.argv[1], sys.argv[2]
for path in sys.argv[3:]:
    with open(path) as f: text = f.read()
    with open(path, "w") as f: f.write(text.replace(old, new))' "$old_root" "$PWD"
fi
echo "$build"
