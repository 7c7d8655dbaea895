"""The semiring catalogue: the single source of truth for what each product means.

Every engine (CPU, CUDA) and every kernel fragment is derived from the entries
here, so a semiring is described once, as data: which operation is ⊕, which is
⊗, what its zero and one are for each dtype, and where gradients go.  Nothing
in this module imports numpy at call time beyond dtype arithmetic, so looking
up a semiring stays cheap.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .dtypes import canonical_dtype, truth_dtype


#: The ⊕ operations, the ⊗ operations, and the (⊕, ⊗) pairs the engines implement.
ADDS: tuple[str, ...] = ("max", "min")
MULS: tuple[str, ...] = ("plus", "times", "min", "max")
PAIRS: tuple[tuple[str, str], ...] = (("max", "plus"), ("min", "plus"), ("max", "times"), ("max", "min"),
                                      ("min", "max"))

#: The argmax tie rule, for every engine: ``argmax[i, j]`` is the smallest k
#: whose candidate equals ``C[i, j]`` (a candidate wins only when strictly
#: better, and a NaN candidate never is), -1 where ``C`` is the zero.
ARGMAX_TIES = "smallest k wins; NaN loses"
#: The pairs served now: ``PAIRS`` and those of ``register_semiring``.
_PAIRS: list[tuple[str, str]] = list(PAIRS)

#: THE operand tie rule where ⊗ is min or max: the candidate ``a ⊗ b`` took
#: A's value when ``a <cmp> b`` (so A wins ties) or ``b`` is NaN (NaN loses,
#: as ``fmin``/``fmax`` ignore it).  ``Semiring.winner_is_a`` evaluates it in
#: Python and ``jit/functors.py`` spells it in C from this same table.
A_WINS: dict[str, str] = {"min": "<=", "max": ">="}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {"<=": operator.le, ">=": operator.ge}

#: The boolean semiring's (⊕, ⊗): or and and, on truth values.  A pair of its
#: own, outside ``ADDS`` × ``MULS``: no ordered operation composes with them.
BOOLEAN_PAIR: tuple[str, str] = ("or", "and")


@dataclass(frozen=True)
class Semiring:
    """One semiring (S, ⊕, ⊗) as the library understands it.

    ``add`` is ⊕ and is always ``"max"`` or ``"min"``; ``mul`` is ⊗ and is one
    of ``"plus"``, ``"times"``, ``"min"``, ``"max"``, and the pair is one of
    the catalogue's (checked when the object is made: anything else is a
    ``ValueError`` that lists the valid values).  The one exception is the
    boolean semiring ``and_or``, whose pair is ``BOOLEAN_PAIR`` (or, and) on
    truth values.  The zero is the identity of
    ⊕ and absorbs ⊗; the one is the identity of ⊗.  A semiring made here
    under a new name computes exactly as the catalogue entry with its ⊕ and ⊗.

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
        if self.boolean:
            return truth_dtype(dtype, dtype).type(False)
        dt = canonical_dtype(dtype)
        return {"0": dt.type(0), "bottom": _bottom(dt), "top": _top(dt)}[self.zero_kind]

    @property
    def zero_kind(self) -> str:
        """Which value is the zero, by name: ``"0"``, ``"bottom"`` or ``"top"`` (the device code's ``Limits``).

        ⊕ = max has the bottom, ⊕ = min the top, except ``max_mul``: it lives
        on the non-negative numbers, where 0 is the bottom and absorbs ×.
        """
        if (self.mul == "times" and self.add == "max") or self.boolean:
            return "0"
        return "bottom" if self.add == "max" else "top"

    def one(self, dtype: object) -> np.generic:
        """The identity of ⊗ for ``dtype``."""
        if self.boolean:
            return truth_dtype(dtype, dtype).type(True)
        dt = canonical_dtype(dtype)
        if self.mul == "plus":
            return dt.type(0)
        if self.mul == "times":
            return dt.type(1)
        # ⊗ = min has identity +top; ⊗ = max has identity bottom.
        return _top(dt) if self.mul == "min" else _bottom(dt)

    @property
    def boolean(self) -> bool:
        """Whether this is the boolean semiring (⊕ = or, ⊗ = and): truth values in, bool out, no gradient."""
        return (self.add, self.mul) == BOOLEAN_PAIR

    def __post_init__(self) -> None:
        if not self.boolean:  # the boolean pair is checked whole; the ordered ones part by part
            self._check_operations()
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Semiring name must be a non-empty string, got {self.name!r}")
        if not (isinstance(self.aliases, tuple) and all(isinstance(a, str) for a in self.aliases)):
            raise ValueError(f"Semiring aliases must be a tuple of strings, got {self.aliases!r}")

    def _check_operations(self) -> None:
        if self.add not in ADDS:
            raise ValueError(f"Semiring add={self.add!r} is not valid; ⊕ must be one of {', '.join(ADDS)}")
        if self.mul not in MULS:
            raise ValueError(f"Semiring mul={self.mul!r} is not valid; ⊗ must be one of {', '.join(MULS)}")
        if (self.add, self.mul) not in _PAIRS:
            valid = ", ".join(f"(add={a!r}, mul={m!r})" for a, m in _PAIRS)
            raise ValueError(f"Semiring (add={self.add!r}, mul={self.mul!r}) is not a supported semiring; "
                             f"valid pairs are {valid}")

    def winner_is_a(self, a: Any, b: Any, isnan: Callable[[Any], Any]) -> Any:
        """Where ⊗ is min or max, whether the candidate ``a ⊗ b`` took A's value: THE tie rule.

        A wins ties, and NaN loses (as ``fmin``/``fmax`` ignore it), so the
        gradient goes where the value came from.  ``a`` and ``b`` are arrays of
        any library (numpy, torch) with its ``isnan``.  The CPU engine and the
        torch layer call this; the CUDA functors' ``winner_is_a`` is generated
        from the same table, ``A_WINS`` (``jit/functors.py``).

        Examples:
            >>> import numpy as np, tropical_gemm as tg
            >>> a, b = np.array([1., 2., 2., np.nan]), np.array([2., 1., 2., 1.])
            >>> tg.get_semiring("max_min").winner_is_a(a, b, np.isnan)   # A on the tie, NaN loses
            array([ True, False,  True, False])
        """
        if self.mul in A_WINS:
            return _COMPARE[A_WINS[self.mul]](a, b) | isnan(b)
        raise ValueError(f"{self.name} has ⊗ = {self.mul}: each candidate involves both operands")

    def add_ufunc(self, dtype: Any) -> Any:
        """⊕ as a numpy ufunc: ``fmax``/``fmin`` for floats (NaN ignored), ``maximum``/``minimum`` for integers.

        Examples:
            >>> import numpy as np, tropical_gemm as tg
            >>> tg.get_semiring("max_plus").add_ufunc(np.float32).reduce(np.array([1., np.nan, 3.]))
            np.float64(3.0)
        """
        if self.boolean:
            return np.logical_or
        if np.dtype(dtype).kind == "f":
            return np.fmax if self.add == "max" else np.fmin
        return np.maximum if self.add == "max" else np.minimum

def _bottom(dt: np.dtype) -> np.generic:  # floats (bfloat16's kind is "V") have infinities
    return dt.type(np.iinfo(dt).min) if dt.kind == "i" else dt.type(-np.inf)


def _top(dt: np.dtype) -> np.generic:
    return dt.type(np.iinfo(dt).max) if dt.kind == "i" else dt.type(np.inf)


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
    Semiring("and_or", ("boolean", "or_and"), "or", "and",
             "reachability and transitive closure (bool operands, bit-packed)"),
)

#: Every semiring the engines serve: the catalogue, then those added with ``register_semiring``.
_ENTRIES: list[Semiring] = list(CATALOGUE)
_BY_KEY: dict[str, Semiring] = {}
_BY_NAME: dict[str, Semiring] = {}
_BY_PAIR: dict[tuple[str, str], Semiring] = {}
_CANONICAL_IDS: set[int] = set()  # an identity test: hashing a Semiring costs more


def _reindex() -> None:
    """Rebuild the lookup tables from ``_ENTRIES`` (at import and after each registration)."""
    for table in (_BY_KEY, _BY_NAME, _BY_PAIR, _CANONICAL_IDS):
        table.clear()
    for entry in _ENTRIES:
        _BY_NAME.update({n: entry for n in (entry.name, *entry.aliases)})
        _BY_KEY.update({_normalise(n): entry for n in (entry.name, *entry.aliases)})
        _BY_PAIR[(entry.add, entry.mul)] = entry
        _CANONICAL_IDS.add(id(entry))


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "").replace(" ", "")


def semirings() -> tuple[str, ...]:
    """The canonical semiring names, in catalogue order.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.semirings()
        ('max_plus', 'min_plus', 'max_mul', 'max_min', 'min_max', 'and_or')
    """
    return tuple(s.name for s in _ENTRIES)


def get_semiring(name: "str | Semiring") -> Semiring:
    """Look a semiring up by any spelling: case, ``-`` and ``_`` do not matter.

    Raises ``ValueError`` naming the valid semirings (and the closest, if a
    name is close) for an unknown name or a counting semiring, and
    ``TypeError`` for something that is not a string.  A ``Semiring`` made
    outside the catalogue gives the catalogue entry with its ⊕ and ⊗, which
    is what every engine and kernel knows.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.get_semiring("MaxPlus").name
        'max_plus'
        >>> tg.get_semiring("bottleneck").name   # an alias
        'max_min'
    """
    if isinstance(name, Semiring):
        if id(name) in _CANONICAL_IDS:
            return name
        served = _BY_PAIR.get((name.add, name.mul))
        if served is None:  # made while register_semiring served its pair, which was unregistered since
            raise ValueError(f"semiring {name.name!r} (add={name.add!r}, mul={name.mul!r}) is no longer served; "
                             "register_semiring it again")
        return served
    exact = _BY_NAME.get(name) if isinstance(name, str) else None  # the spelling most calls use, as it is
    if exact is not None:
        return exact
    found = _BY_KEY.get(_normalise(name)) if isinstance(name, str) else None
    if found is None:
        counting = find_counting_semiring(name)
        if counting is not None:
            raise ValueError(f"{counting.name!r} is a counting semiring: pass each operand as a pair "
                             f"(values, counts), e.g. tg.matmul((va, ca), (vb, cb), {counting.name!r})")
        if not isinstance(name, str):
            raise TypeError(f"semiring must be a string such as 'max_plus', got {type(name).__name__}")
        raise ValueError(
            f"unknown semiring {name!r}{_did_you_mean(name)}; valid semirings are {', '.join(semirings())} "
            f"(aliases: {', '.join(a for s in _ENTRIES for a in s.aliases)})"
        )
    return found


def _did_you_mean(name: str) -> str:
    """`` (did you mean 'max_plus'?)`` for a name close to one spelling of a semiring (counting ones too), else ``""``."""
    import difflib

    spellings = {**{key: entry.name for key, entry in _BY_KEY.items()},
                 **{key: entry.name for key, entry in _COUNTING_BY_KEY.items()}}
    close = difflib.get_close_matches(_normalise(name), spellings, n=1, cutoff=0.75)
    return f" (did you mean {spellings[close[0]]!r}?)" if close else ""


def register_semiring(name: str, add: str, mul: str, description: str, aliases: tuple[str, ...] = ()) -> Semiring:
    """Add a semiring to the catalogue: every engine and kernel then serves it by name.

    A semiring is its (⊕, ⊗) pair, and each engine is built from those parts,
    so a new pair of a known ⊕ (``ADDS``) and a known ⊗ (``MULS``) needs no
    other code: the CPU engine composes the two ufuncs, and the CUDA kernels
    instantiate a functor generated from the pair (``jit/functors.py``).  ⊗
    must differ from ⊕ (max ⊗ max has no zero that absorbs), and each pair is
    served once.  ``docs/architecture.md`` has the recipe; a new ⊕ or ⊗
    operation is a larger change, listed there too.

    Raises ``ValueError`` naming the problem for a taken name or pair, or an
    unknown ⊕ or ⊗.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> from tropical_gemm.semirings import register_semiring, unregister_semiring
        >>> sr = register_semiring("min_times", "min", "times", "least products of gains")
        >>> tg.matmul(np.array([[2.0, 3.0]]), np.array([[4.0], [1.0]]), "min_times")
        array([[3.]])
        >>> unregister_semiring("min_times")
    """
    if isinstance(aliases, str):  # tuple("mt") would register every letter as a name
        raise ValueError(f"register_semiring: aliases must be a tuple of strings, got the string {aliases!r}; "
                         f"pass ({aliases!r},)")
    if add in ADDS and add == mul:
        raise ValueError(f"register_semiring: ⊗ = ⊕ = {mul!r} has no zero that absorbs ⊗; choose another ⊗ "
                         f"from {', '.join(m for m in MULS if m != add)}")
    for spelling in (name, *aliases):
        clash = _BY_KEY.get(_normalise(spelling)) if isinstance(spelling, str) else None
        clash = clash or find_counting_semiring(spelling)
        if clash is not None:
            raise ValueError(f"register_semiring: the name {spelling!r} is taken by {clash.name!r}; choose another")
    taken = _BY_PAIR.get((add, mul))
    if taken is not None:
        raise ValueError(f"register_semiring: (add={add!r}, mul={mul!r}) is served already, as {taken.name!r}; "
                         "use that name: a semiring is its (⊕, ⊗) pair")
    new_pair = add in ADDS and mul in MULS  # else Semiring() names the bad operation
    if new_pair:
        _PAIRS.append((add, mul))
    try:
        entry = Semiring(name, tuple(aliases), add, mul, description)
    except ValueError:
        if new_pair:
            _PAIRS.remove((add, mul))
        raise
    _ENTRIES.append(entry)
    _reindex()
    return entry


def unregister_semiring(name: str) -> None:
    """Remove a semiring added with ``register_semiring`` (the catalogue's own stay).

    Kernels already compiled for it stay in the disk cache until pruned.
    """
    entry = get_semiring(name)
    if any(entry is built_in for built_in in CATALOGUE):
        raise ValueError(f"unregister_semiring: {entry.name!r} is part of the catalogue and cannot be removed")
    _ENTRIES.remove(entry)
    _PAIRS.remove((entry.add, entry.mul))
    _reindex()


_reindex()


# ------------------------------------------------------------------ counting


@dataclass(frozen=True)
class CountingSemiring:
    """A tropical semiring that also counts: each element is a pair (value, count).

    The value is that of the tropical semiring ``base`` (``max_plus`` or
    ``min_plus``); the count is how many ways reach it.  ⊕ keeps the better
    value and adds the counts of a tie; ⊗ adds the values and multiplies the
    counts.  Values are float32 or float64, counts exact int64; a pair whose
    value is the zero is the zero, whatever its count, and results store it
    with count 0.  This is GenericTensorNetworks' ``CountingTropical``: the
    optimum of a tensor network with the number of optimal configurations.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> sr = tg.get_counting_semiring("count_max_plus")
        >>> sr.base, sr.zero("float32"), sr.one("float32")
        ('max_plus', (np.float32(-inf), 0), (np.float32(0.0), 1))
    """

    name: str
    aliases: tuple[str, ...]
    base: str
    description: str

    @property
    def values(self) -> Semiring:
        """The tropical semiring the values compute in."""
        return get_semiring(self.base)

    def zero(self, dtype: object) -> tuple[np.generic, int]:
        """The identity of ⊕: the base's zero with no way to reach it."""
        return self.values.zero(dtype), 0

    def one(self, dtype: object) -> tuple[np.generic, int]:
        """The identity of ⊗: the base's one, reached one way."""
        return self.values.one(dtype), 1


#: The counting semirings, beside the catalogue: their operands are (values, counts) pairs.
COUNTING_CATALOGUE: tuple[CountingSemiring, ...] = (
    CountingSemiring("count_max_plus", ("counting_max_plus", "counting_tropical"), "max_plus",
                     "the best (largest) total and how many configurations reach it, e.g. maximum independent sets"),
    CountingSemiring("count_min_plus", ("counting_min_plus",), "min_plus",
                     "the shortest distance and how many paths reach it, e.g. counts of shortest paths"),
)
#: The value dtypes of the counting semirings (counts are int64); floats hold the zero ±inf.
COUNTING_VALUE_DTYPES: tuple[str, ...] = ("float32", "float64")
#: The dtype of every count.
COUNT_DTYPE = np.dtype(np.int64)
#: The bits a counting product reports, on every engine: a result's count went past int64's
#: largest value (counts are exact and never wrap), a negative count was read.
COUNT_OVERFLOW, COUNT_NEGATIVE = 1, 2
_COUNTING_BY_KEY: dict[str, CountingSemiring] = {
    _normalise(n): entry for entry in COUNTING_CATALOGUE for n in (entry.name, *entry.aliases)}


def counting_semirings() -> tuple[str, ...]:
    """The counting semirings' canonical names.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.counting_semirings()
        ('count_max_plus', 'count_min_plus')
    """
    return tuple(s.name for s in COUNTING_CATALOGUE)


def find_counting_semiring(name: object) -> "CountingSemiring | None":
    """The counting semiring ``name`` spells (as ``get_semiring`` spells names), or None for any other name."""
    if isinstance(name, CountingSemiring):
        return name
    return _COUNTING_BY_KEY.get(_normalise(name)) if isinstance(name, str) else None


def get_counting_semiring(name: "str | CountingSemiring") -> CountingSemiring:
    """Look a counting semiring up by any spelling; ``ValueError`` naming the valid ones for another name.

    Examples:
        >>> import tropical_gemm as tg
        >>> tg.get_counting_semiring("CountMinPlus").base
        'min_plus'
    """
    found = find_counting_semiring(name)
    if found is None:
        raise ValueError(f"{name!r} is not a counting semiring; valid ones are {', '.join(counting_semirings())} "
                         f"(aliases: {', '.join(a for s in COUNTING_CATALOGUE for a in s.aliases)})")
    return found
