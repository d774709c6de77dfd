#!/usr/bin/env bash
# Builds the `arrow_device` wheel and installs it, as a user installs it,
# into a virtual environment with its interop peers (pyarrow, nanoarrow,
# numpy, polars, duckdb), pytest and mypy, all from PyPI. Prints the
# environment's python. Idempotent: a second run only rebuilds and
# reinstalls the wheel.
#
#   ARROW_DEVICE_VENV    the environment's folder (default target/venv)
#   ARROW_DEVICE_WHEELS  where the wheel is written (default
#                        target/wheels/<the environment's folder name>);
#                        emptied of older wheels first
#
# The wheel is the one a release would publish: a release build, abi3 for
# CPython 3.10 and later, tagged manylinux_2_27 after maturin's auditwheel
# check (scripts/build-wheel.sh, which the example extension's build
# shares). zig (PyPI's `ziglang`) links it against glibc 2.27's symbol
# versions whatever the build machine's glibc; 2.27 is the floor the code
# sets (`memfd_create`, for sharing and the emulated device). The tests then
# import that installed wheel, never the source folder: an editable install
# (`maturin develop`) left in the environment is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ARROW_DEVICE_VENV:-target/venv}"
wheels="${ARROW_DEVICE_WHEELS:-target/wheels/$(basename "$venv")}"
python="$venv/bin/python"
requirements=crates/arrow-device-python/requirements-test.txt

if [ ! -x "$python" ]; then
    python3 -m venv "$venv" >&2
fi
venv=$(cd "$venv" && pwd)
python="$venv/bin/python"
# The requirements as last installed, kept in the environment: pip runs
# again only when the file changed (a new peer, a raised floor).
if ! cmp -s "$requirements" "$venv/requirements-test.txt"; then
    echo "installing the Python test dependencies into $venv" >&2
    "$python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
    cp "$requirements" "$venv/requirements-test.txt"
fi

# One release build (as `maturin develop --release` was): the benchmarks
# and the interop tests measure and move real data. The linker is a
# wrapper that runs this environment's maturin and zig: building for
# another environment changes it, and cargo then rebuilds every crate.
mkdir -p "$wheels"
wheels=$(cd "$wheels" && pwd)
rm -f "$wheels"/arrow_device-*.whl
bash scripts/build-wheel.sh "$python" crates/arrow-device-python/Cargo.toml "$wheels"
wheel=$(ls "$wheels"/arrow_device-*.whl)

# maturin's check reads symbol versions only. A symbol the linker found in
# no glibc of that version stays unversioned and strong (zig links
# `getrandom` so for manylinux_2_17): the import would fail on such a
# glibc. Only the Python API's symbols, which the interpreter provides, may
# be unversioned and strong.
if command -v objdump >/dev/null; then
    so=$(mktemp)
    "$python" - "$wheel" "$so" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    [name] = [n for n in wheel.namelist() if n.startswith("arrow_device/_arrow_device") and n.endswith(".so")]
    with open(sys.argv[2], "wb") as out:
        out.write(wheel.read(name))
EOF
    unversioned=$(objdump -T "$so" |
        awk '/\*UND\*/ && $2 != "w" && !/\([A-Za-z_][A-Za-z0-9_.]*\)/ && $NF !~ /^_?Py/ { print $NF }')
    rm -f "$so"
    if [ -n "$unversioned" ]; then
        echo "python-env: $wheel claims its manylinux tag, yet needs unversioned C library symbols the linker did not find in that glibc:" $unversioned >&2
        exit 1
    fi
else
    echo "python-env: objdump not found (binutils): the wheel's unversioned symbols are not checked" >&2
fi

# A `maturin develop` install is a .pth file pointing at the source folder
# (whose _arrow_device*.so would then shadow the wheel's); pip replaces a
# recorded one, this removes one whose record was lost.
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for pth in "$site"/*.pth; do
    if grep -qsF "/crates/arrow-device-python/python" "$pth"; then
        echo "python-env: removing the editable install $pth" >&2
        rm -f "$pth"
    fi
done
"$python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel" >&2
installed=$(cd / && "$python" -c 'import arrow_device; print(arrow_device.__file__)')
case $installed in
"$site"/arrow_device/*) ;;
*)
    echo "python-env: arrow_device imports from $installed, not from the wheel installed in $site" >&2
    exit 1
    ;;
esac
echo "$python"
