"""The semiring catalogue: the single source of truth for what each product means.

Every engine (CPU, CUDA) and every kernel fragment is derived from the entries
here, so a semiring is described once, as data: which operation is ⊕, which is
⊗, what its zero and one are for each dtype, and where gradients go.  Nothing
in this module imports numpy at call time beyond dtype arithmetic, so looking
up a semiring stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import canonical_dtype


@dataclass(frozen=True)
class Semiring:
    """One semiring (S, ⊕, ⊗) as the library understands it.

    ``add`` is ⊕ and is always ``"max"`` or ``"min"``; ``mul`` is ⊗ and is one
    of ``"plus"``, ``"times"``, ``"min"``, ``"max"``.  The zero is the identity
    of ⊕ and absorbs ⊗; the one is the identity of ⊗.  ``grad_rule`` names how
    ``matmul_backward`` routes the gradient of ``C[i, j]`` through its winning
    ``k``; the semantics page of the docs spells each rule out.

    Examples:
        >>> import tropical_gemm as tg
        >>> sr = tg.get_semiring("min_plus")
        >>> sr.add, sr.mul
        ('min', 'plus')
        >>> print(sr.zero("float32"), sr.one("float32"), sr.zero("int32"))
        inf 0.0 2147483647
    """

    name: str
    aliases: tuple[str, ...]
    add: str
    mul: str
    description: str

    def zero(self, dtype: object) -> np.generic:
        """The identity of ⊕ for ``dtype``: ±inf for floats, the dtype's extreme for ints.

        ``max_mul`` lives on the non-negative numbers, so its zero is 0.
        """
        dt = canonical_dtype(dtype)
        if self.mul == "times":
            return dt.type(0)
        return _bottom(dt) if self.add == "max" else _top(dt)

    def one(self, dtype: object) -> np.generic:
        """The identity of ⊗ for ``dtype``."""
        dt = canonical_dtype(dtype)
        if self.mul == "plus":
            return dt.type(0)
        if self.mul == "times":
            return dt.type(1)
        # ⊗ = min has identity +top; ⊗ = max has identity bottom.
        return _top(dt) if self.mul == "min" else _bottom(dt)

    @property
    def grad_rule(self) -> str:
        """How the gradient of a winning candidate ``A[i,k] ⊗ B[k,j]`` is split."""
        return {
            "plus": "both operands receive the output gradient",
            "times": "each operand receives the output gradient times the other operand",
            "min": "the smaller operand receives it (A on ties)",
            "max": "the larger operand receives it (A on ties)",
        }[self.mul]


def _bottom(dt: np.dtype) -> np.generic:
    return dt.type(-np.inf) if dt.kind == "f" else dt.type(np.iinfo(dt).min)


def _top(dt: np.dtype) -> np.generic:
    return dt.type(np.inf) if dt.kind == "f" else dt.type(np.iinfo(dt).max)


CATALOGUE: tuple[Semiring, ...] = (
    Semiring("max_plus", ("maxplus", "tropical", "tropical_max"), "max", "plus",
             "longest paths, Viterbi decoding, max-plus linear systems"),
    Semiring("min_plus", ("minplus", "tropical_min"), "min", "plus",
             "shortest paths (distance products)"),
    Semiring("max_mul", ("maxmul", "max_times", "maxtimes", "viterbi"), "max", "times",
             "most probable paths on probabilities (non-negative inputs)"),
    Semiring("max_min", ("maxmin", "bottleneck", "widest_path"), "max", "min",
             "widest (bottleneck) paths, fuzzy relations"),
    Semiring("min_max", ("minmax", "minimax"), "min", "max",
             "minimax paths, e.g. the lowest ceiling a route must clear"),
)

_BY_KEY: dict[str, Semiring] = {}
for _s in CATALOGUE:
    for _name in (_s.name, *_s.aliases):
        _BY_KEY[_name.replace("_", "")] = _s


_BY_NAME: dict[str, Semiring] = {n: s for s in CATALOGUE for n in (s.name, *s.aliases)}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "").replace(" ", "")


def semirings() -> tuple[str, ...]:
    """The canonical semiring names, in catalogue order.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.semirings()
        ('max_plus', 'min_plus', 'max_mul', 'max_min', 'min_max')
    """
    return tuple(s.name for s in CATALOGUE)


def get_semiring(name: "str | Semiring") -> Semiring:
    """Look a semiring up by any spelling: case, ``-`` and ``_`` do not matter.

    Raises ``ValueError`` naming the valid semirings for an unknown name, and
    ``TypeError`` for something that is not a string.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.get_semiring("MaxPlus").name
        'max_plus'
        >>> tg.get_semiring("bottleneck").name   # an alias
        'max_min'
    """
    if isinstance(name, Semiring):
        return name
    if not isinstance(name, str):
        raise TypeError(f"semiring must be a string such as 'max_plus', got {type(name).__name__}")
    exact = _BY_NAME.get(name)  # the spelling most calls use, without normalising
    if exact is not None:
        return exact
    found = _BY_KEY.get(_normalise(name))
    if found is None:
        raise ValueError(
            f"unknown semiring {name!r}; valid semirings are {', '.join(semirings())} "
            f"(aliases: {', '.join(a for s in CATALOGUE for a in s.aliases)})"
        )
    return found
