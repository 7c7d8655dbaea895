"""The contraction plan: opt_einsum's path, turned into pairwise and single-operand steps.

Planning depends on the labels and sizes alone, never on the data, so a plan
is cached per (einsum, shapes, optimize) and a repeated call spends its host
time on the steps themselves.  Every step records the groups its lowering
needs (batch, left-free, right-free and contracted labels, or the kept and
reduced labels of a reduction), and its result's labels, in the order the
batched product writes them, so that no step ever permutes its output.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from functools import lru_cache
from typing import Any

from .parse import Parsed


@dataclass(frozen=True)
class Reduce:
    """⊕ over ``reduced`` of live operand ``src`` (labelled ``labels``), keeping ``kept``, in that order.

    Lowered as: permute to ``perm`` (kept then reduced), view as ``(R, K)``
    = ``shape2``, reduce each row, view the result as ``out_shape``.  An
    ``in_place`` step (a reduction before the path) puts its result where
    its operand was, so that an explicit path's positions still name the
    caller's operands; the others append it, as opt_einsum's steps do.
    """

    src: int
    labels: tuple[int, ...]
    kept: tuple[int, ...]
    reduced: tuple[int, ...]
    perm: tuple[int, ...]
    shape2: tuple[int, int]
    out_shape: tuple[int, ...]
    k_sizes: tuple[int, ...]
    in_place: bool = False

    @property
    def result(self) -> tuple[int, ...]:
        return self.kept


@dataclass(frozen=True)
class Pair:
    """One batched tropical product ``(batch, left, k) x (batch, k, right) -> (batch, left, right)``.

    ``a_perm``/``b_perm`` order each operand's axes into its groups and
    ``a_shape``/``b_shape`` (three dims each) are the views the product
    reads; ``out_shape`` views its result (and argmax) with one axis per label.
    """

    left: int
    right: int
    batch: tuple[int, ...]
    left_free: tuple[int, ...]
    right_free: tuple[int, ...]
    contracted: tuple[int, ...]
    a_perm: tuple[int, ...]
    b_perm: tuple[int, ...]
    a_shape: tuple[int, int, int]
    b_shape: tuple[int, int, int]
    out_shape: tuple[int, ...]
    k_sizes: tuple[int, ...]

    @property
    def result(self) -> tuple[int, ...]:
        return self.batch + self.left_free + self.right_free


def _prod(sizes: tuple[int, ...], labels: tuple[int, ...]) -> int:
    return math.prod(sizes[x] for x in labels)


def make_pair(i: int, j: int, a: tuple[int, ...], b: tuple[int, ...], keep: set[int], sizes: tuple[int, ...]) -> Pair:
    """The product of live operands ``i`` (labels ``a``) and ``j`` (labels ``b``), keeping ``keep``."""
    in_a, in_b = set(a), set(b)
    # The shared groups follow the larger operand's axis order, so that it (laid out in that order, as
    # inputs and every intermediate are) needs no copy; only the smaller one may be permuted.
    ref = a if _prod(sizes, a) >= _prod(sizes, b) else b
    batch = tuple(x for x in ref if x in in_a and x in in_b and x in keep)
    left = tuple(x for x in a if x not in in_b)
    right = tuple(x for x in b if x not in in_a)
    con = tuple(x for x in ref if x in in_a and x in in_b and x not in keep)
    nb, m, n, k = (_prod(sizes, g) for g in (batch, left, right, con))
    return Pair(i, j, batch, left, right, con,
                a_perm=tuple(a.index(x) for x in batch + left + con),
                b_perm=tuple(b.index(x) for x in batch + con + right),
                a_shape=(nb, m, k), b_shape=(nb, k, n),
                out_shape=tuple(sizes[x] for x in batch + left + right),
                k_sizes=tuple(sizes[x] for x in con))


def make_reduce(src: int, labels: tuple[int, ...], keep: set[int], sizes: tuple[int, ...],
                in_place: bool = False) -> Reduce:
    kept = tuple(x for x in labels if x in keep)
    reduced = tuple(x for x in labels if x not in keep)
    return Reduce(src, labels, kept, reduced,
                  perm=tuple(labels.index(x) for x in kept + reduced),
                  shape2=(_prod(sizes, kept), _prod(sizes, reduced)),
                  out_shape=tuple(sizes[x] for x in kept),
                  k_sizes=tuple(sizes[x] for x in reduced), in_place=in_place)


@dataclass(frozen=True)
class Plan:
    """Steps over a list of live operands: each step consumes its inputs and appends its result.

    ``operands`` are the labels of the (diagonal-taken, broadcast-squeezed)
    inputs; ``final`` permutes the last live operand into the output order.
    """

    operands: tuple[tuple[int, ...], ...]
    steps: tuple["Reduce | Pair", ...]
    final: tuple[int, ...]
    path: tuple[tuple[int, ...], ...]


def unique_labels(parsed: Parsed) -> tuple[tuple[int, ...], ...]:
    """Each operand's labels once each (a diagonal keeps the first), broadcast axes left out."""
    out = []
    for labels, drop in zip(parsed.inputs, parsed.drop):
        seen: list[int] = []
        for axis, lab in enumerate(labels):
            if axis not in drop and lab not in seen:
                seen.append(lab)
        out.append(tuple(seen))
    return tuple(out)


class Live:
    """The live operands' labels, with how many of them (plus the output) hold each label.

    The counts make "which of these labels does anything else still need"
    cost the size of the operands asked about, not of the whole network, so
    planning a 1000-tensor network stays linear in its steps.
    """

    def __init__(self, operands: tuple[tuple[int, ...], ...], output: tuple[int, ...]) -> None:
        self.labels = list(operands)
        self.counts: dict[int, int] = {}
        for labels in (*operands, output):
            self._count(labels, 1)

    def _count(self, labels: tuple[int, ...], delta: int) -> None:
        for x in labels:
            self.counts[x] = self.counts.get(x, 0) + delta

    def kept(self, positions: tuple[int, ...]) -> set[int]:
        """The labels of these operands that another operand or the output still holds."""
        mine: dict[int, int] = {}
        for p in positions:
            for x in self.labels[p]:
                mine[x] = mine.get(x, 0) + 1
        return {x for x, n in mine.items() if self.counts[x] > n}

    def replace(self, pos: int, labels: tuple[int, ...]) -> None:
        self._count(self.labels[pos], -1)
        self.labels[pos] = labels
        self._count(labels, 1)

    def pop_append(self, positions: tuple[int, ...], labels: tuple[int, ...]) -> None:
        """Remove these operands (opt_einsum's order: highest position first) and append their result."""
        for p in sorted(positions, reverse=True):
            self._count(self.labels.pop(p), -1)
        self.labels.append(labels)
        self._count(labels, 1)


def _reduce_once_seen(live: Live, sizes: tuple[int, ...], steps: list) -> None:
    """Reduce, first and in place, every label seen by one operand only and absent from the output.

    Reducing early is never more work than carrying the label into a product,
    and it means every product's operands hold only labels that are kept or
    contracted.
    """
    for pos in range(len(live.labels)):
        labels = live.labels[pos]
        keep = live.kept((pos,))
        if not all(x in keep for x in labels):
            step = make_reduce(pos, labels, keep, sizes, in_place=True)
            steps.append(step)
            live.replace(pos, step.result)


def contraction_path(operands: tuple[tuple[int, ...], ...], output: tuple[int, ...], sizes: tuple[int, ...],
                     optimize: Any) -> list[tuple[int, ...]]:
    """opt_einsum's path for these labels and sizes (cotengra's, when ``optimize`` is one of its optimisers)."""
    if len(operands) < 2:
        return []
    if isinstance(optimize, (list, tuple)):
        return [tuple(map(int, step)) for step in optimize]
    import opt_einsum

    symbols = {lab: opt_einsum.get_symbol(lab) for labels in operands for lab in labels}
    eq = ",".join("".join(symbols[x] for x in labels) for labels in operands) + "->" + \
        "".join(symbols[x] for x in output)
    shapes = [tuple(sizes[x] for x in labels) for labels in operands]
    optimize = _cotengra_optimizer(optimize)
    path, _ = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    return [tuple(step) for step in path]


def _cotengra_optimizer(optimize: Any) -> Any:
    """``"cotengra"`` asks for cotengra's hyper-optimiser, if it is installed; a path function becomes a
    ``PathOptimizer`` (opt_einsum's ``contract_path`` would read it as an explicit path); anything else
    passes through."""
    import opt_einsum

    if callable(optimize) and not isinstance(optimize, opt_einsum.paths.PathOptimizer):
        return _path_optimizer(optimize)
    if optimize != "cotengra":
        return optimize
    try:
        import cotengra
    except ImportError as exc:
        raise ImportError("optimize='cotengra' needs cotengra: pip install cotengra") from exc
    return cotengra.HyperOptimizer(max_repeats=32, progbar=False)


def _path_optimizer(fn: Any) -> Any:
    """A path function ``fn(inputs, output, size_dict, memory_limit)`` (as ``opt_einsum.paths.greedy``) as a
    ``PathOptimizer``, which ``contract_path`` calls (a bare function it would read as an explicit path)."""
    from opt_einsum.paths import PathOptimizer

    class PathFunction(PathOptimizer):
        def __call__(self, inputs: Any, output: Any, size_dict: Any, memory_limit: Any = None) -> Any:
            return fn(inputs, output, size_dict, memory_limit)

    return PathFunction()


@lru_cache(maxsize=512)
def make_plan(parsed: Parsed, optimize: Any) -> Plan:
    """Pre-reductions, then opt_einsum's pairwise steps, then the output permutation."""
    operands = unique_labels(parsed)
    if not operands:
        raise ValueError("einsum needs at least one operand")
    live = Live(operands, parsed.output)
    steps: list[Reduce | Pair] = []
    _reduce_once_seen(live, parsed.sizes, steps)
    path = contraction_path(tuple(live.labels), parsed.output, parsed.sizes, optimize)
    _check_path(path, len(operands))
    for positions in path:
        _apply(live, positions, parsed.sizes, steps)
    return Plan(operands, tuple(steps), tuple(live.labels[0].index(x) for x in parsed.output), tuple(path))


def _apply(live: Live, positions: tuple[int, ...], sizes: tuple[int, ...], steps: list) -> None:
    """One path entry: a product of two operands, a reduction of one; longer entries pair up left to right."""
    if len(positions) == 1:
        step: Reduce | Pair = make_reduce(positions[0], live.labels[positions[0]], live.kept(positions), sizes)
        steps.append(step)
        live.pop_append(positions, step.result)
        return
    first, second, *rest = positions
    step = make_pair(first, second, live.labels[first], live.labels[second], live.kept((first, second)), sizes)
    steps.append(step)
    live.pop_append((first, second), step.result)
    # Later positions of a longer entry move down past the two popped ones; each pairs with the last result.
    rest = [q - (q > first) - (q > second) for q in rest]
    while rest:
        q = rest.pop(0)
        _apply(live, (q, len(live.labels) - 1), sizes, steps)
        rest = [r - (r > q) for r in rest]


def _check_path(path: list[tuple[int, ...]], n: int) -> None:
    """An explicit path must contract every operand to one, with positions that exist when used."""
    live = n
    for step in path:
        if not step or len(set(step)) != len(step) or any(not 0 <= p < live for p in step):
            raise ValueError(f"einsum path entry {step} is not a set of positions among {live} live operands")
        live -= len(step) - 1
    if live > 1 and n > 0:
        raise ValueError(f"einsum path {path} leaves {live} operands uncontracted; it must end with one")
