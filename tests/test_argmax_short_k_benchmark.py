"""benchmarks/argmax_short_k.py's cases take every way of finding the winners, and benchmarks/ceilings.py's probes
compile for sm_90.

The benchmark compares the argmax with the plain product where K is short;
its cases must reach the kernels that compare every candidate, the staged
resolve (``argmax_resolve_staged``) and the resolve of one thread an output,
or it would compare nothing.  The probes
(``ceilings.py``, also ``--occupancy``) must build without a GPU: the GPU run
is no place to find a typo.
"""

from __future__ import annotations

import pytest
from script_modules import load_script

from tropical_gemm.engines.cuda.plan import plan_forward
from tropical_gemm.jit import Target
from tropical_gemm.jit.compiler import compile_program


def _strides(batch: int, rows: int, cols: int, order: str) -> tuple[int, ...]:
    inner = (cols, 1) if order == "C" else (1, rows)
    return ((rows * cols,) if batch > 1 else ()) + inner


def test_the_cases_take_every_way_of_finding_the_winners():
    """No resolve (every candidate compared), the staged resolve and the resolve of one thread an output."""
    bench = load_script("benchmarks", "argmax_short_k")
    ways = set()
    for dtype, batch, m, k, n, order in bench.CASES:
        lead = (batch,) if batch > 1 else ()
        plan = plan_forward((*lead, m, k), _strides(batch, m, k, order), (*lead, k, n), _strides(batch, k, n, order),
                            lead, dtype, "max_plus", True, 132, True)
        assert plan.splits == 1, (dtype, batch, m, k, n)
        ways.add("compared" if plan.resolve is None else plan.resolve.spec.op)
    assert ways == {"compared", "argmax_resolve", "argmax_resolve_staged"}


@pytest.mark.nvrtc
def test_the_ceiling_probes_are_entry_points_of_one_sm_90_program():
    ceilings = load_script("benchmarks", "ceilings")
    pairs = [("max_plus", dtype) for dtype in ("float32", "float64", "int32")]
    kernel = compile_program(ceilings.probe_source(pairs), ceilings.probe_name(*pairs[0]), Target("cubin", 90))
    for pair in pairs:
        assert ceilings.probe_name(*pair).encode() in kernel.binary
