#!/usr/bin/env bash
# Builds the release wheel of one of this repository's PyO3 crates the way
# every wheel here is built: maturin, with zig from the Python environment
# of PYTHON as the linker, tagged manylinux_2_27 after maturin's check
# (2.27 is the glibc the code needs: `memfd_create`). One set of flags for
# every wheel: the linker wrapper and its settings are part of cargo's
# fingerprint, so wheels built alike share the release build of the crates
# they have in common (the package's and the example extension's).
#
#   bash scripts/build-wheel.sh PYTHON MANIFEST OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:?usage: build-wheel.sh PYTHON MANIFEST OUT_DIR}
manifest=${2:?usage: build-wheel.sh PYTHON MANIFEST OUT_DIR}
out=${3:?usage: build-wheel.sh PYTHON MANIFEST OUT_DIR}
venv=$(cd "$(dirname "$python")/.." && pwd)
PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$python" -m maturin build --release --locked --zig \
    --compatibility manylinux_2_27 -q -m "$manifest" -o "$out" >&2
