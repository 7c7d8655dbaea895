"""One dispatch rule for ``matmul`` and ``einsum`` (issue 34.1, 34.8), and no import circles (issue 33.5).

Each input kind goes through both entry points and must come back as the
same kind with the values of the naive reference: numpy, lists and Python
scalars (numpy's promotion), masked arrays (refused), dask (lazy), torch
(tensors, every dtype ``tropical_matmul`` takes) and cupy (on the GPU).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import tropical_gemm as tg
from reference import reference_matmul

PACKAGE = Path(tg.__file__).resolve().parent
ENTRY_POINTS = ["matmul", "einsum"]


def product(entry: str, a, b, semiring: str = "max_plus"):
    """``a ⊗ b`` through one entry point."""
    return tg.matmul(a, b, semiring) if entry == "matmul" else tg.einsum("ij,jk->ik", a, b, semiring=semiring)


def operands(dtype=np.float64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(5, 7)).astype(dtype), rng.normal(size=(7, 3)).astype(dtype)


# ------------------------------------------------------------------- numpy, lists and scalars


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_numpy_arrays_come_back_as_numpy_arrays(entry):
    a, b = operands()
    c = product(entry, a, b)
    assert type(c) is np.ndarray
    np.testing.assert_array_equal(c, reference_matmul(a, b, "max_plus")[0])


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_lists_take_numpys_promotion(entry):
    a, b = operands(np.float32)
    c = product(entry, a, b.tolist())  # a list of Python floats is float64, as in numpy.matmul
    assert c.dtype == np.matmul(a, b.tolist()).dtype == np.float64
    np.testing.assert_array_equal(c, reference_matmul(a.astype(np.float64), np.asarray(b.tolist()), "max_plus")[0])
    ints = product(entry, a.astype(np.int32), b.round().astype(int).tolist())  # int32 with Python ints: int64
    assert ints.dtype == np.matmul(a.astype(np.int32), b.round().astype(int).tolist()).dtype


def test_python_scalars_are_weak_as_in_nep_50():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = tg.einsum("ij,->ij", a, 2.0, semiring="max_plus")  # a ⊗ 2 = a + 2, in a's dtype
    assert c.dtype == np.float32 and c.tolist() == (a + 2).tolist()
    with pytest.raises(OverflowError):
        tg.einsum("ij,->ij", a.astype(np.int32), 2**40)
    with pytest.raises(TypeError, match="unsupported dtype bool"):
        tg.matmul([[True]], [[False]])


def test_arrays_of_two_dtypes_stay_an_error_beside_a_list():
    with pytest.raises(TypeError, match="different dtypes"):
        tg.einsum("ij,jk,kl->il", np.ones((2, 2), np.float32), np.ones((2, 2)), [[1.0, 2.0], [3.0, 4.0]])


# ------------------------------------------------------------------- masked


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_masked_arrays_are_refused(entry):
    masked = np.ma.masked_array([[1.0, 100.0]], mask=[[0, 1]])
    with pytest.raises(TypeError, match="masked array, whose mask tropical_gemm would ignore.*filled"):
        product(entry, masked, np.zeros((2, 1)))


# ------------------------------------------------------------------- dask


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_dask_arrays_stay_lazy(entry):
    da = pytest.importorskip("dask.array")
    a, b = operands(seed=1)
    c = product(entry, da.from_array(a, chunks=(2, 3)), da.from_array(b, chunks=(4, 2)), "min_plus")
    assert isinstance(c, da.Array)
    np.testing.assert_array_equal(c.compute(), reference_matmul(a, b, "min_plus")[0])


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("ii->i", [(5, 5)]),
    ("ij->", [(4, 6)]),
    ("...ij,jk->...ik", [(2, 1, 3, 4), (4, 2)]),
    ("ij,ij->i", [(4, 5), (4, 5)]),
])
def test_dask_einsum_matches_the_numpy_einsum(subscripts, shapes):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(2)
    arrays = [rng.normal(size=s) for s in shapes]
    lazy = tg.einsum(subscripts, *[da.from_array(x, chunks=2) for x in arrays], semiring="max_plus")
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), tg.einsum(subscripts, *arrays, semiring="max_plus"))


def test_dask_einsum_refuses_what_it_cannot_compute_when_called_not_when_computed():
    """and_or is refused as by tgd.matmul (not as an unsupported bool dtype), and a single operand's
    dtype and an unknown optimize are errors of the call, not of the graph's compute."""
    da = pytest.importorskip("dask.array")
    a = da.ones((2, 2), dtype=bool, chunks=1)
    with pytest.raises(TypeError, match="and_or semiring takes numpy arrays in einsum, not dask arrays"):
        tg.einsum("ij,jk->ik", a, a, semiring="and_or")
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        tg.einsum("ij->i", da.ones((2, 2), dtype=complex, chunks=1))
    with pytest.raises(ValueError, match="optimize='no-such' is not a known strategy"):
        tg.einsum("ij,jk->ik", da.ones((2, 2), chunks=1), da.ones((2, 2), chunks=1), optimize="no-such")


def test_dask_einsum_with_a_configuration_is_a_clear_error():
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="return_configuration=True is not supported for dask arrays"):
        tg.einsum("ij,jk->ik", da.ones((2, 2)), da.ones((2, 2)), return_configuration=True)


# ------------------------------------------------------------------- torch


TORCH_DTYPES = ["float32", "float64", "int32", "int64", "float16", "bfloat16"]


@pytest.mark.torch
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_tensors_come_back_as_tensors_in_every_dtype(entry, dtype):
    torch = pytest.importorskip("torch")
    a, b = operands(seed=3)
    ta, tb = (torch.from_numpy(x * 4).to(getattr(torch, dtype)) for x in (a, b))
    c = product(entry, ta, tb)
    assert isinstance(c, torch.Tensor) and c.dtype == ta.dtype
    want = reference_matmul(ta.double().numpy(), tb.double().numpy(), "max_plus")[0]
    assert torch.equal(c, torch.from_numpy(want).to(ta.dtype))  # computed exactly, rounded once


@pytest.mark.torch
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_torch_keeps_autograd_through_both_entry_points(entry):
    torch = pytest.importorskip("torch")
    a, b = (torch.from_numpy(x) for x in operands(seed=4))
    a.requires_grad_()
    product(entry, a, b).sum().backward()
    assert a.grad.sum().item() == 5 * 3  # one winner per output entry


# ------------------------------------------------------------------- cupy


@pytest.mark.gpu
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "float16"])
def test_cupy_arrays_come_back_as_cupy_arrays_in_every_dtype(entry, dtype):
    import cupy

    a, b = operands(seed=5)
    a, b = (x * 4 for x in (a, b))
    a, b = a.astype(dtype), b.astype(dtype)
    c = product(entry, cupy.asarray(a), cupy.asarray(b))
    assert type(c) is cupy.ndarray and c.dtype == a.dtype
    want = reference_matmul(a.astype(np.float64), b.astype(np.float64), "max_plus")[0].astype(dtype)
    np.testing.assert_array_equal(cupy.asnumpy(c), want)


@pytest.mark.torch
@pytest.mark.gpu
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_cuda_tensors_come_back_as_cuda_tensors(entry):
    import torch

    a, b = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in operands(seed=6))
    c = product(entry, a, b)
    assert c.is_cuda and c.dtype == torch.bfloat16
    assert torch.equal(c.cpu(), product(entry, a.cpu(), b.cpu()))


# ------------------------------------------------------------------- import circles


#: The package's compiled extension modules (setup.py's ``ext_modules``).
COMPILED = ("tropical_gemm.engines.cpu._native",)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports, at the top or inside functions.

    ``from . import x`` imports the submodule ``x``, not the package's
    ``__init__``; a package's ``__init__`` is counted only where it is named.
    Compiled extensions (``COMPILED``, whether built here or not) are
    submodules too, and import nothing of ours.
    """
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph: dict[str, set[str]] = {name: set() for name in COMPILED}
    modules.update(dict.fromkeys(COMPILED, (None, False)))
    for name, (path, is_package) in modules.items():
        if path is None:
            continue
        package = name if is_package else name.rsplit(".", 1)[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in modules]
                imported.update(submodules)
                if len(submodules) < len(node.names):
                    imported.add(module)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_the_import_circle_finder_finds_one():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert "tropical_gemm.frontends" in graph["tropical_gemm.api"]  # the graph sees imports inside functions
    assert all(f'"{name}"' in (PACKAGE.parent / "setup.py").read_text() for name in COMPILED)
    assert import_circles(graph) == []
