"""The Rust crate tropical-gemm's own CUDA kernel (TensorBFS/tropical-gemm, MIT), built and timed beside ours.

Issue 32 asks for at least 1.3× the crate's kernel at 4096³ and 8192³, on the
same column-major operands.  The crate's ``tropical_gemm.cu`` is never
committed here: it is extracted into the git-ignored ``.peers/tropical-gemm/``
(with the crate's licence, the two host files that fix its launches, and the
commit it came from) from any git directory of that repository, a bare
mirror or a clone:

    python benchmarks/rust_peer.py --fetch-from /path/to/tropical-gemm.git [--rev REV]

and compiled at run time by our NVRTC path and driver loader
(``ceilings._load_all``), a cubin for the GPU in use.  The crate compiles
the whole file to PTX with NVRTC's defaults and lets the driver finish it;
our options differ only by ``--fmad=false`` etc., which change nothing in a
kernel of adds and maxes.  Only the instantiations measured are compiled:
all 31 take NVRTC about 27 s, three take 2 s.

The crate's f32 kernel ``tropical_maxplus_f32_nn(A, B, C, M, N, K)`` reads
column-major A (M×K, leading dimension M) and B (K×N, leading dimension K)
and writes column-major C (M×N), ``C = max_k A + B`` with ``fmaxf``: 64×64
outputs per block of 16×16 threads, 4×4 per thread, K in slices of 32 through
static shared memory, on a 1-D grid of ⌈M/64⌉·⌈N/64⌉ blocks, no dynamic
shared memory (``CudaContext::grid_dims_f32`` and ``block_dims_f32`` in
``crates/tropical-gemm-cuda/src/context.rs``, ``launch_kernel_impl`` in
``kernels.rs``).  The i32 kernel has the f32 geometry, the f64 one 32×32
outputs per block of 8×8 threads.  The crate's host synchronises after each
launch; here launches go back to back, as ours do, which can only favour it.

Semantics: ``fmaxf``/``fmax`` ignore NaN, as ours do.  The integer kernels
take ∓46340 as the tropical zero with a saturating add, where ours use the
type's minimum: products of operands in ±1000 (throughput.py's draws) agree.

    python benchmarks/rust_peer.py [--sizes 2048 4096 8192] [--dtypes float32 int32 float64]   # GPU
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ceilings import _load_all, time_gpu  # benchmarks/ is this script's own directory

#: Where the extracted files live: git-ignored (``/.peers/``), carried to a GPU machine as an ignored path.
PEER_FOLDER = Path(__file__).resolve().parent.parent / ".peers" / "tropical-gemm"
REPOSITORY = "TensorBFS/tropical-gemm"
#: Extracted file name -> its path in the crate's repository.
FILES = {
    "tropical_gemm.cu": "crates/tropical-gemm-cuda/kernels/tropical_gemm.cu",
    "context.rs": "crates/tropical-gemm-cuda/src/context.rs",
    "kernels.rs": "crates/tropical-gemm-cuda/src/kernels.rs",
    "LICENSE": "LICENSE",
}
FETCH_COMMAND = "python benchmarks/rust_peer.py --fetch-from <git directory of TensorBFS/tropical-gemm>"
# One instantiation per line at column 0, the kernel's name first: ``TROPICAL_GEMM_F32(tropical_maxplus_f32_nn, ...)``.
_INSTANTIATION = re.compile(r"^TROPICAL_\w+\((\w+)\s*,.*\)[ \t]*$", re.MULTILINE)


class PeerKernel(NamedTuple):
    """One of the crate's max_plus kernels and its launch shape: ``tile``² outputs per block, 4×4 per thread."""

    name: str
    tile: int

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """The crate's 1-D grid: the kernel splits ``blockIdx.x`` into (row tile, column tile) itself."""
        return (-(-m // self.tile) * -(-n // self.tile), 1, 1)

    def block(self) -> tuple[int, int, int]:
        return (self.tile // 4, self.tile // 4, 1)


KERNELS = {
    "float32": PeerKernel("tropical_maxplus_f32_nn", 64),
    "int32": PeerKernel("tropical_maxplus_i32_nn", 64),
    "float64": PeerKernel("tropical_maxplus_f64_nn", 32),
}


class PeerUnavailable(Exception):
    """The crate's kernel cannot be measured here: the message says why and how to fetch it."""


def extract(git_dir: Path, folder: "Path | None" = None, rev: str = "HEAD") -> str:
    """Copy ``FILES`` at ``rev`` of the crate's repository into ``folder`` and record the commit; returns it.

    ``git show`` reads the objects, so a bare mirror serves as well as a
    clone, and the copy is byte for byte the crate's: any change it needs to
    compile standalone is made at run time (``standalone_source``).
    """
    commit = _git(git_dir, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
    contents = {name: _git(git_dir, "show", f"{commit}:{path}") for name, path in FILES.items()}
    folder = folder or PEER_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    (folder / "COMMIT").write_text(f"{REPOSITORY} {commit}\n")
    return commit


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, check=True).stdout


def read_source(folder: "Path | None" = None) -> tuple[str, str]:
    """The crate's kernel source and the commit it came from; ``PeerUnavailable`` where it was not fetched.

    ``folder`` defaults to ``PEER_FOLDER`` as it is at the call, which tests point elsewhere.
    """
    folder = folder or PEER_FOLDER
    path = folder / "tropical_gemm.cu"
    if not path.is_file():
        raise PeerUnavailable(f"no {path} (the crate's CUDA source is never committed); fetch it with: "
                              f"{FETCH_COMMAND}")
    commit_file = folder / "COMMIT"
    commit = commit_file.read_text().split()[-1] if commit_file.is_file() else "unknown"
    return path.read_text(), commit


def standalone_source(source: str, names: list[str]) -> str:
    """``source`` with only the instantiations of ``names``: the rest would cost NVRTC 25 s for nothing.

    The kept kernels' text is untouched.  ``ValueError`` where a name is not
    instantiated: the crate renamed its kernels, and the geometry here needs
    checking against its host code again.
    """
    found = set(_INSTANTIATION.findall(source))
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"the crate's source instantiates no {', '.join(missing)} (it has {', '.join(sorted(found))})")
    return _INSTANTIATION.sub(lambda m: m.group(0) if m.group(1) in names else "", source)


class Peer(NamedTuple):
    """The crate's kernels loaded on the current device, by dtype, and the commit they came from."""

    functions: dict[str, Any]
    commit: str

    def describe(self) -> dict[str, object]:
        return {"repository": REPOSITORY, "commit": self.commit, "file": FILES["tropical_gemm.cu"], "license": "MIT",
                "kernels": {dt: KERNELS[dt].name for dt in self.functions},
                "built": "at run time by our NVRTC path (ceilings._load_all), a cubin for this GPU"}

    def run(self, dtype: str, a: Any, b: Any, c: Any) -> None:
        """One launch of the crate's kernel as its host code makes it: C = A ⊗ B, all column-major."""
        kernel = KERNELS[dtype]
        (m, k), n = a.shape, b.shape[1]
        self.functions[dtype](kernel.grid(m, n), kernel.block(), (a, b, c, np.int32(m), np.int32(n), np.int32(k)))


def load(dtypes: "tuple[str, ...]" = ("float32",), folder: "Path | None" = None) -> Peer:
    """Compile and load the crate's kernels for ``dtypes``; ``PeerUnavailable`` if unfetched or NVRTC refuses them.

    A refusal is the crate's source against this NVRTC, not a fault of ours,
    so it skips the peer rather than the benchmark around it.
    """
    from tropical_gemm.jit.compiler import CompileError

    source, commit = read_source(folder)
    names = [KERNELS[dt].name for dt in dtypes]
    try:
        functions = _load_all(standalone_source(source, names), names)
    except (CompileError, ValueError) as exc:
        raise PeerUnavailable(f"the crate's source at {commit} does not build here: {exc}") from exc
    return Peer({dt: functions[KERNELS[dt].name] for dt in dtypes}, commit)


def mismatches(theirs: np.ndarray, ours: np.ndarray) -> int:
    """Entries that differ (layouts may differ; NaN never occurs: both kernels ignore it in ⊕)."""
    return int(np.count_nonzero(np.asarray(theirs) != np.asarray(ours)))


def compare(peer: Peer, a: Any, b: Any) -> dict[str, object]:
    """Ours (``tg.matmul``) and the crate's kernel on the same column-major cupy operands: times and agreement.

    Both outputs are compared on the host, so no CuPy kernel is compiled.
    ``ours_speedup`` is the crate's time over ours.
    """
    if not (a.flags.f_contiguous and b.flags.f_contiguous):
        raise ValueError("the crate's kernel reads column-major operands only: pass Fortran-order arrays")
    import cupy as cp

    import tropical_gemm as tg

    dtype = str(a.dtype)
    (m, k), n = a.shape, b.shape[1]
    reps = max(1, min(50, int(2e11 / (2.0 * m * n * k))))
    ours_c = tg.matmul(a, b, "max_plus")
    ours_s = time_gpu(lambda: tg.matmul(a, b, "max_plus", out=ours_c), reps=reps)
    theirs_c = cp.empty((m, n), a.dtype, order="F")
    theirs_s = time_gpu(lambda: peer.run(dtype, a, b, theirs_c), reps=reps)
    wrong = mismatches(cp.asnumpy(theirs_c), cp.asnumpy(ours_c))
    return {"size": (m, k, n), "dtype": dtype, "ours_s": ours_s, "crate_s": theirs_s, "ours_speedup": theirs_s / ours_s,
            "agrees": wrong == 0, "mismatches": wrong}


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch-from", type=Path, metavar="GIT_DIR",
                        help=f"extract the crate's files from this git directory of {REPOSITORY} into {PEER_FOLDER}")
    parser.add_argument("--rev", default="HEAD", help="the crate's commit to extract (default HEAD)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(KERNELS), default=["float32"])
    args = parser.parse_args(argv)
    if args.fetch_from is not None:
        try:
            commit = extract(args.fetch_from, rev=args.rev)
        except subprocess.CalledProcessError as exc:
            print(f"git failed in {args.fetch_from}: {exc.stderr.decode().strip()}", file=sys.stderr)
            return 1
        print(f"extracted {REPOSITORY} {commit}: {', '.join(FILES)} into {PEER_FOLDER}")
        return 0
    from throughput import random_operands  # imported here: throughput imports this module

    try:
        peer = load(tuple(args.dtypes))
    except PeerUnavailable as exc:
        print(f"Rust crate kernel skipped: {exc}", file=sys.stderr)
        return 1
    print(f"{'size':>6} {'dtype':>8} {'ours ms':>9} {'crate ms':>9} {'ours/crate':>10}  agrees")
    for size in args.sizes:
        for dtype in args.dtypes:
            r = compare(peer, *random_operands((size, size), (size, size), dtype, order="F"))
            agrees = "yes" if r["agrees"] else f"NO, {r['mismatches']} entries differ"
            print(f"{size:>6} {dtype:>8} {r['ours_s'] * 1e3:9.3f} {r['crate_s'] * 1e3:9.3f} "
                  f"{r['ours_speedup']:9.2f}x  {agrees}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
