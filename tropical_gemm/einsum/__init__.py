"""Tropical einsum: tensor-network contractions over a semiring, with the winning configuration.

``einsum`` parses the subscripts ([`parse`][tropical_gemm.einsum.parse]),
asks opt_einsum for a contraction order ([`plan`][tropical_gemm.einsum.plan]),
runs each pairwise step as one batched tropical product and each
single-operand step as one reduction ([`lower`][tropical_gemm.einsum.lower]),
and, if asked, walks the steps' argmaxes back to the winning value of every
contracted index ([`backtrack`][tropical_gemm.einsum.backtrack]).  On cupy
arrays a call signature's steps are compiled once into launches on addresses
(``program``, ``replay``) and replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import canonical_dtype, promote_untyped, truth_dtype
from ..engines import array_kind
from ..frontends import front_end
from ..semirings import Semiring, find_counting_semiring, get_semiring
from . import backtrack
from .lower import array_ops, execute, permuted
from .parse import Parsed, parse_interleaved, parse_subscripts, split_interleaved
from .plan import Plan, make_plan

__all__ = ["contract", "einsum", "einsum_plan", "parse_call"]


#: Array types whose library the type alone says (numpy's, cupy's and torch's own), as they are met.
_TYPE_KINDS: dict[type, str] = {np.ndarray: "cpu"}


def _library(x: object) -> str:
    """"torch", "cuda" (cupy and other device arrays) or "cpu" (numpy and other host array-likes)."""
    kind = _TYPE_KINDS.get(type(x))
    if kind is not None:  # the common case, without array_kind's DLPack device query
        return kind
    root = type(x).__module__.split(".")[0]
    kind = "torch" if root == "torch" else array_kind(x)
    if root in ("numpy", "cupy", "torch"):
        _TYPE_KINDS[type(x)] = kind
    return kind


def _check_operands(operands: list[Any], sr: Semiring) -> tuple[str, list[Any]]:
    """One array library and one supported dtype for all operands, or an error naming both.

    The boolean semiring takes truth values (bool, uint8) as numpy or cupy
    arrays, and its steps read bools: uint8 operands become bool here, on the
    GPU by the registry's bool ``gather`` (``cuda_aux.truth_values``), never
    a CuPy comparison kernel.  torch tensors take no and_or anywhere.
    """
    if not operands:
        raise ValueError("einsum needs at least one operand")
    kinds = [_library(x) for x in operands]
    if len(set(kinds)) > 1:
        described = ", ".join(f"operand {i}: {type(x).__module__}.{type(x).__name__}" for i, x in enumerate(operands))
        raise TypeError(f"einsum operands mix array libraries ({described}); convert them to one library first")
    kind = kinds[0]
    if kind == "cpu":
        operands = [np.asarray(x) for x in promote_untyped(operands)]
    elif kind == "cuda":
        from ..engines import cuda, cupy_module

        ndarray = cupy_module().ndarray
        operands = [x if type(x) is ndarray else cuda.as_array(x) for x in operands]
    dtypes = [x.dtype for x in operands]
    if sr.boolean:
        if kind == "torch":  # tensors take no and_or anywhere: matmul refuses them too
            raise TypeError("einsum over the and_or semiring takes numpy or cupy arrays, not torch tensors; pass "
                            "t.numpy() (t.cpu().numpy() for a CUDA tensor, or cupy.asarray(t) to stay on the GPU)")
        for dtype in dtypes:
            truth_dtype(dtype, dtype)
        return kind, [x if x.dtype == np.bool_ else _truth_values(kind, x) for x in operands]
    if kind == "torch":
        _check_torch_dtype(dtypes[0])
    else:
        canonical_dtype(dtypes[0])
    if any(d != dtypes[0] for d in dtypes):
        listed = ", ".join(f"operand {i}: {d}" for i, d in enumerate(dtypes))
        cast = "x.to(...)" if kind == "torch" else "x.astype(...)"
        raise TypeError(f"einsum operands have different dtypes ({listed}); cast them to one, e.g. {cast}")
    return kind, operands


def _truth_values(kind: str, x: Any) -> Any:
    """A uint8 operand as bools (nonzero is true): each step's rule, and the result, read bools."""
    if kind == "cpu":
        return x != 0
    from ..engines.cuda_aux import truth_values

    return truth_values(x)


def _check_torch_dtype(dtype: Any) -> None:
    """torch dtypes are checked against the torch layer's tables (no numpy dtype, which torch.compile cannot trace).

    The halves are widened around each product by ``tropical_matmul``, as for ``matmul``.
    """
    from ..torch.validation import ENGINE_NAMES, HALVES

    if dtype not in ENGINE_NAMES and dtype not in HALVES:
        supported = ", ".join(str(t) for t in (*ENGINE_NAMES, *HALVES))
        raise TypeError(f"unsupported dtype {dtype}; supported: {supported}")


def einsum_plan(subscripts: Any, *operands: Any, optimize: Any = "auto") -> Plan:
    """The plan ``einsum`` would run for these arguments: its steps and opt_einsum's path.

    Examples:
        >>> import numpy as np
        >>> from tropical_gemm.einsum import einsum_plan
        >>> plan = einsum_plan("ij,jk,kl->il", np.ones((20, 3)), np.ones((3, 40)), np.ones((40, 5)))
        >>> [type(step).__name__ for step in plan.steps], plan.path   # the 3x40 @ 40x5 product first: cheaper
        (['Pair', 'Pair'], ((1, 2), (0, 1)))
    """
    parsed, _ = parse_call(subscripts, operands)
    return make_plan(parsed, optimize_key(optimize))


def parse_call(subscripts: Any, operands: tuple[Any, ...]) -> tuple[Parsed, list[Any]]:
    """The call's equation, resolved against its operands' shapes, and the operands (either form)."""
    if isinstance(subscripts, str):
        ops = list(operands)
        return parse_subscripts(subscripts, _shapes(ops)), ops
    ops, label_lists, output = split_interleaved([subscripts, *operands])
    return parse_interleaved(label_lists, _shapes(ops), output), ops


def _shapes(ops: list[Any]) -> tuple[tuple[int, ...], ...]:
    """The operands' shapes as tuples of Python ints (the plan cache's key).

    numpy's and cupy's arrays (the types ``_library`` has met) already hold
    one; torch's ``Size`` and other array-likes go through ``np.shape``.
    """
    kinds = _TYPE_KINDS
    return tuple([x.shape if kinds.get(type(x), "torch") != "torch" else tuple(map(int, np.shape(x))) for x in ops])


#: The accepted forms of ``optimize``, for the error that refuses anything else.
OPTIMIZE_FORMS = (
    "an opt_einsum strategy name ({names}), 'cotengra' (if installed), True ('auto') or False/None ('greedy'); "
    "an explicit path such as [(0, 1), (0, 1)] (numpy.einsum_path's ['einsum_path', ...] too); "
    "an opt_einsum PathOptimizer instance or path function fn(inputs, output, size_dict, memory_limit); "
    "or a cotengra optimizer"
)
#: Strategy names already checked against opt_einsum (the check imports it).
_KNOWN_NAMES: set[str] = {"auto", "greedy", "cotengra"}


def optimize_key(optimize: Any) -> Any:
    """``optimize`` in a hashable form (explicit paths become tuples of tuples), or an error listing the forms.

    Checked here, on every call, because opt_einsum itself never looks at
    ``optimize`` for fewer than three operands.
    """
    if isinstance(optimize, str):
        if optimize not in _KNOWN_NAMES:
            _check_name(optimize)
        return optimize
    if optimize is True:
        return "auto"
    if optimize is False or optimize is None:
        return "greedy"
    if isinstance(optimize, (list, tuple)):
        if optimize and isinstance(optimize[0], str) and optimize[0] == "einsum_path":  # numpy.einsum_path's format
            optimize = optimize[1:]
        if all(isinstance(step, (list, tuple)) and all(isinstance(p, (int, np.integer)) for p in step)
               for step in optimize):
            return tuple(map(tuple, optimize))  # the plan makes its entries ints (equal keys: 1 == np.int64(1))
    elif callable(optimize):  # a PathOptimizer, a path function or a cotengra optimizer, cached by identity
        return optimize
    raise TypeError(f"optimize={optimize!r} is not one of the accepted forms: {_forms()}")


def _check_name(name: str) -> None:
    import opt_einsum

    try:
        opt_einsum.paths.get_path_fn(name)
    except KeyError:
        raise ValueError(f"optimize={name!r} is not a known strategy; optimize takes {_forms()}") from None
    _KNOWN_NAMES.add(name)


def _forms() -> str:
    import opt_einsum

    names = ", ".join(repr(n) for n in sorted(getattr(opt_einsum.paths, "_PATH_OPTIONS", ("auto", "greedy"))))
    return OPTIMIZE_FORMS.format(names=names)


def einsum(subscripts: Any, *operands: Any, semiring: "str | Semiring" = "max_plus", optimize: Any = "auto",
           return_configuration: bool = False):
    """Tropical einsum: ``⊕`` over every index missing from the output of the ``⊗`` of the operands.

    ``einsum("ij,jk->ik", a, b)`` is ``tropical_gemm.matmul(a, b)``;
    ``"ij,jk,kl->il"`` chains products, ``"bij,bjk->bik"`` batches,
    ``"ij->i"`` reduces, ``"ii->i"`` takes a diagonal, ``"...ij,...jk"``
    broadcasts, and with no ``->`` the output is numpy's (indices seen once,
    sorted).  numpy's interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``
    takes any hashable labels, for networks with more indices than letters.

    Operands follow [`matmul`][tropical_gemm.matmul]'s dispatch rule
    (``tropical_gemm.frontends``): numpy arrays (and lists, promoted as numpy
    does) run on the CPU engine, cupy arrays on the GPU; torch tensors come
    back as tensors (differentiable: gradients are those of the composed
    products, winner-take-all, and ``torch.compile`` traces it); dask arrays
    give a lazy dask array ([`tropical_gemm.dask.einsum`][tropical_gemm.dask.einsum]);
    masked arrays are refused.  The dtypes are ``SUPPORTED_DTYPES``, one for
    all operands; float16 and bfloat16 steps are computed in float32 and
    rounded once each, as by ``matmul``, so a chain of several steps rounds
    after each and its last bits can depend on the contraction order (pass
    float32 operands and round the result for one rounding).
    ``optimize`` takes what opt_einsum takes: a strategy name (``"auto"``,
    ``"greedy"``, ``"optimal"``, ``"random-greedy"``, ...), ``"cotengra"`` (if
    installed), an explicit path, a ``PathOptimizer`` instance, a path
    function, or a cotengra optimizer; anything else is an error listing these.

    The counting semirings (``count_max_plus``, ``count_min_plus``) take
    each operand as a tuple ``(values, counts)`` of numpy or cupy arrays and
    return such a pair: the optimum and how many terms reach it (for
    example the number of maximum independent sets of a graph).  The
    boolean semiring ``and_or`` takes bool (or uint8, nonzero is true) numpy
    or cupy arrays and returns bool.

    With ``return_configuration=True`` it returns ``(result, configuration)``:
    ``configuration[index]`` is an int32 array (int64 for an index of 2**31
    values or more) shaped like the result holding, for each output element,
    the value of that contracted index in the winning term (the Viterbi path,
    the MAP assignment, the independent set).  Ties go to the smallest index at every step, so the answer is
    deterministic and the same on CPU and GPU; where an output element is
    the semiring's zero nothing wins and every index reads -1.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> a, b = np.array([[0., 5.], [1., 1.]]), np.array([[0., 0.], [2., 0.]])
        >>> tg.einsum("ij,jk->ik", a, b)
        array([[7., 5.],
               [3., 1.]])
        >>> value, config = tg.einsum("ij,jk->", a, b, return_configuration=True)
        >>> value, {name: int(v) for name, v in config.items()}   # 5 + 2, won by i=0, j=1, k=0
        (array(7.), {'i': 0, 'j': 1, 'k': 0})
    """
    counting = find_counting_semiring(semiring)
    if counting is not None:  # (values, counts) pairs: einsum.counting
        from . import counting as count_steps

        subscripts, operands = count_steps.counted_operands(subscripts, operands)
        parsed, ops = parse_call(subscripts, operands)
        return count_steps.run(make_plan(parsed, optimize_key(optimize)), parsed, ops, counting,
                               return_configuration)
    if _has_pairs(subscripts, operands):  # numpy would stack a (values, counts) pair into one array
        from ..counting import counting_semiring

        counting_semiring(semiring)  # raises, naming the semirings that take pairs
    arrays = operands if isinstance(subscripts, str) else (subscripts, *operands)[::2]
    if not all(type(x) is np.ndarray for x in arrays):
        front = front_end(arrays, None, "einsum")
        if front is not None:
            return front.einsum(subscripts, *operands, semiring=semiring, optimize=optimize,
                                return_configuration=return_configuration)
    return contract(subscripts, *operands, semiring=semiring, optimize=optimize,
                    return_configuration=return_configuration)


def contract(subscripts: Any, *operands: Any, semiring: "str | Semiring" = "max_plus", optimize: Any = "auto",
             return_configuration: bool = False):
    """``einsum`` on numpy, cupy or torch operands, after the dispatch rule (the torch front end calls it)."""
    parsed, ops = parse_call(subscripts, operands)
    sr = get_semiring(semiring)
    kind, ops = _check_operands(ops, sr)
    optimize = optimize_key(optimize)
    replayed = None
    if kind == "cuda":  # the call signature's launches, bound once, on addresses
        from . import replay

        replayed = replay.run(parsed, optimize, ops, sr, return_configuration)
    if replayed is not None:
        plan, result, argmaxes = replayed
    else:
        plan = make_plan(parsed, optimize)
        lowering: Any = array_ops(kind) if kind != "torch" else _torch_ops()
        result, argmaxes = execute(plan, parsed, ops, lowering, sr, return_configuration)
    if not return_configuration:
        return result
    return result, _configuration(kind, plan, parsed, result, argmaxes, sr)


def _has_pairs(subscripts: Any, operands: tuple[Any, ...]) -> bool:
    """Whether an operand is a tuple: in the interleaved form, label lists (which may be tuples) are not operands."""
    if isinstance(subscripts, str):
        return any(type(x) is tuple for x in operands)
    return type(subscripts) is tuple or any(type(x) is tuple for x in operands[1::2])


def _torch_ops() -> Any:
    from .torch_bridge import TorchOps

    return TorchOps


def _configuration(kind: str, plan: Plan, parsed: Parsed, result: Any, argmaxes: list[Any], sr: Semiring) -> dict:
    """The backtracked configuration, as arrays of the operands' library.

    Where one step chose everything (``backtrack.direct``) it is that step's
    argmax in output order, made C-contiguous on the operands' device;
    otherwise the walk runs on the GPU (``device_walk``, a scalar output
    included: one thread, no host round trip per step) or, for host arrays
    and what the GPU walk leaves, on the host.
    """
    out_labels = set(parsed.output)
    names = [name for lab, name in enumerate(parsed.names) if lab not in out_labels]
    root = backtrack.direct(plan)
    if root is not None and len(names) == 1 and _direct_kind(kind, argmaxes[root]):
        return {names[0]: _direct_index(kind, argmaxes[root], plan)}
    if kind == "cpu":
        return backtrack.walk(plan, parsed, argmaxes, lambda: result == sr.zero(result.dtype))
    if names:  # on the result's GPU, in one launch (device_walk), where it can be
        from .device_walk import device_walk

        config = device_walk(plan, parsed, argmaxes, result, sr)
        if config is not None:
            return config
    if kind == "cuda":
        import cupy

        host, upload = cupy.asnumpy, cupy.asarray
    else:
        from .torch_bridge import from_host, to_host

        host, upload = to_host, (lambda v: from_host(v, result))
    def is_zero() -> Any:
        values = host(result)  # a numpy array: its dtype is numpy's, which a torch dtype is not
        return values == sr.zero(values.dtype)

    if parsed.output:
        config = backtrack.walk(plan, parsed, backtrack.host_argmaxes(argmaxes, host), is_zero)
    else:  # a network's optimum: one element of each argmax read where it lies
        config = backtrack.walk_scalar(plan, parsed, argmaxes, is_zero)
    return {name: upload(v) for name, v in config.items()}


def _direct_kind(kind: str, idx: Any) -> bool:
    """numpy and torch argmaxes, and the GPU's int32 ones (what its ``gather_index`` copies), are returned directly."""
    return kind != "cuda" or idx.dtype == np.int32


def _direct_index(kind: str, idx: Any, plan: Plan) -> Any:
    """One step's argmax, permuted into output order, as a C-contiguous array of the configuration's dtype.

    On the GPU the copy is the registry's ``gather_index`` kernel (int32), as
    every other GPU copy in einsum; the caller sends only int32 argmaxes here,
    which is the configuration's dtype for them.
    """
    view = permuted(idx, plan.final)
    if kind == "cpu":
        return np.asarray(view, dtype=backtrack.config_dtype(plan), order="C")
    if kind == "torch":  # a copy: autograd may hold the argmax itself for the backward
        import torch

        dtype = torch.int32 if backtrack.config_dtype(plan) == np.int32 else torch.int64
        return view.to(dtype, memory_format=torch.contiguous_format, copy=True)
    from ..engines.cuda_aux import contiguous

    return contiguous(view, index=True)
