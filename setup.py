"""The CPU engine's kernels as an extension module, built where a C++ compiler is found.

Everything else about the package is in pyproject.toml.  The extension is
optional: where it does not build (no compiler), the install goes on and the
CPU engine compiles its kernels with numba on first use instead.  Its sources
are compiled side by side, one per instruction set (see
tropical_gemm/engines/cpu/cpp/module.cpp for the choice at run time).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "tropical_gemm/engines/cpu/cpp"

#: GCC and Clang: -O2 with the vectoriser's dynamic cost model vectorised the
#: kernels as -O3 did, and compiled faster (docs/performance.md, "CPU first call");
#: no contraction into FMA, so every result is the correctly rounded one the
#: other engines compute.
UNIX_FLAGS = ["-std=c++17", "-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-ffp-contract=off",
              "-fvisibility=hidden"]
MSVC_FLAGS = ["/std:c++17", "/O2", "/fp:precise"]


class BuildNative(build_ext):
    """build_ext with the compiler's flags for the kernels, and their sources compiled in parallel."""

    def build_extension(self, ext: Extension) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        ext.extra_compile_args = MSVC_FLAGS if msvc else UNIX_FLAGS
        if not msvc:  # Python's own CFLAGS carry -g and -O3: debug info lengthens the kernels' build
            for command in ("compiler_so", "compiler_so_cxx"):  # the second: setuptools >= 72, for C++
                if hasattr(self.compiler, command):
                    setattr(self.compiler, command,
                            [flag for flag in getattr(self.compiler, command) if flag not in ("-g", "-O3")])
        serial_compile = self.compiler.compile

        def compile_in_parallel(sources: list[str], *args: object, **kwargs: object) -> list[str]:
            with ThreadPoolExecutor() as pool:
                objects = pool.map(lambda source: serial_compile([source], *args, **kwargs), sources)
                return [obj for batch in objects for obj in batch]

        self.compiler.compile = compile_in_parallel
        super().build_extension(ext)


setup(
    ext_modules=[Extension(
        "tropical_gemm.engines.cpu._native",
        sources=[f"{NATIVE}/{name}.cpp" for name in ("isa_avx512", "isa_avx2", "isa_base", "module")],
        depends=[f"{NATIVE}/{name}" for name in ("tile.hpp", "tile_api.h", "isa_table.inc")],
        language="c++",
        optional=True,
    )],
    cmdclass={"build_ext": BuildNative},
)
