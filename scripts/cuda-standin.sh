#!/usr/bin/env bash
# Builds the CUDA driver stand-in (crates/cuda-standin) and prints the
# directory that holds it as libcuda.so: put that directory on
# LD_LIBRARY_PATH and cudarc loads the stand-in instead of a driver.
# The directory holds nothing else, so no other library is shadowed.
# A release build: its memsets, copies and kernels run over buffers of up
# to gigabytes in the GPU suites.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p cuda-standin --locked >&2
dir="$PWD/target/cuda-standin"
mkdir -p "$dir"
# Replaced by a rename, never rewritten in place: a test process may have
# the previous build mapped.
cp -f target/release/libcuda_standin.so "$dir/libcuda.so.new"
mv -f "$dir/libcuda.so.new" "$dir/libcuda.so"
ln -sf libcuda.so "$dir/libcuda.so.1"
echo "$dir"
