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
    """One rule, as observed.

    >>> Check.of("device_array.reserved", "passed", "zero").advisory
    False
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
        """A check of catalogue rule `check_id` (KeyError for an unknown id)."""
        section, _summary, advisory = _rule_of(check_id)
        if outcome not in (PASSED, FAILED, NOT_APPLICABLE):
            raise ValueError(f"unknown outcome {outcome!r}")
        return cls(check_id, outcome, message, section, advisory)

    @property
    def failed(self) -> bool:
        """Whether this check fails its report (failed, not advisory)."""
        return self.outcome == FAILED and not self.advisory

    def label(self) -> str:
        """The outcome column of the table: passed, failed, advisory, n/a."""
        if self.outcome == FAILED and self.advisory:
            return "advisory"
        return "n/a" if self.outcome == NOT_APPLICABLE else self.outcome


class Report:
    """The checks run on one producer or consumer.

    ``passed`` is True when no check failed (advisory failures aside);
    ``failures`` lists the failed checks; ``str(report)`` is a table.
    """

    def __init__(self, subject: str, checks: List[Check]):
        self.subject = subject
        self.checks = list(checks)

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def failures(self) -> List[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def advisories(self) -> List[Check]:
        """Failed advisory checks (reported, not failing)."""
        return [c for c in self.checks if c.outcome == FAILED and c.advisory]

    def outcome(self, check_id: str) -> str:
        """The outcome of `check_id` (KeyError when it was not run)."""
        for check in self.checks:
            if check.id == check_id:
                return check.outcome
        raise KeyError(f"{check_id} was not checked for {self.subject}")

    def to_dict(self) -> dict:
        """The report as plain data (for JSON)."""
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
