"""The report of a conformance check: one `Check` per rule observed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from .. import _arrow_device as _native

PASSED = "passed"
FAILED = "failed"
NOT_APPLICABLE = "not_applicable"


def _catalogue() -> Dict[str, Tuple[str, str, bool]]:
    return {rid: (section, summary, advisory) for rid, section, summary, advisory in _native._conformance_rules()}


#: Every rule: check id -> (spec section, what a conforming side does, advisory).
RULES: Dict[str, Tuple[str, str, bool]] = _catalogue()


def _rule_of(check_id: str) -> Tuple[str, str, bool]:
    """The catalogue entry of `check_id`; consumer ids carry their case in
    the middle (``consumer.<case>.<rule>``)."""
    if check_id in RULES:
        return RULES[check_id]
    scope, _, rest = check_id.partition(".")
    return RULES[f"{scope}.{rest.rpartition('.')[2]}"]


@dataclass(frozen=True)
class Check:
    """One rule, as observed: its id, outcome, message, spec section, and
    whether it is advisory.

    >>> from arrow_device.conformance import Check
    >>> check = Check.of("device_array.reserved", "passed", "zero")
    >>> check.section
    'C Device Data Interface § The ArrowDeviceArray structure'
    >>> check.advisory, check.failed
    (False, False)
    """

    #: Stable id, ``scope.rule`` (``consumer.<case>.<rule>`` for consumers).
    id: str
    #: ``passed``, ``failed`` or ``not_applicable``.
    outcome: str
    #: What was seen, and what the spec asks where it differs.
    message: str
    #: Where the spec states the rule.
    section: str
    #: A failure of an advisory rule does not fail the report.
    advisory: bool = False

    @classmethod
    def of(cls, check_id: str, outcome: str, message: str) -> "Check":
        """A check of catalogue rule `check_id`, its section and advisory flag
        from ``RULES`` (KeyError for an unknown id, ValueError for an
        outcome other than passed, failed, not_applicable).

        >>> from arrow_device.conformance import Check
        >>> Check.of("array.release_once", "failed", "released twice").outcome
        'failed'
        """
        section, _summary, advisory = _rule_of(check_id)
        if outcome not in (PASSED, FAILED, NOT_APPLICABLE):
            raise ValueError(f"unknown outcome {outcome!r}")
        return cls(check_id, outcome, message, section, advisory)

    @property
    def failed(self) -> bool:
        """Whether this check fails its report (failed, not advisory).

        >>> from arrow_device.conformance import Check
        >>> Check.of("array.release_once", "failed", "released twice").failed
        True
        >>> Check.of("array.release_once", "not_applicable", "no array").failed
        False
        """
        return self.outcome == FAILED and not self.advisory

    def label(self) -> str:
        """The outcome column of the table: passed, failed, advisory, n/a.

        >>> from arrow_device.conformance import Check
        >>> Check.of("array.release_once", "not_applicable", "no array").label()
        'n/a'
        """
        if self.outcome == FAILED and self.advisory:
            return "advisory"
        return "n/a" if self.outcome == NOT_APPLICABLE else self.outcome


class Report:
    """The checks run on one producer or consumer (``checks``, in the order
    they ran) and its ``subject``.

    ``passed`` is True when no check failed (advisory failures aside);
    ``failures`` lists the failed checks; ``str(report)`` is a table.

    >>> from arrow_device.conformance import Check, Report
    >>> report = Report("my producer", [
    ...     Check.of("array.capsule_names", "passed", "('arrow_schema', 'arrow_array')"),
    ...     Check.of("array.release_once", "failed", "released twice"),
    ... ])
    >>> report
    <Report my producer: FAILED, 2 checks>
    >>> print(report)
    conformance of my producer
    check                outcome   message
    array.capsule_names  passed    ('arrow_schema', 'arrow_array')
    array.release_once   failed    released twice
    FAILED: 1 passed, 1 failed, 0 advisory, 0 not applicable
    <BLANKLINE>
    """

    def __init__(self, subject: str, checks: List[Check]):
        self.subject = subject
        self.checks = list(checks)

    @property
    def passed(self) -> bool:
        """Whether no check failed (advisory failures aside).

        >>> from arrow_device.conformance import Check, Report
        >>> Report("x", [Check.of("array.release_once", "passed", "once")]).passed
        True
        """
        return not any(c.failed for c in self.checks)

    @property
    def failures(self) -> List[Check]:
        """The checks that fail the report.

        >>> from arrow_device.conformance import Check, Report
        >>> report = Report("x", [Check.of("array.release_once", "failed", "twice")])
        >>> [check.id for check in report.failures]
        ['array.release_once']
        """
        return [c for c in self.checks if c.failed]

    @property
    def advisories(self) -> List[Check]:
        """Failed advisory checks (reported, not failing).

        >>> import pyarrow as pa
        >>> from arrow_device.conformance import check_producer
        >>> check_producer(pa.array([1, 2])).advisories
        []
        """
        return [c for c in self.checks if c.outcome == FAILED and c.advisory]

    def outcome(self, check_id: str) -> str:
        """The outcome of `check_id` (KeyError when it was not run).

        >>> from arrow_device.conformance import Check, Report
        >>> Report("x", [Check.of("array.release_once", "passed", "once")]).outcome("array.release_once")
        'passed'
        """
        for check in self.checks:
            if check.id == check_id:
                return check.outcome
        raise KeyError(f"{check_id} was not checked for {self.subject}")

    def to_dict(self) -> dict:
        """The report as plain data (for JSON).

        >>> import json
        >>> from arrow_device.conformance import Check, Report
        >>> data = Report("x", [Check.of("array.release_once", "passed", "once")]).to_dict()
        >>> data["passed"], data["checks"][0]["id"]
        (True, 'array.release_once')
        >>> json.loads(json.dumps(data)) == data
        True
        """
        return {
            "subject": self.subject,
            "passed": self.passed,
            "checks": [c.__dict__.copy() for c in self.checks],
        }

    def __str__(self) -> str:
        rows = [(c.id, c.label(), c.message) for c in self.checks]
        return _native._conformance_table(self.subject, rows)

    def __repr__(self) -> str:
        return f"<Report {self.subject}: {'passed' if self.passed else 'FAILED'}, {len(self.checks)} checks>"


def from_rows(rows) -> List[Check]:
    """Checks from the native module's ``(id, outcome, message, section, advisory)`` rows."""
    return [Check(rid, outcome, message, section, advisory) for rid, outcome, message, section, advisory in rows]
