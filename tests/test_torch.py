"""The PyTorch integration: values, gradients, custom-op contracts, compile, layer, CUDA.

Values and gradients are checked against the core API on numpy arrays, which
the semantics tests pin down, so these tests are about the glue: dispatch,
dtypes and devices, broadcasting of gradients, the op registrations that
``torch.compile`` relies on, and (on a GPU) streams and zero-copy.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tropical_gemm as tg  # noqa: E402
from tropical_gemm import torch as tgt  # noqa: E402
from tropical_gemm.engines import cpu as cpu_engine  # noqa: E402
from tropical_gemm.torch import bridge, eager  # noqa: E402

pytestmark = pytest.mark.torch

SEMIRINGS = tuple(s for s in tg.semirings() if not tg.get_semiring(s).boolean)  # and_or: test_boolean.py
DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
OPS = torch.ops.tropical_gemm

#: Smallest distance kept between competing candidates (and between the two
#: operands of a min/max) so that gradcheck's 1e-6 steps never cross a tie.
MARGIN = 1e-3


# -------------------------------------------------------------------- inputs


def _candidates(a: np.ndarray, b: np.ndarray, semiring: str) -> np.ndarray:
    """All ``a[..., i, k] ⊗ b[..., k, j]`` as an array ``(..., M, K, N)``."""
    mul = {"plus": np.add, "times": np.multiply, "min": np.minimum, "max": np.maximum}
    return mul[tg.get_semiring(semiring).mul](a[..., :, :, None], b[..., None, :, :])


def _has_margin(a: np.ndarray, b: np.ndarray, semiring: str) -> bool:
    """True when no candidate ties the winner and no ⊗ = min/max ties its operands."""
    if tg.get_semiring(semiring).mul in ("min", "max"):
        if np.abs(a[..., :, :, None] - b[..., None, :, :]).min() < MARGIN:
            return False
    cand = np.sort(_candidates(a, b, semiring), axis=-2)
    if cand.shape[-2] < 2:
        return True
    gaps = cand[..., -1, :] - cand[..., -2, :], cand[..., 1, :] - cand[..., 0, :]
    return min(g.min() for g in gaps) >= MARGIN


#: Most candidates (batch * M * K * N) that tie_free is asked for.  Every
#: candidate must clear MARGIN, so the chance that a draw succeeds falls
#: exponentially with their number: at 1000 about a third of the draws of the
#: worst semiring (max_min) succeed, at 100 000 practically none.
TIE_FREE_MAX_CANDIDATES = 1000


def tie_free(a_shape, b_shape, semiring, *, seed=0, dtype=torch.float64, device="cpu", requires_grad=True):
    """Small random float operands with no ties within MARGIN (so they are differentiable).

    The margin is checked on the values as rounded to ``dtype``.  max_mul
    draws positive numbers: its zero is 0, and negative products never win.
    Tests that do not differentiate through ties (timing, memory, streams)
    want :func:`random_operands`, which has no size limit.
    """
    batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    count = int(np.prod(batch)) * a_shape[-2] * a_shape[-1] * b_shape[-1]
    if count > TIE_FREE_MAX_CANDIDATES:
        raise ValueError(
            f"tie_free({a_shape}, {b_shape}) asks for {count} candidates clear of each other by {MARGIN}, "
            f"more than {TIE_FREE_MAX_CANDIDATES} that random draws can meet; use random_operands"
        )
    rng = np.random.default_rng(seed)
    low = 0.5 if tg.get_semiring(semiring).mul == "times" else -2.0
    for _ in range(200):
        a, b = (torch.tensor(rng.uniform(low, 2.0, size=shape), dtype=dtype) for shape in (a_shape, b_shape))
        if _has_margin(a.double().numpy(), b.double().numpy(), semiring):
            return tuple(x.to(device).requires_grad_(requires_grad) for x in (a, b))
    raise AssertionError(f"no tie-free operands of shapes {a_shape}, {b_shape} for {semiring}")


def random_operands(a_shape, b_shape, dtype, *, seed=0, device="cpu"):
    """Operands of any supported dtype, with ties allowed (integers tie a lot)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        a, b = torch.randn(a_shape, generator=gen, dtype=dtype), torch.randn(b_shape, generator=gen, dtype=dtype)
    else:
        a = torch.randint(-20, 20, a_shape, generator=gen, dtype=dtype)
        b = torch.randint(-20, 20, b_shape, generator=gen, dtype=dtype)
    return a.to(device), b.to(device)


def core_product(a, b, semiring):
    """(values, argmax) from the core API on numpy copies."""
    return tg.matmul(a.detach().cpu().numpy(), b.detach().cpu().numpy(), semiring, argmax=True)


def core_gradients(grad_c, a, b, semiring):
    """(grad_a, grad_b) from the core API on numpy copies."""
    _, argmax = core_product(a, b, semiring)
    arrays = (x.detach().cpu().numpy() for x in (grad_c, a, b))
    return tg.matmul_backward(*arrays, argmax, semiring)


BATCHED_SHAPES = [((3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 5)), ((3, 4), (2, 4, 1))]


# ------------------------------------------------------------------- imports


def test_torch_is_imported_only_by_tropical_gemm_torch_and_cupy_only_for_cuda():
    script = (
        "import sys, tropical_gemm as tg\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "c = tg.torch.tropical_matmul(torch.zeros(2, 3), torch.zeros(3, 2))\n"
        "assert 'cupy' not in sys.modules and c.shape == (2, 2)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


@pytest.fixture(params=["eager", "ops"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a call can run: the eager fast path, and the custom ops (as under compile or a transform)."""
    if request.param == "ops":
        monkeypatch.setattr(eager, "plain_eager", lambda a, b: False)
    return request.param


# ------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("shapes", BATCHED_SHAPES, ids=str)
def test_forward_matches_core(shapes, path, semiring, dtype):
    a, b = random_operands(*shapes, dtype)
    values, argmax = tgt.tropical_matmul_with_argmax(a, b, semiring)
    expected, expected_argmax = core_product(a, b, semiring)
    np.testing.assert_array_equal(values.numpy(), expected)
    np.testing.assert_array_equal(argmax.numpy(), expected_argmax)
    np.testing.assert_array_equal(tgt.tropical_matmul(a, b, semiring).numpy(), expected)
    assert values.dtype == dtype and argmax.dtype == torch.int32 and not argmax.requires_grad


def test_non_contiguous_inputs_are_read_in_place():
    base_a, base_b = random_operands((6, 8), (10, 4), torch.float32)
    a, b = base_a[::2, 1:5], base_b.T[:, ::2]  # a strided slice and a transposed view
    assert not a.is_contiguous() and not b.is_contiguous()
    np.testing.assert_array_equal(tgt.tropical_matmul(a, b).numpy(), core_product(a, b, "max_plus")[0])


def test_semiring_spellings_and_objects_are_accepted():
    a, b = random_operands((3, 4), (4, 2), torch.float64)
    expected = tgt.tropical_matmul(a, b, "min_plus")
    for spelling in ("MinPlus", "tropical_min", tg.get_semiring("min_plus")):
        torch.testing.assert_close(tgt.tropical_matmul(a, b, spelling), expected, rtol=0, atol=0)


def test_argmax_is_computed_only_when_a_gradient_is_needed(path, monkeypatch):
    calls = []
    real = cpu_engine.forward
    monkeypatch.setattr(cpu_engine, "forward", lambda *args: calls.append(args[-1] is not None) or real(*args))
    a, b = tie_free((3, 4), (4, 2), "max_plus")
    tgt.tropical_matmul(a, b)
    with torch.no_grad():
        tgt.tropical_matmul(a, b)
    tgt.tropical_matmul(a.detach(), b.detach())
    assert calls == [True, False, False]


def test_plain_eager_calls_skip_the_dispatcher_and_modes_see_the_ops():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    a, b = tie_free((3, 4), (4, 2), "max_plus")
    assert eager.plain_eager(a, b)
    with Recorder() as recorder:
        assert not eager.plain_eager(a, b)
        values = tgt.tropical_matmul(a, b)
    assert any("tropical_gemm.matmul_with_argmax" in op for op in recorder.ops)
    torch.testing.assert_close(values, tgt.tropical_matmul(a, b), rtol=0, atol=0)
    assert not eager.plain_eager(torch.empty(3, 4, device="meta"), b)


def test_a_torch_without_the_private_flags_takes_the_ops(monkeypatch):
    """The eager path rests on private torch functions: where one is missing, every call goes through the ops."""
    a, b = tie_free((3, 4), (4, 2), "max_plus")
    monkeypatch.delattr(torch._C, "_len_torch_dispatch_stack")
    plain_eager, _ = eager._bind_private_api()
    assert not plain_eager(a, b)
    monkeypatch.undo()
    plain_eager, _ = eager._bind_private_api()
    assert plain_eager(a, b)


def test_meta_tensors_infer_shapes_without_computing():
    a = torch.empty((5, 1, 3, 7), device="meta")
    b = torch.empty((4, 7, 2), device="meta")
    values, argmax = tgt.tropical_matmul_with_argmax(a, b)
    assert values.shape == (5, 4, 3, 2) and values.device.type == "meta" and argmax.dtype == torch.int32


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.complex64], ids=str)
def test_unsupported_dtype_is_a_type_error(dtype):
    a = torch.zeros((2, 3), dtype=dtype)
    with pytest.raises(TypeError, match=f"does not support a.dtype={dtype}"):
        tgt.tropical_matmul(a, a.T)


def test_mixed_dtypes_are_a_type_error():
    with pytest.raises(TypeError, match="different dtypes"):
        tgt.tropical_matmul(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))


def test_different_devices_are_a_value_error():
    with pytest.raises(ValueError, match="different devices"):
        tgt.tropical_matmul(torch.zeros(2, 3), torch.zeros(3, 2, device="meta"))


def test_shape_errors_and_unknown_semirings_name_the_problem():
    with pytest.raises(ValueError, match="inner dimensions differ"):
        tgt.tropical_matmul(torch.zeros(2, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        tgt.tropical_matmul(torch.zeros(()), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="unknown semiring 'max_sum'"):
        tgt.tropical_matmul(torch.zeros(2, 3), torch.zeros(3, 2), "max_sum")


def test_raw_ops_check_the_semiring_in_eager_and_fake_kernels():
    a = torch.zeros(2, 3)
    for device in ("cpu", "meta"):
        with pytest.raises(ValueError, match="unknown semiring 'maxplus2'"):
            OPS.matmul(a.to(device), a.T.to(device), "maxplus2")


def test_raw_ops_refuse_and_or_and_name_where_halves_go():
    """The public ops took and_or on float tensors to numpy's packbits ("Expected an input array of integer or
    boolean data type"), and refused float16 while listing it as supported."""
    a = torch.zeros(2, 3)
    for device in ("cpu", "meta"):
        for op in (OPS.matmul, OPS.matmul_with_argmax):
            with pytest.raises(TypeError, match="the and_or semiring takes numpy or cupy arrays, not torch tensors"):
                op(a.to(device), a.T.to(device), "and_or")
        with pytest.raises(TypeError, match=r"compute in torch.float32, .*got a.dtype=torch.float16; call "
                                            r"tropical_gemm.torch.tropical_matmul"):
            OPS.matmul(a.half().to(device), a.T.half().to(device), "max_plus")


def test_layer_checks_its_semiring_when_made_and_its_inputs_when_called():
    with pytest.raises(TypeError, match="the and_or semiring takes numpy or cupy arrays, not torch tensors"):
        tgt.TropicalLinear(4, 3, "and_or")
    layer = tgt.TropicalLinear(4, 3)
    for shape in [(2, 5), (), (8,)]:  # () and (8,) were reshaped into rows of 4 (a 0-d input took 1 feature)
        with pytest.raises(ValueError, match=rf"TropicalLinear\(4, 3\) takes inputs of shape \(\*, 4\), got shape"):
            layer(torch.zeros(shape))
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        tgt.TropicalLinear(1, 3)(torch.tensor(1.0))


def test_raw_backward_op_checks_grad_c_and_argmax_in_eager_and_fake_kernels():
    """The public backward op refuses inputs that do not belong to the product, before a kernel reads them."""
    a, b = random_operands((3, 4), (4, 2), torch.float64)
    _, argmax = tgt.tropical_matmul_with_argmax(a, b)
    grad_c = torch.randn(3, 2, dtype=torch.float64)
    bad_calls = {
        "grad_c must have the product's shape": (grad_c[:2], a, b, argmax),
        "grad_c must have .* dtype torch.float64": (grad_c.float(), a, b, argmax),
        "argmax must be an int32 or int64 tensor of shape": (grad_c, a, b, argmax[:, :1]),
        "got shape \\(3, 2\\), dtype torch.float64": (grad_c, a, b, argmax.double()),
    }
    for device in ("cpu", "meta"):
        for message, args in bad_calls.items():
            with pytest.raises(ValueError, match=message):
                OPS.matmul_backward(*(x.to(device) for x in args), "max_plus")
        with pytest.raises(TypeError, match="float operands"):
            OPS.matmul_backward(grad_c.long().to(device), a.long().to(device), b.long().to(device),
                                argmax.to(device), "max_plus")


def test_non_tensors_are_pointed_to_the_core_api():
    with pytest.raises(TypeError, match="tropical_gemm.matmul"):
        tgt.tropical_matmul(np.zeros((2, 3)), torch.zeros(3, 2))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integers_are_forward_only(dtype):
    a, b = random_operands((3, 4), (4, 2), dtype)
    c = tgt.tropical_matmul(a, b)
    np.testing.assert_array_equal(c.numpy(), core_product(a, b, "max_plus")[0])
    assert not c.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        c.sum().backward()
    with pytest.raises(RuntimeError, match="floating point"):
        a.requires_grad_()


# ----------------------------------------------------------------- gradients


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("shapes", BATCHED_SHAPES, ids=str)
def test_gradcheck(shapes, path, semiring):
    a, b = tie_free(*shapes, semiring)
    assert torch.autograd.gradcheck(lambda x, y: tgt.tropical_matmul(x, y, semiring), (a, b))


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_gradgradcheck(path, semiring):
    a, b = tie_free((2, 1, 3, 4), (3, 4, 2), semiring)
    assert torch.autograd.gradgradcheck(lambda x, y: tgt.tropical_matmul(x, y, semiring), (a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("shapes", BATCHED_SHAPES, ids=str)
def test_gradients_equal_core_backward(shapes, path, semiring, dtype):
    a, b = tie_free(*shapes, semiring, dtype=dtype)
    c = tgt.tropical_matmul(a, b, semiring)
    grad_c = torch.randn(c.shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    c.backward(grad_c)
    expected_a, expected_b = core_gradients(grad_c, a, b, semiring)
    np.testing.assert_array_equal(a.grad.numpy(), expected_a)
    np.testing.assert_array_equal(b.grad.numpy(), expected_b)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_broadcast_gradients_are_reduced_like_torch(path, semiring):
    a, b = tie_free((2, 1, 3, 4), (3, 4, 5), semiring)
    tgt.tropical_matmul(a, b, semiring).sum().backward()
    # The same product on explicitly expanded operands: torch's expand backward does the reduction.
    a2, b2 = (x.detach().clone().requires_grad_() for x in (a, b))
    tgt.tropical_matmul(a2.expand(2, 3, 3, 4), b2.expand(2, 3, 4, 5), semiring).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_only_the_winning_entries_receive_gradient():
    a = torch.tensor([[0.0, 3.0]], requires_grad=True)
    b = torch.tensor([[1.0], [1.0]], requires_grad=True)
    tgt.tropical_matmul(a, b).sum().backward()
    assert a.grad.tolist() == [[0.0, 1.0]] and b.grad.tolist() == [[0.0], [1.0]]


def test_vmap_matches_the_batched_product():
    a, b = tie_free((3, 4, 5), (3, 5, 2), "min_plus", requires_grad=False)
    mapped = torch.vmap(lambda x, y: tgt.tropical_matmul(x, y, "min_plus"))(a, b)
    torch.testing.assert_close(mapped, tgt.tropical_matmul(a, b, "min_plus"), rtol=0, atol=0)


def test_deterministic_mode_reaches_the_engine(path, monkeypatch):
    seen = []
    real = tg.api.matmul_backward
    monkeypatch.setattr(
        tg.api, "matmul_backward", lambda *args, **kw: seen.append(kw["deterministic"]) or real(*args, **kw)
    )
    a, b = tie_free((3, 4), (4, 2), "max_plus")
    was = torch.are_deterministic_algorithms_enabled()
    try:
        for flag in (True, False):
            torch.use_deterministic_algorithms(flag)
            tgt.tropical_matmul(a, b).sum().backward()
    finally:
        torch.use_deterministic_algorithms(was)
    assert seen == [True, False]


# -------------------------------------------------------- op registrations


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_opcheck_product_ops(semiring):
    a, b = tie_free((2, 3, 4), (4, 5), semiring)
    torch.library.opcheck(OPS.matmul_with_argmax.default, (a, b, semiring))
    torch.library.opcheck(OPS.matmul.default, (a.detach(), b.detach(), semiring))
    ints = random_operands((3, 4), (2, 4, 5), torch.int64)
    torch.library.opcheck(OPS.matmul.default, (*ints, semiring))


@pytest.mark.parametrize("semiring", ["max_plus", "max_mul", "min_max"])
def test_opcheck_backward_op(semiring):
    a, b = tie_free((2, 3, 4), (4, 5), semiring)
    _, argmax = tgt.tropical_matmul_with_argmax(a, b, semiring)
    grad_c = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(OPS.matmul_backward.default, (grad_c, a, b, argmax, semiring))


def _loss_and_grads(fn, a, b):
    a, b = (x.detach().clone().requires_grad_() for x in (a, b))
    loss = fn(a, b)
    loss.backward()
    return loss.detach(), a.grad, b.grad


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_compile_fullgraph_matches_eager(semiring):
    """aot_eager traces the ops, fakes and autograd formulas as inductor does, in a fraction of the time."""

    def fn(a, b):
        c, argmax = tgt.tropical_matmul_with_argmax(a, b, semiring)
        return (tgt.tropical_matmul(c.tanh(), b.transpose(-1, -2), semiring) ** 2).sum() + argmax.sum()

    a, b = tie_free((2, 3, 4), (4, 4), semiring, dtype=torch.float32)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for got, want in zip(_loss_and_grads(compiled, a, b), _loss_and_grads(fn, a, b)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)



def assert_compiled_training_step_matches_eager(model: torch.nn.Module, x: torch.Tensor) -> None:
    """Loss and every parameter's gradient, through torch.compile(fullgraph=True) and eagerly."""

    def step(module):
        module.zero_grad()
        loss = module(x).square().mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in module.parameters()]

    compiled = torch.compile(model, fullgraph=True)
    for got, want in zip(step(compiled), step(model)):
        torch.testing.assert_close(got, want)

def test_compile_inductor_layer_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(tgt.TropicalLinear(6, 5), torch.nn.Tanh(), tgt.TropicalLinear(5, 3, "min_plus"))
    x = torch.randn(8, 6)

    assert_compiled_training_step_matches_eager(model, x)


# -------------------------------------------------------------------- layer


def test_layer_computes_tropical_affine_map():
    layer = tgt.TropicalLinear(4, 3, "max_plus", dtype=torch.float64)
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    y = layer(x)
    w, bias = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    expected = np.maximum((x.numpy()[..., None, :] + w).max(axis=-1), bias)
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_layer_bias_enters_through_tropical_addition(semiring):
    layer = tgt.TropicalLinear(3, 2, semiring, dtype=torch.float64)
    x = torch.rand(4, 3, dtype=torch.float64) + 0.5
    add = torch.fmax if tg.get_semiring(semiring).add == "max" else torch.fmin
    expected = add(tgt.tropical_matmul(x, layer.weight.T, semiring), layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=0)


def test_layer_without_bias_and_with_1d_input():
    layer = tgt.TropicalLinear(4, 3, bias=False)
    assert layer.bias is None and [name for name, _ in layer.named_parameters()] == ["weight"]
    x = torch.randn(4)
    torch.testing.assert_close(layer(x), tgt.tropical_matmul(x[None], layer.weight.T)[0])


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_layer_init_ranges(semiring):
    torch.manual_seed(0)
    layer = tgt.TropicalLinear(300, 200, semiring)
    w = layer.weight.detach()
    low, high = (np.exp(-1), np.exp(1)) if semiring == "max_mul" else (-1.0, 1.0)
    for p in (w, layer.bias.detach()):
        assert low <= p.min() and p.max() <= high
    assert w.min() < low + 0.01 * (high - low) and w.max() > high - 0.01 * (high - low)
    # What the init is for: outputs pick many different inputs, and which one
    # depends on the input, so a batch trains many weights.
    x = torch.rand(2, 300) * 2 - 1  # unit-scale inputs; for max_mul their exp, as for its weights
    winners = tgt.tropical_matmul_with_argmax(x.exp() if semiring == "max_mul" else x, w.T, semiring)[1]
    assert winners[0].unique().numel() >= 20
    assert (winners[0] != winners[1]).float().mean() >= 0.5


def test_layer_reset_parameters_redraws():
    layer = tgt.TropicalLinear(5, 4)
    before = [p.detach().clone() for p in layer.parameters()]
    layer.reset_parameters()
    assert all(not torch.equal(b, p) for b, p in zip(before, layer.parameters()))


def test_layer_factory_kwargs_and_repr():
    layer = tgt.TropicalLinear(4, 3, "MinPlus", bias=False, device="meta", dtype=torch.float64)
    assert layer.weight.device.type == "meta" and layer.weight.dtype == torch.float64
    assert layer.weight.shape == (3, 4)
    assert repr(layer) == "TropicalLinear(in_features=4, out_features=3, semiring='min_plus', bias=False)"


def test_layer_trains_weights_and_bias():
    layer = tgt.TropicalLinear(4, 3, dtype=torch.float64)
    with torch.no_grad():
        layer.bias.fill_(10.0)  # the bias wins output 0 ...
        layer.bias[1:] = -10.0  # ... and loses outputs 1 and 2
    layer(torch.randn(5, 4, dtype=torch.float64)).sum().backward()
    assert layer.bias.grad.tolist() == [5.0, 0.0, 0.0]
    assert layer.weight.grad[0].abs().sum() == 0 and layer.weight.grad[1:].sum() == 10.0


# ---------------------------------------------------------------------- CUDA


@pytest.fixture
def cuda(request):
    """The CUDA device for torch; a GPU run (--require-gpu) must not skip it."""
    if not torch.cuda.is_available():
        reason = f"torch {torch.__version__} sees no CUDA device"
        if request.config.getoption("--require-gpu"):
            pytest.fail(f"--require-gpu given, but {reason}", pytrace=False)
        pytest.skip(reason)
    return torch.device("cuda", torch.cuda.current_device())


#: Products the CUDA bridge cannot queue as one launch of buffers, so it goes
#: through the engine on cupy views: K slices (a 64×48 output has too few
#: tiles for the GPU), four batch dims that do not fold, K = 0, an empty output.
GENERAL_PATH_SHAPES = [((64, 1024), (1024, 48)), ((2, 1, 3, 1, 4, 5), (1, 2, 1, 3, 5, 6)), ((3, 0), (0, 4)),
                       ((0, 4), (4, 5))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("shapes", BATCHED_SHAPES + [((70, 33), (33, 90)), ((3, 129, 64), (64, 5))]
                         + GENERAL_PATH_SHAPES, ids=str)
def test_cuda_forward_matches_cpu(cuda, path, shapes, semiring, dtype):
    a, b = random_operands(*shapes, dtype)
    values, argmax = tgt.tropical_matmul_with_argmax(a.to(cuda), b.to(cuda), semiring)
    assert values.device == cuda and argmax.device == cuda
    expected, expected_argmax = tgt.tropical_matmul_with_argmax(a, b, semiring)
    torch.testing.assert_close(values.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(argmax.cpu(), expected_argmax, rtol=0, atol=0)
    torch.testing.assert_close(tgt.tropical_matmul(a.to(cuda), b.to(cuda), semiring).cpu(), expected, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("shapes", [((70, 33), (33, 90)), ((2, 1, 3, 4), (3, 4, 5))], ids=str)
def test_cuda_single_launch_products_take_buffers_not_cupy_views(cuda, shapes, monkeypatch):
    """The host-time path: a one-launch product and its gradient never build cupy arrays."""
    a, b = (x.requires_grad_() for x in random_operands(*shapes, torch.float32, device=cuda))
    a_cpu, b_cpu = (x.detach().cpu().requires_grad_() for x in (a, b))
    expected = tgt.tropical_matmul(a_cpu, b_cpu)
    expected.backward(torch.ones_like(expected))

    def no_views(device):
        raise AssertionError(f"the product went through cupy views on {device}")

    monkeypatch.setattr(bridge, "engine", no_views)
    values = tgt.tropical_matmul(a, b)
    values.backward(torch.ones_like(values))
    torch.cuda.synchronize()
    monkeypatch.undo()
    torch.testing.assert_close(values.detach().cpu(), expected.detach(), rtol=0, atol=0)
    torch.testing.assert_close(a.grad.cpu(), a_cpu.grad)
    torch.testing.assert_close(b.grad.cpu(), b_cpu.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("shapes", BATCHED_SHAPES + [((40, 300), (300, 50))] + GENERAL_PATH_SHAPES[:2], ids=str)
def test_cuda_deterministic_gradients_equal_cpu_bit_for_bit(cuda, path, shapes, semiring):
    a, b = (x.requires_grad_() for x in random_operands(*shapes, torch.float32))  # ties are fine: same rule
    grad_c = torch.randn(tgt.tropical_matmul(a, b, semiring).shape, generator=torch.Generator().manual_seed(3))
    tgt.tropical_matmul(a, b, semiring).backward(grad_c)
    a_dev, b_dev = (x.detach().to(cuda).requires_grad_() for x in (a, b))
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        tgt.tropical_matmul(a_dev, b_dev, semiring).backward(grad_c.to(cuda))
    finally:
        torch.use_deterministic_algorithms(was)
    torch.testing.assert_close(a_dev.grad.cpu(), a.grad, rtol=0, atol=0)
    torch.testing.assert_close(b_dev.grad.cpu(), b.grad, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_cuda_gradients_close_to_cpu_by_default(cuda, semiring):
    a, b = random_operands((4, 96, 200), (200, 64), torch.float32)
    grads = []
    for device in ("cpu", cuda):
        x, y = (t.detach().to(device).requires_grad_() for t in (a, b))  # leaves on every device
        tgt.tropical_matmul(x, y, semiring).sum().backward()  # an expanded (stride-0) grad_c
        grads.append((x.grad.cpu(), y.grad.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_cuda_gradcheck(cuda, path, semiring):
    a, b = tie_free((2, 1, 3, 4), (3, 4, 5), semiring, device=cuda)
    assert torch.autograd.gradcheck(lambda x, y: tgt.tropical_matmul(x, y, semiring), (a, b))
    assert torch.autograd.gradgradcheck(lambda x, y: tgt.tropical_matmul(x, y, semiring), (a, b))


@pytest.mark.gpu
def test_cuda_and_cpu_operands_are_a_value_error(cuda):
    with pytest.raises(ValueError, match="different devices"):
        tgt.tropical_matmul(torch.zeros(2, 3, device=cuda), torch.zeros(3, 2))


@pytest.mark.gpu
def test_cuda_raw_backward_op_refuses_an_argmax_of_another_shape(cuda):
    """On CUDA the kernel reads argmax by address: a smaller one must be an error, never a read past its end."""
    a, b = random_operands((8, 16), (16, 8), torch.float32, device=cuda)
    with pytest.raises(ValueError, match="argmax must be"):
        OPS.matmul_backward(torch.ones(8, 8, device=cuda), a, b, torch.zeros(4, 8, dtype=torch.int32, device=cuda),
                            "max_plus")


@pytest.mark.gpu
def test_cuda_results_come_from_torchs_allocator_without_syncs(cuda):
    a, b = (x.requires_grad_() for x in random_operands((256, 128), (128, 192), torch.float32, device=cuda))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(cuda)
    torch.cuda.set_sync_debug_mode("error")  # any torch-side synchronisation raises
    try:
        values, argmax = tgt.tropical_matmul_with_argmax(a, b)
        values.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    grown = torch.cuda.memory_allocated(cuda) - before
    # values, argmax and both gradients are tensors of torch's caching allocator.
    assert grown >= values.nbytes + argmax.nbytes + a.grad.nbytes + b.grad.nbytes


@pytest.mark.gpu
def test_cuda_calls_return_while_queued_work_still_runs(cuda):
    """No host synchronisation: a call returns long before earlier GPU work has finished.

    The GPU is kept busy by ``torch.cuda._sleep`` (a spin kernel): torch's own
    products would also exercise its allocator, whose waits are not ours.
    """
    a, b = (x.requires_grad_() for x in random_operands((64, 96), (96, 80), torch.float32, device=cuda))
    grad_c = torch.ones(64, 80, device=cuda)
    for _ in range(2):  # compile our kernels; the second call also loads torch's own grad accumulation kernel
        tgt.tropical_matmul(a, b).backward(grad_c)  # (CUDA loads modules lazily, and a load waits for the device)
    cycles = 2_000_000_000  # about a second on any current GPU
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    busy_s = time.perf_counter() - start
    calls = {
        "forward": lambda: tgt.tropical_matmul_with_argmax(a, b),
        "forward+backward": lambda: tgt.tropical_matmul(a, b).backward(grad_c),
    }
    for name, call in calls.items():
        torch.cuda._sleep(cycles)
        start = time.perf_counter()
        call()
        host_s = time.perf_counter() - start
        torch.cuda.synchronize()
        assert host_s < busy_s / 4, f"{name} took {host_s * 1e3:.1f} ms on the host, as if it waited for the GPU"


@pytest.mark.gpu
def test_cuda_inputs_from_async_work_on_a_side_stream(cuda):
    """Inputs finished late on a side stream: a product launched anywhere else reads zeros."""
    m, k, n = 64, 96, 80
    semiring = "max_plus"
    warm = torch.zeros(m, k, device=cuda, requires_grad=True)
    tgt.tropical_matmul(warm, torch.zeros(k, n, device=cuda)).sum().backward()  # compile kernels up front
    torch.cuda.synchronize()
    side = torch.cuda.Stream(cuda)
    with torch.cuda.stream(side):
        a = torch.zeros(m, k, device=cuda, requires_grad=True)
        b = torch.zeros(k, n, device=cuda)
        x = torch.randn(4096, 4096, device=cuda)
        for _ in range(30):  # tens of milliseconds of queued work
            x = torch.tanh(x @ x * 0.02)
        with torch.no_grad():
            a.copy_(x[:m, :k] * 100)
            b.copy_(x[-k:, -n:] * 100)
        values = tgt.tropical_matmul(a, b, semiring)
        values.backward(torch.ones_like(values))
        got = values.cpu(), a.grad.cpu()  # ordered on the side stream too
    torch.cuda.synchronize()
    a_cpu = a.detach().cpu().requires_grad_()
    expected = tgt.tropical_matmul(a_cpu, b.cpu(), semiring)
    expected.sum().backward()
    torch.testing.assert_close(got[0], expected.detach(), rtol=0, atol=0)
    torch.testing.assert_close(got[1], a_cpu.grad, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", ["max_plus", "max_mul"])
def test_cuda_opcheck(cuda, semiring):
    a, b = tie_free((2, 3, 4), (4, 5), semiring, device=cuda)
    torch.library.opcheck(OPS.matmul_with_argmax.default, (a, b, semiring))
    torch.library.opcheck(OPS.matmul.default, (a.detach(), b.detach(), semiring))
    _, argmax = tgt.tropical_matmul_with_argmax(a, b, semiring)
    grad_c = torch.randn(2, 3, 5, dtype=torch.float64, device=cuda, requires_grad=True)
    torch.library.opcheck(OPS.matmul_backward.default, (grad_c, a, b, argmax, semiring))


@pytest.mark.gpu
def test_cuda_compile_layer_matches_eager(cuda):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        tgt.TropicalLinear(64, 48, device=cuda), torch.nn.Tanh(), tgt.TropicalLinear(48, 16, "min_plus", device=cuda)
    )
    x = torch.randn(32, 64, device=cuda)

    assert_compiled_training_step_matches_eager(model, x)
