"""Parsing einsum subscripts into integer labels, with errors that name the problem.

Both of numpy's spellings are accepted: a subscripts string (``"ij,jk->ik"``,
with ``...`` for broadcast dimensions) and the interleaved form
``einsum(op0, labels0, op1, labels1, ..., [output])`` whose labels are any
hashable values.  In a string, as in opt_einsum's, every character other than
``,``, ``-``, ``>``, ``.`` and a space is an index, so equations written with
``opt_einsum.get_symbol`` (which gives other Unicode characters from its 53rd
index on), by cotengra or by tensor-network generators parse unchanged.
Either way the result is a [`Parsed`][tropical_gemm.einsum.parse.Parsed]: each
operand's axes as integer labels, the output's labels, the size of every
label, and the user's name for each label (used for configurations).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Hashable, Sequence


@dataclass(frozen=True)
class Parsed:
    """One einsum, resolved against its operands' shapes.

    ``inputs[i]`` labels each axis of operand ``i`` (a label repeats for a
    diagonal); ``drop[i]`` lists the axes of operand ``i`` that are size-1
    ``...`` dimensions broadcast against a larger size, which the operand
    does not depend on.  ``names[label]`` is the user's name of a label: a
    letter, an interleaved label, or ``"...0"``, ``"...1"``... for the
    ``...`` dimensions from the left.
    """

    inputs: tuple[tuple[int, ...], ...]
    drop: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    sizes: tuple[int, ...]
    names: tuple[Hashable, ...]


class _Labels:
    """Assigns integer labels to names in order of first appearance."""

    def __init__(self) -> None:
        self.ids: dict[Hashable, int] = {}
        self.names: list[Hashable] = []

    def __call__(self, name: Hashable) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.names)
            self.names.append(name)
        return self.ids[name]


def _split_term(term: str, subscripts: str, where: str) -> tuple[list[str], bool]:
    """The indices of one term, with ``"..."`` standing for the ellipsis, and whether it had one."""
    if term.count("...") > 1:
        raise ValueError(f"einsum subscripts {subscripts!r}: {where} has more than one '...'")
    before, dots, after = term.partition("...")
    for part in (before, after):
        if "." in part:
            pos = subscripts.index(term) + term.index(".")
            raise ValueError(
                f"einsum subscripts {subscripts!r}: a lone '.' near position {pos}; an ellipsis is exactly '...'"
            )
    return [*before, *(["..."] if dots else []), *after], bool(dots)


def _split_subscripts(subscripts: str, n_operands: int) -> tuple[list[str], "str | None"]:
    text = subscripts.replace(" ", "")
    if text.count("->") > 1 or text.replace("->", "").count("-") or text.replace("->", "").count(">"):
        raise ValueError(f"einsum subscripts {subscripts!r}: '->' must appear at most once, and '-', '>' only in it")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_operands:
        raise ValueError(
            f"einsum subscripts {subscripts!r} name {len(terms)} operand(s), but {n_operands} were passed"
        )
    return terms, (rhs if arrow else None)


def _ellipsis_dims(terms: list[list[str]], shapes: Sequence[tuple[int, ...]], text: str) -> list[int]:
    """The broadcast sizes of the ``...`` dimensions (numpy's right-aligned rule)."""
    width = max([len(s) - (len(t) - 1) for t, s in zip(terms, shapes) if "..." in t] + [0])
    dims = [1] * width
    for i, (t, s) in enumerate(zip(terms, shapes)):
        if "..." not in t or len(s) < len(t) - 1:  # too few dims: _expand names that error
            continue
        own = s[t.index("...") : t.index("...") + len(s) - (len(t) - 1)]
        for d, size in enumerate(own, start=width - len(own)):
            if size != 1 and dims[d] not in (1, size):
                raise ValueError(
                    f"einsum {text!r}: the '...' dimensions of operand {i} {tuple(own)} do not broadcast "
                    f"against the others (size {dims[d]})"
                )
            dims[d] = max(dims[d], size) if size != 1 else dims[d]
    return dims


def _expand(term: list[str], shape: tuple[int, ...], width: int, i: int, text: str) -> list[Hashable]:
    """Term names per axis, the ellipsis replaced by the names of its dims."""
    fixed = len(term) - ("..." in term)
    if len(shape) < fixed or ("..." not in term and len(shape) != fixed):
        raise ValueError(
            f"einsum {text!r}: operand {i} has {len(shape)} dimension(s) but its subscripts "
            f"{''.join(term)!r} name {fixed}" + (" or more" if "..." in term else "")
        )
    if "..." not in term:
        return list(term)
    at = term.index("...")
    own = len(shape) - fixed
    return [*term[:at], *(f"...{d}" for d in range(width - own, width)), *term[at + 1 :]]


def _resolve(named: list[list[Hashable]], shapes: Sequence[tuple[int, ...]], output: "list[Hashable] | None",
             ellipsis: list[int], text: str) -> Parsed:
    """Integer labels, sizes checked; implicit output is numpy's (once-seen labels sorted, ``...`` first)."""
    labels = _Labels()
    sizes: dict[int, tuple[int, int, int]] = {}  # label -> (size, operand, axis)
    inputs, drop = [], []
    for i, (names, shape) in enumerate(zip(named, shapes)):
        ids, dropped = [], []
        for axis, (name, size) in enumerate(zip(names, shape)):
            lab = labels(name)
            ids.append(lab)
            if isinstance(name, str) and name.startswith("...") and size == 1 and ellipsis[int(name[3:])] != 1:
                dropped.append(axis)
                continue
            seen = sizes.setdefault(lab, (size, i, axis))
            if seen[0] != size:
                raise ValueError(
                    f"einsum {text!r}: index {name!r} has size {seen[0]} in operand {seen[1]} (axis {seen[2]}) "
                    f"but size {size} in operand {i} (axis {axis})"
                )
        inputs.append(tuple(ids))
        drop.append(tuple(dropped))
    if output is None:
        counts: dict[Hashable, int] = {}
        for names in named:
            for name in names:
                counts[name] = counts.get(name, 0) + 1
        dots = [f"...{d}" for d in range(len(ellipsis))]
        output = dots + sorted((n for n, c in counts.items() if c == 1 and n not in dots), key=_sort_key)
    out = _output_labels(output, labels, text)
    size_of = [sizes.get(lab, (ellipsis[int(str(n)[3:])] if _is_dots(n) else 1,))[0]
               for lab, n in enumerate(labels.names)]
    return Parsed(tuple(inputs), tuple(drop), out, tuple(size_of), tuple(labels.names))


def _is_dots(name: Hashable) -> bool:
    return isinstance(name, str) and name.startswith("...")


def _sort_key(name: Hashable) -> tuple:
    return (type(name).__name__, name) if not isinstance(name, str) else ("", name)


def _output_labels(output: list[Hashable], labels: _Labels, text: str) -> tuple[int, ...]:
    seen = set()
    for name in output:
        if name not in labels.ids:
            raise ValueError(f"einsum {text!r}: output index {name!r} appears in no operand")
        if name in seen:
            raise ValueError(f"einsum {text!r}: output index {name!r} appears more than once")
        seen.add(name)
    return tuple(labels.ids[n] for n in output)


@lru_cache(maxsize=1024)
def parse_subscripts(subscripts: str, shapes: tuple[tuple[int, ...], ...]) -> Parsed:
    """Parse a subscripts string against the operands' shapes.

    Examples:
        >>> p = parse_subscripts("ij,jk->ik", ((2, 3), (3, 4)))
        >>> p.inputs, p.output, p.sizes, p.names
        (((0, 1), (1, 2)), (0, 2), (2, 3, 4), ('i', 'j', 'k'))
        >>> parse_subscripts("ij,jÀ->iÀ", ((2, 3), (3, 4))).names   # any character but , - > . is an index
        ('i', 'j', 'À')
        >>> parse_subscripts("ij,j>k", ((2, 3), (3, 4)))
        Traceback (most recent call last):
        ...
        ValueError: einsum subscripts 'ij,j>k': '->' must appear at most once, and '-', '>' only in it
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum subscripts must be a string, got {type(subscripts).__name__}")
    terms, rhs = _split_subscripts(subscripts, len(shapes))
    split = [_split_term(t, subscripts, f"operand {i}")[0] for i, t in enumerate(terms)]
    ellipsis = _ellipsis_dims(split, shapes, subscripts)
    named = [_expand(t, s, len(ellipsis), i, subscripts) for i, (t, s) in enumerate(zip(split, shapes))]
    output = None
    if rhs is not None:
        out_terms, has_dots = _split_term(rhs, subscripts, "the output")
        output = _expand(out_terms, (1,) * (len(out_terms) - 1 + len(ellipsis)) if has_dots else (),
                         len(ellipsis), -1, subscripts) if has_dots else list(out_terms)
    return _resolve(named, shapes, output, ellipsis, subscripts)


def split_interleaved(args: Sequence[object]) -> tuple[list[object], list[Sequence[Hashable]],
                                                      "list[Hashable] | None"]:
    """Operands, their label lists and the output list (or None) from ``op0, labels0, op1, labels1, ..., [out]``.

    The label lists are the caller's own lists and tuples (``parse_interleaved`` reads them into tuples).
    """
    pairs, output = list(args), None
    if len(pairs) % 2 == 1:
        output = pairs.pop()
    label_lists = pairs[1::2]
    for i, labs in enumerate([*label_lists, *([output] if output is not None else [])]):
        if type(labs) is list or type(labs) is tuple:  # the common case, without isinstance's two checks
            continue
        if isinstance(labs, str) or not isinstance(labs, (list, tuple)):
            if i == 0 and not isinstance(args[0], (list, tuple)) and not hasattr(args[0], "shape"):
                raise TypeError(f"einsum subscripts must be a string such as 'ij,jk->ik', got "
                                f"{type(args[0]).__name__} (or, interleaved, einsum(op0, [labels0], op1, ...))")
            where = f"operand {i}" if i < len(label_lists) else "the output"
            raise TypeError(
                f"einsum's interleaved form takes a list of labels for {where}, got {type(labs).__name__}; "
                "pass einsum(op0, [labels0], op1, [labels1], ..., [output])"
            )
    return pairs[0::2], label_lists, (list(output) if output is not None else None)


def parse_interleaved(label_lists: Sequence[Sequence[Hashable]], shapes: tuple[tuple[int, ...], ...],
                      output: "Sequence[Hashable] | None") -> Parsed:
    """Parse the interleaved form; ``Ellipsis`` in a label list stands for ``...``.

    Examples:
        >>> p = parse_interleaved([["x", 0], [0, ("y",)]], ((2, 3), (3, 4)), ["x"])
        >>> p.inputs, p.output, p.names
        (((0, 1), (1, 2)), (0,), ('x', 0, ('y',)))
    """
    try:
        key = (tuple(map(tuple, label_lists)), None if output is None else tuple(output))
        hash(key)
    except TypeError as exc:
        raise TypeError(f"einsum labels must be hashable: {exc}") from exc
    return _parse_interleaved(*key, shapes)


@lru_cache(maxsize=1024)
def _parse_interleaved(label_lists: tuple[tuple[Hashable, ...], ...], output: "tuple[Hashable, ...] | None",
                       shapes: tuple[tuple[int, ...], ...]) -> Parsed:
    text = "interleaved einsum"
    terms = [["..." if lab is Ellipsis else lab for lab in labs] for labs in label_lists]
    for i, t in enumerate(terms):
        if t.count("...") > 1:
            raise ValueError(f"{text}: operand {i} has more than one Ellipsis")
    ellipsis = _ellipsis_dims(terms, shapes, text)
    named = [_expand(t, s, len(ellipsis), i, text) for i, (t, s) in enumerate(zip(terms, shapes))]
    out = None
    if output is not None:
        out_t = ["..." if lab is Ellipsis else lab for lab in output]
        if out_t.count("...") > 1:
            raise ValueError(f"{text}: the output has more than one Ellipsis")
        out = _expand(out_t, (1,) * (len(out_t) - 1 + len(ellipsis)), len(ellipsis), -1, text) \
            if "..." in out_t else out_t
    return _resolve(named, shapes, out, ellipsis, text)
