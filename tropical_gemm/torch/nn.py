"""``TropicalLinear``: a linear layer over a tropical semiring, on the differentiable products."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..semirings import Semiring, get_semiring
from .functional import tropical_matmul
from .validation import check_semiring


class TropicalLinear(nn.Module):
    """``y_j = b_j ⊕ ⊕_i (x_i ⊗ W_ji)``: a linear layer over a tropical semiring.

    The bias enters through ⊕ (``fmax``/``fmin``, ignoring NaN as the engines
    do), as the weight of a constant input equal to the semiring's one.  An
    ordinary ``+ b`` would add nothing for max_plus and min_plus: it commutes
    with the max and folds into the weights.

    Initialisation: weights and bias are drawn from U(-1, 1), and for
    ``max_mul`` as exp(U(-1, 1)), the image of that draw under the logarithm
    that maps max_mul on positive numbers onto max_plus.  The width does not
    depend on ``in_features`` because ⊕ selects one term instead of summing
    ``in_features`` of them, so there is no fan-in variance to cancel.  Each
    output sends its gradient to one winning input, so what init must provide
    is diversity: weights spread about as widely as unit-scale inputs, so the
    winner depends on both the input and the weight row and different outputs
    pick, and train, different weights.  At either extreme one side decides
    alone: the inputs (every output picks the same few inputs), or the weights
    (each output keeps its winner whatever the input, and trains one weight).
    Scale inputs to about unit spread, as for ``nn.Linear``.

    Examples:
        >>> import torch
        >>> from tropical_gemm.torch import TropicalLinear
        >>> layer = TropicalLinear(4, 2, "max_plus")
        >>> y = layer(torch.randn(8, 3, 4))    # any leading shape
        >>> y.shape
        torch.Size([8, 3, 2])
        >>> y.sum().backward()
        >>> layer.weight.grad.shape, layer.bias.grad.shape
        (torch.Size([2, 4]), torch.Size([2]))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        semiring: "str | Semiring" = "max_plus",
        bias: bool = True,
        device: "torch.device | str | None" = None,
        dtype: "torch.dtype | None" = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.semiring = check_semiring(semiring).name
        self.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw weights and bias as the class docstring explains."""
        multiplicative = get_semiring(self.semiring).mul == "times"
        with torch.no_grad():
            for param in (self.weight, self.bias):
                if param is not None:
                    param.uniform_(-1.0, 1.0)
                    if multiplicative:
                        param.exp_()

    def forward(self, x: Tensor) -> Tensor:
        """Inputs ``(*, in_features)`` map to ``(*, out_features)`` in one 2-D product."""
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"TropicalLinear({self.in_features}, {self.out_features}) takes inputs of shape "
                             f"(*, {self.in_features}), got shape {tuple(x.shape)}")
        y = tropical_matmul(x.reshape(-1, self.in_features), self.weight.T, self.semiring)
        if self.bias is not None:
            add = torch.fmax if get_semiring(self.semiring).add == "max" else torch.fmin
            y = add(y, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"semiring={self.semiring!r}, bias={self.bias is not None}"
        )
