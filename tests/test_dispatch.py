"""tropical_gemm.matmul as numpy, torch and dask users expect it, and the API's edges (issues 18, 19, 20)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tropical_gemm as tg

PACKAGE = Path(tg.__file__).resolve().parent


# ----------------------------------------------------------------- torch


@pytest.mark.torch
def test_torch_cpu_tensors_come_back_as_tensors_with_autograd():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[0.0, 3.0]], requires_grad=True)
    b = torch.tensor([[1.0], [1.0]])
    c = tg.matmul(a, b, "max_plus")
    assert isinstance(c, torch.Tensor) and c.tolist() == [[4.0]]
    c.sum().backward()
    assert a.grad.tolist() == [[0.0, 1.0]]
    values, argmax = tg.matmul(a, b, argmax=True)
    assert isinstance(values, torch.Tensor) and argmax.tolist() == [[1]]


@pytest.mark.torch
@pytest.mark.gpu
def test_torch_cuda_tensors_come_back_as_cuda_tensors_with_autograd():
    import torch

    a = torch.tensor([[0.0, 3.0]], device="cuda", requires_grad=True)
    c = tg.matmul(a, torch.ones(2, 1, device="cuda"))
    assert c.is_cuda and c.tolist() == [[4.0]]
    c.sum().backward()
    assert a.grad.tolist() == [[0.0, 1.0]]


@pytest.mark.torch
def test_torch_mixed_with_numpy_or_given_out_is_a_clear_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"b is a numpy.ndarray but the other operand is a torch tensor.*as_tensor"):
        tg.matmul(torch.ones(2, 2), np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="out= is not supported for torch tensors"):
        tg.matmul(torch.ones(2, 2), torch.ones(2, 2), out=torch.empty(2, 2))
    with pytest.raises(TypeError, match="matmul_backward takes numpy or cupy arrays, not torch tensors; gradients come "
                                        "from autograd"):
        tg.matmul_backward(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.int32))


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half_tensors_are_rounded_once_and_differentiable(dtype):
    torch = pytest.importorskip("torch")
    half = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, 5, generator=gen).to(half).requires_grad_()
    b = torch.randn(5, 2, generator=gen).to(half)
    c = tg.matmul(a, b, "min_plus")
    assert c.dtype == half
    assert torch.equal(c, tg.matmul(a.detach().float(), b.float(), "min_plus").to(half))
    c.float().sum().backward()
    assert a.grad.dtype == half and a.grad.sum().item() == 3 * 4 * 2


@pytest.mark.torch
def test_torch_vectors_follow_torch_matmul():
    torch = pytest.importorskip("torch")
    v = torch.tensor([0.0, 1.0], requires_grad=True)
    m = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    assert tg.matmul(v, m).tolist() == [2.0, 6.0]
    assert tg.matmul(m, v).tolist() == [2.0, 6.0]
    scalar = tg.matmul(v, v)
    assert scalar.shape == () and scalar.item() == 2.0
    scalar.backward()
    assert v.grad.tolist() == [0.0, 2.0]


# ------------------------------------------------------------------ dask


def test_dask_arrays_stay_lazy_and_match_numpy():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(6, 8)), rng.normal(size=(8, 5))
    c = tg.matmul(da.from_array(a, chunks=3), da.from_array(b, chunks=4), "max_plus")
    assert isinstance(c, da.Array)
    np.testing.assert_array_equal(c.compute(), tg.matmul(a, b, "max_plus"))
    v = tg.matmul(da.from_array(a, chunks=3), b[:, 0])  # a dask array and a 1-D numpy operand
    assert isinstance(v, da.Array) and v.shape == (6,)
    np.testing.assert_array_equal(v.compute(), tg.matmul(a, b[:, 0]))
    with pytest.raises(TypeError, match="out= is not supported for dask arrays"):
        tg.matmul(da.from_array(a), b, out=np.empty((6, 5)))


def test_dask_is_not_imported_for_numpy_calls():
    code = "import sys, numpy as np, tropical_gemm as tg; tg.matmul(np.ones(2), np.ones(2)); print('dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# ---------------------------------------------------------------- masked


@pytest.mark.parametrize("where", ["a", "b", "out"])
def test_masked_arrays_are_refused(where):
    plain = np.ones((2, 2))
    masked = np.ma.masked_array(np.ones((2, 2)), mask=[[True, False], [False, False]])
    args = {"a": plain, "b": plain, "out": None, where: masked}
    with pytest.raises(TypeError, match=rf"{where} is a masked array, whose mask tropical_gemm would ignore.*filled"):
        tg.matmul(args["a"], args["b"], out=args["out"])


def test_masked_arrays_are_refused_by_the_backward():
    masked = np.ma.masked_array(np.ones((2, 2)))
    with pytest.raises(TypeError, match="masked array"):
        tg.matmul_backward(np.ones((2, 2)), masked, np.ones((2, 2)), np.zeros((2, 2), np.int32))


# --------------------------------------------------------------- vectors


@pytest.mark.parametrize("shape_a,shape_b", [((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,)), ((2, 4, 5), (5,)),
                                             ((5,), (2, 5, 3))])
def test_vectors_follow_numpy_matmul(engine, shape_a, shape_b):
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
    expected_shape = np.matmul(a, b).shape
    c, idx = engine.get(*tg.matmul(*engine.put(a, b), "max_plus", argmax=True))
    assert c.shape == idx.shape == expected_shape
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    full, full_idx = tg.matmul(a2, b2, "max_plus", argmax=True)
    np.testing.assert_array_equal(c, full.reshape(expected_shape))
    np.testing.assert_array_equal(idx, full_idx.reshape(expected_shape))


def test_vector_gradients_have_the_vectors_shape():
    a, b = np.array([0.0, 3.0]), np.array([[1.0, 0.0], [1.0, 9.0]])
    c, idx = tg.matmul(a, b, argmax=True)
    grad_a, grad_b = tg.matmul_backward(np.ones_like(c), a, b, idx)
    assert grad_a.shape == (2,) and grad_a.tolist() == [0.0, 2.0]
    assert grad_b.tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_out_with_a_vector_operand_has_the_squeezed_shape():
    out = np.empty(3)
    assert tg.matmul(np.ones(4), np.ones((4, 3)), out=out) is out and out.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match=r"out has shape \(1, 3\), expected \(3,\)"):
        tg.matmul(np.ones(4), np.ones((4, 3)), out=np.empty((1, 3)))


# ------------------------------------------------------ out= subclasses


def test_out_may_be_a_memmap(tmp_path):
    out = np.memmap(tmp_path / "c.bin", dtype=np.float64, mode="w+", shape=(2, 3))
    result = tg.matmul(np.ones((2, 4)), np.ones((4, 3)), out=out)
    assert result is out
    out.flush()
    assert np.fromfile(tmp_path / "c.bin").tolist() == [2.0] * 6


def test_a_read_only_memmap_out_says_how_to_open_it(tmp_path):
    np.zeros((2, 3)).tofile(tmp_path / "c.bin")
    out = np.memmap(tmp_path / "c.bin", dtype=np.float64, mode="r", shape=(2, 3))
    with pytest.raises(ValueError, match="out is read-only.*mode='r'; use 'r\\+'"):
        tg.matmul(np.ones((2, 4)), np.ones((4, 3)), out=out)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_out_may_be_a_matrix():
    out = np.matrix(np.zeros((2, 3)))
    assert tg.matmul(np.ones((2, 4)), np.ones((4, 3)), "min_plus", out=out) is out
    assert out.tolist() == [[2.0] * 3] * 2


# ---------------------------------------------------------- huge outputs


def test_an_output_larger_than_memory_is_a_memory_error_naming_its_size():
    a, b = np.empty((2**22, 0)), np.empty((0, 2**22))  # 2**44 float64 outputs: 128 TiB, nothing allocated
    with pytest.raises(MemoryError, match=r"the product's outputs need 128.0 TiB, more than the .* of host memory"):
        tg.matmul(a, b)
    with pytest.raises(MemoryError, match=r"need 192.0 TiB"):  # and the int32 argmax
        tg.matmul(a, b, argmax=True)


# ---------------------------------------------------------------- semiring


@pytest.mark.parametrize("field,value", [("add", "sum"), ("add", None), ("mul", "pow"), ("mul", None)])
def test_a_bad_semiring_is_refused_when_made(field, value):
    fields = {"name": "mine", "aliases": (), "add": "max", "mul": "plus", "description": "", field: value}
    listed = "max, min" if field == "add" else "plus, times, min, max"
    with pytest.raises(ValueError, match=rf"Semiring {field}={value!r} is not valid; . must be one of {listed}"):
        tg.Semiring(**fields)


def test_an_unsupported_pair_is_refused_listing_the_valid_ones():
    with pytest.raises(ValueError, match=r"\(add='min', mul='times'\) is not a supported semiring; valid pairs"):
        tg.Semiring("min_times", (), "min", "times", "")


def test_a_custom_semiring_computes_as_its_catalogue_pair():
    mine = tg.Semiring("longest", ("mine",), "max", "plus", "my own name for max-plus")
    a, b = np.array([[0.0, 3.0]]), np.array([[1.0], [2.0]])
    assert tg.get_semiring(mine) is tg.get_semiring("max_plus")
    np.testing.assert_array_equal(tg.matmul(a, b, mine), tg.matmul(a, b, "max_plus"))


def test_the_tie_rule_is_written_once():
    # The torch layer and the CPU engine take Semiring.winner_is_a; nothing else spells "a <= b" | isnan(b).
    sources = {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py")}
    spelled = [name for name, text in sources.items() if "isnan(b" in text.replace(" ", "")]
    assert spelled == ["semirings.py"] or set(spelled) <= {"semirings.py", "engines/cpu.py"}
    assert "Semiring.winner_is_a" in (PACKAGE / "cuda_src" / "preamble.cuh").read_text()


# -------------------------------------------------------------- packaging


def test_dir_lists_no_import_helpers():
    leaked = {"import_module", "version", "annotations", "PackageNotFoundError"} & set(dir(tg))
    assert not leaked


def test_version_module_imports_nothing():
    tree = ast.parse((PACKAGE / "_version.py").read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    from tropical_gemm._version import __version__

    assert tg.__version__ == __version__


def test_lower_layers_take_the_version_from_version_py():
    for path in (PACKAGE / "jit").rglob("*.py"):
        assert "from .. import __version__" not in path.read_text(), path


def test_dead_code_is_gone():
    from tropical_gemm import dtypes

    assert not hasattr(dtypes, "is_float") and not hasattr(tg.Semiring, "grad_rule")


def test_dispatching_plain_arrays_imports_nothing(tmp_path):
    """numpy imports numpy.ma lazily, and loading it costs more than a warm product: the dispatch rule must not."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from tropical_gemm.frontends import front_end; "
            "assert front_end((np.ones(2), [1.0, 2.0]), None, 'matmul') is None; "
            "print(sorted(m for m in ('numpy.ma', 'torch', 'dask') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={**__import__("os").environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
