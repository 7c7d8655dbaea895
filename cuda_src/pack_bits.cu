// Truth values packed 32 ks to a word, for the boolean semiring's forward kernels: ${name}
// X is one operand (bool or uint8 bytes; nonzero is true) with any strides: LINES lines (A's rows or B's
// columns) of K values, line stride s_line and k stride s_k, over a batch of up to three folded dims
// (sizes batches / (d1 d2), d1, d2; strides x0, x1, x2).  P[batch][line][word] is C-contiguous with
// W = ceil(K / 32) words per line: bit j of word w is k = 32 w + j, and bits past K are 0.  One thread
// per word; LINE_FAST: consecutive threads take consecutive lines (coalesced where the line is X's
// contiguous axis, as for B's columns in row layout), else consecutive words of one line.  VECTOR_K: k is
// X's contiguous axis and every line starts 16-byte aligned, so a whole word's 32 bytes load as two
// 128-bit loads (the last word of a line, if partial, is read a byte at a time: no load passes K).

// One bit per byte of v, bit i set where byte i (the lowest first) is nonzero.
__device__ __forceinline__ unsigned nonzero_bytes(unsigned v) {
  v |= v >> 4;
  v |= v >> 2;
  v |= v >> 1;
  v &= 0x01010101u;
  return (v & 1u) | ((v >> 7) & 2u) | ((v >> 14) & 4u) | ((v >> 21) & 8u);
}

extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const unsigned char* __restrict__ X, unsigned* __restrict__ P, i64 lines, i64 K, i64 W, i64 s_line,
    i64 s_k, i64 batches, i64 d1, i64 d2, i64 x0, i64 x1, i64 x2, i64 line_fast, i64 vector_k) {
  const tg::Batch bt{d1, d2, x0, x1, x2, 0, 0, 0};
  const i64 per_batch = lines * W;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < per_batch * batches;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 batch = e / per_batch, rest = e % per_batch;
    const i64 line = line_fast ? rest % lines : rest / W;
    const i64 w = line_fast ? rest / lines : rest % W;
    i64 x_off, unused;
    bt.offsets(batch, x_off, unused);
    const unsigned char* x = X + x_off + line * s_line;
    unsigned word = 0u;
    if (vector_k && w * 32 + 32 <= K) {
      const uint4* v = reinterpret_cast<const uint4*>(x + w * 32);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 q = v[h];
        word |= (nonzero_bytes(q.x) | nonzero_bytes(q.y) << 4 | nonzero_bytes(q.z) << 8 | nonzero_bytes(q.w) << 12)
                << (16 * h);
      }
    } else {
      for (int j = 0; j < 32; ++j) {
        const i64 k = w * 32 + j;
        if (k < K && x[k * s_k] != 0) word |= 1u << j;
      }
    }
    P[(batch * lines + line) * W + w] = word;
  }
}
