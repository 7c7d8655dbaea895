"""The one dispatch rule of ``matmul`` and ``einsum``: which layer serves these inputs.

numpy and cupy arrays (and anything ``np.asarray`` takes) go to the core, the
engines.  Two front ends sit above the core and serve their own array types:
torch tensors come back as tensors with autograd, dask arrays stay lazy.
Masked arrays are refused, since the core would ignore their mask.

The front ends are named here, not imported: ``FRONT_ENDS`` says which
library's array type each serves and which module implements it, and that
module is imported by name the first time one of its arrays is met.  So the
API sits below the front ends (they import it, never the reverse) and
nothing here imports torch, dask or ``numpy.ma`` (numpy imports that lazily,
and it costs more than a warm product): an array of a library can only
exist once the library is imported, so ``sys.modules`` says whether to look.

A front end's module provides ``matmul(a, b, semiring, *, argmax)`` and
``einsum(subscripts, *operands, semiring, optimize, return_configuration)``
with the public functions' meaning.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Sequence


@dataclass(frozen=True)
class FrontEnd:
    """A layer above the core for one library's array type."""

    name: str
    library: str  #: the module that defines the array type
    array_type: str  #: its name in that module
    module: str  #: the front end's implementation, imported when first needed
    only_own: bool  #: every operand must be of the type (else the others are wrapped by the front end)
    convert: str  #: how a user converts another operand, for the error
    instead_of_backward: str  #: what replaces ``matmul_backward`` for these arrays
    out_hint: str  #: what replaces ``out=``, for the error
    noun: str  #: what its arrays are called in errors ("torch tensors", "dask arrays")


FRONT_ENDS: tuple[FrontEnd, ...] = (
    FrontEnd("torch", "torch", "Tensor", "tropical_gemm.torch.frontend", True,
             "torch.as_tensor({label}, device=other.device)",
             "gradients come from autograd: c = tropical_gemm.matmul(a, b) (or tropical_gemm.torch.tropical_matmul), "
             "then c.backward(...)",
             "the product is a new tensor that autograd tracks; copy it afterwards if needed (out.copy_(c))",
             "torch tensors"),
    FrontEnd("dask", "dask.array", "Array", "tropical_gemm.dask", False, "",
             "compute them first",
             "the result is lazy; use out[...] = c.compute()", "dask arrays"),
)


_LABELS = {"matmul": ("a", "b"), "matmul_backward": ("a", "b", "grad_c", "argmax")}


def front_end(operands: Sequence[Any], out: Any, function: str) -> "ModuleType | None":
    """The front end's module that serves these operands, or None for the core.

    ``function`` is ``"matmul"``, ``"einsum"`` or ``"matmul_backward"``.
    Raises ``TypeError`` for masked arrays, for a front end's array mixed
    with something it does not take, for ``out=`` with a front end, and for
    ``matmul_backward`` on a front end's arrays.
    """
    outs = out if isinstance(out, tuple) else (out,)
    labels = _LABELS.get(function) or tuple(f"operand {i}" for i in range(len(operands)))
    labelled = (*zip(labels, operands), *(("out", o) for o in outs if o is not None))
    refuse_masked(labelled)
    for end in FRONT_ENDS:
        library = sys.modules.get(end.library)
        if library is None:
            continue
        array_type = getattr(library, end.array_type)
        if any(isinstance(x, array_type) for _, x in labelled):
            _check_call(end, labelled[:len(operands)], array_type, out, function)
            return importlib.import_module(end.module)
    return None


def refuse_masked(labelled: Sequence[tuple[str, Any]]) -> None:
    """A masked array's mask would be ignored: a ``TypeError`` that says how to fill it instead."""
    masked = sys.modules.get("numpy.ma")
    if masked is None:
        return
    for label, x in labelled:
        if isinstance(x, masked.MaskedArray):
            name = label if label.isidentifier() else "x"
            raise TypeError(
                f"{label} is a masked array, whose mask tropical_gemm would ignore; fill the masked entries "
                f"with a value that loses, e.g. {name}.filled(tropical_gemm.get_semiring(semiring).zero({name}.dtype)), "
                f"or pass {name}.data to use the values under the mask"
            )


def _check_call(end: FrontEnd, operands: Sequence[tuple[str, Any]], array_type: type, out: Any,
                function: str) -> None:
    """What the front end cannot take, as one error that names the fix."""
    if end.only_own:
        for label, x in operands:
            if not isinstance(x, array_type):
                other = "the other operand is" if function != "einsum" else "another operand is"
                raise TypeError(
                    f"{label} is a {type(x).__module__}.{type(x).__name__} but {other} a {end.library} "
                    f"{end.array_type.lower()}; convert it first, e.g. {end.convert.format(label=label.replace(' ', '_'))}"
                )
    if function == "matmul_backward":
        raise TypeError(f"matmul_backward takes numpy or cupy arrays, not {end.noun}; {end.instead_of_backward}")
    if out is not None:
        raise TypeError(f"out= is not supported for {end.noun}: {end.out_hint}")
