"""Every public object of ``arrow_device`` documents itself with an example
that runs, so that ``help(arrow_device.array)`` is enough to use it.

The objects: the package and its public modules (``arrow_device.flight``,
``arrow_device.conformance``), each callable or class named in their
``__all__`` (constants are described in their module's docstring), and
each public class's own methods and properties: names without a leading
underscore, and the exchange protocols' dunders (``__arrow_c_array__``,
``__dlpack__``, ...), which are how other libraries call this one.

Each must have a docstring with a ``>>>`` example, and the examples run as
doctests, each docstring in a namespace of its own (an example imports
what it uses). An example that needs a GPU is marked
``# doctest: +SKIP``.
"""

import doctest
import inspect
import types

import pytest

import arrow_device
from arrow_device import conformance, flight

MODULES = [arrow_device, flight, conformance]

# The dunders other libraries call: part of the API, documented as such.
PROTOCOL = {
    "__arrow_c_array__",
    "__arrow_c_device_array__",
    "__arrow_c_schema__",
    "__arrow_c_stream__",
    "__arrow_c_device_stream__",
    "__dlpack__",
    "__dlpack_device__",
    "__cuda_array_interface__",
}

# What a class defines that is a method or property, Python's or PyO3's.
MEMBER_TYPES = (
    types.FunctionType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.ClassMethodDescriptorType,
    types.BuiltinFunctionType,
    property,
    classmethod,
    staticmethod,
)


def _members(cls):
    """The class's own public methods and properties, by name."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in PROTOCOL:
            continue
        if isinstance(value, MEMBER_TYPES):
            yield name, value


def _public_objects():
    """``(qualified name, object)`` of everything that must be documented."""
    found = {}
    for module in MODULES:
        found[module.__name__] = module
        for name in module.__all__:
            value = getattr(module, name)
            if not (inspect.isclass(value) or callable(value) or inspect.ismodule(value)):
                continue
            found.setdefault(f"{module.__name__}.{name}", value)
            if inspect.isclass(value):
                for member, attribute in _members(value):
                    found.setdefault(f"{module.__name__}.{name}.{member}", attribute)
    return found


PUBLIC = _public_objects()


def _doc(obj):
    """The object's own docstring (never one inherited from a base)."""
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    return obj.__doc__ or ""


def test_the_walk_covers_the_api():
    # A sample of what must be there, so that an empty walk cannot pass.
    for name in [
        "arrow_device.array",
        "arrow_device.DeviceArray.to",
        "arrow_device.DeviceArray.__arrow_c_device_array__",
        "arrow_device.DeviceStream.share",
        "arrow_device.Device.type",
        "arrow_device.flight.serve",
        "arrow_device.flight.FlightServer.shutdown",
        "arrow_device.conformance.check_producer",
        "arrow_device.conformance.Report.passed",
    ]:
        assert name in PUBLIC, name
    assert len(PUBLIC) > 70


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_object_has_a_docstring_with_an_example(name):
    doc = _doc(PUBLIC[name])
    assert doc.strip(), f"{name} has no docstring"
    assert ">>>" in doc, f"{name}'s docstring has no example (a `>>>` line):\n{doc}"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_docstring_examples_run(name):
    doc = _doc(PUBLIC[name])
    test = doctest.DocTestParser().get_doctest(doc, {}, name, None, 0)
    if not test.examples:
        pytest.skip("no example (the test above fails)")
    # No option flags: an example that needs one says so (`# doctest:
    # +ELLIPSIS`), so that it runs as written under any doctest runner.
    runner = doctest.DocTestRunner()
    report = []
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
