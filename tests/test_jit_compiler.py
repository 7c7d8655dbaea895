"""The NVRTC stage: arch handling, fixed options, real compiles without a GPU, clear errors."""

from __future__ import annotations


import pytest

from jit_helpers import SMALL_SOURCE
from tropical_gemm.jit import COMPILE_OPTIONS, CompileError, NvrtcUnavailableError, UnsupportedArchError, make_spec
from tropical_gemm.jit import compiler
from tropical_gemm.jit.compiler import Target, compile_program, parse_arch, resolve_target
from tropical_gemm.jit.source import kernel_source
from tropical_gemm.jit.spec import BACKWARD_OPS


@pytest.mark.parametrize("arch, expected", [
    ("sm_90", ("sm", 90)), ("SM_90", ("sm", 90)), ("sm90", ("sm", 90)), ("90", ("sm", 90)), ("9.0", ("sm", 90)),
    (90, ("sm", 90)), ((9, 0), ("sm", 90)), ("compute_80", ("compute", 80)), ("sm_100", ("sm", 100)),
    ("10.0", ("sm", 100)), ((12, 1), ("sm", 121)),
])
def test_parse_arch_accepts_the_usual_spellings(arch, expected):
    assert parse_arch(arch) == expected


@pytest.mark.parametrize("arch", ["sm_90a", "ampere", "", "sm_9", 9, True, (9,), 3.5, None])
def test_parse_arch_rejects_everything_else(arch):
    with pytest.raises(UnsupportedArchError, match="cannot read"):
        parse_arch(arch)


def test_options_never_change_numerics():
    # Bit-identity with the CPU engine rests on these: no flush-to-zero, IEEE division/sqrt, no FMA contraction.
    assert {"--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false"} <= set(COMPILE_OPTIONS)
    assert not any("fast" in o or "ftz=true" in o for o in COMPILE_OPTIONS)
    assert Target("cubin", 90).options == ("-arch=sm_90", *COMPILE_OPTIONS)
    assert Target("ptx", 90).options[0] == "-arch=compute_90"


@pytest.mark.nvrtc
class TestWithNvrtc:
    def test_supported_arch_gets_a_cubin(self):
        assert resolve_target("sm_90") == Target("cubin", 90)
        assert resolve_target("compute_90") == Target("ptx", 90)

    def test_newer_gpu_than_nvrtc_gets_ptx_capped_at_its_maximum(self):
        newest = compiler.supported_archs()[-1]
        assert resolve_target(f"sm_{newest + 50}") == Target("ptx", newest)

    def test_arch_older_than_nvrtc_supports_is_a_clear_error(self):
        with pytest.raises(UnsupportedArchError, match="older than every architecture"):
            resolve_target("sm_35")

    def test_compiles_a_real_cubin_without_a_gpu(self):
        result = compile_program(SMALL_SOURCE.format(name="tg_small", bias=0), "tg_small", Target("cubin", 90))
        assert result.binary[:4] == b"\x7fELF"
        assert b"tg_small" in result.binary
        assert result.options == Target("cubin", 90).options
        assert result.nvrtc_version == compiler.nvrtc_version()
        assert result.compile_seconds > 0

    def test_ptx_target_yields_ptx_for_that_arch(self):
        result = compile_program(SMALL_SOURCE.format(name="tg_small", bias=0), "tg_small", Target("ptx", 80))
        text = result.binary.decode()
        assert ".entry tg_small" in text and ".target sm_80" in text

    def test_compile_error_names_the_kernel_and_quotes_the_log(self):
        broken = 'extern "C" __global__ void tg_broken(float* x) { x[0] = undefined_thing; }'
        with pytest.raises(CompileError) as caught:
            compile_program(broken, "tg_broken", Target("cubin", 90))
        message = str(caught.value)
        assert "tg_broken" in message and "sm_90" in message and "undefined_thing" in message
        assert "undefined_thing" in caught.value.log and caught.value.kernel == "tg_broken"

    def test_missing_entry_point_is_caught_at_compile_time(self):
        source = SMALL_SOURCE.format(name="tg_other_name", bias=0)
        with pytest.raises(CompileError, match="no entry point named 'tg_expected'"):
            compile_program(source, "tg_expected", Target("cubin", 90))

    @pytest.mark.parametrize("op", ["forward", "forward_argmax", *BACKWARD_OPS])
    def test_library_kernels_compile_to_ptx_without_numerics_changing_instructions(self, op):
        # PTX is cheap to produce and shows what the options did: no .ftz, no fused multiply-add, no approximations.
        spec = make_spec(op, "max_mul", "float32")
        text = compile_program(kernel_source(spec), spec.name, Target("ptx", 90)).binary.decode()
        assert f".entry {spec.name}" in text
        for forbidden in (".ftz", "fma.", ".approx"):
            assert forbidden not in text, forbidden

    def test_library_kernel_compiles_to_cubin(self):
        spec = make_spec("forward", "max_plus", "float32")
        result = compile_program(kernel_source(spec), spec.name, resolve_target("sm_90"))
        assert result.binary[:4] == b"\x7fELF" and spec.name.encode() in result.binary


def test_missing_nvrtc_says_how_to_install_it(no_nvrtc_library):
    with pytest.raises(NvrtcUnavailableError, match="no NVRTC library found.*pip install nvidia-cuda-nvrtc"):
        compiler.nvrtc_version()


def test_unloadable_nvrtc_library_says_how_to_install_it(monkeypatch):
    class BrokenBinding:
        @staticmethod
        def version():
            raise OSError("libnvrtc.so.13: cannot open shared object file")

    monkeypatch.setattr(compiler, "nvrtc_module", lambda: BrokenBinding)
    compiler.nvrtc_version.cache_clear()
    try:
        with pytest.raises(NvrtcUnavailableError, match="libnvrtc.so.13.*pip install nvidia-cuda-nvrtc"):
            compiler.nvrtc_version()
    finally:
        compiler.nvrtc_version.cache_clear()
