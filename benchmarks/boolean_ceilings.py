"""Register-only ceilings of the boolean product's candidate designs: which instruction does ``and_or`` best?

Each probe keeps every SM busy with independent chains of one instruction and
no loads, and reports boolean multiply-adds (one k of one output) per second:

* ``lop3``: ``acc | (a & b)`` on 32-bit words, 32 multiply-adds an instruction
  (the SIMT bit-packed kernel's inner loop);
* ``mma_b1``: ``mma.sync m16n8k256 .b1 .and.popc``, 32768 a warp instruction
  (tensor cores on packed bits: the count of true ks, then a test against zero);
* ``mma_s8``: ``mma.sync m16n8k32 .s8``, 4096 (tensor cores on 0/1 bytes);
* ``mma_bf16``: ``mma.sync m16n8k16 .bf16`` into f32, 2048: the instruction
  the cuBLAS idiom ``(A.bf16 @ B.bf16) > 0`` rests on, for scale.

Built by the library's compiler and loader, as ``ceilings.py``'s probes are.

    python benchmarks/boolean_ceilings.py [--out DIR]
"""

from __future__ import annotations

import sys

import numpy as np

from ceilings import _load_all, time_gpu
from results_file import run_and_save

_MMA_CHAINS = 8

_SOURCE = r"""
extern "C" __global__ void tg_probe_lop3(unsigned* o, unsigned b, int iters) {
  unsigned v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = threadIdx.x * 2654435761u + i;
  for (int it = 0; it < iters; it += 2) {  // two rounds, v -> w -> v: one LOP3 per update, none hoistable
    unsigned w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = b | (v[i] & v[(i + 1) % 16]);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = b | (w[i] & w[(i + 1) % 16]);
  }
  unsigned s = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) s ^= v[i];
  o[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

#define TG_MMA_PROBE(NAME, SHAPE_TYPES, ACC_T)                                                        \
extern "C" __global__ void NAME(int* o, unsigned seed, int iters) {                                    \
  unsigned a[4], b[2];                                                                                \
  for (int i = 0; i < 4; ++i) a[i] = seed * (threadIdx.x + 7 * i + 1);                                \
  for (int i = 0; i < 2; ++i) b[i] = seed ^ (threadIdx.x * 31 + i);                                   \
  ACC_T c[CHAINS][4] = {};                                                                            \
  for (int it = 0; it < iters; ++it) {                                                                \
    _Pragma("unroll") for (int j = 0; j < CHAINS; ++j)                                                 \
      asm volatile("mma.sync.aligned." SHAPE_TYPES " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \
                   : "+r"(*(int*)&c[j][0]), "+r"(*(int*)&c[j][1]), "+r"(*(int*)&c[j][2]), "+r"(*(int*)&c[j][3]) \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));               \
  }                                                                                                   \
  int s = 0;                                                                                          \
  for (int j = 0; j < CHAINS; ++j) for (int i = 0; i < 4; ++i) s ^= *(int*)&c[j][i];                  \
  o[blockIdx.x * blockDim.x + threadIdx.x] = s;                                                       \
}
TG_MMA_PROBE(tg_probe_mma_b1, "m16n8k256.row.col.s32.b1.b1.s32.and.popc", int)
TG_MMA_PROBE(tg_probe_mma_s8, "m16n8k32.row.col.s32.s8.s8.s32", int)
TG_MMA_PROBE(tg_probe_mma_bf16, "m16n8k16.row.col.f32.bf16.bf16.f32", float)
"""

#: Boolean multiply-adds per instruction of each probe, per thread (lop3) or per warp (mma).
_PROBES = {"lop3": ("tg_probe_lop3", 32, 16), "mma_b1": ("tg_probe_mma_b1", 16 * 8 * 256, _MMA_CHAINS),
           "mma_s8": ("tg_probe_mma_s8", 16 * 8 * 32, _MMA_CHAINS),
           "mma_bf16": ("tg_probe_mma_bf16", 16 * 8 * 16, _MMA_CHAINS)}


def measure() -> dict[str, float]:
    """Boolean multiply-adds per second (T/s) of each probe, all SMs busy."""
    import cupy as cp

    source = f"#define CHAINS {_MMA_CHAINS}\n" + _SOURCE
    functions = _load_all(source, [name for name, _, _ in _PROBES.values()])
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads, iters = sms * 8, 256, 2048
    out = cp.empty(blocks * threads, dtype=cp.int32)
    rates = {}
    for label, (name, per_instruction, chains) in _PROBES.items():
        kernel = functions[name]
        seconds = time_gpu(lambda: kernel((blocks,), (threads,), (out, np.uint32(0x9E3779B9), np.int32(iters))),
                           reps=3)
        issuers = blocks * threads if label == "lop3" else blocks * threads // 32
        rates[label] = issuers * chains * iters * per_instruction / seconds / 1e12
    return rates


def table(report: dict) -> list[str]:
    n = 16384
    lines = [f"{'probe':<10}{'T bool MAC/s':>14}{'16384^3 at that rate':>24}   ({report['environment']['device']})"]
    for label, rate in report["rates_t_per_s"].items():
        lines.append(f"{label:<10}{rate:14.1f}{n ** 3 / rate / 1e9:21.2f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    from throughput import environment

    return run_and_save(__doc__, argv, "boolean-ceilings",
                        lambda: {"environment": environment(), "benchmark": "boolean_ceilings",
                                 "rates_t_per_s": measure()}, table)


if __name__ == "__main__":
    sys.exit(main())
