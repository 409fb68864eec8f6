#!/usr/bin/env bash
# Sets up libtorch 2.9.0 for the apps' optional `tch` backend, offline from PyPI only.
#
# Why: burn-tch 0.22.1 depends on tch 0.22 / torch-sys 0.22, which needs libtorch 2.9.0 exactly
# and always enables tch's `download-libtorch` (it fetches from download.pytorch.org, which is
# unreachable here). Setting LIBTORCH (or LIBTORCH_USE_PYTORCH) skips that download.
#
# Routes:
#   lean (default, ~1.8 GB on disk): torch==2.9.0 without its dependencies, plus the two small
#        NVIDIA wheels that libtorch_cpu.so links (CUDA runtime, CUPTI). A folder with the
#        headers, libtorch_cpu.so, libc10.so, libgomp.so.1 and an empty stub libtorch.so is
#        given to torch-sys as LIBTORCH: with no libtorch_cuda.so in it, torch-sys links the CPU
#        library only and none of the multi-GB CUDA libraries are needed. A `build-version` file
#        keeps torch-sys's 2.9.0 version check on.
#   full (--full, ~3.8 GB): `pip install torch==2.9.0` with every dependency; build with
#        LIBTORCH_USE_PYTORCH=1 from inside the venv.
#
# Usage: scripts/setup-tch.sh [--full] [VENV_DIR]      (VENV_DIR default: ~/torch29)
# Idempotent: rerunning it checks what is there and only adds what is missing. It ends by
# printing the environment variables to export before `cargo build --features tch` and before
# running the binaries: those `export` lines are all it writes to stdout (pip's output and the
# progress go to stderr), so `eval "$(scripts/setup-tch.sh)"` works.
set -euo pipefail

TORCH_VERSION=2.9.0
CUDA_RT_VERSION=12.8.90   # the versions torch 2.9.0's wheel metadata pins
ROUTE=lean
VENV=""
for arg in "$@"; do
    case "$arg" in
        --full) ROUTE=full ;;
        --lean) ROUTE=lean ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        -*) echo "setup-tch: unknown option $arg (use --full, --lean or --help)" >&2; exit 2 ;;
        *) VENV="$arg" ;;
    esac
done
VENV="${VENV:-$HOME/torch29}"
PYTHON="${PYTHON:-python3}"

say() { echo "setup-tch: $*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating venv $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV" >&2
else
    say "venv $VENV exists"
fi
VPY="$VENV/bin/python"
SP="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# Installed version of a distribution, without importing it (the lean torch cannot be imported:
# its Python dependencies are deliberately missing).
installed() {
    "$VPY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print('')" "$1"
}

have_torch="$(installed torch)"
if [[ "$have_torch" != "$TORCH_VERSION" && -n "$have_torch" ]]; then
    say "venv has torch $have_torch, but tch 0.22 needs exactly $TORCH_VERSION: reinstalling"
fi

if [[ "$ROUTE" == lean ]]; then
    if [[ "$have_torch" != "$TORCH_VERSION" \
        || "$(installed nvidia-cuda-runtime-cu12)" != "$CUDA_RT_VERSION" \
        || "$(installed nvidia-cuda-cupti-cu12)" != "$CUDA_RT_VERSION" ]]; then
        say "installing torch==$TORCH_VERSION (no deps) + CUDA runtime/CUPTI $CUDA_RT_VERSION from PyPI (~900 MB download)"
        "$VPY" -m pip install --no-deps "torch==$TORCH_VERSION" \
            "nvidia-cuda-runtime-cu12==$CUDA_RT_VERSION" "nvidia-cuda-cupti-cu12==$CUDA_RT_VERSION" >&2
    else
        say "torch $TORCH_VERSION and its CUDA runtime wheels are installed"
    fi
    TL="$SP/torch/lib"
    for f in libtorch_cpu.so libc10.so libgomp.so.1; do
        [[ -e "$TL/$f" ]] || { say "missing $TL/$f: is this torch wheel for x86_64 Linux?"; exit 1; }
    done
    LEAN="$VENV/libtorch-lean"
    mkdir -p "$LEAN/lib"
    ln -sfn "$SP/torch/include" "$LEAN/include"
    for f in libtorch_cpu.so libc10.so libgomp.so.1; do
        ln -sfn "$TL/$f" "$LEAN/lib/$f"
    done
    if [[ ! -e "$LEAN/lib/libtorch.so" ]]; then
        CC="${CC:-$(command -v gcc || command -v cc || true)}"
        [[ -n "$CC" ]] || { say "need a C compiler (gcc/cc) for the stub libtorch.so"; exit 1; }
        say "creating the empty stub $LEAN/lib/libtorch.so"
        "$CC" -shared -o "$LEAN/lib/libtorch.so" -x c /dev/null
    fi
    echo "$TORCH_VERSION" > "$LEAN/build-version"
    LDP="$LEAN/lib:$SP/nvidia/cuda_runtime/lib:$SP/nvidia/cuda_cupti/lib"
    say "done ($(du -sh "$VENV" | cut -f1) in $VENV). Export these, then build with --features tch:"
    echo "export LIBTORCH=$LEAN"
    echo "export LD_LIBRARY_PATH=$LDP\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
else
    # A lean install has the right version but no dependencies: `import torch` tells them apart.
    if [[ "$have_torch" != "$TORCH_VERSION" ]] || ! "$VPY" -c 'import torch' 2>/dev/null; then
        say "installing torch==$TORCH_VERSION with all dependencies from PyPI (~3.8 GB)"
        "$VPY" -m pip install "torch==$TORCH_VERSION" >&2
    else
        say "torch $TORCH_VERSION is installed"
    fi
    say "done ($(du -sh "$VENV" | cut -f1) in $VENV). Export these, then build with --features tch:"
    echo "export VIRTUAL_ENV=$VENV PATH=$VENV/bin:\$PATH LIBTORCH_USE_PYTORCH=1"
    echo "export LD_LIBRARY_PATH=$SP/torch/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
fi
