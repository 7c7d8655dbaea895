"""The boolean semiring ``and_or``: catalogue entry, dtype rules, and both engines against a naive reference.

The reference is the definition itself on unpacked truth values:
``C[i, j] = any_k A[i, k] and B[k, j]``, the argmax the first such k (-1
where none is).  Inputs are fresh random truth values at densities that leave
both true and false entries, over sizes that cross the packing's word edges
(32 ks on the GPU, 64 on the CPU) and the GPU tile's (128).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tropical_gemm as tg
from strategies import LAYOUTS
from tropical_gemm.jit import catalogue, kernel_source, make_spec
from tropical_gemm.semirings import BOOLEAN_PAIR, register_semiring


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(C, argmax)`` from the definition, broadcasting batch dims as numpy.matmul does."""
    both = a.astype(bool)[..., :, :, None] & b.astype(bool)[..., None, :, :]  # (..., M, K, N)
    c = both.any(axis=-2)
    first = both.argmax(axis=-2) if both.shape[-2] else np.zeros(c.shape, dtype=np.intp)
    return c, np.where(c, first, -1)


def truth(rng: np.random.Generator, shape: tuple[int, ...], k: int, dtype: str = "bool") -> np.ndarray:
    """Random truth values dense enough that about half the entries of a product over ``k`` are true."""
    density = min(0.5, np.sqrt(np.log(2) / max(k, 1)))
    x = rng.random(shape) < density
    if dtype == "uint8":  # nonzero is true, whatever the value
        return (x * rng.integers(1, 256, size=shape)).astype(np.uint8)
    return x


def check(engine, a: np.ndarray, b: np.ndarray, *, transform=lambda x: x) -> None:  # noqa: ANN001
    """Both variants on ``engine`` equal the reference; ``transform`` makes device views (transposes, strides)."""
    want_c, want_k = reference(a, b)
    da, db = (transform(x) for x in engine.put(a, b))
    plain = engine.get(tg.matmul(da, db, "and_or"))[0]
    c, k = engine.get(*tg.matmul(da, db, "and_or", argmax=True))
    assert plain.dtype == c.dtype == np.bool_
    np.testing.assert_array_equal(plain, want_c)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(k, want_k)


# ----------------------------------------------------------------- catalogue


def test_and_or_is_in_the_catalogue_with_its_aliases():
    sr = tg.get_semiring("and_or")
    assert "and_or" in tg.semirings()
    assert (sr.add, sr.mul) == BOOLEAN_PAIR == ("or", "and") and sr.boolean
    assert tg.get_semiring("boolean") is sr and tg.get_semiring("Or-And") is sr
    assert sr.zero("bool") == np.False_ and sr.one("bool") == np.True_
    assert not tg.get_semiring("max_min").boolean  # the same operations on {0, 1}, but an ordered semiring


def test_the_boolean_operations_do_not_compose_with_the_ordered_ones():
    with pytest.raises(ValueError, match="⊕ must be one of max, min"):
        register_semiring("or_plus", "or", "plus", "not a semiring the engines know")
    with pytest.raises(ValueError, match="served already, as 'and_or'"):
        register_semiring("boolean2", "or", "and", "a second boolean")


def test_its_kernels_are_catalogue_specs():
    names = [s.name for s in catalogue(semirings_=["boolean"], dtypes=["bool"])]
    assert names == ["tg_forward_and_or_b8_rr_square", "tg_forward_and_or_b8_rr_tensor",
                     "tg_forward_argmax_and_or_b8_rr_square", "tg_gather_b8", "tg_reduce_and_or_b8", "tg_walk_b8",
                     "tg_pack_bits_and_or_b8"]  # einsum's copies, reductions and walk: semiring-free names
    assert all(s.semiring == "and_or" for s in catalogue(dtypes=["bool"]))
    assert not [s for s in catalogue(semirings_=["max_plus"]) if s.dtype == "bool" or s.op == "pack_bits"]
    for spec in catalogue(semirings_=["and_or"], dtypes=["bool"]):
        assert 'extern "C" __global__ void __launch_bounds__(' in kernel_source(spec)
        assert f") {spec.name}(" in kernel_source(spec)
    with pytest.raises(ValueError, match="boolean semiring"):
        make_spec("pack_bits", "max_plus", "bool")
    assert make_spec("gather", "max_plus", "bool") == make_spec("gather", "and_or", "bool")  # truth values' copy
    with pytest.raises(ValueError, match="forward, forward_argmax, pack_bits, reduce, gather, walk kernels only"):
        make_spec("backward", "and_or", "bool")
    with pytest.raises(ValueError, match="valid values are bool"):
        make_spec("forward", "and_or", "float32")
    with pytest.raises(ValueError, match="unknown tile 'tensor'; valid values are square"):
        make_spec("forward_argmax", "and_or", "bool", tile="tensor")  # a count has no first true k


@pytest.mark.nvrtc
def test_the_tensor_kernel_uses_bit_mma_and_traps_before_sm_80():
    from tropical_gemm.jit import compile_spec

    spec = make_spec("forward", "and_or", "bool", tile="tensor")
    assert "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc" in kernel_source(spec)
    assert compile_spec(spec, "sm_80").binary[1:4] == b"ELF"
    assert compile_spec(spec, "sm_75").binary[1:4] == b"ELF"  # the catalogue compiles on every arch


@pytest.mark.nvrtc
def test_warmup_compiles_every_kernel_for_sm_90():
    from tropical_gemm.jit import compile_spec, warmup

    result = warmup(semirings="boolean", dtypes="bool", arch="sm_90")
    assert [spec.name for spec in result] == [spec.name for spec in catalogue(semirings_=["and_or"], dtypes=["bool"])]
    assert result.compiled + result.already_cached == 7 and not result.not_stored
    for spec in result:
        assert compile_spec(spec, "sm_90").binary[1:4] == b"ELF", spec.name


def test_info_lists_it():
    from tropical_gemm.info import semiring_report

    assert "and_or" in semiring_report()["arrays"]


# ----------------------------------------------------------------- dtypes and errors


def test_operands_must_be_truth_values():
    with pytest.raises(TypeError, match="and_or semiring takes bool .* got float32; pass x != 0"):
        tg.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), bool), "and_or")
    with pytest.raises(TypeError, match="semiring='and_or'"):
        tg.matmul(np.ones((2, 2), bool), np.ones((2, 2), bool), "max_plus")


def test_there_is_no_gradient():
    a = np.ones((2, 3), bool)
    with pytest.raises(TypeError, match="no gradient"):
        tg.matmul_backward(np.ones((2, 2), bool), a, a.T, np.zeros((2, 2), np.int32), "and_or")


def test_out_takes_bool_buffers():
    rng = np.random.default_rng(1)
    a, b = truth(rng, (5, 70), 70), truth(rng, (70, 6), 70)
    out = np.empty((5, 6), bool), np.empty((5, 6), np.int32)
    assert tg.matmul(a, b, "and_or", argmax=True, out=out) is out
    want_c, want_k = reference(a, b)
    np.testing.assert_array_equal(out[0], want_c)
    np.testing.assert_array_equal(out[1], want_k)
    with pytest.raises(TypeError, match="expected bool"):
        tg.matmul(a, b, "and_or", out=np.empty((5, 6), np.uint8))


# ----------------------------------------------------------------- both engines against the reference


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 31, 1), (3, 32, 5), (7, 33, 2), (17, 63, 9), (9, 64, 31),
                                   (33, 65, 12), (130, 129, 70), (129, 200, 257), (1, 300, 130), (140, 5, 1)])
def test_ragged_sizes(engine, m, k, n):
    rng = np.random.default_rng(m * 10_007 + k * 101 + n)
    check(engine, truth(rng, (m, k), k), truth(rng, (k, n), k))


@pytest.mark.parametrize("m,k,n", [(128, 512, 128), (257, 1500, 131), (200, 520, 255), (1, 4100, 3),
                                   (130, 8200, 7), (64, 257, 64)])
def test_long_k_crosses_word_and_stage_edges(engine, m, k, n):
    # the GPU's tensor kernel takes 256 ks an instruction and 512 a shared-memory stage; odd N stores bytes
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    check(engine, truth(rng, (m, k), k), truth(rng, (k, n), k))


@pytest.mark.parametrize("k", [300, 1000, 2500])
def test_each_k_alone_decides_its_entries(engine, k):
    # A's row i holds one true k, p[i], and B's column j one, q[j]: C[i, j] is p[i] == q[j], argmax p[i];
    # every k of every word, bit and stage must pair A's with B's own
    rng = np.random.default_rng(k)
    p, q = rng.integers(0, k, 150), rng.integers(0, k, 140)
    q[::3] = p[: len(q[::3])]  # some matches for sure
    a, b = np.arange(k) == p[:, None], np.arange(k)[:, None] == q
    want = p[:, None] == q
    c = engine.get(tg.matmul(*engine.put(a, b), "and_or"))[0]
    np.testing.assert_array_equal(c, want)
    check(engine, a, b)


def test_k_zero_is_false_with_no_argmax(engine):
    a, b = np.ones((4, 0), bool), np.ones((0, 3), bool)
    c, k = engine.get(*tg.matmul(*engine.put(a, b), "and_or", argmax=True))
    assert c.dtype == np.bool_ and not c.any() and (k == -1).all() and c.shape == (4, 3)


def test_uint8_reads_nonzero_as_true_and_mixes_with_bool(engine):
    rng = np.random.default_rng(2)
    check(engine, truth(rng, (37, 90), 90, "uint8"), truth(rng, (90, 41), 90))
    check(engine, truth(rng, (2, 37, 90), 90), truth(rng, (90, 41), 90, "uint8"))


def test_transposed_and_strided_operands(engine):
    rng = np.random.default_rng(3)
    a, b = truth(rng, (150, 70), 70), truth(rng, (70, 133), 70)
    check(engine, a, b, transform=lambda x: x.T.copy().T)  # column layouts: k contiguous in B, m in A
    big_a, big_b = truth(rng, (300, 210), 70), truth(rng, (140, 400), 70)
    view_a, view_b = (lambda x: x[::2, ::3]), (lambda x: x[::-2, 1::3])  # steps, and a negative stride
    want_c, want_k = reference(view_a(big_a), view_b(big_b))
    da, db = engine.put(big_a, big_b)
    c, k = engine.get(*tg.matmul(view_a(da), view_b(db), "and_or", argmax=True))
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(k, want_k)


def test_batches_broadcast(engine):
    rng = np.random.default_rng(4)
    check(engine, truth(rng, (3, 1, 20, 70), 70), truth(rng, (4, 70, 33), 70))
    check(engine, truth(rng, (20, 70), 70), truth(rng, (2, 3, 70, 33), 70))
    # more independent batch dims than a kernel indexes, with broadcast ones
    check(engine, truth(rng, (2, 1, 2, 2, 5, 40), 40), truth(rng, (2, 3, 1, 2, 40, 6), 40))
    # an operand whose own batch dims do not fold (every one strided): packed a leading index at a time
    big_a, b = truth(rng, (4, 4, 4, 4, 5, 40), 40), truth(rng, (2, 1, 40, 6), 40)
    every_other = (slice(None, None, 2),) * 4
    want_c, want_k = reference(big_a[every_other], b)
    da, db = engine.put(big_a, b)
    c, k = engine.get(*tg.matmul(da[every_other], db, "and_or", argmax=True))
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(k, want_k)


def test_one_dimensional_operands(engine):
    rng = np.random.default_rng(5)
    a, b = truth(rng, (70,), 70), truth(rng, (70, 9), 70)
    c = engine.get(tg.matmul(*engine.put(a, b), "and_or"))[0]
    np.testing.assert_array_equal(c, reference(a[None], b)[0][0])


def test_argmax_is_the_first_true_k_among_ties(engine):
    # every k from 5 on makes each entry true: the argmax must be 5, the smallest, in every word it spans
    a = np.zeros((3, 200), bool)
    a[:, 5:] = True
    b = np.zeros((200, 4), bool)
    b[5:, :] = True
    b[:, 2] = False
    b[150, 2] = True   # only k = 150 (in GPU word 4, CPU word 2) for column 2
    c, k = engine.get(*tg.matmul(*engine.put(a, b), "and_or", argmax=True))
    np.testing.assert_array_equal(k, np.array([[5, 5, 150, 5]] * 3))
    assert c.all()


def test_einsum_over_and_or_matches_the_products():
    rng = np.random.default_rng(6)
    a, b, c = truth(rng, (6, 40), 40), truth(rng, (40, 30), 40), truth(rng, (30, 7), 30)
    ab = reference(a, b)[0]
    np.testing.assert_array_equal(tg.einsum("ij,jk->ik", a, b, semiring="and_or"), ab)
    np.testing.assert_array_equal(tg.einsum("ij,jk,kl->il", a, b, c, semiring="boolean"), reference(ab, c)[0])
    np.testing.assert_array_equal(tg.einsum("ij->i", a, semiring="and_or"), a.any(axis=1))
    value, config = tg.einsum("ij,jk->ik", a, b, semiring="and_or", return_configuration=True)
    np.testing.assert_array_equal(config["j"], reference(a, b)[1])


def test_einsum_reads_uint8_as_truth_values():
    rng = np.random.default_rng(7)
    a, b = truth(rng, (6, 40), 40, "uint8"), truth(rng, (40, 5), 40)
    want_c, want_k = reference(a, b)
    value, config = tg.einsum("ij,jk->ik", a, b, semiring="and_or", return_configuration=True)
    assert value.dtype == np.bool_
    np.testing.assert_array_equal(value, want_c)
    np.testing.assert_array_equal(config["j"], want_k)
    np.testing.assert_array_equal(tg.einsum("ij->i", a, semiring="and_or"), a.any(axis=1))


def test_torch_and_dask_operands_are_a_clear_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="not torch tensors"):
        tg.matmul(torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 2, dtype=torch.bool), "and_or")
    with pytest.raises(TypeError, match=r"takes numpy or cupy arrays, not torch tensors; pass t.numpy\(\)"):
        tg.einsum("ij,jk->ik", torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 2, dtype=torch.bool),
                  semiring="and_or")  # it pointed to tg.matmul, which refuses tensors too
    dask_array = pytest.importorskip("dask.array")
    x = dask_array.ones((2, 3), dtype=bool)
    with pytest.raises(TypeError, match="not dask arrays"):
        tg.matmul(x, x.T, "and_or")


def test_cpu_warmup_prepares_its_kernels(cache_root, capsys):
    """``warmup --device cpu`` (every semiring by default) took and_or for an ordered semiring and failed."""
    import json

    from tropical_gemm.cli import main
    from tropical_gemm.engines.cpu import boolean

    for cached in (boolean.tile_function, boolean.pack_function):
        cached.cache_clear()  # so that this cache gets their files
    assert main(["warmup", "--device", "cpu", "--semiring", "and_or", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # bool and uint8, with and without argmax: the two tiles and the two packers, whichever kernels serve the others
    assert (summary["products"], summary["numba_kernels"]) == (4, 4)
    assert len(list((cache_root / "numba-cpu").rglob("*.nbc"))) == 4
    a = np.random.default_rng(8).random((5, 70)) < 0.1
    np.testing.assert_array_equal(tg.matmul(a, a.T, "and_or"), (a.astype(int) @ a.T.astype(int)) > 0)
    assert boolean.tile_function.cache_info().misses == 2  # the product compiled nothing more


@settings(max_examples=25)
@given(shapes=st.tuples(st.sampled_from([((), ()), ((2,), ()), ((), (3,)), ((1, 3), (2, 1)), ((2, 1), (3,))]),
                        st.integers(1, 40), st.sampled_from([0, 1, 7, 63, 64, 65, 127, 129]), st.integers(1, 40)),
       layouts=st.tuples(st.sampled_from(sorted(LAYOUTS)), st.sampled_from(sorted(LAYOUTS))),
       dtypes=st.tuples(st.sampled_from(["bool", "uint8"]), st.sampled_from(["bool", "uint8"])),
       threads=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_cpu_products_on_every_split_match_the_reference(cpu_threads, shapes, layouts, dtypes, threads, seed):
    """Words cut at 63/64/65 ks, uint8 values of every byte, strided layouts and batches, over 1 to 4 threads."""
    (batch_a, batch_b), m, k, n = shapes
    rng = np.random.default_rng(seed)
    a, b = truth(rng, (*batch_a, m, k), k, dtypes[0]), truth(rng, (*batch_b, k, n), k, dtypes[1])
    cpu_threads(threads)
    want_c, want_k = reference(a, b)
    views = [LAYOUTS[layout](x, lambda y: y) for layout, x in zip(layouts, (a, b))]
    c, idx = tg.matmul(*views, "and_or", argmax=True)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_k)
    np.testing.assert_array_equal(tg.matmul(*views, "and_or"), want_c)
