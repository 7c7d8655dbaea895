"""benchmarks/tile_store.py's cases: each goes to the pipelined kernel, and together they cover what a store may meet."""

from __future__ import annotations

import numpy as np

from script_modules import load_script
from tropical_gemm.engines.cuda.plan import plan_forward
from tropical_gemm.jit.source import pipelined, tile_shape


def _strides(rows: int, cols: int, order: str) -> tuple[int, int]:
    return (cols, 1) if order == "C" else (1, rows)


def test_every_case_is_the_pipelined_kernel_and_the_cases_cover_layouts_row_lengths_and_edges():
    tile_store = load_script("benchmarks", "tile_store")
    paths = set()
    for dtype, argmax, batch, m, k, n, order in tile_store.CASES:
        batch_shape = (batch,) if batch > 1 else ()
        a_strides = (m * k,) * len(batch_shape) + _strides(m, k, order)
        b_strides = (k * n,) * len(batch_shape) + _strides(k, n, order)
        plan = plan_forward((*batch_shape, m, k), a_strides, (*batch_shape, k, n), b_strides, batch_shape, dtype,
                            "max_plus", argmax, 132, True)
        spec = plan.product.spec
        assert pipelined(spec), (dtype, m, k, n, spec.name)
        shape = tile_shape(spec)
        paths.add(f"B {spec.b_layout}-major")
        paths.add("16-byte rows" if n % (16 // np.dtype(dtype).itemsize) == 0 else "odd rows")
        if m % shape.bm or n % shape.bn:
            paths.add("edges")
    assert paths == {"B row-major", "B col-major", "16-byte rows", "odd rows", "edges"}
