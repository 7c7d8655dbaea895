"""Random operands for the property tests: fresh data with the values that break things.

Hypothesis draws the *description* of a case (sizes, dtype, semiring, layout,
how many special values, a seed); numpy then fills arrays of up to 70 x 70
quickly.  Values mix small integers (so ties are common), ordinary random
numbers, and the specials of each dtype: ±inf, NaN, signed zeros, overflowing
magnitudes and subnormals for floats; the extremes of the range for integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from reference import RULES

SEMIRINGS = tuple(RULES)
DTYPES = ("float32", "float64", "int32", "int64")
FLOAT_DTYPES = ("float32", "float64")

#: Sizes not multiples of any tile, with 1 and the tile edges around 16/32/64.
SIZES = st.one_of(st.integers(1, 9), st.sampled_from([15, 16, 17, 31, 32, 33, 63, 64, 65]), st.integers(1, 70))


def float_specials(dtype: np.dtype) -> np.ndarray:
    info = np.finfo(dtype)
    return np.array(
        [np.inf, -np.inf, np.nan, 0.0, -0.0, info.max, -info.max, info.tiny / 4, -info.smallest_subnormal],
        dtype=dtype,
    )


def int_specials(dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    half = 2 ** (info.bits // 2)
    return np.array(
        [info.min, info.min + 1, info.max, info.max - 1, 0, -1, 1, half, -half, half + 3],
        dtype=dtype,
    )


def random_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, special_rate: float) -> np.ndarray:
    """Never all zeros: small integers (ties), wide random values, and a share of specials."""
    dt = np.dtype(dtype)
    small = rng.integers(-4, 5, size=shape)
    if dt.kind == "f":
        wide = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)
        specials = float_specials(dt)
    else:
        info = np.iinfo(dt)
        wide = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        specials = int_specials(dt)
    pick = rng.random(shape)
    out = np.where(pick < 0.5, small.astype(dt), wide.astype(dt))
    return np.where(pick > 1.0 - special_rate, rng.choice(specials, size=shape), out).astype(dt)


def operand_pair(dtype: str, shape: tuple[int, int, int], seed: int,
                 special_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """A (M, K) and a (K, N) operand of ``random_values`` for ``shape = (M, K, N)``."""
    rng = np.random.default_rng(seed)
    m, k, n = shape
    return random_values(rng, (m, k), dtype, special_rate), random_values(rng, (k, n), dtype, special_rate)


# ------------------------------------------------------------------- layouts
# Each layout builds, from the values x, a base array on the host, moves it with
# ``put`` (identity for numpy, cupy.asarray for the GPU) and takes a view of it
# there, so the engine really receives a strided, transposed or reversed array.

Layout = Callable[[np.ndarray, Callable[[np.ndarray], Any]], Any]


def _contiguous(x: np.ndarray, put):
    return put(np.ascontiguousarray(x))


def _transposed(x: np.ndarray, put):
    return put(np.ascontiguousarray(np.swapaxes(x, -1, -2))).swapaxes(-1, -2)


def _stepped(x: np.ndarray, put):
    base = np.zeros((*x.shape[:-2], 2 * x.shape[-2] + 1, 3 * x.shape[-1]), dtype=x.dtype)
    base[..., 1::2, ::3] = x
    return put(base)[..., 1::2, ::3]


def _reversed(x: np.ndarray, put):
    return put(np.ascontiguousarray(x[..., ::-1, ::-1]))[..., ::-1, ::-1]


LAYOUTS: dict[str, Layout] = {
    "C": _contiguous,
    "transposed": _transposed,
    "stepped": _stepped,
    "reversed": _reversed,
}


@dataclass(frozen=True)
class Case:
    """One product to check: host operands, their layouts, and the semiring."""

    a: np.ndarray
    b: np.ndarray
    semiring: str
    layout_a: str
    layout_b: str

    def on(self, put) -> tuple[Any, Any]:
        """The operands as the engine should receive them (device, layout applied)."""
        return LAYOUTS[self.layout_a](self.a, put), LAYOUTS[self.layout_b](self.b, put)


@st.composite
def batch_shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two batch shapes that broadcast: dims dropped on the left or stretched from 1."""
    full = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))

    def operand() -> tuple[int, ...]:
        dims = full[draw(st.integers(0, len(full))):]
        return tuple(1 if draw(st.booleans()) else d for d in dims)

    return operand(), operand()


@st.composite
def cases(draw, dtypes=DTYPES, semirings=SEMIRINGS, batched: bool = True, max_size: int = 70) -> Case:
    dtype = draw(st.sampled_from(dtypes))
    semiring = draw(st.sampled_from(semirings))
    batch_a, batch_b = draw(batch_shapes()) if batched else ((), ())
    limit = max_size if not (batch_a or batch_b) else max_size // 2
    m, k, n = (min(draw(SIZES), limit) for _ in range(3))
    if draw(st.integers(0, 9)) == 0:
        k = 0  # an empty sum: C is the zero, argmax -1, gradients 0
    special_rate = draw(st.sampled_from([0.0, 0.05, 0.3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = random_values(rng, (*batch_a, m, k), dtype, special_rate)
    b = random_values(rng, (*batch_b, k, n), dtype, special_rate)
    layouts = st.sampled_from(sorted(LAYOUTS))
    return Case(a, b, semiring, draw(layouts), draw(layouts))
