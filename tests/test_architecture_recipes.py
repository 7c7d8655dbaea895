"""The recipes of docs/architecture.md, followed exactly as written there.

"Add a semiring": one call to ``tropical_gemm.semirings.register_semiring``
with a new (⊕, ⊗) pair; the CPU engine then computes it and every kernel of
the catalogue compiles for it through NVRTC (no GPU needed).  The toy here
is min-times on positive numbers (least product of gains along a path),
the one pair of a known ⊕ and ⊗ the catalogue does not ship.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.jit import make_spec, resolve_target, source, warmup
from tropical_gemm.jit.registry import build_request
from tropical_gemm.semirings import register_semiring, unregister_semiring

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


@pytest.fixture
def min_times():
    sr = register_semiring("min_times", "min", "times", "least product of gains along a path", aliases=("mintimes",))
    try:
        yield sr
    finally:
        unregister_semiring("min_times")
    assert "min_times" not in tg.semirings()


def documented_recipe() -> str:
    """The first Python block under "Add a semiring" in docs/architecture.md."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Add a semiring"):]
    return section[section.index("```python\n") + len("```python\n"):section.index("```\n", 12)]


@pytest.mark.nvrtc
def test_the_documented_recipe_runs_as_written(cache_root):
    printed: list[str] = []
    try:
        exec(compile(documented_recipe(), str(DOC), "exec"), {"print": lambda x: printed.append(str(x))})
        assert printed == ["[[3.]]"]
        assert "min_times" in tg.semirings()
        assert [p.name.split("-")[0] for p in cache_root.rglob("*.cubin")] == ["tg_backward_min_times_f32"]
    finally:
        unregister_semiring("min_times")


def _naive(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min over k of a[i, k] * b[k, j] (NaN ignored, saturated to the dtype), the smallest such k."""
    m, k = a.shape
    n = b.shape[1]
    top = np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).max
    c, idx = np.full((m, n), top, dtype=a.dtype), np.full((m, n), -1, dtype=np.int32)
    for i in range(m):
        for j in range(n):
            for kk in range(k):
                if a.dtype.kind == "f":
                    cand = a.dtype.type(a[i, kk] * b[kk, j])
                else:
                    info = np.iinfo(a.dtype)
                    cand = min(max(int(a[i, kk]) * int(b[kk, j]), info.min), info.max)
                if cand < c[i, j]:  # strictly better: the smallest k keeps a tie; NaN never wins
                    c[i, j], idx[i, j] = cand, kk
    return c, idx


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(7, 13, 5), (1, 1, 1), (3, 0, 4)])
def test_a_registered_semiring_runs_on_the_cpu_engine(min_times, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    m, k, n = shape
    values = np.array([0.5, 1.0, 2.0, 4.0, np.inf, np.nan], dtype=dtype)  # repeats make ties
    a = rng.choice(values[:4], size=(m, k), p=[0.3, 0.3, 0.3, 0.1]).astype(dtype)
    b = (rng.random((k, n)) * 3 + 0.25).astype(dtype)
    if a.size > 2:
        a.flat[[0, 1]] = values[4:]  # +inf (the zero) and NaN
    c, idx = tg.matmul(a, b, "min_times", argmax=True)
    want_c, want_idx = _naive(a, b)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(tg.matmul(a.T.copy().T, b, "mintimes"), want_c)  # alias, col-major A


def test_a_registered_semiring_saturates_integers(min_times):
    rng = np.random.default_rng(3)
    top = np.iinfo(np.int32).max
    a = rng.choice(np.array([1, 2, 3, 1 << 20, top], dtype=np.int32), size=(6, 9))
    b = rng.choice(np.array([1, 5, 1 << 12, top], dtype=np.int32), size=(9, 4))
    c, idx = tg.matmul(a, b, "min_times", argmax=True)
    want_c, want_idx = _naive(a, b)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_idx)
    assert min_times.zero("int32") == top and min_times.one("float32") == 1


def test_a_registered_semiring_has_gradients_like_its_mul(min_times):
    a, b = np.array([[2.0, 3.0]]), np.array([[4.0], [1.0]])
    c, idx = tg.matmul(a, b, "min_times", argmax=True)
    grad_a, grad_b = tg.matmul_backward(np.ones((1, 1)), a, b, idx, "min_times")
    # The winner is k = 1 (3 × 1): as for ×, d/da = b and d/db = a there, zero elsewhere.
    np.testing.assert_array_equal(grad_a, [[0.0, 1.0]])
    np.testing.assert_array_equal(grad_b, [[0.0], [3.0]])


@pytest.mark.nvrtc
def test_a_registered_semiring_compiles_through_nvrtc(min_times, cache_root):
    # Every forward family (argmax variant), both layouts, a float and an integer dtype, and the gradient.
    specs = warmup(semirings="min_times", dtypes="float32,int64", ops="forward_argmax,backward", arch="sm_90")
    names = {spec.name for spec in specs}
    assert {"tg_forward_argmax_min_times_f32_rr_square", "tg_forward_argmax_min_times_i64_cc_skinny",
            "tg_forward_argmax_min_times_i64_rc_small", "tg_backward_min_times_f32"} <= names
    program = source.kernel_source(make_spec("backward", "min_times", "float32"))
    assert "struct MinTimes {" in program and "MulKind<MinTimes> { static constexpr int value = 1; }" in program
    assert "Limits<T>::top()" in source.functor("min_times")


def test_registration_refuses_what_the_design_cannot_serve(min_times):
    with pytest.raises(ValueError, match="has no zero that absorbs"):
        register_semiring("max_max", "max", "max", "")
    with pytest.raises(ValueError, match="served already, as 'min_times'"):
        register_semiring("other", "min", "times", "")
    with pytest.raises(ValueError, match="the name 'Max-Plus' is taken by 'max_plus'"):
        register_semiring("Max-Plus", "min", "plus", "")
    with pytest.raises(ValueError, match="⊗ must be one of"):
        register_semiring("pow", "max", "pow", "")
    with pytest.raises(ValueError, match="part of the catalogue"):
        unregister_semiring("max_plus")
    with pytest.raises(ValueError, match=r"aliases must be a tuple of strings, got the string 'mm'; pass \('mm',\)"):
        register_semiring("other", "min", "times", "", aliases="mm")  # each letter would have become a name
    assert tg.semirings()[-1] == "min_times"


def test_the_tie_rule_in_the_functors_is_the_catalogues():
    for name, cmp in (("max_min", "<="), ("min_max", ">=")):
        assert f"return a {cmp} b || b != b;" in source.functor(name)
        a, b = np.array([1.0, 2.0, np.nan, 3.0]), np.array([1.0, 1.0, 1.0, np.nan])
        want = [(x <= y if cmp == "<=" else x >= y) or y != y for x, y in zip(a, b)]
        np.testing.assert_array_equal(tg.get_semiring(name).winner_is_a(a, b, np.isnan), want)


@pytest.mark.nvrtc
@pytest.mark.parametrize("header", source.HEADERS)
def test_an_edit_to_any_header_changes_every_key(header, monkeypatch):
    spec, target = make_spec("forward", "max_plus", "float32"), resolve_target("sm_90")
    before = build_request(spec, target, source.kernel_source(spec)).key
    if header == source.GENERATED_HEADER:
        generated = source.functors_header
        monkeypatch.setattr(source, "functors_header", lambda srs: generated(srs) + "// edited\n")
    else:
        read = source.read_cuda_file
        monkeypatch.setattr(source, "read_cuda_file", lambda name: read(name) + ("// edited\n" if name == header else ""))
    assert build_request(spec, target, source.kernel_source(spec)).key != before
