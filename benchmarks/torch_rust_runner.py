"""Runs in the Rust crate's virtual environment (torch_layer.py starts it): its PyTorch module, timed.

    python torch_rust_runner.py TORCH_SITE SIZE REPEATS

``TORCH_SITE`` (the caller's site-packages) goes at the end of the path, for
torch alone: the crate's own ``tropical_gemm`` comes first.  Prints
``{"seconds": ...}``, the median of ``REPEATS`` forward+backward passes of a
float32 max_plus product of ``SIZE``³ (after one untimed pass), and the
module's file, for the record.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(torch_site: str, size: str, repeats: str) -> None:
    sys.path.append(torch_site)
    import torch
    import tropical_gemm  # the Rust crate's package, not ours
    from tropical_gemm.pytorch import tropical_maxplus_matmul

    n = int(size)
    gen = torch.Generator().manual_seed(0)
    a, b, g = (torch.randn(n, n, generator=gen) for _ in range(3))
    a.requires_grad_()
    b.requires_grad_()

    def forward_backward() -> None:
        torch.autograd.grad(tropical_maxplus_matmul(a, b), (a, b), g)

    forward_backward()
    samples = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        forward_backward()
        samples.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(samples), "module": tropical_gemm.__file__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
