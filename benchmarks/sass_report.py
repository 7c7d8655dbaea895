"""What the kernels behind issue 16's targets execute: their hot k loop in SASS, counted (runs without a GPU).

Each kernel that ``benchmarks/throughput.py`` measures is built by our
compiler for sm_90 and disassembled with ``cuobjdump -sass``.  Its k loop
is the innermost backward branch whose body holds the most ⊗/⊕
instructions; every instruction is counted by class: the useful ⊗ and ⊕ (FADD, FMNMX,
VIADDMNMX, DADD, ...), shared-memory loads, global loads and stores,
compare and select, register moves, integer and address arithmetic, control.
Counts are per staged K slice and thread: the slice loop's own body once,
and the innermost (k) loop as often as the slice's multiply-adds need.
``useful share`` is useful / all, ``instructions per multiply-add`` all
over the slice's multiply-adds (a VIADDMNMX is one, FADD with FMNMX two).
ptxas's report gives registers and spills; occupancy follows from them on
sm_90 (65,536 registers and 2,048 threads per SM).

``cuobjdump`` and ``nvdisasm`` come with the ``nvidia-cuda-cuobjdump`` and
``nvidia-cuda-nvdisasm`` wheels (``pip download --no-deps`` them and unzip:
the programs are in ``nvidia/cu13/bin``); pass that folder with ``--bin`` or
put it on PATH.

    python benchmarks/sass_report.py [--bin DIR] [--out benchmarks/results]

Writes ``sass-report-sm_90-<date>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from results_file import RESULTS, save_report  # benchmarks/ is this script's own directory

#: (label, op, semiring, dtype, tile): the compute-bound kernels of throughput.py's targets, row-major
#: operands.  int64 is left out (its ⊗ and ⊕ are several integer instructions each, which the classes
#: below do not tell from address arithmetic), and so are the families for shapes bound by memory or by
#: the host (skinny, vector, thin), where instruction counts explain little.
KERNELS = [
    ("f32 max_plus square", "forward", "max_plus", "float32", "square"),
    ("f32 max_min square", "forward", "max_min", "float32", "square"),
    ("f64 max_plus square", "forward", "max_plus", "float64", "square"),
    ("f64 max_min square", "forward", "max_min", "float64", "square"),
    ("i32 max_plus square", "forward", "max_plus", "int32", "square"),
    ("i32 max_min square", "forward", "max_min", "int32", "square"),
    ("f32 max_plus argmax square", "forward_argmax", "max_plus", "float32", "square"),
    ("f32 max_min argmax square", "forward_argmax", "max_min", "float32", "square"),
    ("f64 max_plus argmax square", "forward_argmax", "max_plus", "float64", "square"),
    ("i32 max_plus argmax square", "forward_argmax", "max_plus", "int32", "square"),
    ("f32 max_plus small", "forward", "max_plus", "float32", "small"),
]

#: Instruction classes by opcode (the part before the first dot); the first match wins.
CLASSES = [
    ("useful", ("FADD", "FMNMX", "FMUL", "DADD", "DMUL", "DSETP", "VIADDMNMX", "VIMNMX", "IMNMX", "VIADD")),
    ("shared load", ("LDS",)),
    ("shared store", ("STS",)),
    ("global load", ("LDG",)),
    ("global store", ("STG",)),
    ("local (spill)", ("LDL", "STL")),
    ("compare/select", ("FSETP", "ISETP", "SEL", "FSEL", "PLOP3", "UISETP")),
    ("move", ("MOV", "IMAD.MOV", "UMOV", "CS2R", "S2R", "S2UR")),
    ("barrier", ("BAR",)),
    ("control", ("BRA", "BSSY", "BSYNC", "EXIT", "RET", "CALL", "WARPSYNC")),
]
_LINE = re.compile(r"\s+/\*([0-9a-f]{4,6})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
_TARGET = re.compile(r"0x([0-9a-f]+)")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores")
#: For integer ⊗ = + and ⊕ = max/min, one VIADDMNMX is a whole multiply-add; elsewhere two instructions are.
_FUSED = ("VIADDMNMX",)


def parse(sass: str) -> list[tuple[int, str]]:
    """``(address, opcode with its modifiers, operands)`` of each instruction of a ``cuobjdump -sass`` listing."""
    return [(int(m.group(1), 16), m.group(3), m.group(4)) for m in map(_LINE.match, sass.splitlines()) if m]


def classify(opcode: str) -> str:
    """The class of one opcode (``CLASSES``); integer and address arithmetic and the rest are "other"."""
    for name, prefixes in CLASSES:
        if any(opcode == p or opcode.startswith(p + ".") for p in prefixes):
            return name
    return "other"


def loops(instructions: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """``(first, last)`` instruction indices of every loop: a backward branch and its target."""
    at = {address: i for i, (address, _, _) in enumerate(instructions)}
    found = []
    for i, (address, opcode, operands) in enumerate(instructions):
        target = _TARGET.search(operands) if opcode.startswith("BRA") else None
        if target and int(target.group(1), 16) < address and int(target.group(1), 16) in at:
            found.append((at[int(target.group(1), 16)], i))
    return found


def _useful(instructions: list[tuple[int, str, str]]) -> int:
    return sum(classify(op) == "useful" for _, op, _ in instructions)


def slice_profile(instructions: list[tuple[int, str, str]], multiply_adds: int, fused: bool) -> dict[str, object]:
    """The k loop's cost per staged slice of ``multiply_adds`` multiply-adds per thread.

    The k loop is the innermost loop with the most useful instructions; the
    slice loop, the smallest loop around it (the whole listing when there is
    none).  A slice runs the slice loop's own body once and the k loop as
    often as the useful work left over needs; the counts are per slice, per
    thread.
    """
    found = loops(instructions)
    nested = lambda outer, inner: outer[0] <= inner[0] and inner[1] <= outer[1] and outer != inner
    innermost = [loop for loop in found if not any(nested(loop, other) for other in found)]
    k_lo, k_hi = max(innermost, key=lambda loop: _useful(instructions[loop[0]:loop[1] + 1]))
    around = [loop for loop in found if nested(loop, (k_lo, k_hi))]
    s_lo, s_hi = min(around, key=lambda loop: loop[1] - loop[0]) if around else (0, len(instructions) - 1)
    own = [x for j, x in enumerate(instructions[s_lo:s_hi + 1], s_lo) if not k_lo <= j <= k_hi]
    k_body = instructions[k_lo:k_hi + 1]
    trips = max(0.0, (multiply_adds * (1 if fused else 2) - _useful(own)) / max(_useful(k_body), 1))
    classes: collections.Counter = collections.Counter(classify(op) for _, op, _ in own)
    for _, op, _ in k_body:
        classes[classify(op)] += trips
    total = sum(classes.values())
    return {"k_loop_instructions": len(k_body), "k_loop_useful_share": _useful(k_body) / len(k_body),
            "slice_loop_instructions": s_hi - s_lo + 1, "k_loop_trips_per_slice": round(trips, 2),
            "per_slice": {k: round(v, 1) for k, v in classes.most_common()},
            "useful_share": classes["useful"] / total if total else 0.0,
            "instructions_per_multiply_add": total / multiply_adds}


def occupancy(registers: int, threads: int) -> dict[str, int]:
    """Blocks and warps per SM on sm_90 that the registers allow (allocated per warp in units of 256)."""
    per_warp = -(-registers * 32 // 256) * 256
    blocks = min(32, 65536 // (per_warp * (threads // 32)), 2048 // threads)
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * threads // 32}


def report_kernel(label: str, op: str, semiring: str, dtype: str, tile: str, cuobjdump: str,
                  scratch: Path) -> dict[str, object]:
    from tropical_gemm.jit import Target, kernel_source, make_spec
    from tropical_gemm.jit.compiler import compile_program
    from tropical_gemm.jit.source import kernel_options, tile_shape

    spec = make_spec(op, semiring, dtype, tile=tile)
    kernel = compile_program(kernel_source(spec), spec.name, Target("cubin", 90),
                             (*kernel_options(spec), "--ptxas-options=-v"))
    cubin = scratch / f"{spec.name}.cubin"
    cubin.write_bytes(kernel.binary)
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    registers = int(_REGISTERS.search(kernel.log).group(1))
    spills = _SPILLS.search(kernel.log)
    shape = tile_shape(spec)
    # multiply-adds per thread and staged slice: the tile's TM×TN outputs over BK steps
    per_slice = shape.bk * shape.tm * shape.tn
    fused = dtype == "int32" and semiring in ("max_plus", "min_plus")
    return {"label": label, "kernel": spec.name, "registers": registers,
            "spill_bytes": int(spills.group(1)) if spills else 0, "threads": shape.threads,
            "multiply_adds_per_slice": per_slice, **occupancy(registers, shape.threads),
            **slice_profile(parse(sass), per_slice, fused)}


def find_cuobjdump(folder: "Path | None") -> str:
    found = shutil.which("cuobjdump", path=str(folder) if folder else None)
    if found is None:
        sys.exit("cuobjdump not found: pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, unzip "
                 "both, and pass --bin <folder>/nvidia/cu13/bin (or put it on PATH)")
    os.environ["PATH"] = f"{Path(found).parent}{os.pathsep}{os.environ['PATH']}"  # cuobjdump runs nvdisasm
    return found


def table(report: dict) -> list[str]:
    lines = [f"{'kernel':<28} {'regs':>4} {'spill':>5} {'warps/SM':>8} {'k loop':>7} {'useful/slice':>12} "
             f"{'instr/MA':>8}  per slice, besides the useful"]
    for row in report["kernels"]:
        others = ", ".join(f"{k} {v:g}" for k, v in row["per_slice"].items() if k != "useful")
        lines.append(f"{row['label']:<28} {row['registers']:4d} {row['spill_bytes']:5d} {row['warps_per_sm']:8d} "
                     f"{row['k_loop_useful_share']:7.1%} {row['useful_share']:12.1%} "
                     f"{row['instructions_per_multiply_add']:8.2f}  {others[:100]}")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=Path, default=None, help="the folder of cuobjdump and nvdisasm")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cuobjdump = find_cuobjdump(args.bin)
    from tropical_gemm.jit.compiler import nvrtc_version

    with tempfile.TemporaryDirectory() as scratch:
        rows = [report_kernel(*kernel, cuobjdump, Path(scratch)) for kernel in KERNELS]
    report = {"environment": {"device": "sm_90", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "nvrtc": ".".join(map(str, nvrtc_version())),
                              "cuobjdump": subprocess.run([cuobjdump, "--version"], capture_output=True,
                                                          text=True).stdout.strip().splitlines()[-1]},
              "command": "python benchmarks/sass_report.py", "kernels": rows}
    save_report(report, args.out, "sass-report", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
