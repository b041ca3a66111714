#!/usr/bin/env bash
# Bad command lines exit 2 (usage) with a message that says what was wrong, before any work:
# check_usage_errors.sh PAGEDATTN_PROGRAM
set -u
prog="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
# expect_usage_error "MESSAGE SUBSTRING" ARGS...
expect_usage_error() {
  local want="$1"
  shift
  local err code
  err="$(timeout 60 "$prog" "$@" 2>&1 >/dev/null)"
  code=$?
  if [[ $code -ne 2 || "$err" != *"$want"* ]]; then
    echo "FAILED: pagedattn $* -> exit $code, stderr: $err (wanted exit 2 and '$want')"
    failures=$((failures + 1))
  fi
}
expect_usage_error "unknown command 'bogus'" bogus
expect_usage_error "no case matches" verify --filter no-such-case-anywhere
expect_usage_error "excludes" verify --quick --random 3
expect_usage_error "requires --random" verify --seed 3
expect_usage_error "not a share in [0, 1]" demo --fork-share nan
expect_usage_error "at most 65535 query heads" demo --heads 9223372036854775807/1
expect_usage_error "--launch: only with --device cuda" bench decode --launch calls
expect_usage_error "--nondeterministic: only with --device cuda" bench decode --nondeterministic
expect_usage_error "--ragged: only with --device cuda" bench decode --ragged
expect_usage_error "excludes" bench decode --device cuda --standard-shapes --ragged
expect_usage_error "--seq-lens: only with --device cuda" bench decode --seq-lens 2048x4,1024
expect_usage_error "'0x3' is not LEN or LENxCOUNT" bench decode --seq-lens 0x3
expect_usage_error "'16x' is not LEN or LENxCOUNT" bench decode --seq-lens 64,16x
expect_usage_error "'16x2y' is not LEN or LENxCOUNT" bench decode --seq-lens 16x2y
expect_usage_error "excludes" bench decode --seq-lens 16 --ragged
expect_usage_error "excludes" bench decode --seq-lens 16 --batch 4
expect_usage_error "eager not in {graph,calls}" bench decode --device cuda --launch eager
# An --out that cannot be written is reported before the benchmark runs (it would print records).
out="$(timeout 60 "$prog" bench decode --seq-len 16 --batch 1 --iters 1 --warmup 0 --json --out "$tmp/missing/x.json" 2>/dev/null)"
code=$?
if [[ $code -ne 2 || -n "$out" ]]; then
  echo "FAILED: bench --out into a missing folder -> exit $code, stdout: $out (wanted exit 2 before any record)"
  failures=$((failures + 1))
fi
# A write that fails when the buffered records reach the disk is an error too.
if [[ -w /dev/full ]]; then
  expect_usage_error "writing '/dev/full' failed" bench decode --seq-len 16 --batch 1 --iters 1 --warmup 0 --kv-dtype f32 --out /dev/full
fi
if ((failures)); then exit 1; fi
echo "all usage errors reported"
