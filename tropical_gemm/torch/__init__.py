"""PyTorch integration: differentiable tropical products and a ``TropicalLinear`` layer.

The products are ``torch.library.custom_op`` operators in the ``tropical_gemm``
namespace, each with a fake (meta) kernel and an autograd formula, so they
work under ``torch.compile(fullgraph=True)`` without graph breaks and pass
``torch.library.opcheck``.  Tensors never leave their device and are never
copied; on CUDA the kernels run on PyTorch's current stream and every buffer
comes from PyTorch's caching allocator.  cupy is imported the first time a
CUDA tensor is seen.

The package, by concern (each layer uses only those above it):

* ``validation``: checks of tensors in torch's terms, on the core dtype,
  semiring and shape rules;
* ``bridge``: tensors as numpy or cupy arrays, PyTorch's CUDA streams and
  allocator for cupy;
* ``kernels``: the engines' forward and backward on tensors, into buffers
  torch allocates, one prepared launch on CUDA where the product allows;
* ``ops``: the custom operators, their fake kernels and autograd formulas,
  double backward included;
* ``eager``: plain eager calls skip the dispatcher (the one place that reads
  torch's private API);
* ``functional``: ``tropical_matmul`` and ``tropical_matmul_with_argmax``;
* ``nn``: ``TropicalLinear``.
"""

from .functional import tropical_matmul, tropical_matmul_with_argmax
from .nn import TropicalLinear

__all__ = ["TropicalLinear", "tropical_matmul", "tropical_matmul_with_argmax"]
