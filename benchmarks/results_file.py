"""Where a benchmark's results go: ``<kind>-<device>-<date>.json`` under the results folder.

One function, so every script names its files the same way and prints the
same closing lines: its table, then the path it wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Callable

#: The default results folder: benchmarks/results, next to the scripts.
RESULTS = Path(__file__).parent / "results"
#: The option of the benchmarks that compare commits by a run in each checkout (``run_and_save``'s options).
LABEL_OPTION = {"--label": {"default": "", "help": "a name for this checkout's run (e.g. its commit)"}}


def run_and_save(doc: str, argv: "list[str] | None", kind: str, run: "Callable[..., dict]",
                 table: "Callable[[dict], list[str]]", options: "dict[str, dict] | None" = None) -> int:
    """The whole ``main`` of a benchmark (``--help`` shows its docstring): ``--out``, and ``options`` (a flag's
    ``add_argument`` keywords by flag), whose values ``run`` takes by name."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    for flag, keywords in (options or {}).items():
        parser.add_argument(flag, **keywords)
    values = vars(parser.parse_args(argv))
    out = values.pop("out")
    report = run(**values)
    save_report(report, out, kind, table(report))
    return 0


def save_report(report: dict, out: Path, kind: str, table: list[str]) -> Path:
    """Write ``report`` (tagged with ``environment.device``, ``.date`` and ``.commit``) as JSON, print ``table`` and the path."""
    env = report["environment"]
    if not env.get("commit"):
        env["commit"] = commit()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{kind}-{str(env['device']).replace(' ', '_')}-{str(env['date'])[:10]}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(table))
    print(f"wrote {path}")
    return path


def commit(where: "Path | None" = None) -> str:
    """The git commit measured: ``TG_COMMIT`` where the tree is an export without .git, else git's HEAD (of the
    checkout holding ``where``, by default this one)."""
    if os.environ.get("TG_COMMIT"):
        return os.environ["TG_COMMIT"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=where or Path(__file__).parent)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def pyplot():
    """matplotlib's pyplot drawing to files (the Agg backend), or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int) -> bool:
    """Lay out and write a matplotlib figure; True, for the plotting functions to return."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return True
