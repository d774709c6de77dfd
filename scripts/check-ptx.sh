#!/usr/bin/env bash
# Checks, for CI (no GPU needed), that the committed PTX of arrow-device's
# CUDA kernels is exactly what scripts/gen-ptx.sh makes from their CUDA C
# source, and that ptxas accepts it for every architecture gen-ptx.sh names;
# then runs the kernels' source on the host against a reference, under
# AddressSanitizer and UndefinedBehaviorSanitizer
# (crates/arrow-device/tests/kernels/host_emulation.cpp).
# The tools are cached under target/cuda-tools: only the first run downloads.
set -euo pipefail
cd "$(dirname "$0")/.."

committed=crates/arrow-device/src/device/cuda/kernels/convert.ptx
fresh="$(mktemp --suffix=.ptx)"
trap 'rm -f "$fresh"' EXIT

# Compiles, lowers the ISA version and validates with ptxas (see gen-ptx.sh).
bash scripts/gen-ptx.sh "$fresh"
if ! diff -u "$committed" "$fresh" >&2; then
    echo "check-ptx: $committed is not what scripts/gen-ptx.sh makes from convert.cu" \
        "(diff above): run scripts/gen-ptx.sh and commit the result" >&2
    exit 1
fi
echo "check-ptx: $committed matches convert.cu" >&2

kernels=crates/arrow-device/src/device/cuda/kernels
emulation="$(mktemp)"
trap 'rm -f "$fresh" "$emulation"' EXIT
# -Wno-unknown-pragmas: `#pragma unroll` is NVCC's.
g++ -std=c++17 -O1 -g -Wall -Wextra -Werror -Wno-unknown-pragmas \
    -fsanitize=address,undefined -fno-sanitize-recover=all \
    -I "$kernels" -o "$emulation" crates/arrow-device/tests/kernels/host_emulation.cpp
"$emulation" >&2
