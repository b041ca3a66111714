#!/usr/bin/env bash
# Packs a CUDA build made on this machine for a GPU machine that lacks the time or the packages
# to build it: pack_build.sh BUILD_DIR ARCHIVE [TARGET...] (.tar.xz). With targets (e.g.
# `pagedattn test_decode_cuda cuda_paged_read_probe`, a build of only what a decode call runs:
# ~20 minutes on 2 cores instead of the whole tree's), only those need be built and only their
# programs travel; without, the whole build must be up to date. Best with a shared-library build
# (-DBUILD_SHARED_LIBS=ON): the kernels then travel once, in libpagedattn.so, instead of once
# per test binary.
# The archive holds, under BUILD_DIR, the ctest files (test lists included), the CLI, the GPU
# test binaries and bench/cuda_paged_read_probe, all stripped, and in BUILD_DIR/carried-libs
# libpagedattn.so with the libraries it needs that a GPU image may lack (Highway, fmt). On the
# GPU machine, tools/device/unpack_build.sh ARCHIVE unpacks it and points the ctest files at
# that checkout; then BUILD_DIR=BUILD_DIR tools/device/run_gpu_suite.sh --skip-build runs it.
set -euo pipefail
build=${1:?usage: pack_build.sh BUILD_DIR ARCHIVE [TARGET...]}
archive=$(realpath -m "${2:?usage: pack_build.sh BUILD_DIR ARCHIVE [TARGET...]}")
shift 2
targets=("$@")
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${build%/}
# The archive holds the build under its own name, which unpack_build.sh restores in the checkout's
# root: a directory directly under it.
[[ $build != */* ]] || { echo "BUILD_DIR must be a directory directly under the checkout's root, got $build" >&2; exit 1; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "$build is not a configured build directory" >&2; exit 1; }
[[ -x $build/pagedattn ]] || { echo "$build/pagedattn is missing: build it first" >&2; exit 1; }
# Nothing left to build, and every compiled object with its header dependencies on record. An
# object whose record lists none is not rebuilt when a header it includes changes: after a header
# edit, such a kernel object and the host code disagreed on the kernel parameters' layout, and
# every decode launch faulted with "illegal instruction" (docs/perf-notes.md, CUDA decode on the
# H200). How ninja came to record none for four objects is not pinned down (a dry run, `ninja -n`,
# leaves the record alone; two ninja processes writing one build's record at once are a suspect).
if [[ -f $build/build.ninja ]]; then
  pending=$(ninja -C "$build" -n "${targets[@]}" 2>/dev/null | grep -c '^\[' || true)
  ((pending == 0)) || { echo "$build is not up to date ($pending steps): build it first" >&2; exit 1; }
  blind=$(ninja -C "$build" -t deps | awk '/#deps 0,/ { sub(":", "", $1); print $1 }')
  [[ -z $blind ]] || {
    echo "these objects have no header dependencies on record; delete them and build again:" >&2
    echo "$blind" >&2
    exit 1
  }
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$build/carried-libs"
# The ctest files name this checkout's absolute paths; unpack_build.sh rewrites them.
pwd >"$stage/$build/carried-source-root"
find "$build" \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) \
  -not -path '*/CMakeFiles/*' -print0 | xargs -0 cp --parents -t "$stage"

binaries=("$build/pagedattn")
for f in "$build"/tests/cuda/test_*_cuda "$build"/bench/cuda_paged_read_probe; do
  # With targets named, a program left from an older build of other targets stays behind.
  if ((${#targets[@]} > 0)) && [[ ! " ${targets[*]} " == *" $(basename "$f") "* ]]; then continue; fi
  [[ -x $f ]] && binaries+=("$f")
done
for f in "${binaries[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  strip --strip-unneeded -o "$stage/$f" "$f"
done

# Shared libraries: the library itself (when built shared) and the non-base ones the programs link.
libs=()
while read -r name path; do
  case $name in libpagedattn*.so* | libhwy*.so* | libfmt*.so* | libgtest*.so*) libs+=("$path") ;; esac
done < <(for f in "${binaries[@]}"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
for lib in "${libs[@]}"; do
  strip --strip-unneeded -o "$stage/$build/carried-libs/$(basename "$lib")" "$lib"
done

# Written beside the archive and moved over it once whole and verified: an archive left half
# written (or damaged on disk) once reached a GPU machine, which spent its call unpacking it.
if ! tar -C "$stage" -cJf "$archive.partial" "$build" || ! xz -t "$archive.partial"; then
  rm -f "$archive.partial"
  echo "packing $archive failed (the archive there, if any, is the old one)" >&2
  exit 1
fi
mv "$archive.partial" "$archive"
echo "$archive: $(du -h "$archive" | cut -f1) (${#binaries[@]} programs, libraries: ${libs[*]##*/})"
