"""`arrow_device.conformance` held to its own catalogue.

* This package's objects (arrays and streams, on the CPU and on the emulated
  device) pass every check, and the exact set of checks each one passes is
  written down here: a check that stops running shows.
* For every rule a producer can break, a hostile producer
  (conformance_hostile.py, hand-written C structs in ctypes) breaks it, and
  the checker reports that rule failed and nothing else, except where one
  defect necessarily breaks two rules (`conformance_hostile.COUPLED` says
  why). A rule added to the catalogue without a hostile producer fails
  `test_every_producer_rule_has_a_hostile_producer`.
* Hostile consumers (a leak, a host read of device memory, a skipped
  sync_event, a refusal) each fail their rule; a consumer built on this
  package passes all six cases, through spawned and forked workers.
* ``python -m arrow_device.conformance``: exit status, table and JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import arrow_device as ad
import pyarrow as pa
import pytest
from arrow_device.conformance import FAILED, NOT_APPLICABLE, PASSED, RULES, check_consumer, check_producer

import conformance_hostile as hostile

HERE = os.path.dirname(os.path.abspath(__file__))


def ids(report, outcome):
    return {c.id for c in report.checks if c.outcome == outcome}


def scoped(scope, rules):
    return {f"{scope}.{rule}" for rule in rules}


# ---------------------------------------------------------------- our objects

SCHEMA = scoped("schema", ["capsule_names", "capsule_destructor", "valid_schema", "schema_release_once"])
ARRAY_RULES = ["requested_schema_none", "capsule_names", "capsule_destructor", "schema_agrees",
               "schema_release_once", "valid_full", "alignment", "release_once"]
DEVICE_RULES = ["device", "sync_event", "reserved", "kwargs_none", "unknown_kwarg"]
STREAM_RULES = ["requested_schema_none", "capsule_names", "capsule_destructor", "schema_agrees", "callbacks",
                "schema_release_once", "get_schema_stable", "valid_full", "alignment", "release_once",
                "end_repeats", "stream_release"]
DLPACK = scoped("dlpack", ["capsule_names", "max_version", "device_matches", "capsule_destructor", "consumed", "stream"])
NO_STREAMS = {"stream.export", "device_stream.export"}
NO_ARRAYS = {"array.export", "device_array.export"}


def batch():
    """A record batch with nulls, strings, lists and a dictionary column."""
    return pa.record_batch({
        "id": pa.array([1, None, 3, 4], pa.int64()),
        "name": pa.array(["a", None, "ccc", ""]),
        "values": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())),
        "colour": pa.array(["red", "blue", None, "red"]).dictionary_encode(),
    })


def on_emulated(data):
    return ad.array(data).to(ad.emulated(0))


def stream_of(make):
    return lambda: ad.stream([make(batch()), make(batch())])


# name -> (object factory, check_producer keywords, ids passed, ids not applicable)
OURS = {
    "cpu_batch": (
        lambda: ad.array(batch()), {},
        SCHEMA | scoped("array", ARRAY_RULES + ["child_move"])
        | scoped("device_array", ARRAY_RULES + ["child_move"] + DEVICE_RULES),
        # DLPack carries no struct arrays: the refusal is allowed.
        NO_STREAMS | {"dlpack.max_version", "cai.version"},
    ),
    "emulated_batch": (
        lambda: on_emulated(batch()), {"device": ad.emulated(0)},
        SCHEMA | scoped("device_array", ARRAY_RULES + ["child_move"] + DEVICE_RULES),
        # The CPU-only method refuses device data, as the spec allows.
        NO_STREAMS | {"array.export", "dlpack.max_version", "cai.version"},
    ),
    "cpu_int64": (
        lambda: ad.array(pa.array([1, 2, 3], pa.int64())), {},
        SCHEMA | scoped("array", ARRAY_RULES) | scoped("device_array", ARRAY_RULES + DEVICE_RULES) | DLPACK,
        NO_STREAMS | {"array.child_move", "device_array.child_move", "cai.version"},
    ),
    "emulated_int64": (
        lambda: on_emulated(pa.array([1, 2, 3], pa.int64())), {"device": ad.emulated(0)},
        SCHEMA | scoped("device_array", ARRAY_RULES + DEVICE_RULES) | DLPACK,
        NO_STREAMS | {"array.export", "device_array.child_move", "cai.version"},
    ),
    "cpu_stream": (
        stream_of(ad.array), {"fresh": stream_of(ad.array)},
        SCHEMA | scoped("stream", STREAM_RULES) | scoped("device_stream", STREAM_RULES + DEVICE_RULES),
        # No call fails, so get_last_error may not be called.
        NO_ARRAYS | {"stream.last_error", "device_stream.last_error", "dlpack.device_matches", "cai.version"},
    ),
    "emulated_stream": (
        stream_of(on_emulated), {"fresh": stream_of(on_emulated)},
        SCHEMA | scoped("device_stream", STREAM_RULES + DEVICE_RULES),
        NO_ARRAYS | {"stream.export", "device_stream.last_error", "dlpack.device_matches", "cai.version"},
    ),
}


@pytest.mark.parametrize("name", OURS)
def test_our_producers_pass_every_check_they_can_run(name):
    make, options, passed, not_applicable = OURS[name]
    report = check_producer(make(), **options)
    assert report.passed, report
    assert report.advisories == [], report
    assert ids(report, FAILED) == set(), report
    assert ids(report, PASSED) == passed, report
    assert ids(report, NOT_APPLICABLE) == not_applicable, report
    assert len(report.checks) == len(passed) + len(not_applicable), "a check reported twice"


def test_a_consumer_built_on_arrow_device_takes_and_passes_all_six_cases():
    report = check_consumer(hostile.ours)
    cases = ["cpu_array", "cpu_device_array", "cpu_stream", "cpu_device_stream",
             "emulated_device_array", "emulated_device_stream"]
    expected = {"consumer.accepts"} | {f"consumer.{case}.{rule}" for case in cases
                                       for rule in ("accepts", "values", "release")}
    expected |= {f"consumer.{case}.host_read" for case in cases if case.startswith("emulated")}
    assert report.passed, report
    assert ids(report, PASSED) == expected, report
    assert len(report.checks) == len(expected)
    assert report.checks[0].message == "took 4 of the 4 CPU forms (workers: spawn)"


# ---------------------------------------------------------------- hostile producers

#: What each rule's failure message says, for the defect of its producer.
WHY = {
    "export": r"raised RuntimeError: this producer cannot export",
    "capsule_names": r"capsule name(s|d) .*(expected|v2)",
    "capsule_destructor": r"no destructor on|tensor released 0 times",
    "requested_schema_none": r"unexpected keyword argument 'requested_schema'",
    "schema_agrees": r"__arrow_c_schema__ describes Int64, __arrow_c_\w+__ Struct",
    "schema_release_once": r"schema\.children\[0\] released 0 times",
    "valid_schema": r'format "Q!" is not a format string',
    "valid_full": r"Invalid UTF8",
    "alignment": r"values\) at 0x[0-9a-f]+, not a multiple of 4",
    "release_once": r"array\.children\[0\] released 0 times",
    "child_move": r"changed values when its parent was released",
    "device": r"a CPU array with device_id 0",
    "sync_event": r"sync_event is 0x[0-9a-f]+ on the CPU",
    "reserved": r"reserved is \[0, 7, 0\]",
    "kwargs_none": r"=None raised NotImplementedError",
    "unknown_kwarg": r"=1 was accepted",
    "callbacks": r"get_last_error NULL on a live stream",
    "get_schema_stable": r'name: "call 2".*the second .*name: "call 3"',
    "end_repeats": r"call 1 after the end gave a batch",
    "last_error": r"not UTF-8",
    "stream_release": r"stream's release did not set release to NULL",
    "device_matches": r"__dlpack_device__\(\) is \(1, 0\), the tensor's device \(1, 1\)",
    "max_version": r"max_version=\(1, 0\) raised TypeError",
    "consumed": r"renamed used_dltensor called the deleter",
    "stream": r"stream=None raised TypeError|stream 0 \(spec",
    "version": r"version 4 \(expected 3\)",
    "layout": r"strides \(8, 8\) overlap",
    "mask": r"mask shape \(2,\), array shape \(3,\)",
}


def assert_breaks_only(report, check_id):
    """`check_id` failed, for the reason `WHY` gives; every other check
    passed or did not apply, except the ones COUPLED names."""
    coupled, _why = hostile.COUPLED.get(check_id, (set(), ""))
    assert ids(report, FAILED) == {check_id} | coupled, report
    [check] = [c for c in report.checks if c.id == check_id]
    advisory = RULES[check_id][2]
    assert check.advisory == advisory
    assert check.section == RULES[check_id][0]
    assert report.passed == advisory, report
    assert [c.id for c in report.advisories] == ([check_id] if advisory else [])
    return check


@pytest.mark.parametrize("check_id", sorted(hostile.PRODUCERS))
def test_a_producer_that_breaks_one_rule_fails_that_rule(check_id):
    report = check_producer(hostile.PRODUCERS[check_id]())
    check = assert_breaks_only(report, check_id)
    assert re.search(WHY[check_id.partition(".")[2]], check.message), check.message


VARIANT_WHY = {
    # The destructor is there (no "no destructor on"), and releases nothing.
    "a destructor that releases nothing": r"^arrow_\w+: (schema|array|stream) released 0 times \(expected 1\)",
    "raises TypeError": r"=1 raised TypeError: unexpected keyword .*\(spec: NotImplementedError\)",
    "versioned without max_version": r"without max_version the capsule is dltensor_versioned",
    "no destructor": r"no capsule destructor",
}


@pytest.mark.parametrize("check_id, what, make", hostile.VARIANTS, ids=[f"{v[0]}: {v[1]}" for v in hostile.VARIANTS])
def test_another_form_of_a_defect_fails_the_same_rule(check_id, what, make):
    check = assert_breaks_only(check_producer(make()), check_id)
    assert re.search(VARIANT_WHY[what], check.message), check.message


def test_every_producer_rule_has_a_hostile_producer():
    producer_rules = {rule for rule in RULES if not rule.startswith("consumer.")}
    assert set(hostile.PRODUCERS) | set(hostile.UNBREAKABLE) == producer_rules
    assert not set(hostile.PRODUCERS) & set(hostile.UNBREAKABLE)
    # A rule that cannot be broken alone is an exception, and says why.
    assert len(hostile.UNBREAKABLE) <= 2, hostile.UNBREAKABLE
    assert all(hostile.UNBREAKABLE.values())
    # Every rule's failure message is pinned down.
    assert {rule.partition(".")[2] for rule in hostile.PRODUCERS} <= set(WHY)
    for check_id, (coupled, why) in hostile.COUPLED.items():
        assert check_id in hostile.PRODUCERS and coupled <= producer_rules and why, check_id
        assert {c.partition(".")[0] for c in coupled} == {check_id.partition(".")[0]}, "coupled across scopes"


# ---------------------------------------------------------------- hostile consumers


def test_a_consumer_that_never_releases_an_array_fails_release():
    report = check_consumer(hostile.leaks_arrays)
    assert ids(report, FAILED) == {"consumer.cpu_array.release"}, report
    [check] = report.failures
    assert re.search(r"__arrow_c_array__: array released 0 times \(expected 1\)", check.message), check.message
    assert report.outcome("consumer.cpu_array.values") == NOT_APPLICABLE  # it returned None
    assert report.outcome("consumer.cpu_device_array.release") == PASSED


def test_a_consumer_that_reads_device_memory_on_the_host_fails_host_read():
    report = check_consumer(hostile.reads_device_memory)
    assert ids(report, FAILED) == {"consumer.emulated_device_array.host_read"}, report
    [check] = report.failures
    assert "killed by SIGSEGV" in check.message, check.message
    # The case after the crash ran in a new worker.
    assert report.outcome("consumer.emulated_device_stream.values") == PASSED
    assert report.outcome("consumer.emulated_device_stream.host_read") == PASSED


def test_a_consumer_that_skips_the_sync_event_fails_values_on_poison():
    report = check_consumer(hostile.skips_sync_event)
    assert ids(report, FAILED) == {"consumer.emulated_device_array.values"}, report
    [check] = report.failures
    assert "poison" in check.message, check.message
    assert report.outcome("consumer.emulated_device_array.accepts") == PASSED
    assert report.outcome("consumer.emulated_device_array.release") == PASSED


def test_a_consumer_that_refuses_everything_fails_accepts():
    report = check_consumer(hostile.refuses_everything)
    assert ids(report, FAILED) == {"consumer.accepts"}, report
    assert ids(report, PASSED) == set()
    accepts = [c for c in report.checks if c.id.endswith(".accepts") and c.id != "consumer.accepts"]
    assert len(accepts) == 6
    assert all(c.outcome == NOT_APPLICABLE and "this consumer takes nothing" in c.message for c in accepts)


def test_a_lambda_consumer_runs_in_forked_workers():
    # Runs after this process used the emulated device (the producer tests):
    # a forked worker must not wait on the parent's device threads.
    report = check_consumer(lambda producer: hostile.ours(producer), timeout=60)
    assert report.passed, report
    assert report.checks[0].message == "took 4 of the 4 CPU forms (workers: fork)"
    assert len(ids(report, PASSED)) == 21


# ---------------------------------------------------------------- the command line


def cli(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "arrow_device.conformance", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_command_line_prints_the_table_and_exits_0_for_a_conforming_producer():
    run = cli("pyarrow:array([1, 2])")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "conformance of pyarrow:array([1, 2])"
    assert re.search(r"^array\.release_once\s+passed\s+one release call released 1 array struct", run.stdout, re.M)
    assert re.match(r"PASSED: \d+ passed, 0 failed, 0 advisory, \d+ not applicable$", lines[-1])


def test_the_command_line_exits_1_for_a_hostile_producer():
    run = cli("conformance_hostile:bad_reserved()")
    assert run.returncode == 1, run.stderr
    assert re.search(r"^device_array\.reserved\s+failed\s+reserved is \[0, 7, 0\]", run.stdout, re.M), run.stdout
    assert re.search(r"^FAILED: \d+ passed, 1 failed", run.stdout, re.M), run.stdout


@pytest.mark.parametrize("spec, error", [
    ("pyarrow", r"expected MODULE:EXPR"),
    ("no_such_module_for_conformance:f()", r"ModuleNotFoundError"),
    ("pyarrow:1", r"implements none of the Arrow PyCapsule, DLPack or CUDA Array Interface protocols"),
])
def test_the_command_line_exits_2_for_a_bad_spec(spec, error):
    run = cli(spec)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stdout == ""
    assert re.search(error, run.stderr), run.stderr


def test_the_command_line_prints_json():
    run = cli("--json", "pyarrow:array([1, 2])", "conformance_hostile:bad_reserved()")
    assert run.returncode == 1, run.stderr
    good, bad = json.loads(run.stdout)
    assert (good["subject"], good["passed"], bad["passed"]) == ("pyarrow:array([1, 2])", True, False)
    [failed] = [c for c in bad["checks"] if c["outcome"] == FAILED]
    assert failed["id"] == "device_array.reserved"
    assert failed["section"] == RULES["device_array.reserved"][0]
    assert failed["advisory"] is False


def test_the_command_line_checks_a_consumer():
    run = cli("--consumer", "pyarrow:array")
    assert run.returncode == 0, run.stderr
    assert re.search(r"^consumer\.accepts\s+passed\s+took \d of the 4 CPU forms \(workers: spawn\)", run.stdout, re.M)
    assert re.search(r"^consumer\.cpu_array\.release\s+passed", run.stdout, re.M), run.stdout
    assert run.stdout.splitlines()[-1].startswith("PASSED: ")


def test_the_modules_examples_run():
    """The docstrings' examples (help() is the first documentation)."""
    import doctest

    import arrow_device.conformance as conformance
    from arrow_device.conformance import _consumer, _producer, _report

    for module in (_report, _producer, _consumer, conformance):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
