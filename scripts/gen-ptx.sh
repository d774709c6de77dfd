#!/usr/bin/env bash
# Regenerates the PTX of arrow-device's CUDA kernels from their CUDA C source,
# on any x86-64 or aarch64 Linux machine, GPU and CUDA toolkit not needed:
#
#   crates/arrow-device/src/device/cuda/kernels/convert.cu
#     -> crates/arrow-device/src/device/cuda/kernels/convert.ptx (committed,
#        embedded by kernels.rs and JIT-compiled by the driver at run time)
#
# Usage: scripts/gen-ptx.sh [OUTPUT]   (OUTPUT defaults to the committed file;
# scripts/check-ptx.sh passes a temporary one and compares)
#
# Steps:
# 1. NVRTC and ptxas come from NVIDIA's pip wheels (nvidia-cuda-nvrtc-cu12,
#    nvidia-cuda-nvcc-cu12), pinned to one version so the output is
#    reproducible, downloaded once into target/cuda-tools/<version>.
# 2. NVRTC compiles convert.cu for compute_52 (through Python's ctypes).
# 3. The `.version` line is lowered to 7.0: PTX ISA 7.0 is CUDA 11.0's, so
#    every CUDA 11.0+ driver can JIT the file, whereas NVRTC 12.9 writes 8.8,
#    which drivers older than 12.9 reject (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
#    The kernels use only instructions far older than ISA 7.0; step 4 proves
#    it, since ptxas rejects an instruction the declared ISA lacks.
# 4. ptxas checks the result for sm_52, sm_70, sm_80 and sm_90, warnings as
#    errors; only then is OUTPUT written.
#
# PYTHON chooses the interpreter (default python3; it needs pip for step 1).
set -euo pipefail

kernels=crates/arrow-device/src/device/cuda/kernels
root="$(cd "$(dirname "$0")/.." && pwd)"
# Resolved before the cd below, so a relative OUTPUT means the caller's one.
out="$(realpath -m "${1:-$root/$kernels/convert.ptx}")"
cd "$root"

python="${PYTHON:-python3}"
cuda_version=12.9.86
# NVRTC 12.x still compiles for compute_52 (deprecated, with a warning that
# step 2 filters); 13.x does not, hence the pin to the last 12.x release.
arch=compute_52
ptx_isa=7.0
validate_archs=(sm_52 sm_70 sm_80 sm_90)

tools="target/cuda-tools/$cuda_version"
libnvrtc="$tools/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
ptxas="$tools/nvidia/cuda_nvcc/bin/ptxas"

# --- 1. the tools, downloaded once -------------------------------------------
if [ ! -f "$libnvrtc" ] || [ ! -x "$ptxas" ]; then
    echo "gen-ptx: downloading NVRTC and ptxas $cuda_version (pip wheels, ~100 MB) into $tools" >&2
    mkdir -p target/cuda-tools
    staging="$(mktemp -d target/cuda-tools/.download.XXXXXX)"
    trap 'rm -rf "$staging"' EXIT
    "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --dest "$staging/wheels" \
        "nvidia-cuda-nvrtc-cu12==$cuda_version" "nvidia-cuda-nvcc-cu12==$cuda_version" >&2
    # Only what the steps run: libnvrtc dlopens its builtins from its own
    # folder.
    unzip -q -o "$staging"/wheels/nvidia_cuda_nvrtc_cu12-*.whl \
        'nvidia/cuda_nvrtc/lib/libnvrtc.so.12' 'nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.*' \
        -d "$staging/tools"
    unzip -q -o "$staging"/wheels/nvidia_cuda_nvcc_cu12-*.whl 'nvidia/cuda_nvcc/bin/ptxas' \
        -d "$staging/tools"
    chmod +x "$staging/tools/nvidia/cuda_nvcc/bin/ptxas"
    # A rename, so a run interrupted above leaves no half-unpacked tools; a
    # concurrent run that got there first is as good.
    rm -rf "$tools"
    mv -T "$staging/tools" "$tools" 2>/dev/null || [ -x "$ptxas" ]
fi

# --- 2. and 3. compile, lower the ISA version, add the header -----------------
work="$(mktemp -d)"
trap 'rm -rf "$work" ${staging:+"$staging"}' EXIT
"$python" - "$libnvrtc" "$kernels/convert.cu" "$arch" "$ptx_isa" "$cuda_version" \
    "${validate_archs[*]}" >"$work/convert.ptx" <<'PY'
import ctypes
import re
import sys

libnvrtc, source_path, arch, ptx_isa, cuda_version, validate_archs = sys.argv[1:]
nvrtc = ctypes.CDLL(libnvrtc)
nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p


def check(result, call):
    if result != 0:
        message = nvrtc.nvrtcGetErrorString(result).decode()
        sys.exit(f"gen-ptx: {call} failed: {message} (nvrtcResult {result})")


with open(source_path, "rb") as f:
    source = f.read()
program = ctypes.c_void_p()
check(
    nvrtc.nvrtcCreateProgram(
        ctypes.byref(program), source, b"convert.cu", 0, None, None
    ),
    "nvrtcCreateProgram",
)
options = [f"--gpu-architecture={arch}".encode()]
compiled = nvrtc.nvrtcCompileProgram(
    program, len(options), (ctypes.c_char_p * len(options))(*options)
)
size = ctypes.c_size_t()
check(nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "nvrtcGetProgramLogSize")
log = ctypes.create_string_buffer(size.value)
check(nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
# The one expected warning: architectures before sm_75 are deprecated.
# compute_52 is chosen on purpose (the widest reach), so it is not repeated.
for line in log.value.decode().splitlines():
    if line.strip() and "are deprecated" not in line:
        print(f"gen-ptx: nvrtc: {line}", file=sys.stderr)
check(compiled, f"nvrtcCompileProgram of {source_path}")
check(nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size)), "nvrtcGetPTXSize")
ptx = ctypes.create_string_buffer(size.value)
check(nvrtc.nvrtcGetPTX(program, ptx), "nvrtcGetPTX")
nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
ptx = ptx.value.decode()

version = re.compile(r"^\.version (\d+)\.(\d+)$", re.MULTILINE)
found = version.findall(ptx)
if len(found) != 1:
    sys.exit(f"gen-ptx: expected one .version line in NVRTC's PTX, found {len(found)}")
emitted = ".".join(found[0])
wanted = tuple(int(part) for part in ptx_isa.split("."))
if tuple(int(part) for part in found[0]) < wanted:
    sys.exit(f"gen-ptx: NVRTC emitted PTX ISA {emitted}, older than the {ptx_isa} declared")
ptx = version.sub(f".version {ptx_isa}", ptx)

header = f"""\
// Generated by scripts/gen-ptx.sh from convert.cu: do not edit. Rerun the
// script after changing convert.cu (scripts/check-ptx.sh fails until then).
//
// NVRTC {cuda_version}, --gpu-architecture={arch}. The script lowered NVRTC's
// `.version {emitted}` to `.version {ptx_isa}` (PTX ISA {ptx_isa}, CUDA 11.0) so that
// every CUDA 11.0+ driver can JIT this file; ptxas {cuda_version} accepted the
// result for {", ".join(validate_archs.split())}.
"""
sys.stdout.write(header + ptx)
PY

# --- 4. validate, then write --------------------------------------------------
for sm in "${validate_archs[@]}"; do
    if ! "$ptxas" --warning-as-error -arch="$sm" -o /dev/null "$work/convert.ptx"; then
        echo "gen-ptx: ptxas $cuda_version rejected the PTX for $sm (kept in $work/convert.ptx)" >&2
        trap - EXIT
        exit 1
    fi
done
mkdir -p "$(dirname "$out")"
cp "$work/convert.ptx" "$out"
echo "gen-ptx: wrote $out (PTX ISA $ptx_isa, $arch; ptxas: ${validate_archs[*]} ok)" >&2
