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

# The CUDA driver stand-in (crates/cuda-standin): libcuda.so in a directory
# of its own, for the runs below that put it on LD_LIBRARY_PATH.
standin=$(bash scripts/cuda-standin.sh)

# Library, CLI and C interop tests, plus every doctest. The CLI's CUDA tests
# run its binary against the stand-in (CUDA_STANDIN_DIR); nothing else in
# this run sees a driver.
CUDA_STANDIN_DIR=$standin cargo test --workspace --locked
# The CUDA devices built in but without a driver: the no-driver errors.
cargo test -p arrow-device --features cuda --locked --test cuda_absent
# The CUDA module against the stand-in: its unit tests (kernels included),
# the GPU suites, fault injection and sharing between processes (IPC). A test that would skip for want of a
# GPU fails here instead.
LD_LIBRARY_PATH=$standin ARROW_DEVICE_REQUIRE_GPU=1 ARROW_DEVICE_REQUIRE_STANDIN=1 \
    cargo test -p arrow-device --features cuda --locked --lib \
    --test cuda_gpu --test cuda_interop_gpu --test cuda_faults --test cuda_share --test staging
# Arrow Flight from and onto the CUDA devices (pinned staging included).
LD_LIBRARY_PATH=$standin ARROW_DEVICE_REQUIRE_GPU=1 ARROW_DEVICE_REQUIRE_STANDIN=1 \
    cargo test -p arrow-device-flight --features cuda --locked --test cuda
# The committed PTX is what convert.cu compiles to, and ptxas accepts it.
bash scripts/check-ptx.sh

# Fuzzing and sanitizers (nightly Rust; each step says "skipped" without
# it). The committed fuzz corpus already replayed above, on stable, through
# the same harnesses (arrow-device-fuzz's tests); here each target also runs
# 20 seconds under libFuzzer and AddressSanitizer from that corpus, then the
# unsafe-heavy suites run under AddressSanitizer with leak detection, and
# Miri runs the code that makes no system call (its short part).
bash scripts/fuzz.sh short 20
bash scripts/sanitizers.sh asan
bash scripts/sanitizers.sh miri-short

# The Python package as users install it: its wheel (one release build,
# manylinux-checked) installed into a virtual environment with its peers;
# its stubs checked against the installed module (no allowlist: stubtest
# sees every name the stubs declare); the suite run against that install,
# docstring examples included, where an import from the source folder
# fails (ARROW_DEVICE_REQUIRE_WHEEL); then its CUDA paths against the
# stand-in.
python=$(bash scripts/python-env.sh)
"$python" -m mypy.stubtest arrow_device --mypy-config-file crates/arrow-device-python/pyproject.toml
ARROW_DEVICE_REQUIRE_WHEEL=1 "$python" -m pytest -q crates/arrow-device-python/tests
LD_LIBRARY_PATH=$standin ARROW_DEVICE_REQUIRE_STANDIN=1 \
    "$python" -m pytest -q crates/arrow-device-python/tests/test_cuda_standin.py
# The example PyO3 extension on arrow-device-pyo3, built as a wheel and
# called with pyarrow, nanoarrow, numpy, polars and emulated arrays.
bash scripts/pyo3-example.sh "$python"
