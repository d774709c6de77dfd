#!/usr/bin/env bash
# Builds the `arrow_device` Python module into a virtual environment with its
# interop peers (pyarrow, nanoarrow, numpy, polars, duckdb) and pytest, all
# from PyPI. Prints the environment's python. Idempotent: a second run only
# rebuilds the module. ARROW_DEVICE_VENV chooses the folder (default
# target/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ARROW_DEVICE_VENV:-target/venv}"
python="$venv/bin/python"

if [ ! -x "$python" ]; then
    python3 -m venv "$venv" >&2
fi
if ! "$python" -c "import maturin, pyarrow, nanoarrow, numpy, polars, duckdb, pytest" 2>/dev/null; then
    echo "installing the Python test dependencies into $venv" >&2
    "$python" -m pip install -q --disable-pip-version-check -r crates/arrow-device-python/requirements-test.txt >&2
fi
# A release build: the benchmark and the interop tests measure and move real
# data; `maturin develop` installs it editable into the venv.
(cd crates/arrow-device-python && VIRTUAL_ENV="$(cd "../../$venv" && pwd)" \
    "../../$python" -m maturin develop --release --locked -q >&2)
echo "$python"
