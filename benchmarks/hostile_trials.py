"""Issue 35's trial table: hostile trials, failures and skips per family, from one pytest run.

Every test in ``tests/test_hostile_trials*.py`` is one trial and carries
``@pytest.mark.hostile(family)``.  This runs them (CPU only, no GPU needed)
and writes ``hostile-trials-<commit>-<device>-<date>.json`` under
``benchmarks/results``.  A trial fails if any of its phases fails or errors
(an API that does not exist yet, on an old commit, counts as a failure); a
skip (a trial that needs root, say) is counted apart, as no trial.

Usage::

    python benchmarks/hostile_trials.py [--out DIR] [-- extra pytest arguments]

It measures the tree it sits in, wherever it is run from; for an older commit, copy the
trial files (``tests/test_hostile_trials*.py``, ``tests/hostile_bundles.py``)
and this script into a checkout of it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # the tree this script is in is the one measured
from results_file import RESULTS, commit, save_report  # noqa: E402

TRIALS = ["tests/test_hostile_trials.py", "tests/test_hostile_trials_io.py"]


class Tally:
    """A pytest plugin: each trial's family at collection, its worst phase outcome at the end."""

    def __init__(self) -> None:
        self.family: dict[str, str] = {}
        self.outcome: dict[str, str] = {}

    def pytest_collection_modifyitems(self, items: list) -> None:
        for item in items:
            marker = item.get_closest_marker("hostile")
            self.family[item.nodeid] = marker.args[0] if marker else "unmarked"

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.skipped and self.outcome.get(report.nodeid) != "failed":
            self.outcome[report.nodeid] = "skipped"
        else:
            self.outcome.setdefault(report.nodeid, "passed")

    def rows(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = defaultdict(lambda: {"trials": 0, "failures": 0, "skipped": 0})
        for nodeid, family in self.family.items():
            outcome = self.outcome.get(nodeid, "failed")  # never reported: the run broke off
            row = table[family]
            if outcome == "skipped":
                row["skipped"] += 1
            else:
                row["trials"] += 1
                row["failures"] += outcome == "failed"
        return dict(sorted(table.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    tally = Tally()
    os.chdir(ROOT)
    status = pytest.main(["-q", "-p", "no:cacheprovider", *TRIALS, *args.pytest_args], plugins=[tally])
    import tropical_gemm

    assert Path(tropical_gemm.__file__).resolve().is_relative_to(ROOT), f"measured {tropical_gemm.__file__}"
    rows = tally.rows()
    measured = commit()
    report = {
        "environment": {"device": f"cpu-{os.cpu_count()}-cores-{'root' if os.geteuid() == 0 else 'user'}",
                        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": measured,
                        "python": platform.python_version(), "pytest_status": int(status)},
        "families": rows,
        "total": {key: sum(row[key] for row in rows.values()) for key in ("trials", "failures", "skipped")},
    }
    table = [f"{'family':<16} {'trials':>6} {'failures':>8} {'skipped':>7}"]
    table += [f"{name:<16} {row['trials']:>6} {row['failures']:>8} {row['skipped']:>7}" for name, row in rows.items()]
    total = report["total"]
    table.append(f"{'total':<16} {total['trials']:>6} {total['failures']:>8} {total['skipped']:>7}")
    save_report(report, args.out, f"hostile-trials-{measured[:7]}", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
