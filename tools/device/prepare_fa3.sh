#!/usr/bin/env bash
# Builds the FlashAttention-3 paged decode that vLLM runs on Hopper into one shared library for
# bench/fa3_decode.py, on a machine with nvcc (no GPU needed; about 9 minutes on 2 cores):
#
#   tools/device/prepare_fa3.sh FA_DIR CUTLASS_DIR [OUT_DIR]
#
# FA_DIR: a checkout of github.com/vllm-project/flash-attention (its hopper/ folder holds the
# kernels; measured at 617264c1, 2026-08-06). CUTLASS_DIR: a checkout of github.com/NVIDIA/cutlass
# at the commit that repository pins as its csrc/cutlass submodule (62750a2b for 617264c1).
# OUT_DIR (default .whl/fa3, git-ignored) receives libfa3_decode.so (a few MB) and SOURCE, which
# names both commits. The objects stay in $FA3_PREP_DIR (default /tmp/fa3-prep): a second run
# compiles only the sources newer than their objects (after a change to the shim, a minute).
# Nothing of either repository is kept in this one: the library is built from the checkouts and
# carried to the GPU machine in a device call (name .whl in its carry).
#
# Only what a bf16, head_dim 128, 16-token-page decode reaches is compiled: the paged forward
# kernel without and with split-KV (PagedKVNonTMA, PackGQA; the instantiations FlashAttention's
# own dispatch picks for that call), the split combine, the varlen scheduler's prepare kernel,
# and bench/fa3_decode_shim.cu, which sets the kernels' parameters as FlashAttention's mha_fwd
# does. The kernels include one PyTorch header for a check macro only; a stand-in defines it.
set -euo pipefail
fa=$(realpath "${1:?usage: prepare_fa3.sh FA_DIR CUTLASS_DIR [OUT_DIR]}")
cutlass=$(realpath "${2:?usage: prepare_fa3.sh FA_DIR CUTLASS_DIR [OUT_DIR]}")
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=$(realpath -m "${3:-.whl/fa3}")
[[ -f $fa/hopper/flash_fwd_launch_template.h ]] || { echo "$fa is not a flash-attention checkout (no hopper/)" >&2; exit 1; }
[[ -f $cutlass/include/cute/tensor.hpp ]] || { echo "$cutlass is not a CUTLASS checkout (no include/cute)" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "nvcc is not on PATH" >&2; exit 1; }

work=${FA3_PREP_DIR:-/tmp/fa3-prep}
mkdir -p "$work/shim/torch/headeronly/util" "$work/obj" "$out"
cat >"$work/shim/torch/headeronly/util/Exception.h" <<'EOF'
#pragma once
#include <stdexcept>
#define STD_TORCH_CHECK(cond, ...) do { if (!(cond)) throw std::runtime_error("check failed: " #cond); } while (0)
EOF

# FlashAttention's own flags for its sm_90a kernels (hopper/setup.py), with the features this
# decode does not reach compiled out.
flags=(-O3 -std=c++17 --use_fast_math -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a
  --expt-relaxed-constexpr --expt-extended-lambda -DNDEBUG -DCUTLASS_DEBUG_TRACE_LEVEL=0
  -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DFLASHATTENTION_VARLEN_ONLY
  -DFLASHATTENTION_DISABLE_BACKWARD -DFLASHATTENTION_DISABLE_FP16 -DFLASHATTENTION_DISABLE_SM8x
  -DFLASHATTENTION_DISABLE_HDIM64 -DFLASHATTENTION_DISABLE_HDIM96 -DFLASHATTENTION_DISABLE_HDIM192
  -DFLASHATTENTION_DISABLE_HDIM256 -DFLASHATTENTION_DISABLE_HDIMDIFF64 -DFLASHATTENTION_DISABLE_HDIMDIFF192
  -I"$fa/hopper" -I"$cutlass/include" -I"$work/shim" -w)
sources=("$fa/hopper/instantiations/flash_fwd_hdim128_bf16_paged_sm90.cu"
  "$fa/hopper/instantiations/flash_fwd_hdim128_bf16_paged_split_sm90.cu"
  "$fa/hopper/flash_fwd_combine.cu" "$fa/hopper/flash_prepare_scheduler.cu" "$PWD/bench/fa3_decode_shim.cu")
pids=()
for src in "${sources[@]}"; do
  obj="$work/obj/$(basename "$src" .cu).o"
  [[ -f $obj && $obj -nt $src ]] && continue
  nvcc "${flags[@]}" -c "$src" -o "$obj.partial" && mv "$obj.partial" "$obj" &
  pids+=($!)
  # Two at a time: each of the two kernel instantiations takes several GB and minutes.
  if ((${#pids[@]} == 2)); then wait "${pids[0]}"; pids=("${pids[1]}"); fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
# The kernels' Q and output tiles go through TMA descriptors encoded with the driver API.
nvcc -shared -cudart static -o "$out/libfa3_decode.so" "$work"/obj/*.o -L"$(dirname "$(command -v nvcc)")/../lib64/stubs" -lcuda
strip --strip-unneeded "$out/libfa3_decode.so"
{
  echo "vllm-project/flash-attention ${FA_COMMIT:-$(git -C "$fa" rev-parse HEAD 2>/dev/null || echo unknown)}"
  echo "NVIDIA/cutlass ${CUTLASS_COMMIT:-$(git -C "$cutlass" rev-parse HEAD 2>/dev/null || echo unknown)}"
} >"$out/SOURCE"
ls -la "$out"
