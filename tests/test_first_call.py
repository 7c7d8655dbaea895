"""Issue 15: every public path's first call compiles nothing outside the registry and imports no cupyx.scipy.

Each case runs in a fresh interpreter (tests/first_call_cases.py) with an
empty kernel cache of ours and an empty ``CUPY_CACHE_DIR``, which must stay
empty: any CuPy reduction, ufunc, ``where``, fill or fancy index on a
product path would compile a kernel there.  ``import cupy`` (14) imports the
bare ``cupyx`` package itself, so the check is on its submodules
(``take_along_axis`` imported ``cupyx.scipy`` and with it ``scipy.sparse``).  Tiered compilation is on, so the
first calls run on baseline kernels and the repeat on the tuned ones, and
both must give the CPU engine's bits.  The lean-import checks need no GPU.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from jit_helpers import REPO, last_json_line, run_python

CASES = ["float32", "float64", "int32", "int64", "float32-out", "backward", "torch", "einsum", "half"]


@pytest.mark.gpu
@pytest.mark.tiered
@pytest.mark.parametrize("tiered", ["1", "0"])
@pytest.mark.parametrize("case", CASES)
def test_first_call_compiles_only_registry_kernels(case, tiered, tmp_path):
    if tiered == "0" and case not in ("float32", "torch"):
        pytest.skip("tiering off: the float32 and torch cases cover it")  # visible, not hidden
    if case == "torch":
        pytest.importorskip("torch")
    env = {"CUPY_CACHE_DIR": str(tmp_path / "cupy"), "TROPICAL_GEMM_CACHE_DIR": str(tmp_path / "ours"),
           "CUDA_CACHE_DISABLE": "1", "TROPICAL_GEMM_TIERED": tiered}
    result = run_python(f"import sys; sys.argv = ['x', {case!r}]; import first_call_cases as c; c.main({case!r})",
                        env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = last_json_line(result.stdout)
    assert report["cupy_cache_files"] == [], "CuPy compiled kernels of its own"
    assert report["cupyx_submodules"] == [] and not report["scipy"]
    assert report["background_failures"] == 0
    if tiered == "1" and case != "backward":  # the backward has no tuned forward to wait for
        assert report["baseline_launches"] > 0 and report["tuned_swaps"] > 0
    if tiered == "0":
        assert report["baseline_launches"] == 0


LEAN = """
    import json, sys
    {imports}
    heavy = ("cupy", "cupyx", "scipy", "dask", "numba", "filelock")
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


@pytest.mark.torch
def test_import_tropical_gemm_torch_is_lean():
    pytest.importorskip("torch")
    result = run_python(LEAN.format(imports="import tropical_gemm.torch"), {})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_first_call_modules_import_nothing_heavy():
    """What a first CUDA call imports (engine, its small kernels, tiering, registry) pulls no cupy, cupyx or scipy."""
    imports = "import tropical_gemm, tropical_gemm.engines.cuda, tropical_gemm.engines.cuda_aux, tropical_gemm.jit.tiering"
    result = run_python(LEAN.format(imports=imports), {})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


#: CuPy calls that compile a kernel of CuPy's own (or import cupyx) the first time a process makes them.
_COMPILING = {"max", "min", "argmax", "argmin", "where", "take_along_axis", "arange", "fill", "astype", "maximum",
              "minimum", "ascontiguousarray", "ElementwiseKernel", "ReductionKernel", "RawKernel", "zeros",
              "full", "sum", "copyto", "get_array_module"}
PRODUCT_PATH_MODULES = ["tropical_gemm/engines/cuda_aux.py",
                        "tropical_gemm/dask.py", "tropical_gemm/api.py", "tropical_gemm/half.py",
                        *sorted(str(p.relative_to(REPO)) for package in ("engines/cuda", "einsum", "torch")
                                for p in (REPO / "tropical_gemm" / package).glob("*.py"))]


@pytest.mark.parametrize("module", PRODUCT_PATH_MODULES)
def test_product_paths_call_no_compiling_cupy_function(module):
    """A static guard beside the GPU test: no ``cupy.<f>``/``xp.<f>``/``cp.<f>`` of those names, no cupyx."""
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    found = [f"{node.value.id}.{node.attr} (line {node.lineno})" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
             and node.value.id in ("cupy", "cp", "xp") and node.attr in _COMPILING]
    found += [f"import cupyx (line {node.lineno})" for node in ast.walk(tree)
              if isinstance(node, (ast.Import, ast.ImportFrom))
              and "cupyx" in ((node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name)]
    assert found == [], f"{module} calls CuPy functions that compile kernels of their own: {found}"
    assert Path(REPO / module).exists()


LAZY_TRAP = """
    import sys, types
    import torch
    import tropical_gemm

    class LazyModule(types.ModuleType):  # as cupy keeps cupyx: loading it costs most of a second
        def __getattr__(self, name):
            raise SystemExit(f"the lazy module was loaded (through {name!r})")

    sys.modules["lazy_like_cupyx"] = LazyModule("lazy_like_cupyx")
    from tropical_gemm.torch import tropical_matmul
    a, b = torch.rand(3, 4, requires_grad=True), torch.rand(4, 2, requires_grad=True)
    tropical_matmul(a, b, "max_plus").sum().backward()
    print("untouched")
"""


def test_registering_the_torch_ops_loads_no_lazy_module():
    """torch records each op's source through inspect.getmodule, whose scan of sys.modules would load cupy's lazy cupyx."""
    pytest.importorskip("torch")
    result = run_python(LAZY_TRAP, {})
    assert result.returncode == 0 and result.stdout.strip().endswith("untouched"), result.stdout + result.stderr


TORCH_STORY = """
    import sys, torch
    torch.manual_seed(0)
    a = torch.randn(96, 80, device="cuda", requires_grad=True)
    b = torch.randn(80, 64, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    from tropical_gemm.torch import tropical_matmul
    import tropical_gemm.jit as jit
    tropical_matmul(a, b, "max_plus").sum().backward()
    torch.cuda.synchronize()
    jit.wait()
    print("cupy" in sys.modules, jit.stats()["compiled"])
"""


@pytest.mark.gpu
@pytest.mark.torch
def test_a_warm_torch_call_never_imports_cupy(tmp_path):
    """Issue 15: a torch forward and backward that find their kernels cached launch through the driver alone.

    The cold run compiles (and may import CuPy for NVRTC); the warm one, in a
    fresh process on the same cache, must compile nothing and import no CuPy.
    """
    pytest.importorskip("torch")
    env = {"TROPICAL_GEMM_CACHE_DIR": str(tmp_path / "ours"), "CUPY_CACHE_DIR": str(tmp_path / "cupy")}
    cold = run_python(TORCH_STORY, env, timeout=600)
    assert cold.returncode == 0, cold.stderr[-4000:]
    assert int(cold.stdout.split()[-1]) > 0  # it did compile, so the warm run below reads a filled cache
    warm = run_python(TORCH_STORY, env, timeout=600)
    assert warm.returncode == 0, warm.stderr[-4000:]
    assert warm.stdout.split()[-2:] == ["False", "0"], warm.stdout
