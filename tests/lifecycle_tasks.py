"""Functions that worker processes import by name (multiprocessing's spawn and fork pools) in the lifecycle tests."""

from __future__ import annotations

import numpy as np

import tropical_gemm as tg


def max_plus_of_seed(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Our product and a naive one on the same fresh random operands."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    return tg.matmul(a, b, "max_plus"), (a[:, :, None] + b[None, :, :]).max(axis=1)
