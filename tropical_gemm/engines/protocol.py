"""What the public API asks of an engine: the one interface the CPU and CUDA engines both offer.

An engine is a module (``engines.cpu``, ``engines.cuda``) chosen per call by
``select_engine``; ``api``, ``einsum`` and the torch bridge call only these
names on it.  ``tests/test_engine_protocol.py`` checks that both engine
modules satisfy it, parameter names included.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..semirings import CountingSemiring, Semiring


@runtime_checkable
class Engine(Protocol):
    """One kind of array (numpy on the host, cupy on a GPU) and the products computed on it.

    Arrays passed in are the engine's own (``as_array`` made them); outputs
    are new and C-contiguous.  Launches may be asynchronous: nothing waits
    for the results unless the caller reads them.
    """

    #: The engine's name, as ``array_kind`` reports arrays of its kind.
    NAME: str

    def as_array(self, x: Any) -> Any:
        """``x`` as this engine's array type, without a copy where it already is one."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any) -> Any:
        """A new array where ``like`` lives."""

    def is_c_contiguous(self, x: Any) -> bool:
        """Whether ``x`` is C-contiguous (the engines write only into such outputs)."""

    def may_share_memory(self, x: Any, y: Any) -> bool:
        """Whether ``x`` and ``y`` may overlap in memory (an output must not overlap an input)."""

    def forward(self, a: Any, b: Any, semiring: Semiring, out: Any, argmax_out: Any) -> None:
        """Write ``a ⊗ b`` (batched, broadcast) into ``out``, and its argmax into ``argmax_out`` unless None."""

    def backward(self, grad_c: Any, a: Any, b: Any, argmax: Any, semiring: Semiring, deterministic: bool,
                 grad_a: Any, grad_b: Any) -> None:
        """Write the gradients of a product, reduced over broadcast batch dims, into ``grad_a`` and ``grad_b``."""

    def count_forward(self, a_values: Any, a_counts: Any, b_values: Any, b_counts: Any, semiring: CountingSemiring,
                      out_values: Any, out_counts: Any, flags: Any) -> None:
        """Write the counting product of two ``(values, counts)`` pairs (batched, broadcast) into the outputs.

        ORs ``semirings.COUNT_OVERFLOW`` into ``flags[0]`` for a result count
        past int64, ``COUNT_NEGATIVE`` for a negative count read.
        """
