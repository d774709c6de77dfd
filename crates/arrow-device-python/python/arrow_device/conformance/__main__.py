"""``python -m arrow_device.conformance MODULE:EXPR [...]``: the conformance
report of the object ``EXPR`` evaluates to after ``import MODULE`` (for
example ``pyarrow:array([1, 2])``, ``nanoarrow:c_array([1, 2], nanoarrow.int64())``).
``--consumer`` checks ``EXPR`` as a consumer function instead. Exit status 0
when every check passed, 1 when one failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from . import check_consumer, check_producer


def _evaluate(spec: str):
    module_name, sep, expr = spec.partition(":")
    if not sep or not module_name or not expr:
        raise ValueError(f"expected MODULE:EXPR, got {spec!r}")
    module = importlib.import_module(module_name)
    namespace = dict(vars(module))
    namespace[module_name.split(".")[0]] = importlib.import_module(module_name.split(".")[0])
    return eval(expr, namespace)  # the user's own expression, as with python -c


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arrow_device.conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", nargs="+", metavar="MODULE:EXPR", help="an object (or consumer function) to check")
    parser.add_argument("--consumer", action="store_true", help="check EXPR as a consumer function")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args(argv)
    reports = []
    for spec in args.spec:
        try:
            target = _evaluate(spec)
        except Exception as exc:
            print(f"error: {spec}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        try:
            # Each export of a producer evaluates EXPR afresh, so that a
            # single-use object (a stream reader) is checked through every
            # protocol method it has.
            report = (check_consumer(target, subject=spec) if args.consumer
                      else check_producer(target, fresh=lambda: _evaluate(spec), subject=spec))
        except TypeError as exc:
            print(f"error: {spec}: {exc}", file=sys.stderr)
            return 2
        reports.append(report)
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        print("\n".join(str(r) for r in reports), end="")
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
