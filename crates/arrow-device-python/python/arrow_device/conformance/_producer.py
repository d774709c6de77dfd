"""`check_producer`: every protocol method of an object, exercised as a
strict consumer would, rule by rule.

The rules of the structs themselves (release, moved children, device
fields, validity, streams) are the library's (`arrow_device::conformance`,
shared with ``arrow-device check`` for C producers); this module adds the
rules of the Python protocols: capsule names and destructors, keyword
arguments, schema agreement, DLPack and the CUDA Array Interface.
"""

from __future__ import annotations

import gc
import re
import warnings
from typing import Any, Callable, List, Optional

from .. import _arrow_device as _native
from ._report import FAILED, NOT_APPLICABLE, PASSED, Check, Report, from_rows

#: An extra keyword no protocol defines, passed as None (must be accepted)
#: and as a value (must raise NotImplementedError).
PROBE_KEYWORD = "arrow_device_conformance_probe"

_METHODS = [
    ("__arrow_c_schema__", "schema", None),
    ("__arrow_c_array__", "array", ("arrow_schema", "arrow_array")),
    ("__arrow_c_device_array__", "device_array", ("arrow_schema", "arrow_device_array")),
    ("__arrow_c_stream__", "stream", "arrow_array_stream"),
    ("__arrow_c_device_stream__", "device_stream", "arrow_device_array_stream"),
]

_CPU = 1
_STREAM_DEVICES = {2, 3, 10, 11, 13}  # CUDA, CUDA_HOST, ROCM, ROCM_HOST, CUDA_MANAGED


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_MISSING = object()


def _capsule_name(obj: Any) -> str:
    """A capsule's name, or what `obj` is instead."""
    name = _native._conformance_capsule_name(obj)
    if name is None:
        return f"<{type(obj).__name__}, not a PyCapsule>"
    return name


def _collect() -> None:
    """Runs every pending destructor (capsules in cycles included)."""
    gc.collect()


class _Checks:
    def __init__(self) -> None:
        self.checks: List[Check] = []

    def add(self, check_id: str, outcome: str, message: str) -> None:
        self.checks.append(Check.of(check_id, outcome, message))

    def extend_rows(self, rows) -> None:
        self.checks.extend(from_rows(rows))


def _names_message(found, expected) -> Optional[str]:
    """None when `found` names match `expected`, else the message."""
    if found == expected:
        return None
    return f"capsule names {found} (expected {expected})"


def _capsule_names(result: Any, expected) -> Any:
    """The capsule name(s) of a protocol method's result, shaped as `expected`."""
    if isinstance(expected, tuple):
        if not isinstance(result, tuple) or len(result) != 2:
            return f"a {type(result).__name__}, not a tuple of two capsules"
        return tuple(_capsule_name(part) for part in result)
    return _capsule_name(result)


def _watch_result(result: Any) -> List[Any]:
    parts = result if isinstance(result, tuple) else (result,)
    return [_native._conformance_watch(part) for part in parts]


def _destructor_check(checks: _Checks, scope: str, held: List[Any]) -> None:
    """Drops the one export in `held` (its capsules, unconsumed; the list is
    its only reference) and checks that their destructors released each
    struct once."""
    parts = held.pop()
    parts = parts if isinstance(parts, tuple) else (parts,)
    missing = [_capsule_name(p) for p in parts if not _native._conformance_has_destructor(p)]
    watches = [(_capsule_name(p), _native._conformance_watch(p)) for p in parts]
    del parts
    _collect()
    problems = []
    if missing:
        problems.append(f"no destructor on {', '.join(missing)} (an unconsumed capsule leaks its struct)")
    for name, watch in watches:
        found = watch.problems()
        if found:
            problems.append(f"{name}: {found}")
    if problems:
        checks.add(f"{scope}.capsule_destructor", FAILED, "; ".join(problems))
    else:
        checks.add(f"{scope}.capsule_destructor", PASSED, "dropping an unconsumed capsule released its struct once")


def _kwargs_checks(checks: _Checks, scope: str, method: Callable, reusable: bool) -> None:
    if reusable:
        try:
            result = method(**{PROBE_KEYWORD: None})
        except Exception as exc:
            checks.add(f"{scope}.kwargs_none", FAILED, f"{PROBE_KEYWORD}=None raised {_describe(exc)} (spec: accept extra keywords whose value is None)")
        else:
            del result
            checks.add(f"{scope}.kwargs_none", PASSED, f"{PROBE_KEYWORD}=None accepted")
    else:
        checks.add(f"{scope}.kwargs_none", NOT_APPLICABLE, "the object exports only once (a single-use stream)")
    try:
        result = method(**{PROBE_KEYWORD: 1})
    except NotImplementedError as exc:
        checks.add(f"{scope}.unknown_kwarg", PASSED, f"NotImplementedError: {exc}")
    except Exception as exc:
        checks.add(f"{scope}.unknown_kwarg", FAILED, f"{PROBE_KEYWORD}=1 raised {_describe(exc)} (spec: NotImplementedError)")
    else:
        del result
        checks.add(f"{scope}.unknown_kwarg", FAILED, f"{PROBE_KEYWORD}=1 was accepted (spec: raise NotImplementedError for an unknown keyword with a non-None value)")
    _collect()


_DEVICE_METHOD = {"array": "__arrow_c_device_array__", "stream": "__arrow_c_device_stream__"}


def _refusal_allowed(source: Callable[[], Any], scope: str) -> Optional[str]:
    """Why a CPU-only method may refuse: the object's data is on a device
    (spec, Device Support: the CPU methods raise or copy for non-CPU data);
    None when it is on the CPU or that cannot be learnt."""
    device_method = _DEVICE_METHOD.get(scope)
    obj = source()
    if device_method is None or not hasattr(obj, device_method):
        return None
    try:
        result = getattr(obj, device_method)()
        capsule = result[1] if isinstance(result, tuple) else result
        device_type = _native._conformance_device_type(capsule)
    except Exception:
        return None
    finally:
        result = capsule = obj = None
        _collect()
    if device_type == _CPU:
        return None
    return f"the data is on device type {device_type}, and the spec lets the CPU-only methods refuse non-CPU data (Device Support)"


def _check_method(checks: _Checks, source: Callable[[], Any], fresh: bool, name: str, scope: str,
                  expected, schema_type: Optional[str], device, consumed_by: Optional[str]) -> bool:
    """Checks one protocol method; returns whether it called a stream
    method (which may have consumed a single-use object)."""

    def method(*args, **kwargs):
        return getattr(source(), name)(*args, **kwargs)

    # The first export passes requested_schema=None; a producer whose
    # signature lacks it (TypeError) fails that rule, and the rest is still
    # checked on an export without arguments.
    schema_none_error: Optional[str] = None
    failure: Optional[BaseException] = None
    first: Any = _MISSING
    try:
        first = method() if scope == "schema" else method(requested_schema=None)
    except TypeError as exc:
        failure = exc
        if scope != "schema":
            schema_none_error = _describe(exc)
            try:
                first = method()
                failure = None
            except Exception as retry:
                failure = retry
    except Exception as exc:
        failure = exc
    if schema_none_error is not None and failure is None:
        checks.add(f"{scope}.requested_schema_none", FAILED,
                   f"requested_schema=None raised {schema_none_error}, though an export without it works "
                   "(spec: requested_schema is a keyword with default None)")
    if failure is not None:
        called = f"{name}({'' if scope == 'schema' else 'requested_schema=None'})"
        allowed = _refusal_allowed(source, scope)
        if allowed is None and consumed_by is not None and not fresh:
            allowed = f"the object was consumed by the check of {consumed_by} (a single-use object: pass fresh= to check every method)"
        if allowed is not None:
            checks.add(f"{scope}.export", NOT_APPLICABLE, f"{called} raised {_describe(failure)}: {allowed}")
        else:
            checks.add(f"{scope}.export", FAILED, f"{called} raised {_describe(failure)}")
            if scope != "schema":
                checks.add(f"{scope}.requested_schema_none", FAILED, f"raised {_describe(failure)}")
        # Even a failed call (or the probe of the device method) may have
        # consumed a single-use stream.
        return scope.endswith("stream")
    if scope != "schema" and schema_none_error is None:
        checks.add(f"{scope}.requested_schema_none", PASSED, "requested_schema=None accepted")
    names = _capsule_names(first, expected if expected is not None else "arrow_schema")
    problem = _names_message(names, expected if expected is not None else "arrow_schema")
    checks.add(f"{scope}.capsule_names", FAILED if problem else PASSED, problem or f"{names}")
    if problem:
        return scope.endswith("stream")

    # A second export tells a reusable object from a single-use stream.
    held: List[Any] = []
    try:
        held.append(method())
        reusable = True
    except Exception as exc:
        reusable = False
        reuse_error = _describe(exc)
    if reusable:
        _destructor_check(checks, scope, held)
    else:
        checks.add(f"{scope}.capsule_destructor", NOT_APPLICABLE, f"the object exports only once ({reuse_error}); its one export is checked below")

    # Schema agreement, before the first export is consumed.
    if scope != "schema":
        if schema_type is None:
            checks.add(f"{scope}.schema_agrees", NOT_APPLICABLE, "the object has no __arrow_c_schema__")
        else:
            try:
                own = _native._conformance_schema_type(first[0] if isinstance(first, tuple) else first)
            except Exception as exc:
                checks.add(f"{scope}.schema_agrees", FAILED, f"the data's own schema did not import: {_describe(exc)}")
            else:
                if own == schema_type:
                    checks.add(f"{scope}.schema_agrees", PASSED, f"both {own}")
                else:
                    checks.add(f"{scope}.schema_agrees", FAILED, f"__arrow_c_schema__ describes {schema_type}, {name} {own}")

    # The structs: the first export, then fresh ones as the rules need.
    pending = [first]
    del first

    def produce():
        return pending.pop() if pending else method()

    if scope == "schema":
        checks.extend_rows(_native._conformance_check_schema(produce))
    elif scope in ("array", "device_array"):
        expect = None if device is None else int(device.type)
        checks.extend_rows(_native._conformance_check_array(produce, scope == "device_array", expect))
    else:
        checks.extend_rows(_native._conformance_check_stream(produce, scope == "device_stream"))
    pending.clear()
    _collect()

    if scope in ("device_array", "device_stream"):
        _kwargs_checks(checks, scope, method, reusable)
    return scope.endswith("stream")


def _dlpack_checks(checks: _Checks, obj: Any) -> None:
    try:
        device = obj.__dlpack_device__()
        device = (int(device[0]), int(device[1]))
    except Exception as exc:
        checks.add("dlpack.device_matches", FAILED, f"__dlpack_device__() raised {_describe(exc)}")
        return
    on_stream_device = device[0] in _STREAM_DEVICES

    def export(**kwargs):
        return obj.__dlpack__(**kwargs)

    # Legacy export (no max_version), then a versioned one.
    problems, names, infos = [], [], []
    try:
        # The legacy form is what the spec gives a consumer that passes no
        # max_version; a producer may warn that it is deprecated.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            legacy = export()
    except (BufferError, TypeError, ValueError, RuntimeError) as exc:
        # The producer refuses this data (nulls, a dtype DLPack lacks, ...).
        checks.add("dlpack.max_version", NOT_APPLICABLE, f"__dlpack__() refused this data: {_describe(exc)}")
        return
    except Exception as exc:
        checks.add("dlpack.max_version", FAILED, f"__dlpack__() raised {_describe(exc)}")
        return
    legacy_info = _native._conformance_dlpack_info(legacy) if _capsule_name(legacy) in ("dltensor", "dltensor_versioned") else None
    names.append(_capsule_name(legacy))
    if legacy_info is not None:
        infos.append(legacy_info)
        if legacy_info["name"] != "dltensor":
            problems.append(f"without max_version the capsule is {legacy_info['name']} (expected a legacy dltensor: the consumer may not know DLPack 1.x)")
    del legacy
    versioned_ok = True
    try:
        versioned = export(max_version=(1, 0))
    except TypeError as exc:
        versioned_ok = False
        problems.append(f"max_version=(1, 0) raised {_describe(exc)} (the array API asks producers to accept max_version since 2023)")
        versioned = None
    except Exception as exc:
        versioned_ok = False
        problems.append(f"max_version=(1, 0) raised {_describe(exc)}")
        versioned = None
    if versioned is not None:
        names.append(_capsule_name(versioned))
        if names[-1] in ("dltensor", "dltensor_versioned"):
            info = _native._conformance_dlpack_info(versioned)
            infos.append(info)
            if info["version"] is not None and info["version"][0] > 1:
                problems.append(f"max_version=(1, 0) gave a tensor of version {info['version']} (expected major version 1 at most)")
    del versioned
    bad_names = [n for n in names if n not in ("dltensor", "dltensor_versioned")]
    checks.add("dlpack.capsule_names", FAILED if bad_names else PASSED,
               f"capsule named {bad_names[0]} (expected dltensor or dltensor_versioned)" if bad_names else ", ".join(names))
    checks.add("dlpack.max_version", FAILED if problems else PASSED,
               "; ".join(problems) or ("legacy without max_version, " + (infos[-1]["name"] if len(infos) > 1 else "?") + " with max_version=(1, 0)"))
    mismatched = [i for i in infos if tuple(i["device"]) != device]
    if not infos:
        checks.add("dlpack.device_matches", NOT_APPLICABLE, "no tensor was exported")
    elif mismatched:
        checks.add("dlpack.device_matches", FAILED, f"__dlpack_device__() is {device}, the tensor's device {tuple(mismatched[0]['device'])}")
    else:
        checks.add("dlpack.device_matches", PASSED, f"{device} both")
    _collect()
    if bad_names or not infos:
        return

    kwargs = {"max_version": (1, 0)} if versioned_ok else {}
    # An unconsumed capsule: its destructor calls the deleter once.
    capsule = export(**kwargs)
    if not _native._conformance_has_destructor(capsule):
        del capsule
        checks.add("dlpack.capsule_destructor", FAILED, "no capsule destructor (an unconsumed tensor leaks)")
    elif not _native._conformance_dlpack_info(capsule)["has_deleter"]:
        del capsule
        checks.add("dlpack.capsule_destructor", NOT_APPLICABLE, "the tensor has no deleter (allowed: nothing to free)")
    else:
        watch = _native._conformance_watch(capsule)
        del capsule
        _collect()
        found = watch.problems()
        checks.add("dlpack.capsule_destructor", FAILED if found else PASSED,
                   found or "dropping the unconsumed capsule called the deleter once")
    # A consumed capsule: renamed, its destructor leaves the tensor alone.
    capsule = export(**kwargs)
    taken = _native._conformance_dlpack_take(capsule)
    del capsule
    _collect()
    if taken.untouched() is None:
        taken.delete()
        checks.add("dlpack.consumed", NOT_APPLICABLE, "the tensor has no deleter")
    elif not taken.untouched():
        checks.add("dlpack.consumed", FAILED, "the destructor of a capsule renamed used_dltensor called the deleter (the consumer owns the tensor: spec, capsule renaming)")
        taken.delete()
    else:
        found = taken.delete()
        checks.add("dlpack.consumed", FAILED if found else PASSED,
                   found or "the renamed capsule left the tensor to the consumer, whose one deleter call freed it")
    # Stream rules.
    trials: List[tuple[str, dict[str, Any]]] = [("stream=None", {"stream": None})]
    if on_stream_device:
        trials.append(("stream=-1", {"stream": -1}))
    failed = []
    for label, extra in trials:
        try:
            result = export(**kwargs, **extra)
            del result
        except Exception as exc:
            failed.append(f"{label} raised {_describe(exc)}")
    _collect()
    checks.add("dlpack.stream", FAILED if failed else PASSED,
               "; ".join(failed) + (" (expected accepted)" if failed else "") if failed
               else " and ".join(label for label, _ in trials) + " accepted")


_TYPESTR = re.compile(r"^[<>|=][biufcmMOSUV]\d+$")


def _cai_checks(checks: _Checks, iface: Any) -> None:
    if not isinstance(iface, dict):
        checks.add("cai.version", FAILED, f"__cuda_array_interface__ is a {type(iface).__name__}, not a dict")
        return
    version = iface.get("version")
    if version == 3:
        checks.add("cai.version", PASSED, "3")
    elif version in (1, 2):
        checks.add("cai.version", PASSED, f"{version} (older than 3; no stream or mask semantics of v3)")
    else:
        checks.add("cai.version", FAILED, f"version {version!r} (expected 3)")
    if "stream" not in iface or iface["stream"] is None:
        checks.add("cai.stream", PASSED, "absent or None (the data is ready)")
    elif isinstance(iface["stream"], int) and not isinstance(iface["stream"], bool) and iface["stream"] != 0:
        checks.add("cai.stream", PASSED, f"stream {iface['stream']}")
    else:
        checks.add("cai.stream", FAILED, f"stream {iface['stream']!r} (spec: None or a non-zero integer; 0 is disallowed)")
    problems = []
    shape: Any = iface.get("shape")
    typestr: Any = iface.get("typestr")
    data: Any = iface.get("data")
    strides: Any = iface.get("strides")
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        problems.append(f"shape {shape!r} is not a tuple of non-negative ints")
    if not isinstance(typestr, str) or not _TYPESTR.match(typestr):
        problems.append(f"typestr {typestr!r} is not a NumPy type string")
    if not (isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], int) and isinstance(data[1], bool)):
        problems.append(f"data {data!r} is not (pointer, read_only)")
    elif isinstance(shape, tuple) and shape and min(shape) > 0 and data[0] == 0:
        problems.append("data pointer 0 for a non-empty array")
    if not problems and strides is not None:
        itemsize = int(typestr[2:])
        if not isinstance(strides, tuple) or len(strides) != len(shape):
            problems.append(f"strides {strides!r} do not match shape {shape}")
        else:
            # Non-overlapping: sorted by stride, each stride covers the
            # extent of the dimensions inside it.
            extent = itemsize
            for stride, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
                if stride < extent:
                    problems.append(f"strides {strides} overlap for shape {shape} and itemsize {itemsize}")
                    break
                extent = stride * n
    checks.add("cai.layout", FAILED if problems else PASSED,
               "; ".join(problems) or f"shape {shape}, typestr {typestr}, " + ("C-contiguous" if strides is None else f"strides {strides}"))
    mask = iface.get("mask")
    if mask is None:
        checks.add("cai.mask", PASSED, "no mask")
    else:
        try:
            mask_iface = mask.__cuda_array_interface__
        except Exception as exc:
            checks.add("cai.mask", FAILED, f"mask has no __cuda_array_interface__ ({_describe(exc)})")
        else:
            mask_shape, mask_type = mask_iface.get("shape"), mask_iface.get("typestr", "")
            if mask_shape != shape:
                checks.add("cai.mask", FAILED, f"mask shape {mask_shape}, array shape {shape} (expected equal)")
            elif not (isinstance(mask_type, str) and len(mask_type) >= 3 and mask_type[1] in "biu"):
                checks.add("cai.mask", FAILED, f"mask typestr {mask_type!r} (expected boolean or integer)")
            else:
                checks.add("cai.mask", PASSED, f"mask of shape {mask_shape}, {mask_type}")


def check_producer(obj: Any, *, device=None, fresh: Optional[Callable[[], Any]] = None,
                   subject: Optional[str] = None) -> Report:
    """Exercises every protocol method `obj` has, as a strict consumer, and
    reports each rule it could observe.

    `device` (an ``arrow_device.Device``) is the device the producer's device
    exports are expected on: a device array elsewhere fails
    ``device_array.device``. `fresh`, a function that makes a new object like
    `obj`, lets a single-use object (a stream reader) be checked through
    every method: each export then calls it. `subject` names the object in
    the report.

    >>> import pyarrow as pa
    >>> from arrow_device.conformance import check_producer
    >>> report = check_producer(pa.array([1, 2, None]))
    >>> report.outcome("array.release_once")
    'passed'
    >>> print(report)  # doctest: +SKIP
    """
    checks = _Checks()
    schema_type = None
    if hasattr(obj, "__arrow_c_schema__"):
        # The capsule is held until no exception is in flight: a destructor
        # written in Python (ctypes, cffi) must not run with one pending.
        capsule = None
        try:
            capsule = obj.__arrow_c_schema__()
            schema_type = _native._conformance_schema_type(capsule)
        except Exception:
            schema_type = None
        del capsule
    found_any = False
    source = fresh if fresh is not None else (lambda: obj)
    consumed_by = None
    for name, scope, expected in _METHODS:
        if not hasattr(obj, name):
            checks.add(f"{scope}.export", NOT_APPLICABLE, f"no {name}")
            continue
        found_any = True
        if _check_method(checks, source, fresh is not None, name, scope, expected, schema_type, device, consumed_by):
            consumed_by = consumed_by or name
    if hasattr(obj, "__dlpack__"):
        found_any = True
        _dlpack_checks(checks, obj)
    else:
        checks.add("dlpack.device_matches", NOT_APPLICABLE, "no __dlpack__")
    try:
        iface = obj.__cuda_array_interface__
    except AttributeError:
        checks.add("cai.version", NOT_APPLICABLE, "no __cuda_array_interface__")
    except Exception as exc:
        found_any = True
        checks.add("cai.version", FAILED, f"__cuda_array_interface__ raised {_describe(exc)}")
    else:
        found_any = True
        _cai_checks(checks, iface)
    if not found_any:
        raise TypeError(f"{type(obj).__name__} implements none of the Arrow PyCapsule, DLPack or CUDA Array Interface protocols")
    return Report(subject or _subject(obj), checks.checks)


def _subject(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"
