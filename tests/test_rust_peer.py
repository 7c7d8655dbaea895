"""benchmarks/rust_peer.py without a GPU: fetching the Rust crate's CUDA source, the skip, its launch, its build.

The crate's source is never committed: the tests that read it skip, saying
how to fetch it, where ``.peers/tropical-gemm/`` is absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from script_modules import load_script

from tropical_gemm.jit import Target
from tropical_gemm.jit.compiler import compile_program

peer = load_script("benchmarks", "rust_peer")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _fetched(name: str) -> str:
    """A file extracted from the crate, or a skip that says how to extract it."""
    path = peer.PEER_FOLDER / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: fetch the crate's files with {peer.FETCH_COMMAND}")
    return path.read_text()


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _fake_crate(repo, kernel_text: str) -> str:
    """A commit of a repository laid out like the crate's, holding ``kernel_text``; returns its hash."""
    for name, path in peer.FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(kernel_text if name == "tropical_gemm.cu" else f"{name} of the fake crate\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "crate")
    return _git(repo, "rev-parse", "HEAD")


@needs_git
def test_extract_copies_the_crate_files_at_the_asked_commit_from_a_clone_or_a_bare_mirror(tmp_path):
    repo = tmp_path / "crate"
    repo.mkdir()
    _git(repo, "init", "-q")
    first = _fake_crate(repo, "// first\n")
    second = _fake_crate(repo, "// second\n")
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(tmp_path / "mirror.git")], check=True)

    assert peer.extract(repo, tmp_path / "old", rev=first) == first
    assert (tmp_path / "old" / "tropical_gemm.cu").read_text() == "// first\n"
    assert peer.extract(tmp_path / "mirror.git", tmp_path / "new") == second
    assert (tmp_path / "new" / "COMMIT").read_text() == f"TensorBFS/tropical-gemm {second}\n"
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted([*peer.FILES, "COMMIT"])
    assert peer.read_source(tmp_path / "new") == ("// second\n", second)


@needs_git
def test_a_repository_without_the_kernel_file_extracts_nothing(tmp_path):
    repo = tmp_path / "other"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README").write_text("not the crate\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "other")
    with pytest.raises(subprocess.CalledProcessError):
        peer.extract(repo, tmp_path / "peer")
    assert not (tmp_path / "peer").exists()


def test_without_the_source_the_peer_is_skipped_with_the_command_that_fetches_it(tmp_path, monkeypatch):
    monkeypatch.setattr(peer, "PEER_FOLDER", tmp_path / "absent")
    with pytest.raises(peer.PeerUnavailable) as caught:
        peer.load(("float32",))
    assert str(tmp_path / "absent" / "tropical_gemm.cu") in str(caught.value)
    assert peer.FETCH_COMMAND in str(caught.value)


def test_throughput_records_the_skip_and_prints_it_with_the_targets(tmp_path, monkeypatch):
    throughput = load_script("benchmarks", "throughput")
    monkeypatch.setattr(throughput.rust_peer, "PEER_FOLDER", tmp_path / "absent")
    rec = throughput.Recorder({"max_plus": {"float32": 50.0}}, 3.0)
    crate = throughput.rust_crate(rec, quick=True)
    assert rec.rows == [] and crate["fetch"] == peer.FETCH_COMMAND
    report = {"ceilings_tops": {}, "bandwidth_tbs": {}, "rust_peer": crate, "results": rec.rows}
    assert f"Rust crate kernel skipped: {crate['skipped']}" in throughput.table(report)


def test_the_table_judges_our_speed_against_the_crate_and_flags_different_results():
    throughput = load_script("benchmarks", "throughput")
    rec = throughput.Recorder({"max_plus": {"float32": 50.0}}, 3.0)
    for seconds, ratio, agrees in ((0.010, 1.5, True), (0.020, 1.2, False)):
        rec.product("peer rust crate kernel 4096^3 f32 max_plus", seconds, 2 * 4096**3, op="peer", size=4096,
                    ours_speedup=ratio, agrees=agrees, mismatches=0 if agrees else 3, target=("ours_speedup", 1.3))
    lines = throughput.table({"ceilings_tops": {}, "bandwidth_tbs": {}, "rust_peer": {}, "results": rec.rows})
    met, missed = lines[-3], lines[-2]
    assert met.endswith("ours_speedup 1.5 >= 1.3: met")
    assert missed.endswith("ours_speedup 1.2 >= 1.3: MISSED; RESULTS DIFFER in 3 entries")
    assert lines[-1].startswith("targets met: 1 of 2")


def test_only_the_named_instantiations_are_kept_and_a_missing_one_is_named():
    source = ("#define TROPICAL_GEMM_F32(NAME, INIT, CMP, OP) extern \"C\" __global__ void NAME() {}\n"
              "TROPICAL_GEMM_F32(tropical_maxplus_f32_nn, NEG_INF_F32, fmaxf, +)\n"
              "TROPICAL_GEMM_F32(tropical_minplus_f32_nn, INF_F32,     fminf, +)\n")
    kept = peer.standalone_source(source, ["tropical_maxplus_f32_nn"])
    assert kept.splitlines()[:2] == source.splitlines()[:2] and "minplus" not in kept
    with pytest.raises(ValueError, match="no tropical_maxplus_i32_nn"):
        peer.standalone_source(source, ["tropical_maxplus_i32_nn"])


def test_the_grid_is_one_dimensional_with_a_block_per_output_tile():
    f32, f64 = peer.KERNELS["float32"], peer.KERNELS["float64"]
    assert (f32.grid(100, 130), f32.block()) == ((2 * 3, 1, 1), (16, 16, 1))
    assert (f64.grid(100, 130), f64.block()) == ((4 * 5, 1, 1), (8, 8, 1))
    assert f32.grid(8192, 8192) == (128 * 128, 1, 1)


def test_mismatches_compare_values_whatever_the_layouts():
    ours = np.arange(12, dtype=np.float32).reshape(3, 4)
    theirs = np.asfortranarray(ours)
    assert peer.mismatches(theirs, ours) == 0
    theirs[1, 2] = -1
    assert peer.mismatches(theirs, ours) == 1


def test_the_launch_matches_the_crate_host_code():
    """Tiles, threads, argument order and shared memory as ``context.rs`` and ``kernels.rs`` launch them."""
    context, kernels = _fetched("context.rs"), _fetched("kernels.rs")
    consts = dict(re.findall(r"pub const (\w+): u32 = (\d+);", context))
    assert int(consts["BLOCK_SIZE_M_F32"]) == int(consts["BLOCK_SIZE_N_F32"]) == peer.KERNELS["float32"].tile
    assert int(consts["BLOCK_SIZE_M_F64"]) == int(consts["BLOCK_SIZE_N_F64"]) == peer.KERNELS["float64"].tile
    assert consts["THREAD_SIZE_M"] == consts["THREAD_SIZE_N"] == "4"
    assert "(grid_x * grid_y, 1, 1)" in context and "(bszm, bszn, 1)" in context
    assert re.search(r"a\.as_slice\(\),\s*b\.as_slice\(\),\s*c\.as_slice_mut\(\),\s*"
                     r"m as i32,\s*n as i32,\s*k as i32,", kernels)
    assert "shared_mem_bytes: 0" in kernels
    i32_impl = kernels[kernels.index("macro_rules! impl_cuda_kernel_i32"):]
    assert "grid_dims_f32" in i32_impl[:i32_impl.index("macro_rules!", 1)]


@pytest.mark.nvrtc
def test_the_crate_kernels_compile_for_sm_90_with_our_nvrtc_path():
    names = [k.name for k in peer.KERNELS.values()]
    source = _fetched("tropical_gemm.cu")
    assert re.search(r"const float\* __restrict__ A,\s*\\\s*const float\* __restrict__ B,\s*\\\s*"
                     r"float\* __restrict__ C,\s*\\\s*int M, int N, int K", source)
    kernel = compile_program(peer.standalone_source(source, names), names[0], Target("cubin", 90))
    for name in names:
        assert name.encode() in kernel.binary
    assert b"tropical_minplus_f32_nn" not in kernel.binary


def test_a_launch_passes_column_major_operands_and_m_n_k_as_the_crate_does():
    launches = []
    run = peer.Peer({"float32": lambda grid, block, args: launches.append((grid, block, args))}, "c0ffee")
    a, b, c = np.zeros((100, 30), order="F"), np.zeros((30, 130), order="F"), np.zeros((100, 130), order="F")
    run.run("float32", a, b, c)
    (grid, block, args), = launches
    assert (grid, block) == ((2 * 3, 1, 1), (16, 16, 1))
    assert [id(x) for x in args[:3]] == [id(a), id(b), id(c)] and args[3:] == (100, 130, 30)
    assert all(type(x) is np.int32 for x in args[3:])


def test_compare_refuses_row_major_operands_before_any_launch():
    with pytest.raises(ValueError, match="column-major"):
        peer.compare(peer.Peer({}, "c0ffee"), np.zeros((4, 4)), np.zeros((4, 4), order="F"))
