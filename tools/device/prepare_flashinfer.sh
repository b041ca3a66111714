#!/usr/bin/env bash
# Builds the FlashInfer payload that bench/flashinfer_decode.py needs on a GPU machine that has
# no package registry: one archive, .whl/flashinfer-<version>-sm90a-decode.tar.xz (git-ignored,
# about 14 MB; unpacked about 130 MB), holding
#   - FlashInfer <version>'s Python package without its CUDA/CUTLASS sources (only the few
#     templates and sources its module generators read back) nor its other backends' sources,
#     and without the Python packages that neither `import flashinfer` nor the decode wrapper
#     imports (so that it fits one device call beside a carried pagedattn build);
#   - its paged-decode kernels, compiled here for sm_90a into the package's AOT folder
#     (flashinfer/data/aot/<module>/<module>.so), which FlashInfer loads as they are: no nvcc,
#     no ninja, no compile on the GPU machine. Nine modules, q / out bf16, head_dim 128, no RoPE,
#     ALiBi, soft-cap or sliding window, int32 page table:
#       batch_decode_..._dtype_kv_{bf16,e4m3}_...        the CUDA-core decode kernel
#       batch_prefill_..._dtype_kv_{bf16,e4m3}_..._kv_stride_equal
#                                                        the use_tensor_cores=True (FA2) path
#       batch_prefill_..._dtype_kv_bf16_..._sm90         the FA3 (Hopper) tensor-core path
#     (page size and head counts are run-time arguments of these; GQA groups 1, 2, 3, 4, 6, 8
#     and 16 are compiled in), and
#       xqa_..._kv_cache_{bf16,e4m3}_..._page_size_16_..._head_group_ratio_{4,1}_...
#                                                        TensorRT-LLM's XQA, compiled per page
#                                                        size and group (32/8 and 32/32 heads)
#   - apache-tvm-ffi, the runtime those modules link to, unpacked for CPython 3.12.
# The GPU machine must have the rest: CPython 3.12, torch 2.11 (cu130), numpy, packaging,
# requests, tqdm, tabulate, einops, click, ninja, nvidia-ml-py, cuda-bindings, jinja2, filelock.
#
# Run on a development machine with nvcc 13, Python 3.12 (PYTHON=... to choose one) and PyPI:
#   tools/device/prepare_flashinfer.sh
# It needs no GPU. Its working files (a venv with torch 2.11 for FlashInfer's module generators,
# about 5 GB; the 101 MB wheel; the build tree) stay in $FLASHINFER_PREP_DIR (default
# /tmp/flashinfer-prep), so a second run only re-checks and repacks, in under a minute (the
# first installs torch and compiles for about 18 minutes on 2 cores).
#
# On the GPU machine, from the repository root (FLASHINFER_DISABLE_JIT=1 turns a kernel the
# archive lacks into an error instead of a compile; FLASHINFER_WORKSPACE_BASE is a writable folder
# for the sources FlashInfer generates even when it loads a precompiled kernel); with the same
# exports, tools/device/run_gpu_suite.sh adds these records to its decode table. Python unpacks
# the archive: the machine may have no xz.
#   python3 -m tarfile --filter data -e .whl/flashinfer-*-sm90a-decode.tar.xz /tmp/flashinfer-site
#   export PYTHONPATH=/tmp/flashinfer-site FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-ws
#   python3 bench/flashinfer_decode.py --launch graph --out $OUT/flashinfer.json
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$(pwd)

FLASHINFER_VERSION=${FLASHINFER_VERSION:-0.7.4}
TVM_FFI_VERSION=${TVM_FFI_VERSION:-0.1.15.post2}  # the newest FlashInfer 0.7.4 accepts (<0.2)
TORCH_VERSION=${TORCH_VERSION:-2.11.0}            # the GPU machine's; its cu130 build is PyPI's
export FLASHINFER_CUDA_ARCH_LIST=9.0  # the H200's sm_90a, which the archive's name says
work=${FLASHINFER_PREP_DIR:-/tmp/flashinfer-prep}
payload=$repo/.whl/flashinfer-$FLASHINFER_VERSION-sm90a-decode.tar.xz

log() { printf '[prepare_flashinfer] %s\n' "$*"; }

# XQA's modules link the CUDA driver (libcuda.so.1), which a machine without a GPU lacks: loading
# them here, to record and check them, takes the toolkit's stub of it (nothing here calls it).
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  stub=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")/lib64/stubs/libcuda.so
  [[ -f $stub ]] || { echo "prepare_flashinfer.sh: no libcuda.so.1 and no toolkit stub at $stub" >&2; exit 1; }
  mkdir -p "$work/libcuda-stub" && ln -sf "$stub" "$work/libcuda-stub/libcuda.so.1"
  export LD_LIBRARY_PATH=$work/libcuda-stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# The first CPython 3.12 of PYTHON, python3.12 and pyenv's (whose shim fails where 3.12 is not
# the active version).
python=
for candidate in ${PYTHON:-} python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    python=$candidate
    break
  fi
done
[[ -n $python ]] || { echo "prepare_flashinfer.sh: needs CPython 3.12 (the GPU machine's) as python3.12 or PYTHON=..." >&2; exit 1; }
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "prepare_flashinfer.sh: needs nvcc" >&2; exit 1; }
mkdir -p "$work/dl" "$repo/.whl"

# A venv where FlashInfer's module generators can import torch (they take torch dtypes) and its
# build can find tvm-ffi's headers: the same versions as the GPU machine's, so the headers the
# kernels are compiled against are those of the runtime carried beside them.
venv=$work/venv
if ! "$venv/bin/python" -c "import torch, tvm_ffi, jinja2, packaging, requests, tqdm, tabulate, einops, click, pynvml
assert torch.__version__.split('+')[0] == '$TORCH_VERSION' and tvm_ffi.__version__ == '$TVM_FFI_VERSION'" 2>/dev/null; then
  log "creating $venv (torch $TORCH_VERSION with its CUDA libraries: a few GB)"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "torch==$TORCH_VERSION" "apache-tvm-ffi==$TVM_FFI_VERSION" numpy packaging \
    requests tqdm tabulate einops click ninja nvidia-ml-py cuda-core
fi
export PATH=$venv/bin:$PATH

log "downloading flashinfer-python $FLASHINFER_VERSION and apache-tvm-ffi $TVM_FFI_VERSION (cp312)"
"$venv/bin/python" -m pip download -q --no-deps -d "$work/dl" "flashinfer-python==$FLASHINFER_VERSION"
"$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$work/dl" "apache-tvm-ffi==$TVM_FFI_VERSION"
wheel=$(ls "$work"/dl/flashinfer_python-"$FLASHINFER_VERSION"-*.whl)
tvm_wheel=$(ls "$work"/dl/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl)

full=$work/full
if [[ ! -f $full/flashinfer/version.py || $wheel -nt $full/flashinfer/version.py ]]; then
  log "unpacking $(basename "$wheel")"
  rm -rf "$full" && mkdir -p "$full" && (cd "$full" && "$venv/bin/python" -m zipfile -e "$wheel" .)
fi

# The module arguments below are the ones BatchDecodeWithPagedKVCacheWrapper.plan() (backends
# "fa2" and "fa3") and xqa_batch_decode_with_kv_cache pass for bench/flashinfer_decode.py's cases
# (q / out bf16, kv bf16 or e4m3, int32 indices, head_dim 128, pos_encoding NONE, no window, no
# soft-cap, no fp16 QK reduction, no per-token scales): build + load through FlashInfer's own
# entry points, so the names and files are the ones plan() and xqa() will look up.
cat >"$work/modules.py" <<'EOF'
import torch
from flashinfer.decode import get_batch_decode_module
from flashinfer.prefill import get_batch_prefill_module
from flashinfer.jit.attention.modules import (_gen_batch_prefill_primary_module, gen_batch_decode_module,
                                              gen_batch_prefill_module)
from flashinfer.jit.xqa import gen_xqa_module
from flashinfer.xqa import get_xqa_module


def modules():
    """(spec, load) for each module bench/flashinfer_decode.py's plans need."""
    bf16, i32 = torch.bfloat16, torch.int32
    for kv in (torch.bfloat16, torch.float8_e4m3fn):
        decode_args = (bf16, kv, bf16, i32, 128, 128, 0, False, False)
        prefill_args = decode_args + (False, False)  # fp16 QK reduction, per-token KV scales
        yield gen_batch_decode_module(*decode_args), lambda a=decode_args: get_batch_decode_module(*a)
        yield (_gen_batch_prefill_primary_module("fa2", *prefill_args),
               lambda a=prefill_args: get_batch_prefill_module("fa2", *a))
        # XQA (TensorRT-LLM's decode kernels), compiled per page size, head_dim and GQA group:
        # pages of 16, head_dim 128, groups 4 (32/8) and 1 (32/32); no window, bf16 output,
        # one query token.
        for group in (4, 1):
            xqa_args = (bf16, kv, 16, 128, group, False, bf16, 1, False)
            yield gen_xqa_module(*xqa_args), lambda a=xqa_args: get_xqa_module(*a)
    # FA3 (Hopper) prefill kernels run as decode: bf16 KV only.
    fa3_args = (bf16, bf16, bf16, i32, 128, 128, 0, False, False, False, False)
    yield gen_batch_prefill_module("fa3", *fa3_args), lambda a=fa3_args: get_batch_prefill_module("fa3", *a)
EOF

log "compiling the decode modules for FLASHINFER_CUDA_ARCH_LIST=$FLASHINFER_CUDA_ARCH_LIST (ninja: a no-op when up to date)"
# Records the package's data files that the generators read (templates and sources they copy
# into the generated tree): those are all of data/ the GPU machine needs besides the kernels.
FLASHINFER_WORKSPACE_BASE=$work/ws PYTHONPATH=$full:$work MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  "$venv/bin/python" - "$work/build.list" <<'EOF'
import os, pathlib, sys, time
data = pathlib.Path(os.environ["PYTHONPATH"].split(":")[0]) / "flashinfer" / "data"
read = set()
sys.addaudithook(lambda event, args: event == "open" and isinstance(args[0], (str, os.PathLike))
                 and read.add(os.path.abspath(args[0])))
from modules import modules
with open(sys.argv[1], "w") as out:
    for spec, load in modules():
        start = time.time()
        load()
        print(f"  {spec.name}: {time.time() - start:.0f} s", flush=True)
        out.write(f"so {spec.jit_library_path}\n")
    for path in sorted(read):
        if path.startswith(str(data) + os.sep) and os.path.isfile(path):
            out.write(f"data {os.path.relpath(path, data)}\n")
EOF

log "assembling the trimmed package"
trim=$work/trim
rm -rf "$trim" && mkdir -p "$trim"
# Python and the small data files beside it; no data/ (sources, CUTLASS, CCCL: for compiling)
# and no other backends' CUDA sources.
(cd "$full" && tar -cf - --exclude=flashinfer/data --exclude='*.cu' --exclude='*.cuh' --exclude='*.h' \
  --exclude='*.hpp' --exclude='*.c' --exclude='*.cpp' --exclude=__pycache__ flashinfer flashinfer_python-*.dist-info) \
  | tar -xf - -C "$trim"
while read -r kind path; do
  if [[ $kind == data ]]; then
    install -D -m 644 "$full/flashinfer/data/$path" "$trim/flashinfer/data/$path"
  else
    name=$(basename "$path" .so)
    install -D -m 755 "$path" "$trim/flashinfer/data/aot/$name/$name.so"
  fi
done <"$work/build.list"
(cd "$trim" && "$venv/bin/python" -m zipfile -e "$tvm_wheel" . && rm -rf ./*.data)
# Packages that `import flashinfer` and the decode wrapper never import (22 MB of Python kept
# beside the GPU build would not fit one device call's 64 MiB), and the wheel's file list, which
# nothing reads at run time.
rm -rf "$trim"/flashinfer/experimental/b12x "$trim"/flashinfer/experimental/qwen_3_5_block "$trim"/flashinfer/moe_ep
: >"$trim"/flashinfer_python-"$FLASHINFER_VERSION".dist-info/RECORD

log "checking the trimmed package loads every module without compiling (no GPU needed for this)"
# FLASHINFER_CUDA_ARCH_LIST (still exported) stands in for the GPU: FlashInfer checks for a target
# architecture even to load a module.
rm -rf "$work/check-ws"
(cd / && FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE="$work/check-ws" \
  PYTHONPATH="$trim:$work" "$venv/bin/python" - "$trim" <<'EOF'
import sys
import flashinfer, tvm_ffi
assert flashinfer.__file__.startswith(sys.argv[1]) and tvm_ffi.__file__.startswith(sys.argv[1])
from modules import modules
for spec, load in modules():
    assert spec.is_aot, f"{spec.name}: not found as a precompiled module"
    load()
    print(f"  loaded {spec.get_library_path().relative_to(sys.argv[1])}")
EOF
)

log "packing $payload"
rm -f "$repo"/.whl/flashinfer-*-sm90a-decode.tar.xz
tar -cf - -C "$trim" --sort=name --owner=0 --group=0 --mtime=@0 . | xz -T0 -9e >"$payload.tmp"
mv "$payload.tmp" "$payload"
ls -l "$payload"
du -sh "$repo/.whl"
