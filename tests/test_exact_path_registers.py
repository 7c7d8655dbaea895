"""Issue 32, item 2: the int32 exact path's forward kernels keep their values in registers.

Each kernel with the exact integer path (int32 under max_plus, min_plus, max_times: every tile family,
plain and argmax) is compiled for sm_90, the device host's GPU, by the NVRTC found here: no GPU is
needed.  ptxas's resource report (``--ptxas-options=-v``, a report only: the code is the registry's)
must show no bytes spilled to local memory in any of the program's functions.  Values the kernels keep
in local memory on purpose (a tile's corner, the stream schedule's state, the exact path's hand-over)
are a stack frame, not spills.
"""

from __future__ import annotations

import re

import pytest

from tropical_gemm.jit import Target, catalogue, kernel_source
from tropical_gemm.jit.compiler import compile_program
from tropical_gemm.jit.source import kernel_options

EXACT_INT32 = re.compile(r"^tg_forward_(argmax_)?(max_plus|min_plus|max_mul)_i32_")
_SPILLS = re.compile(r"(\d+) bytes spill stores")


@pytest.mark.nvrtc
@pytest.mark.parametrize("spec", [s for s in catalogue() if EXACT_INT32.match(s.name)], ids=lambda s: s.name)
def test_the_int32_exact_path_spills_no_registers(spec):
    kernel = compile_program(kernel_source(spec), spec.name, Target("cubin", 90),
                             (*kernel_options(spec), "--ptxas-options=-v"))
    spilled = [int(n) for n in _SPILLS.findall(kernel.log)]
    assert spilled, f"no ptxas resource report for {spec.name}:\n{kernel.log}"
    assert not any(spilled), f"{spec.name} spills {spilled} bytes (ptxas, NVRTC {kernel.nvrtc_version}):\n{kernel.log}"
