"""Every error the public API raises: the right exception, and a message that names the problem."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tropical_gemm as tg


def ones(engine, shape, dtype="float32"):
    return engine.to_device(np.ones(shape, dtype=dtype))


# ------------------------------------------------------------------- shapes


@pytest.mark.parametrize("shape_a,shape_b", [((), (1, 1)), ((2, 2), ()), ((), ())])
def test_operands_need_one_dimension(engine, shape_a, shape_b):
    with pytest.raises(ValueError, match=r"at least 1 dimension.*no scalar form"):
        tg.matmul(ones(engine, shape_a), ones(engine, shape_b))


def test_inner_dimensions_must_agree(engine):
    with pytest.raises(ValueError, match=r"inner dimensions differ.*\(2, 3\).*K=3.*\(4, 5\).*K=4"):
        tg.matmul(ones(engine, (2, 3)), ones(engine, (4, 5)))


@pytest.mark.parametrize("shape_a,shape_b", [((2, 3, 4), (3, 4, 5)), ((2, 1, 3, 4), (3, 2, 4, 5))])
def test_batch_dimensions_must_broadcast(engine, shape_a, shape_b):
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast.*" + re_shape(shape_a)):
        tg.matmul(ones(engine, shape_a), ones(engine, shape_b))


def re_shape(shape: tuple[int, ...]) -> str:
    return re.escape(str(tuple(shape)))


# ------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("da,db", [("float32", "float64"), ("int32", "int64"), ("int64", "float64"), ("float32", "int32")])
def test_mixed_dtypes_are_refused_not_promoted(engine, da, db):
    with pytest.raises(TypeError, match=rf"different dtypes \({da} and {db}\).*astype"):
        tg.matmul(ones(engine, (2, 3), da), ones(engine, (3, 2), db))


@pytest.mark.parametrize("dtype", ["bool", "complex64", "complex128", "uint8", "uint32", "uint64", "int8", "int16"])
def test_unsupported_dtypes(engine, dtype):
    with pytest.raises(TypeError, match=rf"unsupported dtype {dtype}; supported: float32, float64, int32, int64, "
                                        "float16, bfloat16"):
        tg.matmul(ones(engine, (2, 3), dtype), ones(engine, (3, 2), dtype))


@pytest.mark.parametrize("dtype", [">f4", ">i8", "object", "U3", "datetime64[s]"])
def test_host_only_unsupported_dtypes(dtype):
    a = np.zeros((2, 2), dtype=dtype)
    with pytest.raises(TypeError, match="unsupported dtype"):
        tg.matmul(a, a)


# ----------------------------------------------------------------- semiring


@pytest.mark.parametrize("name", ["nope", "", "max plus times", "plus_max"])
def test_unknown_semiring_lists_the_valid_names(engine, name):
    with pytest.raises(ValueError, match="unknown semiring") as info:
        tg.matmul(ones(engine, (2, 2)), ones(engine, (2, 2)), name)
    for valid in ("max_plus", "min_plus", "max_mul", "max_min", "min_max"):
        assert valid in str(info.value)


@pytest.mark.parametrize("name, close", [("max_pluss", "max_plus"), ("Min-Pls", "min_plus"),
                                         ("bottlenek", "max_min"), ("count_max_plu", "count_max_plus")])
def test_unknown_semiring_names_the_closest(name, close):
    with pytest.raises(ValueError, match=rf"unknown semiring '{name}' \(did you mean '{close}'\?\); valid semirings"):
        tg.matmul(np.ones((2, 2)), np.ones((2, 2)), name)


def test_a_counting_semiring_object_with_arrays_says_it_takes_pairs():
    """As its name does: not "semiring must be a string"."""
    with pytest.raises(ValueError, match="'count_min_plus' is a counting semiring: pass each operand as a pair"):
        tg.matmul(np.ones((2, 2)), np.ones((2, 2)), tg.get_counting_semiring("count_min_plus"))


def test_a_semiring_whose_pair_was_unregistered_is_a_clear_error():
    from tropical_gemm.semirings import Semiring, register_semiring, unregister_semiring

    register_semiring("min_times_gone", "min", "times", "made, then unregistered")
    made = Semiring("mine", (), "min", "times", "")
    unregister_semiring("min_times_gone")
    with pytest.raises(ValueError, match=r"semiring 'mine' \(add='min', mul='times'\) is no longer served"):
        tg.matmul(np.ones((2, 2)), np.ones((2, 2)), made)


@pytest.mark.parametrize("name", [None, 3, b"max_plus"])
def test_semiring_must_be_a_string(name):
    with pytest.raises(TypeError, match="semiring must be a string"):
        tg.matmul(np.ones((2, 2)), np.ones((2, 2)), name)


# ---------------------------------------------------------------------- out


def test_out_with_the_wrong_shape(engine):
    with pytest.raises(ValueError, match=r"out has shape \(3, 3\), expected \(2, 4\)"):
        tg.matmul(ones(engine, (2, 3)), ones(engine, (3, 4)), out=ones(engine, (3, 3)))


def test_out_with_the_wrong_dtype(engine):
    with pytest.raises(TypeError, match="out has dtype float64, expected float32"):
        tg.matmul(ones(engine, (2, 3)), ones(engine, (3, 4)), out=ones(engine, (2, 4), "float64"))


def test_out_must_be_c_contiguous(engine):
    out = ones(engine, (4, 2)).T
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        tg.matmul(ones(engine, (2, 3)), ones(engine, (3, 4)), out=out)


def test_out_must_not_overlap_the_operands(engine):
    a = ones(engine, (3, 3))
    with pytest.raises(ValueError, match="out must not overlap the operands"):
        tg.matmul(a, ones(engine, (3, 3)), out=a)
    with pytest.raises(ValueError, match="out must not overlap the operands"):
        tg.matmul(ones(engine, (3, 3)), a, argmax=True, out=(ones(engine, (3, 3)), a.view("int32")))


def test_the_two_outs_must_not_overlap(engine):
    c = ones(engine, (3, 3))
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] must not overlap"):
        tg.matmul(ones(engine, (3, 3)), ones(engine, (3, 3)), argmax=True, out=(c, c.view("int32")))


def test_out_must_be_writeable():
    out = np.empty((2, 2), "float32")
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        tg.matmul(np.ones((2, 2), "float32"), np.ones((2, 2), "float32"), out=out)


def test_out_must_be_an_array_the_engine_writes():
    with pytest.raises(TypeError, match="out is a builtins.list, but the operands run on the cpu engine, which "
                                        "writes only into numpy arrays"):
        tg.matmul(np.ones((2, 2)), np.ones((2, 2)), out=[[0.0, 0.0], [0.0, 0.0]])


def test_out_is_one_array_without_argmax(engine):
    pair = (ones(engine, (2, 2)), ones(engine, (2, 2), "int32"))
    with pytest.raises(TypeError, match="out is a tuple, but argmax=False"):
        tg.matmul(ones(engine, (2, 2)), ones(engine, (2, 2)), out=pair)


@pytest.mark.parametrize("bad", ["array", "one", "three"])
def test_out_is_a_pair_with_argmax(engine, bad):
    c, i = ones(engine, (2, 2)), ones(engine, (2, 2), "int32")
    out = {"array": c, "one": (c,), "three": (c, i, i)}[bad]
    with pytest.raises(TypeError, match=r"with argmax=True, out must be a tuple \(values, argmax\)"):
        tg.matmul(ones(engine, (2, 2)), ones(engine, (2, 2)), argmax=True, out=out)


def _backward_operands(engine):
    a, b = ones(engine, (2, 3)), ones(engine, (3, 4))
    c, idx = tg.matmul(a, b, argmax=True)
    return c, a, b, idx


def test_backward_out_is_checked_like_matmuls(engine):
    grad_c, a, b, idx = _backward_operands(engine)
    with pytest.raises(TypeError, match=r"out must be a tuple \(grad_a, grad_b\)"):
        tg.matmul_backward(grad_c, a, b, idx, out=ones(engine, (2, 3)))
    with pytest.raises(ValueError, match=r"out\[1\] has shape \(4, 3\), expected \(3, 4\)"):
        tg.matmul_backward(grad_c, a, b, idx, out=(ones(engine, (2, 3)), ones(engine, (4, 3))))
    with pytest.raises(TypeError, match=r"out\[0\] has dtype float64, expected float32"):
        tg.matmul_backward(grad_c, a, b, idx, out=(ones(engine, (2, 3), "float64"), ones(engine, (3, 4))))
    with pytest.raises(ValueError, match=r"out\[0\] must be C-contiguous"):
        tg.matmul_backward(grad_c, a, b, idx, out=(ones(engine, (3, 2)).T, ones(engine, (3, 4))))


def test_backward_out_must_not_overlap_its_inputs_or_itself(engine):
    grad_c, a, b, idx = _backward_operands(engine)
    with pytest.raises(ValueError, match="out must not overlap grad_c, a, b or argmax"):
        tg.matmul_backward(grad_c, a, b, idx, out=(a, ones(engine, (3, 4))))
    shared = ones(engine, (12,))
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] must not overlap"):
        tg.matmul_backward(grad_c, a, b, idx, out=(shared[:6].reshape(2, 3), shared.reshape(3, 4)))


def test_argmax_out_must_be_int32(engine):
    out = (ones(engine, (2, 2)), ones(engine, (2, 2), "int64"))
    with pytest.raises(TypeError, match=r"out\[1\] has dtype int64, expected int32"):
        tg.matmul(ones(engine, (2, 2)), ones(engine, (2, 2)), argmax=True, out=out)


# ------------------------------------------------------ mixing array kinds


class FakeDeviceArray:
    """Looks like a CUDA array to the dispatcher; never touched, since mixing fails first."""

    shape, dtype = (2, 2), np.dtype("float32")
    __cuda_array_interface__ = {"shape": (2, 2), "typestr": "<f4", "data": (0, False), "version": 3}


def test_host_and_device_arrays_do_not_mix():
    with pytest.raises(TypeError, match=r"cannot mix host \(numpy\) and device"):
        tg.matmul(np.ones((2, 2), "float32"), FakeDeviceArray())
    with pytest.raises(TypeError, match=r"cannot mix host \(numpy\) and device"):
        tg.matmul_backward(np.ones((2, 2), "float32"), np.ones((2, 2), "float32"), FakeDeviceArray(),
                           np.zeros((2, 2), "int32"))


@pytest.mark.gpu
def test_numpy_and_cupy_do_not_mix():
    import cupy

    a = np.ones((2, 2), "float32")
    with pytest.raises(TypeError, match="cannot mix"):
        tg.matmul(a, cupy.asarray(a))
    with pytest.raises(TypeError, match="out is a cupy.ndarray, but the operands run on the cpu engine"):
        tg.matmul(a, a, out=cupy.empty((2, 2), "float32"))
    with pytest.raises(TypeError, match="out is a host array, but the operands run on the cuda engine"):
        tg.matmul(cupy.asarray(a), cupy.asarray(a), out=np.empty((2, 2), "float32"))


# ----------------------------------------------------------------- backward


def forward(engine, m=2, k=3, n=4, dtype="float32"):
    a, b = ones(engine, (m, k), dtype), ones(engine, (k, n), dtype)
    c, idx = tg.matmul(a, b, argmax=True)
    return c, a, b, idx


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_backward_needs_float_operands(engine, dtype):
    c, a, b, idx = forward(engine, dtype=dtype)
    with pytest.raises(TypeError, match=rf"needs float operands \(float32, float64, float16, bfloat16\), got {dtype}"):
        tg.matmul_backward(c, a, b, idx)


def test_backward_refuses_mixed_dtypes(engine):
    c, a, b, idx = forward(engine)
    with pytest.raises(TypeError, match="different dtypes"):
        tg.matmul_backward(c, a, b.astype("float64"), idx)


def test_backward_checks_grad_c(engine):
    c, a, b, idx = forward(engine)
    with pytest.raises(ValueError, match=r"grad_c must have the product's shape \(2, 4\).*got shape \(4, 2\)"):
        tg.matmul_backward(c.T.copy(), a, b, idx)
    with pytest.raises(ValueError, match="grad_c must have .* dtype float32.*dtype float64"):
        tg.matmul_backward(c.astype("float64"), a, b, idx)


def test_backward_checks_argmax(engine):
    c, a, b, idx = forward(engine)
    with pytest.raises(ValueError, match=r"argmax must be an int32 or int64 array of shape \(2, 4\).*float32"):
        tg.matmul_backward(c, a, b, idx.astype("float32"))
    with pytest.raises(ValueError, match=r"argmax must be an int32 or int64 array of shape \(2, 4\).*\(2, 3\)"):
        tg.matmul_backward(c, a, b, idx[:, :3])
    for narrow in ("int8", "int16", "uint32"):  # integers the engines do not read (int8 reached the kernel)
        with pytest.raises(ValueError, match=rf"argmax must be an int32 or int64 array .*dtype {narrow}"):
            tg.matmul_backward(c, a, b, idx.astype(narrow))


@pytest.mark.parametrize("semiring", ["max_plus", "max_min"])
@pytest.mark.parametrize("index", ["int8", "int16", "uint32", ">i4", ">i8"])
def test_backward_refuses_host_argmax_of_other_integer_dtypes(semiring, index):
    """The engines read int32 or int64 indices in this machine's byte order, and nothing else.

    The CPU engine's compiled loops took a big-endian argmax's bytes as
    indices: wrong gradients for max_plus, a read out of bounds (a segfault)
    for max_min; numba's refused it with a typing error, and int8/int16 were
    an internal error of the extension yet accepted by numba.
    """
    rng = np.random.default_rng(23)
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((5, 4))
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    with pytest.raises(ValueError, match=rf"argmax must be an int32 or int64 array of shape \(3, 4\), in this "
                                         rf"machine's byte order .*dtype {re.escape(str(np.dtype(index)))}"):
        tg.matmul_backward(c, a, b, idx.astype(index), semiring)


@pytest.mark.parametrize("bad", [3, -2, 2**31 - 1])
def test_backward_refuses_argmax_outside_minus_one_to_k_on_the_host(bad):
    a, b = np.ones((2, 3), "float32"), np.ones((3, 4), "float32")
    c, idx = tg.matmul(a, b, argmax=True)
    idx[1, 2] = bad
    with pytest.raises(ValueError, match=r"argmax holds indices in .*must lie in \[-1, 2\] for K=3"):
        tg.matmul_backward(c, a, b, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("bad", [3, -2, 2**31 - 1])
def test_backward_skips_device_argmax_outside_minus_one_to_k(bad):
    """Checking device indices would stall the stream; the kernels skip bad ones instead."""
    import cupy

    a, b = cupy.ones((2, 3), "float32"), cupy.ones((3, 4), "float32")
    c, idx = tg.matmul(a, b, argmax=True)
    expected = [cupy.asnumpy(g) for g in tg.matmul_backward(c, a, b, idx)]
    k = int(idx[1, 2])
    idx[1, 2] = bad
    c_host = cupy.asnumpy(c)
    got = [cupy.asnumpy(g) for g in tg.matmul_backward(c, a, b, idx)]
    if k >= 0:  # the entry's contribution is gone, nothing else changes
        expected[0][1, k] -= c_host[1, 2]
        expected[1][k, 2] -= c_host[1, 2]
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_backward_unknown_semiring(engine):
    c, a, b, idx = forward(engine)
    with pytest.raises(ValueError, match="unknown semiring 'nope'; valid semirings are max_plus"):
        tg.matmul_backward(c, a, b, idx, "nope")
