#!/usr/bin/env bash
# The GPU workflow in one call, on a machine with an NVIDIA GPU, nvcc and CMake:
#   1. configure and build the CUDA configuration (BUILD_DIR, default build-gpu/, sm_90 unless
#      CUDA_ARCHS is set); with --skip-build, BUILD_DIR may instead be a build made elsewhere and
#      carried here (tools/device/pack_build.sh, unpack_build.sh), whose shared libraries in
#      BUILD_DIR/carried-libs go on LD_LIBRARY_PATH;
#   2. run the `cuda` tests and the `sanitizer` tests (compute-sanitizer memcheck, racecheck);
#   3. run `pagedattn bench decode --device cuda` and bench/torch_sdpa_decode.py (PyTorch SDPA
#      on a contiguous cache, the competitor) with the read floors of the same shapes
#      (bench/torch_read_floor.py contiguous, bench/cuda_paged_read_probe paged), then `pagedattn bench prefill --device cuda` and
#      bench/torch_sdpa_prefill.py (SDPA and flex_attention) in the same call, and
#      `pagedattn bench cascade --device cuda` (shared prefix: plain decode vs. the cascade);
#      with PREFILL_HEAD_DIMS (e.g. "64 256"), the prefill table and its competitors once more
#      at each of those head dims;
#   4. write the JSON records and a Markdown table to RESULTS_DIR (default: $OUT if set, else
#      bench/results/local), and all of it as RESULTS_DIR/0-suite-results.tar.gz.
# Build dependencies missing on the machine are taken from .deps/*.deb (tools/device/fetch_deps.sh).
# CTEST_JOBS sets the cuda tests' parallelism (default 4); BENCH picks the benchmark sections
# (default "decode prefill cascade"); DECODE_ROUNDS and PREFILL_ROUNDS the interleaved rounds of
# those two (default 1 and 3).
# Usage: tools/device/run_gpu_suite.sh [--skip-build] [--skip-tests] [--skip-bench]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
RESULTS_DIR=${RESULTS_DIR:-${OUT:-$ROOT/bench/results/local}}
mkdir -p "$RESULTS_DIR"
JOBS=${JOBS:-$(nproc)}
# shellcheck source=tools/device/build_dir.sh
source tools/device/build_dir.sh
BENCH=${BENCH:-decode prefill cascade}  # which benchmark sections run
skip_build=0 skip_tests=0 skip_bench=0
for arg in "$@"; do
  case $arg in
    --skip-build) skip_build=1 ;;
    --skip-tests) skip_tests=1 ;;
    --skip-bench) skip_bench=1 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
status=0
log() { printf '\n==> %s\n' "$*"; }
# interleaved_rounds NAME ROUNDS OURS... -- COMPETITOR_SCRIPT ARGS... [-- COMPETITOR_SCRIPT ARGS...]:
# our benchmark (JSON records on stdout) and each competitor's Python script (records to --out)
# take turns for ROUNDS rounds; the records go to RESULTS_DIR/NAME_cuda.json and, all the
# competitors' together, NAME_torch.json.
interleaved_rounds() {
  local name=$1 rounds=$2 ours=() theirs=() arg
  shift 2
  while [[ $1 != -- ]]; do ours+=("$1"); shift; done
  shift
  # The competitors' commands, one string each (arguments without spaces), split on "--".
  local command=""
  for arg in "$@"; do
    if [[ $arg == -- ]]; then theirs+=("$command"); command=""; else command+="${command:+ }$arg"; fi
  done
  theirs+=("$command")
  : >"$RESULTS_DIR/${name}_cuda.json"
  : >"$RESULTS_DIR/${name}_torch.json"
  local round_file="$RESULTS_DIR/${name}_torch.round.json"
  for ((round = 0; round < rounds; ++round)); do
    "${ours[@]}" >>"$RESULTS_DIR/${name}_cuda.json" || status=1
    for command in "${theirs[@]}"; do
      rm -f "$round_file"  # a round whose script fails adds nothing (not the round before's records)
      # shellcheck disable=SC2086  # the command's words, split as given
      PYTHONUNBUFFERED=1 python3 $command --out "$round_file" >/dev/null || status=1
      [[ -f $round_file ]] && cat "$round_file" >>"$RESULTS_DIR/${name}_torch.json"
    done
  done
  rm -f "$round_file"
}

prefix_args=()
if ! ls /usr/lib/x86_64-linux-gnu/cmake/hwy >/dev/null 2>&1 && ls .deps/*.deb >/dev/null 2>&1; then
  DEPS=/tmp/pagedattn-deps
  log "unpacking .deps/*.deb into $DEPS"
  for deb in .deps/*.deb; do dpkg -x "$deb" "$DEPS"; done
  prefix_args=(-DCMAKE_PREFIX_PATH="$DEPS/usr" -DCMAKE_INCLUDE_PATH="$DEPS/usr/include")
  export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RESULTS_DIR/gpu.txt"
if ((!skip_build)); then
  log "building the CUDA configuration"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" "${prefix_args[@]}" >"$RESULTS_DIR/configure.log" 2>&1 \
    || { tail -30 "$RESULTS_DIR/configure.log"; exit 1; }
  cmake --build "$BUILD_DIR" -j "$JOBS" >"$RESULTS_DIR/build.log" 2>&1 || { grep -E "error" -A3 "$RESULTS_DIR/build.log" | head -40; exit 1; }
fi
if ((!skip_tests)); then
  log "cuda tests"
  ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure -j "${CTEST_JOBS:-4}" >"$RESULTS_DIR/ctest_cuda.log" 2>&1 || status=1
  tail -4 "$RESULTS_DIR/ctest_cuda.log"
  log "sanitizer tests"
  ctest --test-dir "$BUILD_DIR" -L sanitizer --output-on-failure >"$RESULTS_DIR/ctest_sanitizer.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|tests passed|Passed|Failed" "$RESULTS_DIR/ctest_sanitizer.log" | tail -8
fi
if ((!skip_bench)) && [[ " $BENCH " == *" decode "* ]]; then
  # Adjacent runs of identical code differ by up to ~1.5% on a shape (and the copy ceiling by
  # ~0.5%): the decode benchmark and SDPA take turns for DECODE_ROUNDS rounds and the table
  # compares medians, each round rated against its own ceiling.
  # FlashInfer's paged decode as well where it can be imported (a carried payload,
  # tools/device/prepare_flashinfer.sh): the paged competitor, on the same cache format.
  decode_competitors=(-- bench/torch_sdpa_decode.py --launch graph)
  if PYTHONUNBUFFERED=1 python3 -c "import flashinfer" >/dev/null 2>&1; then
    decode_competitors+=(-- bench/flashinfer_decode.py --launch graph)
  else
    echo "flashinfer cannot be imported here: no FlashInfer kernels in the decode table"
  fi
  # FlashAttention-3's paged decode as vLLM runs it, where its library was built and carried
  # (tools/device/prepare_fa3.sh; bench/fa3_decode.py finds it at PAGEDATTN_FA3_LIB).
  if [[ -f ${PAGEDATTN_FA3_LIB:=.whl/fa3/libfa3_decode.so} ]]; then
    export PAGEDATTN_FA3_LIB
    decode_competitors+=(-- bench/fa3_decode.py --launch graph)
  else
    echo "$PAGEDATTN_FA3_LIB is not here: no FlashAttention-3 (vLLM) kernels in the decode table"
  fi
  log "decode benchmark and its competitors on the same shapes, ${DECODE_ROUNDS:=1} interleaved round(s)"
  # Graph replays on every side (the decode benchmark's default): like is timed against like.
  interleaved_rounds decode "$DECODE_ROUNDS" "$BUILD_DIR"/pagedattn bench decode --device cuda --standard-shapes --json \
    "${decode_competitors[@]}"
  log "read floors: a contiguous one-launch read of each shape's bytes"
  PYTHONUNBUFFERED=1 python3 bench/torch_read_floor.py --out "$RESULTS_DIR/decode_floor.json" >/dev/null || status=1
  log "paged read floors: each shape's bytes through shuffled 16-token pages, nothing else"
  # 256 tokens per CTA of 8 warps: the grid at which the bare reader was fastest on every shape
  # (docs/perf-notes.md, "The paged read floor"). d-ragged's lengths are not probed.
  for heads in 8 32; do
    for shape in "d-long1 1 32768" "d-mid16 16 4096" "d-b64 64 2048" "d-b256 256 1024" "d-b32-16k 32 16384"; do
      read -r name batch len <<<"$shape"
      "$BUILD_DIR"/bench/cuda_paged_read_probe --shape "$name" --batch "$batch" --seq-len "$len" --kv-heads "$heads" \
        --tokens-per-cta 256 --threads 256 --page-sizes 16 --layouts nhd --orders shuffled || status=1
    done
  done >"$RESULTS_DIR/decode_paged_floor.json"
  python3 tools/device/results_table.py "$RESULTS_DIR/decode_cuda.json" "$RESULTS_DIR/decode_torch.json" \
    "$RESULTS_DIR/decode_floor.json" "$RESULTS_DIR/decode_paged_floor.json" | tee "$RESULTS_DIR/decode.md"
fi
if ((!skip_bench)) && [[ " $BENCH " == *" prefill "* ]]; then
  # Compute-bound kernels run at the clock the GPU's power limit leaves them, which moves with
  # its temperature: the prefill benchmark and its competitors take turns for PREFILL_ROUNDS
  # rounds and the table compares medians.
  log "prefill / append benchmark and PyTorch SDPA / flex_attention, ${PREFILL_ROUNDS:=3} interleaved rounds"
  interleaved_rounds prefill "$PREFILL_ROUNDS" "$BUILD_DIR"/pagedattn bench prefill --device cuda --standard-shapes --json \
    -- bench/torch_sdpa_prefill.py
  python3 tools/device/results_table.py "$RESULTS_DIR/prefill_cuda.json" "$RESULTS_DIR/prefill_torch.json" \
    | tee "$RESULTS_DIR/prefill.md"
  for d in ${PREFILL_HEAD_DIMS:-}; do
    log "prefill / append benchmark and PyTorch at head_dim $d"
    "$BUILD_DIR"/pagedattn bench prefill --device cuda --standard-shapes --head-dim "$d" --json \
      --out "$RESULTS_DIR/prefill_d${d}_cuda.json" >/dev/null || status=1
    PYTHONUNBUFFERED=1 python3 bench/torch_sdpa_prefill.py --head-dim "$d" --out "$RESULTS_DIR/prefill_d${d}_torch.json" >/dev/null || status=1
    python3 tools/device/results_table.py "$RESULTS_DIR/prefill_d${d}_cuda.json" "$RESULTS_DIR/prefill_d${d}_torch.json" \
      | tee "$RESULTS_DIR/prefill_d$d.md"
  done
fi
if ((!skip_bench)) && [[ " $BENCH " == *" cascade "* ]]; then
  log "cascade benchmark"
  "$BUILD_DIR"/pagedattn bench cascade --device cuda --json --out "$RESULTS_DIR/cascade_cuda.json" >/dev/null || status=1
  python3 tools/device/results_table.py "$RESULTS_DIR/cascade_cuda.json" | tee "$RESULTS_DIR/cascade.md"
fi
# Everything above in one archive as well, for transports that bring back only a few files (its
# name sorts first).
bundle=$(mktemp)
tar -czf "$bundle" -C "$RESULTS_DIR" --exclude=0-suite-results.tar.gz . && mv "$bundle" "$RESULTS_DIR/0-suite-results.tar.gz" || status=1
exit $status
