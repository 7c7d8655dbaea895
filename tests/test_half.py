"""float16 and bfloat16: stored in half precision, and exactly the true product rounded once.

The reference computes every candidate as an exact rational (``Fraction``),
takes the exact ⊕, and rounds that once to the half format, to nearest even,
by its own code: nothing in it goes through float32, so the engines' float32
path is checked against the definition, not against itself.  Inputs are
drawn from all finite bit patterns, so their exponents spread over the whole
range and the sums of large and tiny values (where a second rounding could
bite) are common.
"""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest

import tropical_gemm as tg

#: (significand bits with the implicit one, smallest normal exponent, largest exponent) of each format.
FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127)}
#: The semirings on ordered values (and_or takes truth values: test_boolean.py).
ORDERED = tuple(s for s in tg.semirings() if not tg.get_semiring(s).boolean)


def round_half(x: Fraction, fmt: str) -> float:
    """``x`` rounded to nearest even in ``fmt`` (subnormals, overflow to inf), as a Python float."""
    precision, emin, emax = FORMATS[fmt]
    if x == 0:
        return 0.0
    sign, ax = (-1 if x < 0 else 1), abs(x)
    e = ax.numerator.bit_length() - ax.denominator.bit_length()
    e = e if Fraction(2) ** e <= ax else e - 1  # now 2**e <= ax < 2**(e+1)
    ulp = Fraction(2) ** (max(e, emin) - precision + 1)
    q, rest = divmod(ax, ulp)
    q = int(q)
    if rest * 2 > ulp or (rest * 2 == ulp and q % 2):
        q += 1
    value = q * ulp
    if value >= Fraction(2) ** (emax + 1):
        return sign * float("inf")
    return sign * float(value)


def exact_reference(a: np.ndarray, b: np.ndarray, semiring: str, fmt: str) -> np.ndarray:
    """``round(⊕_k a[i, k] ⊗ b[k, j])`` with exact ⊗ and ⊕, for finite 2-D inputs."""
    sr = tg.get_semiring(semiring)
    mul = {"plus": lambda x, y: x + y, "times": lambda x, y: x * y, "min": min, "max": max}[sr.mul]
    add = max if sr.add == "max" else min
    fa = [[Fraction(float(v)) for v in row] for row in a.astype(np.float64)]
    fb = [[Fraction(float(v)) for v in row] for row in b.astype(np.float64)]
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    out = np.empty((m, n), dtype=np.float64)
    for i in range(m):
        for j in range(n):
            out[i, j] = round_half(add(mul(fa[i][t], fb[t][j]) for t in range(k)), fmt)
    return out


def random_finite(rng: np.random.Generator, shape: tuple[int, ...], fmt: str, non_negative: bool) -> np.ndarray:
    """Half values from uniformly random finite bit patterns (every exponent equally likely), as float64."""
    bits = rng.integers(0, 2**16, size=shape, dtype=np.uint32)
    if non_negative:
        bits &= 0x7FFF
    with np.errstate(invalid="ignore"):  # NaN patterns, replaced below
        if fmt == "float16":
            values = bits.astype(np.uint16).view(np.float16).astype(np.float64)
        else:
            values = (bits << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isfinite(values), values, 1.0)


def float32_argmax(a: np.ndarray, b: np.ndarray, semiring: str) -> np.ndarray:
    """The documented argmax of a half product: the smallest k whose float32 candidate is the float32 best."""
    sr = tg.get_semiring(semiring)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        cand = {"plus": np.add, "times": np.multiply, "min": np.fmin, "max": np.fmax}[sr.mul](
            a32[:, :, None], b32[None, :, :])
    best = np.nanmax(cand, axis=1) if sr.add == "max" else np.nanmin(cand, axis=1)
    return np.argmax(cand == best[:, None, :], axis=1)


def half_product(engine, a: np.ndarray, b: np.ndarray, semiring: str, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """``(C, argmax)`` of half operands holding the values of ``a`` and ``b``, on ``engine``, as float64/int.

    bfloat16 goes as torch tensors (on the engine's device: cupy has no
    bfloat16); numpy's bfloat16 (ml_dtypes) has its own test below.
    """
    if fmt == "bfloat16":
        torch = pytest.importorskip("torch")
        device = "cuda" if engine.name == "cuda" else "cpu"
        ta, tb = (torch.tensor(x).to(device=device, dtype=torch.bfloat16) for x in (a, b))
        c, idx = tg.matmul(ta, tb, semiring, argmax=True)
        assert c.dtype == torch.bfloat16
        return c.double().cpu().numpy(), idx.cpu().numpy()
    c, idx = engine.get(*tg.matmul(*engine.put(a.astype(np.float16), b.astype(np.float16)), semiring, argmax=True))
    assert c.dtype == np.float16
    return c.astype(np.float64), idx


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("semiring", ORDERED)
def test_half_products_are_the_exact_product_rounded_once(engine, fmt, semiring):
    rng = np.random.default_rng(zlib.crc32(f"{fmt} {semiring}".encode()))
    non_negative = semiring == "max_mul"
    a = random_finite(rng, (7, 33), fmt, non_negative)
    b = random_finite(rng, (33, 6), fmt, non_negative)
    c, idx = half_product(engine, a, b, semiring, fmt)
    assert c.shape == (7, 6)
    np.testing.assert_array_equal(c, exact_reference(a, b, semiring, fmt))
    np.testing.assert_array_equal(idx, float32_argmax(a, b, semiring))


@pytest.mark.parametrize("semiring", ORDERED)
def test_numpy_bfloat16_arrays_run_on_the_cpu_engine(semiring):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy holds bfloat16 only with ml_dtypes (the test extra)")
    rng = np.random.default_rng(zlib.crc32(f"numpy bfloat16 {semiring}".encode()))
    a = random_finite(rng, (5, 21), "bfloat16", semiring == "max_mul")
    b = random_finite(rng, (21, 4), "bfloat16", semiring == "max_mul")
    c, idx = tg.matmul(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), semiring, argmax=True)
    assert c.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(c.astype(np.float64), exact_reference(a, b, semiring, "bfloat16"))
    np.testing.assert_array_equal(idx, float32_argmax(a, b, semiring))


def test_the_reference_rounds_as_ieee_does():
    # Known cases: ties to even, the overflow threshold, subnormals, so the reference itself is trustworthy.
    assert round_half(Fraction(65519), "float16") == 65504.0
    assert round_half(Fraction(65520), "float16") == float("inf")
    assert round_half(Fraction(2049), "float16") == 2048.0 and round_half(Fraction(2051), "float16") == 2052.0
    assert round_half(Fraction(1, 2**25), "float16") == 0.0
    assert round_half(Fraction(3, 2**26), "float16") == 2.0**-24
    assert round_half(Fraction(257), "bfloat16") == 256.0 and round_half(Fraction(259), "bfloat16") == 260.0
    rng = np.random.default_rng(0)
    for value in rng.normal(size=200) * 2.0 ** rng.integers(-30, 16, size=200):
        assert round_half(Fraction(float(value)), "float16") == float(np.float16(value))


def test_a_sum_that_float32_rounds_still_rounds_once():
    # 1024 + 2**-24 is not a float32; the float32 sum rounds, and the half result must still be exact.
    a, b = np.array([[1024.0, 2.0**-24]], np.float16), np.array([[2.0**-24], [1024.0]], np.float16)
    assert tg.matmul(a, b, "max_plus")[0, 0] == np.float16(1024.0)
    # Both candidates round to the same float32: the smaller k wins the tie, as the docs say.
    assert tg.matmul(a, b, "max_plus", argmax=True)[1][0, 0] == 0


def test_einsum_of_halves_rounds_each_step_as_the_docs_say(engine):
    """A chain's steps are half products, each rounded once: the left-to-right fold equals the composed
    matmuls, and the other order may differ in the last bit (the docs' example), never by more."""
    a, b, c = (np.array([[x]], np.float16) for x in (1.0, 2.0**-11, 2.0**-11))
    (left,) = engine.get(tg.einsum("ij,jk,kl->il", *engine.put(a, b, c), optimize=[(0, 1), (0, 1)]))
    (right,) = engine.get(tg.einsum("ij,jk,kl->il", *engine.put(a, b, c), optimize=[(1, 2), (0, 1)]))
    assert left[0, 0] == tg.matmul(tg.matmul(a, b), c)[0, 0] == np.float16(1.0)
    assert right[0, 0] == tg.matmul(a, tg.matmul(b, c))[0, 0] == np.float16(1.0 + 2.0**-10)


def test_overflow_to_inf_and_special_values(engine):
    a = np.array([[65504.0, -np.inf, np.nan]], np.float16)
    b = np.array([[65504.0], [0.0], [1.0]], np.float16)
    c, idx = engine.get(*tg.matmul(*engine.put(a, b), "max_plus", argmax=True))
    assert c[0, 0] == np.inf and idx[0, 0] == 0  # 131008 rounds to inf in half precision; NaN loses
    c = engine.get(tg.matmul(*engine.put(a[:, 1:2], b[1:2]), "max_plus"))[0]
    assert c[0, 0] == -np.inf


@pytest.mark.parametrize("semiring", ["max_plus", "max_mul", "max_min"])
def test_half_gradients_are_float32_gradients_rounded_once(engine, semiring):
    rng = np.random.default_rng(11)
    a = np.abs(rng.normal(size=(2, 5, 8))).astype(np.float16)
    b = np.abs(rng.normal(size=(8, 4))).astype(np.float16)
    grad_c = rng.normal(size=(2, 5, 4)).astype(np.float16)
    da, db, dg = engine.put(a, b, grad_c)
    c, idx = tg.matmul(da, db, semiring, argmax=True)
    grads = engine.get(*tg.matmul_backward(dg, da, db, idx, semiring, deterministic=True))
    expected = tg.matmul_backward(grad_c.astype(np.float32), a.astype(np.float32), b.astype(np.float32),
                                  engine.get(idx)[0], semiring, deterministic=True)
    for got, want in zip(grads, expected):
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, want.astype(np.float16))


def test_half_out_and_batches_and_vectors(engine):
    rng = np.random.default_rng(12)
    a = rng.normal(size=(3, 4, 6)).astype(np.float16)
    b = rng.normal(size=(6,)).astype(np.float16)
    out = engine.to_device(np.zeros((3, 4), np.float16))
    result = tg.matmul(*engine.put(a, b), "min_plus", out=out)
    assert result is out
    expected = tg.matmul(a.astype(np.float32), b.astype(np.float32), "min_plus").astype(np.float16)
    np.testing.assert_array_equal(engine.get(out)[0], expected)


@pytest.mark.gpu
def test_cuda_half_reads_strided_operands_and_many_dimensions():
    import cupy

    rng = np.random.default_rng(13)
    a = rng.normal(size=(2, 1, 2, 1, 2, 2, 5, 7)).astype(np.float16)  # 8 dims: the widen cast goes in slices
    b = rng.normal(size=(6, 7)).astype(np.float16)
    got = tg.matmul(cupy.asarray(a), cupy.asarray(b).T, "max_plus")  # b transposed: a strided view
    np.testing.assert_array_equal(cupy.asnumpy(got), tg.matmul(a, np.ascontiguousarray(b.T), "max_plus"))


@pytest.mark.gpu
def test_cuda_casts_match_numpy_on_every_half_and_on_float32_edges():
    import cupy

    from tropical_gemm import half

    every_half = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    widened = cupy.asnumpy(half.widen("cuda", cupy.asarray(every_half)))
    same = (widened.view(np.uint32) == every_half.astype(np.float32).view(np.uint32)) | np.isnan(widened)
    assert same.all() and np.isnan(widened).sum() == np.isnan(every_half).sum()
    rng = np.random.default_rng(14)
    edges = np.concatenate([rng.integers(0, 2**32, size=2**20, dtype=np.uint64).astype(np.uint32),
                            np.arange(0x38000000, 0x38900000, 97, dtype=np.uint32),  # around the subnormal edge
                            np.arange(0x477FE000, 0x47800010, dtype=np.uint32)])  # around the overflow edge
    floats = edges.view(np.float32)
    narrowed = cupy.empty(floats.shape, np.float16)
    half.narrow("cuda", cupy.asarray(floats), narrowed)
    got = cupy.asnumpy(narrowed)
    with np.errstate(over="ignore"):
        want = floats.astype(np.float16)
    both_nan = np.isnan(got) & np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint16)[~both_nan], want.view(np.uint16)[~both_nan])
