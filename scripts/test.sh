#!/usr/bin/env bash
# Runs every test of the project on a fresh machine (no GPU needed).
# Installs what it needs: the Rust toolchain is the machine's; gcc compiles
# the C interop tests through the `cc` crate; the Python package and its
# peers go into a virtual environment (scripts/python-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cc >/dev/null 2>&1; then
    echo "installing a C compiler for the C interop tests" >&2
    apt-get update -qq && apt-get install -y -qq gcc g++ >/dev/null
fi

# Library, CLI and C interop tests, plus every doctest.
cargo test --workspace --locked
# The CUDA devices built in but without a GPU: unit tests (kernels, stream
# numbers), the no-driver errors, and the GPU suites, which skip here.
cargo test -p arrow-device --features cuda --locked --lib \
    --test cuda_absent --test cuda_gpu --test cuda_interop_gpu
# The committed PTX is what convert.cu compiles to, and ptxas accepts it.
bash scripts/check-ptx.sh

# The Python package, built into a virtual environment with its peers.
python=$(bash scripts/python-env.sh)
"$python" -m pytest -q crates/arrow-device-python/tests
