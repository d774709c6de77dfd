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
# Built as the package is (scripts/build-wheel.sh), so that the package's
# release build of arrow-device-pyo3's dependencies is reused.
bash scripts/build-wheel.sh "$python" examples/pyo3-extension/Cargo.toml "$wheels"
"$python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/*.whl >&2
"$python" -m pytest -q -p no:cacheprovider examples/pyo3-extension/tests "$@"
