"""benchmarks/boolean_ceilings.py's probes compile for sm_90 with no GPU: the GPU run is no place to find a typo."""

from __future__ import annotations

import pytest
from script_modules import load_script

from tropical_gemm.jit import Target
from tropical_gemm.jit.compiler import compile_program

pytestmark = pytest.mark.nvrtc


def test_every_probe_is_an_entry_point_of_one_sm_90_program():
    probes = load_script("benchmarks", "boolean_ceilings")
    source = f"#define CHAINS {probes._MMA_CHAINS}\n" + probes._SOURCE
    kernel = compile_program(source, "tg_probe_lop3", Target("cubin", 90))
    for name, per_instruction, _ in probes._PROBES.values():
        assert name.encode() in kernel.binary
        assert per_instruction in (32, 16 * 8 * 256, 16 * 8 * 32, 16 * 8 * 16)


def test_the_table_gives_the_time_of_a_16384_cube_at_each_rate():
    probes = load_script("benchmarks", "boolean_ceilings")
    lines = probes.table({"environment": {"device": "GPU"}, "rates_t_per_s": {"lop3": 16384 ** 3 / 1e12 / 0.01}})
    assert "10.00 ms" in lines[1]
