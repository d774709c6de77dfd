"""The suite tests the package as users install it: the wheel that
``scripts/python-env.sh`` builds and installs, typing files included, not
the source folder (where ``maturin develop`` would leave an editable
install and a ``_arrow_device*.so``).

``ARROW_DEVICE_REQUIRE_WHEEL=1`` (scripts/test.sh sets it) turns the skip
for an editable install into a failure.
"""

import os
from importlib import metadata
from pathlib import Path

import pytest

import arrow_device

SOURCE = Path(__file__).resolve().parents[1] / "python"
REQUIRE_WHEEL = os.environ.get("ARROW_DEVICE_REQUIRE_WHEEL") == "1"


def _from_source():
    return Path(arrow_device.__file__).resolve().is_relative_to(SOURCE)


@pytest.fixture
def installed():
    if _from_source():
        message = (
            f"arrow_device is imported from the source folder ({arrow_device.__file__}), "
            "not from an installed wheel: run scripts/python-env.sh"
        )
        if REQUIRE_WHEEL:
            pytest.fail(message)
        pytest.skip(message)


def test_the_package_is_imported_from_the_installed_wheel(installed):
    record = {str(path) for path in metadata.files("arrow-device")}
    assert "arrow_device/__init__.py" in record
    native = Path(arrow_device._arrow_device.__file__)
    assert native.name.startswith("_arrow_device") and native.suffix == ".so"
    # The module that runs is the one the wheel's RECORD lists.
    assert f"arrow_device/{native.name}" in record
    assert native.resolve().parent == Path(arrow_device.__file__).resolve().parent


def test_the_wheel_ships_py_typed_and_the_stubs(installed):
    record = {str(path) for path in metadata.files("arrow-device")}
    typing_files = {"arrow_device/py.typed", "arrow_device/_arrow_device.pyi"}
    assert typing_files <= record
    package = Path(arrow_device.__file__).resolve().parent
    stubs = (package / "_arrow_device.pyi").read_text()
    assert "def array(" in stubs and "class DeviceArray" in stubs
    assert (package / "py.typed").is_file()
