"""CUDA kernel sources built for the host, so their indexing is tested on machines without a GPU.

The shim turns a block into real threads meeting at ``__syncthreads`` (a
C++20 barrier) and ``__shared__`` arrays into statics (blocks run one at a
time); the few device intrinsics the kernels use get host definitions.  Code
behind ``#if __CUDA_ARCH__ >= 800`` (cp.async, tensor cores) is left out, as
``__CUDA_ARCH__`` is undefined here: the kernels' own fallbacks run instead.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = r"""
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <cmath>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __ffs(x) __builtin_ffs(x)
#define TG_HOST_BUILD
// Blocks run one at a time, so one buffer serves every block's dynamic shared memory.
namespace tg {
static unsigned char* dynamic_shared() { alignas(16) static unsigned char shared[228 * 1024]; return shared; }
}
using std::max;
using std::min;
static inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
static inline double __longlong_as_double(long long x) { double f; std::memcpy(&f, &x, 8); return f; }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct Dim { long long x; };
static thread_local Dim threadIdx = {0};
static Dim blockIdx = {0}, blockDim = {0}, gridDim = {0};
static std::barrier<>* block_barrier = nullptr;
static void __syncthreads() { block_barrier->arrive_and_wait(); }
static void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static int atomicAdd(int* address, int value) { return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST); }
template <class T> static T __ldcg(const T* address) { return *address; }
static std::atomic<int> any_of_block{0};
static int __syncthreads_or(int p) {  // read after everyone wrote, reset after everyone read
  if (p) any_of_block = 1;
  __syncthreads();
  const int any = any_of_block;
  __syncthreads();
  if (threadIdx.x == 0) any_of_block = 0;
  __syncthreads();
  return any;
}
"""

LAUNCH = r"""
// Each block's threads run as real threads; one that returns early drops out of the block's barrier.
template <class F> static void launch(long long grid, long long block, F kernel) {
  gridDim.x = grid; blockDim.x = block;
  for (long long b = 0; b < grid; ++b) {
    std::barrier<> barrier(block);
    block_barrier = &barrier;
    blockIdx.x = b;
    std::vector<std::thread> threads;
    for (long long t = 0; t < block; ++t)
      threads.emplace_back([t, &kernel] { threadIdx.x = t; kernel(); block_barrier->arrive_and_drop(); });
    for (auto& thread : threads) thread.join();
  }
}
"""


def build_library(source: str, path: Path) -> ctypes.CDLL:
    """``source`` (the shim, kernels and ``extern "C"`` launchers) compiled to ``path``.so and loaded; a skip
    where the machine has no C++20 compiler."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the kernels for the host")
    path.with_suffix(".cpp").write_text(source)
    library = path.with_suffix(".so")
    done = subprocess.run([compiler, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(library),
                           str(path.with_suffix(".cpp"))], capture_output=True, text=True)
    if done.returncode != 0 and "barrier" in done.stderr and "No such file" in done.stderr:
        pytest.skip("the C++ compiler has no <barrier> (C++20)")
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(library))


#: The C type of each dtype the forward kernels take.
C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}


def forward_builder(folder: Path, headers: tuple[str, ...], launcher: str, companion=lambda spec: ""):
    """``get(spec)``: the host build of a forward spec's fragment (its entry point renamed ``forward``, ``T_`` its
    C type) with the named headers, ``companion(spec)``'s code (kernels it launches with) and ``launcher``'s
    ``extern "C"`` functions, built once per rendered text (the tests that swap a tile shape keep the spec)."""
    from tropical_gemm.jit.source import fragment, header_sources

    built: dict[str, ctypes.CDLL] = {}

    def get(spec):
        rendered = fragment(spec).replace(spec.name, "forward") + companion(spec)
        if rendered not in built:
            text = "".join(body + "\n" for name, body in header_sources() if name in headers)
            program = SHIM + text + rendered + f"typedef {C_TYPES[spec.dtype]} T_;\n" + LAUNCH + launcher
            built[rendered] = build_library(program, folder / f"{spec.name}_{len(built)}")
        return built[rendered]

    return get

