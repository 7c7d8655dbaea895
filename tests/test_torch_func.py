"""torch.func on the products (issue 34.2): grad, jacrev, jacfwd and vmap against eager autograd.

Operands are drawn without ties (``tie_free``), where the products are
differentiable; the references are eager ``backward``/``autograd.grad`` on
the same products, and for vmap the batched product itself.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
func = torch.func

import tropical_gemm as tg  # noqa: E402
from tropical_gemm.torch import tropical_matmul, tropical_matmul_with_argmax  # noqa: E402
from test_torch import tie_free  # noqa: E402

SEMIRINGS = tg.semirings()
pytestmark = pytest.mark.torch


def eager_jacobian(f, x):
    """d f(x) / d x by eager reverse mode, one output entry at a time."""
    x = x.detach().requires_grad_()
    y = f(x)
    rows = [torch.autograd.grad(y.reshape(-1)[i], x, retain_graph=True)[0] for i in range(y.numel())]
    return torch.stack(rows).reshape(*y.shape, *x.shape)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_grad_matches_eager_backward(semiring):
    a, b = tie_free((3, 4), (4, 5), semiring)
    weights = torch.linspace(-1, 2, 15, dtype=a.dtype).reshape(3, 5)
    tropical_matmul(a, b, semiring).mul(weights).sum().backward()
    grad_a, grad_b = func.grad(lambda x, y: tropical_matmul(x, y, semiring).mul(weights).sum(), argnums=(0, 1))(
        a.detach(), b.detach())
    torch.testing.assert_close(grad_a, a.grad, rtol=0, atol=0)
    torch.testing.assert_close(grad_b, b.grad, rtol=0, atol=0)


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("jacobian", [func.jacrev, func.jacfwd])
def test_jacobians_match_eager_autograd(semiring, jacobian):
    a, b = tie_free((2, 3, 4), (4, 2), semiring, requires_grad=False)
    for argnum, x in enumerate((a, b)):
        def f(x, argnum=argnum):
            return tropical_matmul(x, b, semiring) if argnum == 0 else tropical_matmul(a, x, semiring)

        torch.testing.assert_close(jacobian(f)(x), eager_jacobian(f, x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_forward_mode_dual_tensors_give_the_directional_derivative(semiring):
    a, b = tie_free((3, 4), (4, 2), semiring, requires_grad=False)
    ta, tb = torch.randn(3, 4, dtype=a.dtype), torch.randn(4, 2, dtype=a.dtype)
    _, tangent = func.jvp(lambda x, y: tropical_matmul(x, y, semiring), (a, b), (ta, tb))
    want = (eager_jacobian(lambda x: tropical_matmul(x, b, semiring), a) * ta).sum((-2, -1)) + \
        (eager_jacobian(lambda y: tropical_matmul(a, y, semiring), b) * tb).sum((-2, -1))
    torch.testing.assert_close(tangent, want, rtol=0, atol=1e-12)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(a, ta)
        values, argmax = tropical_matmul_with_argmax(dual, b, semiring)
        torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(values).tangent,
                                   (eager_jacobian(lambda x: tropical_matmul(x, b, semiring), a) * ta).sum((-2, -1)))
        assert torch.autograd.forward_ad.unpack_dual(argmax).tangent is None


@pytest.mark.parametrize("semiring", ["max_mul", "max_plus"])
def test_hessians_match_eager_double_backward(semiring):
    a, b = tie_free((2, 3), (3, 2), semiring, requires_grad=False)

    def f(x):
        return tropical_matmul(x, b, semiring).pow(2).sum()

    x = a.detach().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    want = torch.stack([torch.autograd.grad(g.reshape(-1)[i], x, retain_graph=True)[0]
                        for i in range(g.numel())]).reshape(*a.shape, *a.shape)
    torch.testing.assert_close(func.jacrev(func.jacrev(f))(a), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(func.hessian(f)(a), want, rtol=0, atol=1e-12)  # forward over reverse


@pytest.mark.parametrize("in_dims,shapes", [
    ((0, 0), ((5, 3, 4), (5, 4, 2))),
    ((0, None), ((5, 3, 4), (4, 2))),
    ((None, 1), ((3, 4), (4, 5, 2))),
    ((2, 0), ((3, 4, 5), (5, 2, 4, 6))),  # a's vmap dim last; b batched on its own batch dim too
])
def test_vmap_runs_the_registered_rule_and_matches_a_loop(in_dims, shapes, capfd):
    gen = torch.Generator().manual_seed(1)
    a, b = (torch.randn(shape, generator=gen, dtype=torch.float64) for shape in shapes)  # values only: ties are fine
    mapped = func.vmap(lambda x, y: tropical_matmul(x, y, "min_plus"), in_dims=in_dims)(a, b)
    size = shapes[0][in_dims[0]] if in_dims[0] is not None else shapes[1][in_dims[1]]
    pick = [lambda i, x=x, d=d: x if d is None else x.select(d, i) for x, d in zip((a, b), in_dims)]
    looped = torch.stack([tropical_matmul(pick[0](i), pick[1](i), "min_plus") for i in range(size)])
    torch.testing.assert_close(mapped, looped, rtol=0, atol=0)
    assert "batching rule" not in capfd.readouterr().err  # torch's fallback warns on stderr


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_per_sample_gradients_by_vmap_of_grad_match_a_loop(semiring, capfd):
    a, b = tie_free((4, 3, 5), (5, 2), semiring, requires_grad=False)

    def loss(x, y):
        return tropical_matmul(x, y, semiring).sum()

    mapped_a, mapped_b = func.vmap(func.grad(loss, argnums=(0, 1)), in_dims=(0, None))(a, b)
    for i in range(4):
        x, y = a[i].clone().requires_grad_(), b.clone().requires_grad_()
        loss(x, y).backward()
        torch.testing.assert_close(mapped_a[i], x.grad, rtol=0, atol=0)
        torch.testing.assert_close(mapped_b[i], y.grad, rtol=0, atol=0)
    assert "batching rule" not in capfd.readouterr().err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_transforms_see_through_half_precision_and_vectors(dtype):
    a, b = tie_free((1, 4), (4, 3), "max_plus", requires_grad=False)
    a, b = a[0].to(dtype), b.to(dtype)  # a vector; the eager reference breaks any tie the rounding makes alike
    grad = func.grad(lambda x: tropical_matmul(x, b).float().sum())(a)
    x = a.clone().requires_grad_()
    tropical_matmul(x, b).float().sum().backward()
    assert grad.dtype == dtype and torch.equal(grad, x.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_transforms_on_cuda_tensors_match_eager_autograd(semiring):
    a, b = tie_free((3, 4, 5), (5, 2), semiring, device="cuda", requires_grad=False)
    mapped = func.vmap(func.grad(lambda x, y: tropical_matmul(x, y, semiring).sum(), argnums=(0, 1)),
                       in_dims=(0, None))(a, b)
    for i in range(3):
        x, y = a[i].clone().requires_grad_(), b.clone().requires_grad_()
        tropical_matmul(x, y, semiring).sum().backward()
        torch.testing.assert_close(mapped[0][i], x.grad, rtol=1e-12, atol=1e-12)  # GPU atomics: any order
        torch.testing.assert_close(mapped[1][i], y.grad, rtol=1e-12, atol=1e-12)
    f = lambda x: tropical_matmul(x, b, semiring)  # noqa: E731
    torch.testing.assert_close(func.jacfwd(f)(a), func.jacrev(f)(a), rtol=0, atol=1e-12)
    torch.testing.assert_close(func.jacrev(f)(a), eager_jacobian(f, a), rtol=0, atol=1e-12)
