"""Try tile shapes, pipeline depths and k-loop unroll factors for the square forward kernels on this GPU.

Each candidate runs in a fresh process that swaps one entry of
``tropical_gemm.jit.source.TILE_SHAPES`` or ``PIPELINED_SHAPES`` (or the
preamble's ``TG_UNROLL`` line) before its first kernel is built (all are
part of the source, hence of the cache key, so candidates never share a
cache entry).  A pipelined candidate serves every operand layout of its
(op, dtype) (in ``PIPELINED_EXACT_SHAPES`` where the semiring and dtype
take the exact integer path), in the square family and the stream family
alike (``STREAM_EXACT_SHAPES`` and ``STREAM_SHAPES`` are set aside); None removes them from the
table: the register-staged square kernel, for comparison (the stream
family then takes its fallback shape).  The
winners go into the tables (or the preamble) by hand, with this script's
JSON as the record.

    python benchmarks/tune_tiles.py [--out benchmarks/results] [--only pipelined] [--dtype D] [--op OP]
        [--order C] [--pipelined BM,BN,BK,TM,TN,MIN_BLOCKS,UNROLL,STAGES ...] [--products MxKxN[xBATCH] ...]
        [--semiring S]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

#: (dtype, op, semiring, size, candidate shapes as bm, bn, bk, tm, tn, min_blocks)
CANDIDATES = [
    ("int64", "forward", "max_plus", 4096, [(64, 64, 8, 4, 4, 2), (64, 64, 16, 4, 4, 2)]),
    # the argmax tiles: ptxas spills the 2-blocks-per-SM integer ones (and the f64 one of BK 16)
    ("float32", "forward_argmax", "max_plus", 4096, [(128, 64, 8, 8, 4, 2), (128, 64, 16, 8, 4, 2),
                                                     (128, 128, 16, 8, 8, 1), (128, 64, 16, 8, 4, 1)]),
    ("int32", "forward_argmax", "max_plus", 4096, [(128, 64, 8, 8, 4, 2), (128, 64, 8, 8, 4, 1),
                                                   (128, 64, 16, 8, 4, 1)]),
    ("float64", "forward_argmax", "max_plus", 4096, [(64, 64, 16, 4, 4, 2), (64, 64, 8, 4, 4, 2),
                                                     (64, 64, 16, 4, 4, 1)]),
    ("int64", "forward_argmax", "max_plus", 4096, [(64, 64, 16, 4, 4, 2), (64, 64, 16, 4, 4, 1)]),
]

#: (dtype, op, semiring, size, k-loop unroll factors of the square kernel, TG_UNROLL in the preamble)
UNROLLS = [("float32", "forward", "max_plus", 4096, [16, 8, 4]), ("int32", "forward", "max_plus", 4096, [16, 8, 4]),
           ("float32", "forward_argmax", "max_plus", 4096, [16, 4])]

#: (dtype, op, semiring, size, operand orders ("C", "F", or A's then B's), pipelined shapes as bm, bn, bk,
#: tm, tn, min_blocks, unroll, stages; None: the register-staged kernel)
_F32 = [None, (128, 128, 16, 8, 8, 2, 0, 3), (128, 128, 16, 8, 8, 2, 0, 4), (128, 128, 32, 8, 8, 2, 0, 2),
        (128, 128, 16, 8, 8, 1, 0, 4), (128, 256, 16, 8, 16, 1, 0, 3), (128, 256, 16, 8, 16, 1, 0, 4),
        (128, 256, 32, 8, 16, 1, 0, 3), (256, 128, 16, 16, 8, 1, 0, 3)]
_F64 = [None, (64, 64, 16, 4, 4, 2, 0, 3), (64, 64, 16, 4, 4, 2, 0, 4), (128, 64, 16, 8, 4, 2, 0, 3),
        (64, 128, 16, 4, 8, 2, 0, 3), (128, 128, 16, 8, 8, 1, 0, 3), (128, 128, 8, 8, 8, 1, 0, 4)]
# int32 under max_plus: the exact path's slice check in the pipelined kernel against the register-staged one
_I32 = [None, (128, 256, 16, 8, 16, 1, 2, 3), (128, 256, 16, 8, 16, 1, 0, 3), (128, 128, 16, 8, 8, 1, 0, 3),
        (128, 128, 16, 8, 8, 1, 0, 4), (256, 128, 16, 16, 8, 1, 0, 3)]
_I64 = [None, (64, 64, 16, 4, 4, 2, 0, 4), (64, 64, 16, 4, 4, 2, 0, 3)]
_I32_ARGMAX = [None, (128, 128, 16, 8, 8, 1, 0, 3)]
_F32_ARGMAX = [None, (128, 128, 16, 8, 8, 1, 0, 3), (128, 128, 32, 8, 8, 1, 0, 2), (128, 128, 8, 8, 8, 1, 0, 4),
               (128, 64, 16, 8, 4, 2, 0, 3)]
_F64_ARGMAX = [None, (64, 64, 16, 4, 4, 2, 0, 3), (64, 64, 8, 4, 4, 2, 0, 4), (128, 64, 16, 8, 4, 1, 0, 3)]
PIPELINES = [("float32", "forward", "max_plus", 4096, order, _F32) for order in ("C", "F", "CF")]
PIPELINES += [("float64", "forward", "max_plus", 4096, order, _F64) for order in ("C", "F")]
PIPELINES += [("int32", "forward", "max_plus", 4096, order, _I32) for order in ("C", "F", "CF", "FC")]
PIPELINES += [("int64", "forward", "max_plus", 4096, "C", _I64)]
PIPELINES += [("float32", "forward_argmax", "max_plus", 4096, order, _F32_ARGMAX) for order in ("C", "F")]
PIPELINES += [("float64", "forward_argmax", "max_plus", 4096, "C", _F64_ARGMAX)]
PIPELINES += [("int32", "forward_argmax", "max_plus", 4096, order, _I32_ARGMAX) for order in ("C", "F", "CF", "FC")]

CHILD = r"""
import json, sys
import numpy as np
cfg = json.loads(sys.argv[1])
import tropical_gemm.jit.source as source
if "shape" in cfg:
    source.TILE_SHAPES[("square", cfg["dtype"], cfg["op"])] = source.TileShape(*cfg["shape"])
table = source.pipelined_table(cfg["semiring"], cfg["dtype"])
for layouts in ("rr", "rc", "cr", "cc") if "pipelined" in cfg else ():
    key = (cfg["op"], cfg["dtype"], layouts)
    source.STREAM_EXACT_SHAPES.pop(key, None)  # the stream family then takes the candidate too
    source.STREAM_SHAPES.pop(key, None)
    if cfg["pipelined"] is None:
        table.pop(key, None)
    else:
        table[key] = source.TileShape(*cfg["pipelined"])
if "unroll" in cfg:
    default = source.preamble
    source.preamble = lambda: default().replace("#define TG_UNROLL 4", "#define TG_UNROLL %d" % cfg["unroll"])
sys.path.insert(0, "benchmarks")
from throughput import bench_product
s = cfg["size"]
timed = []
for m, k, n, *batch in cfg.get("products") or [(s, s, s)]:
    seconds = bench_product(m, k, n, cfg["dtype"], cfg["semiring"], argmax=cfg["op"] == "forward_argmax",
                            order=cfg.get("order", "C"), batch=tuple(batch))
    timed.append({"product": [m, k, n, *batch], "seconds": seconds,
                  "tops": 2 * m * k * n * (batch[0] if batch else 1) / seconds / 1e12})
print(json.dumps(timed[0] if "products" not in cfg else {"products": timed}))
"""


def _shape(text: str) -> "list[int] | None":
    return None if text == "none" else [int(x) for x in text.split(",")]


def _product(text: str) -> list[int]:
    return [int(x) for x in text.split("x")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--only", choices=("shapes", "unrolls", "pipelined"), help="one kind of candidate")
    parser.add_argument("--op", choices=("forward", "forward_argmax"), help="one op's candidates")
    parser.add_argument("--dtype", help="one dtype's candidates")
    parser.add_argument("--order", help="one operand order's candidates (C, F, CF, FC)")
    parser.add_argument("--semiring", help="time the candidates under this semiring instead of the lists' own")
    parser.add_argument("--pipelined", action="append", type=_shape, metavar="BM,BN,BK,TM,TN,MIN_BLOCKS,UNROLL,STAGES",
                        help="try these pipelined shapes (or 'none': the register-staged kernel) instead of the "
                             "script's lists; repeat for more")
    parser.add_argument("--products", nargs="+", type=_product, metavar="MxKxN[xBATCH]",
                        help="time every candidate on these products instead of the size's cube")
    args = parser.parse_args(argv)
    rows = []
    kinds = {
        "shapes": [{"dtype": d, "op": o, "semiring": s, "size": n, "shape": shape}
                   for d, o, s, n, shapes in CANDIDATES for shape in shapes],
        "unrolls": [{"dtype": d, "op": o, "semiring": s, "size": n, "unroll": u}
                    for d, o, s, n, unrolls in UNROLLS for u in unrolls],
        "pipelined": [{"dtype": d, "op": o, "semiring": s, "size": n, "order": order, "pipelined": p}
                      for d, o, s, n, order, shapes in PIPELINES for p in args.pipelined or shapes],
    }
    configs = [cfg for kind, listed in kinds.items() if args.only in (None, kind) for cfg in listed
               if args.op in (None, cfg["op"]) and args.dtype in (None, cfg["dtype"])
               and args.order in (None, cfg.get("order"))]
    if args.pipelined:  # the same shapes for every (dtype, op, order) the lists name: once each
        configs = list({json.dumps(cfg, sort_keys=True): cfg for cfg in configs}.values())
    for cfg in configs if args.products else ():
        cfg["products"] = args.products
    for cfg in configs if args.semiring else ():
        cfg["semiring"] = args.semiring
    for cfg in configs:
        dtype, op, semiring, size = cfg["dtype"], cfg["op"], cfg["semiring"], cfg["size"]
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True,
                              env={**__import__("os").environ, "TROPICAL_GEMM_DISABLE_DISK_CACHE": "1"})
        result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
            "error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
        rows.append({**cfg, **result})
        label = f"{cfg.get('shape', cfg.get('unroll', cfg.get('pipelined')))} {cfg.get('order', '')}"
        for timed in result.get("products", [{"product": [size] * 3, **result}]):
            print(f"{dtype:8} {op:15} {semiring:9} {'x'.join(map(str, timed['product'])):18} {label:40} "
                  + (f"{timed['tops']:6.2f} T ops/s" if "tops" in timed else result["error"]), flush=True)
    from throughput import environment  # benchmarks/ is this script's own directory

    args.out.mkdir(parents=True, exist_ok=True)
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    report = {"environment": environment(), "date": date, "results": rows}
    (args.out / f"tune-tiles-{date[:10]}.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
