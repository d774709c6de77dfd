#!/usr/bin/env bash
# Builds the example PyO3 extension (examples/pyo3-extension, on
# arrow-device-pyo3) as a release wheel, installs it into the environment of
# PYTHON (the one scripts/python-env.sh prints, which holds arrow_device and
# the interop peers) and runs its tests.
#
#   bash scripts/pyo3-example.sh PYTHON [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:?usage: pyo3-example.sh PYTHON [PYTEST ARGS...]}
shift
wheels=target/wheels-example
rm -rf "$wheels"
# Built as scripts/python-env.sh builds the package (zig from the same
# environment, the same manylinux level): the linker settings are part of
# cargo's fingerprint, so the package's release build of arrow-device-pyo3
# and its dependencies is reused and only the example crate compiles here.
venv=$(cd "$(dirname "$python")/.." && pwd)
PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$python" -m maturin build --release --locked --zig \
    --compatibility manylinux_2_27 -q -m examples/pyo3-extension/Cargo.toml -o "$wheels" >&2
"$python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/*.whl >&2
"$python" -m pytest -q -p no:cacheprovider examples/pyo3-extension/tests "$@"
