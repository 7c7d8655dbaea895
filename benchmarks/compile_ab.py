"""Compile time of this checkout's kernels against another revision's: the two versions compiled by turns.

Single compiles of one kernel move by up to half from run to run of the
device host, so a change's cost in compile time is measured in one
process: each kernel's two versions are compiled alternately (this tree's
first in even pairs, the other's in odd ones), and the median of the
per-pair ratios is reported, with both versions' medians.  The other
revision's programs come from ``git archive REV`` and that revision's own
``tropical_gemm`` (in a child process), so a change to a header, a
fragment or an NVRTC option counts alike; kernels whose programs are
byte-identical in both are reported as such.

    python benchmarks/compile_ab.py REV [--only REGEX] [--pairs 3] [--out benchmarks/results]

REV may also be a folder holding another checkout (its files, say from ``git archive``), for a machine
without the repository's history.

To time with the NVRTC of another machine (the device host's), unpack that
``nvidia-cuda-nvrtc`` wheel into a folder and put the folder first on
``PYTHONPATH`` and its ``nvidia/cu13/lib`` on ``LD_LIBRARY_PATH``: the
registry loads the first wheel's library it finds.

Writes ``compile-ab-<device>-<date>.json`` and prints, per kernel, REV's
median, this tree's and their ratio.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from compile_times import host, isolate_caches, load_nvrtc  # benchmarks/ is this script's own directory
from results_file import commit, run_and_save

ROOT = Path(__file__).resolve().parent.parent


def programs(only: str) -> dict[str, list]:
    """This process's ``tropical_gemm``'s program and NVRTC options of every catalogue kernel matching ``only``."""
    from tropical_gemm.jit import catalogue, kernel_source
    from tropical_gemm.jit.source import kernel_options

    return {s.name: [kernel_source(s), list(kernel_options(s))] for s in catalogue() if re.search(only, s.name)}


def programs_of(rev: str, only: str) -> dict[str, list]:
    """``programs`` of revision ``rev`` of this repository (or of the checkout in folder ``rev``), from its own
    ``tropical_gemm`` in a child process."""
    if Path(rev).is_dir():
        return _programs_in(rev, rev, only)
    with tempfile.TemporaryDirectory(prefix="tg-compile-ab-") as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True)
        if archive.returncode:
            raise SystemExit(f"git archive {rev} failed: {archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="tar")
        return _programs_in(folder, rev, only)


def _programs_in(folder: str, rev: str, only: str) -> dict[str, list]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, __file__, "--programs", only], env=env, capture_output=True, text=True,
                           cwd=folder)
    if child.returncode:
        raise SystemExit(f"revision {rev}'s tropical_gemm could not list its programs:\n{child.stderr.strip()}")
    return json.loads(child.stdout)


def compile_seconds(name: str, program: list) -> float:
    from tropical_gemm.jit import Target
    from tropical_gemm.jit.compiler import compile_program

    source, options = program
    return compile_program(source, name, Target("cubin", 90), tuple(options)).compile_seconds


def run(rev: str, only: str, pairs: int) -> dict[str, object]:
    import tropical_gemm
    from tropical_gemm.jit.compiler import nvrtc_version

    theirs, ours = programs_of(rev, only), programs(only)
    load_nvrtc()
    rows = []
    for name in sorted(set(theirs) & set(ours)):
        samples = {"rev": [], "this": []}
        for pair in range(pairs):
            for side in ("this", "rev") if pair % 2 == 0 else ("rev", "this"):
                samples[side].append(compile_seconds(name, ours[name] if side == "this" else theirs[name]))
        ratios = [b / a for a, b in zip(samples["rev"], samples["this"])]
        rows.append({"name": name, "identical": theirs[name] == ours[name], "rev_seconds": statistics.median(samples["rev"]),
                     "this_seconds": statistics.median(samples["this"]), "ratio": statistics.median(ratios),
                     "samples": samples})
        print(f"[{len(rows)}] {name} {rows[-1]['ratio']:.2f}", file=sys.stderr, flush=True)
    return {"environment": {"device": host(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                            "nvrtc": ".".join(map(str, nvrtc_version())), "cpus": os.cpu_count(),
                            "commit": commit(Path(tropical_gemm.__file__).parent)},
            "command": f"python benchmarks/compile_ab.py {rev} --only '{only}' --pairs {pairs}", "rev": rev,
            "only_in_one": sorted(set(theirs) ^ set(ours)), "kernels": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'kernel':48} {report['rev'][:10]:>10} {'this':>7}  ratio"]
    for r in report["kernels"]:
        same = "  (same program)" if r["identical"] else ""
        lines.append(f"{r['name']:48} {r['rev_seconds']:10.2f} {r['this_seconds']:7.2f}  {r['ratio']:.2f}{same}")
    if report["kernels"]:
        lines.append(f"median ratio {statistics.median(r['ratio'] for r in report['kernels']):.2f} over "
                     f"{len(report['kernels'])} kernels, NVRTC {report['environment']['nvrtc']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--programs"]:  # the child of programs_of, running the other revision's tropical_gemm
        print(json.dumps(programs(argv[1])))
        return 0
    isolate_caches()
    return run_and_save(__doc__, argv, "compile-ab", run, table,
                        {"rev": {"help": "the git revision (or a folder holding a checkout) to compare this checkout with"},
                         "--only": {"default": "", "help": "kernels whose name matches this regular expression"},
                         "--pairs": {"type": int, "default": 3, "help": "compiles of each version per kernel"}})


if __name__ == "__main__":
    sys.exit(main())
