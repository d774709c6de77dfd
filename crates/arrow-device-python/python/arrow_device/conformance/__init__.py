"""Conformance checks for producers and consumers of the Arrow C (Device)
Data Interface, the Arrow PyCapsule protocol, DLPack and the CUDA Array
Interface.

* :func:`check_producer` exercises every protocol method an object has, as a
  strict consumer would, and reports each rule it could observe.
* :func:`check_consumer` hands a consumer function this package's producers
  (on the CPU and on the emulated device in strict, delayed mode) and checks
  that it released everything once, never read device memory on the host,
  and waited for the data.
* ``python -m arrow_device.conformance MODULE:EXPR`` prints the report for an
  object and exits 1 when a check fails.

Each check has a stable id (``device_array.release_once``), an outcome
(``passed``, ``failed``, ``not_applicable``), a message saying what was seen
and what the spec asks, and the spec section; :data:`RULES` lists them all.

>>> import pyarrow as pa
>>> from arrow_device.conformance import check_producer
>>> report = check_producer(pa.array([1, 2, 3]))
>>> report.outcome("array.release_once")
'passed'
>>> [check.id for check in report.checks][:3]
['schema.export', 'array.requested_schema_none', 'array.capsule_names']

``report.passed`` is True when no check failed; ``print(report)`` shows the
table.
"""

from ._consumer import check_consumer
from ._producer import check_producer
from ._report import FAILED, NOT_APPLICABLE, PASSED, RULES, Check, Report

__all__ = [
    "FAILED",
    "NOT_APPLICABLE",
    "PASSED",
    "RULES",
    "Check",
    "Report",
    "check_consumer",
    "check_producer",
]
