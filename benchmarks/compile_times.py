"""NVRTC compile time of every catalogue kernel, one at a time, against the budgets of issue 32.

Each spec of ``tropical_gemm.jit.catalogue()`` is compiled for sm_90 (cubin)
on its own, in this process, straight through the registry's compiler (no
cache layer is consulted or written; ``CUDA_CACHE_DISABLE=1`` and empty
cache folders are set anyway, so nothing else can hide a compile).  ptxas's
resource report (``--ptxas-options=-v``: a report only, the code is the
same) gives each kernel's registers and spill bytes.  Tuned kernels (every
kernel but the baseline forwards) must compile in ``BUDGET_S`` or less, the
baseline forwards, which a first call waits for, in ``BASELINE_BUDGET_S``.

    python benchmarks/compile_times.py [--only REGEX] [--repeat N] [--split] [--out benchmarks/results]

``--only '_square$'`` takes the square kernels alone (the slowest family).
``--repeat N`` compiles each kernel N times and records the median (and
every sample): single compiles of one kernel vary by a third on a busy host.
``--split`` also compiles each kernel to PTX alone (NVRTC's front end and
NVVM), so that the rest of the cubin's time is ptxas's: where a change to a
kernel's source would save compile time.

Writes ``compile-times-<device>-<date>.json`` (and a histogram PNG where
matplotlib is installed) and prints the slowest kernels per family.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

from results_file import pyplot, save_figure, save_report  # benchmarks/ is this script's own directory

#: The compile-time budgets on the device machine (issue 32; issue 15's 1.0 s for a tuned kernel became
#: 2.0 s when the pipelined square kernels' larger tiles came, their compiles hidden by tiering).
BUDGET_S = 2.0
BASELINE_BUDGET_S = 0.2
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores")


def isolate_caches() -> None:
    """Empty caches everywhere a compile could be served from, before anything imports CuPy."""
    root = Path(tempfile.mkdtemp(prefix="tg-compile-times-"))
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    os.environ["CUPY_CACHE_DIR"] = str(root / "cupy")
    os.environ["TROPICAL_GEMM_CACHE_DIR"] = str(root / "tg")


def host() -> str:
    """The GPU's name where one is visible, else the host's (the VM has none)."""
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:  # no driver, no device, or no CuPy: a CPU-only machine  # noqa: BLE001
        return f"no-gpu-{platform.node() or 'host'}"


def family(spec) -> str:
    return spec.tile if spec.op.startswith("forward") else spec.op


def tuned(spec) -> bool:
    return spec.tile != "baseline" or not spec.op.startswith("forward")


def compile_one(spec, repeat: int = 1, split: bool = False) -> dict[str, object]:
    from tropical_gemm.jit import Target, kernel_source
    from tropical_gemm.jit.compiler import compile_program
    from tropical_gemm.jit.source import kernel_options

    options = (*kernel_options(spec), "--ptxas-options=-v")
    source = kernel_source(spec)
    samples, ptx_samples = [], []
    for _ in range(repeat):
        kernel = compile_program(source, spec.name, Target("cubin", 90), options)
        samples.append(kernel.compile_seconds)
        if split:
            ptx_samples.append(compile_program(source, spec.name, Target("ptx", 90), options).compile_seconds)
    registers = _REGISTERS.search(kernel.log)
    spills = _SPILLS.search(kernel.log)
    row = {"name": spec.name, **spec.as_dict(), "family": family(spec), "tuned": tuned(spec),
           "seconds": sorted(samples)[len(samples) // 2], "samples": samples, "cubin_bytes": len(kernel.binary),
           "registers": int(registers.group(1)) if registers else None,
           "spill_bytes": int(spills.group(1)) if spills else None}
    if split:  # medians of each; ptxas's share is the difference
        row["to_ptx_seconds"] = sorted(ptx_samples)[len(ptx_samples) // 2]
        row["ptxas_seconds"] = row["seconds"] - row["to_ptx_seconds"]
    return row


def load_nvrtc() -> None:
    """One throwaway compile, so that NVRTC's one-time start is not charged to the first kernel."""
    from tropical_gemm.jit import Target
    from tropical_gemm.jit.compiler import compile_program

    compile_program('extern "C" __global__ void tg_nvrtc_start() {}', "tg_nvrtc_start", Target("cubin", 90))


def run(only: str, repeat: int = 1, split: bool = False) -> dict[str, object]:
    from tropical_gemm.jit import catalogue
    from tropical_gemm.jit.compiler import nvrtc_version

    specs = [s for s in catalogue() if re.search(only, s.name)]
    load_nvrtc()
    rows = []
    for i, spec in enumerate(specs):
        rows.append(compile_one(spec, repeat, split))
        print(f"[{i + 1}/{len(specs)}] {spec.name} {rows[-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    over = [r["name"] for r in rows if r["seconds"] > (BUDGET_S if r["tuned"] else BASELINE_BUDGET_S)]
    return {"environment": {"device": host(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                            "nvrtc": ".".join(map(str, nvrtc_version())), "cpus": os.cpu_count(),
                            "python": platform.python_version(), "commit": os.environ.get("TG_COMMIT", "")},
            "command": "python benchmarks/compile_times.py" + (f" --only '{only}'" if only else "")
            + (f" --repeat {repeat}" if repeat > 1 else "") + (" --split" if split else ""),
            "budget_s": BUDGET_S, "baseline_budget_s": BASELINE_BUDGET_S, "kernels": rows, "over_budget": over,
            "total_s": sum(r["seconds"] for r in rows)}


def table(report: dict[str, object]) -> list[str]:
    rows = report["kernels"]
    lines = ["family          kernels  median (s)  max (s)  slowest"]
    for fam in sorted({r["family"] for r in rows}):
        times = sorted((r["seconds"], r["name"]) for r in rows if r["family"] == fam)
        median = times[len(times) // 2][0]
        lines.append(f"{fam:<15} {len(times):7d} {median:11.2f} {times[-1][0]:8.2f}  {times[-1][1]}")
    if rows and "to_ptx_seconds" in rows[0]:
        to_ptx = sorted(r["to_ptx_seconds"] / r["seconds"] for r in rows)
        lines.append(f"to PTX (front end and NVVM): a median {to_ptx[len(to_ptx) // 2]:.0%} of a kernel's compile, "
                     f"{to_ptx[0]:.0%}-{to_ptx[-1]:.0%}; the rest is ptxas")
    lines.append(f"total {report['total_s']:.1f} s over {len(rows)} kernels on {report['environment']['device']}; "
                 f"kernels over budget ({report['budget_s']} s tuned, {report['baseline_budget_s']} s baseline): "
                 f"{len(report['over_budget'])} "
                 + ", ".join(report["over_budget"][:8]))
    return lines


def plot(report: dict[str, object], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    families = sorted({r["family"] for r in report["kernels"]})
    ax.hist([[r["seconds"] for r in report["kernels"] if r["family"] == f] for f in families], bins=30,
            stacked=True, label=families)
    ax.axvline(report["budget_s"], color="red", ls="--", label=f"budget {report['budget_s']} s")
    ax.set_xlabel("NVRTC compile, sm_90 cubin (s)")
    ax.set_ylabel("kernels")
    ax.set_title(f"{report['environment']['device']}, NVRTC {report['environment']['nvrtc']}")
    ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="compile only kernels whose name matches this regular expression")
    parser.add_argument("--repeat", type=int, default=1, help="compiles per kernel; the median is recorded")
    parser.add_argument("--split", action="store_true", help="also time each kernel's compile to PTX alone")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    isolate_caches()
    report = run(args.only, max(1, args.repeat), args.split)
    path = save_report(report, args.out, "compile-times", table(report))
    if plot(report, path.with_suffix(".png")):
        print(f"wrote {path.with_suffix('.png')}")
    return 1 if report["over_budget"] else 0


if __name__ == "__main__":
    sys.exit(main())
