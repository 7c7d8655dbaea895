// Counting tropical product: ${name}
// Each operand is a pair of arrays of one shape, values (T) and counts (i64, >= 0), with strides of their own.
// A block of 16×16 threads computes a 16×16 tile of C, one output per thread, staging 16-deep slices of both
// pairs in shared memory.  Each output keeps the best value, its count and whether that count overflowed:
// a strictly better candidate (SR::better, so NaN never wins) replaces all three, an equal one adds its
// count.  ⊗ is the base semiring's mul_exact on the values and a product of the counts.  Overflow is
// decided in unsigned arithmetic (counts are below 2**63, so a sum of two never wraps u64); it matters
// only if its value is the final one, so the flag travels with the count.  A result at the zero counts 0.
// FLAGS[0] gets ${overflow_bit} for an overflowed result and ${negative_bit} for a negative count read.
// Grid: x over column tiles, y over row tiles, z over batches; each loops over what lies beyond it.
namespace {
__device__ __forceinline__ u64 count_mul(u64 a, u64 b, bool& overflow) {
  const u64 low = a * b;
  overflow |= __umul64hi(a, b) != 0ull || low > 0x7fffffffffffffffull;
  return low;
}
__device__ __forceinline__ u64 count_add(u64 a, u64 b, bool& overflow) {
  const u64 sum = a + b;
  overflow |= sum > 0x7fffffffffffffffull;
  return sum;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256) ${name}(
    const ${T}* __restrict__ VA, const i64* __restrict__ CA, const ${T}* __restrict__ VB,
    const i64* __restrict__ CB, ${T}* __restrict__ VC, i64* __restrict__ CC, int* __restrict__ FLAGS,
    i64 M, i64 N, i64 K, i64 va_sm, i64 va_sk, i64 ca_sm, i64 ca_sk, i64 vb_sk, i64 vb_sn, i64 cb_sk, i64 cb_sn,
    i64 batches, i64 d1, i64 d2, i64 va0, i64 va1, i64 va2, i64 ca0, i64 ca1, i64 ca2,
    i64 vb0, i64 vb1, i64 vb2, i64 cb0, i64 cb1, i64 cb2) {
  typedef ${semiring} SR;
  typedef ${T} T;
  constexpr int TILE = 16;
  __shared__ T a_values[TILE][TILE + 1];
  __shared__ T b_values[TILE][TILE + 1];
  __shared__ i64 a_counts[TILE][TILE + 1];
  __shared__ i64 b_counts[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const tg::Batch values_batch{d1, d2, va0, va1, va2, vb0, vb1, vb2};
  const tg::Batch counts_batch{d1, d2, ca0, ca1, ca2, cb0, cb1, cb2};
  bool negative = false;
  for (i64 batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    i64 va_off, vb_off, ca_off, cb_off;
    values_batch.offsets(batch, va_off, vb_off);
    counts_batch.offsets(batch, ca_off, cb_off);
    for (i64 m0 = (i64)blockIdx.y * TILE; m0 < M; m0 += (i64)gridDim.y * TILE) {
      for (i64 n0 = (i64)blockIdx.x * TILE; n0 < N; n0 += (i64)gridDim.x * TILE) {
        const i64 m = m0 + ty, n = n0 + tx;
        T best = SR::template zero<T>();
        u64 count = 0;
        bool overflow = false;
        for (i64 k0 = 0; k0 < K; k0 += TILE) {
          const i64 ka = k0 + tx, kb = k0 + ty;
          if (m < M && ka < K) {  // thread (ty, tx) stages A[m, k0 + tx]
            a_values[ty][tx] = VA[va_off + m * va_sm + ka * va_sk];
            a_counts[ty][tx] = CA[ca_off + m * ca_sm + ka * ca_sk];
            negative |= a_counts[ty][tx] < 0;
          }
          if (kb < K && n < N) {  // and B[k0 + ty, n]
            b_values[ty][tx] = VB[vb_off + kb * vb_sk + n * vb_sn];
            b_counts[ty][tx] = CB[cb_off + kb * cb_sk + n * cb_sn];
            negative |= b_counts[ty][tx] < 0;
          }
          __syncthreads();
          const int depth = (int)(K - k0 < TILE ? K - k0 : TILE);
          if (m < M && n < N) {
            for (int kk = 0; kk < depth; ++kk) {
              const T cand = SR::template mul_exact<T>(a_values[ty][kk], b_values[kk][tx]);
              const bool wins = SR::template better<T>(cand, best);
              if (!wins && !(cand == best)) continue;
              bool product_overflow = false;
              const u64 ways = count_mul((u64)a_counts[ty][kk], (u64)b_counts[kk][tx], product_overflow);
              if (wins) {
                best = cand;
                count = ways;
                overflow = product_overflow;
              } else {
                count = count_add(count, ways, overflow);
                overflow |= product_overflow;
              }
            }
          }
          __syncthreads();
        }
        if (m < M && n < N) {
          const bool is_zero = best == SR::template zero<T>();
          const i64 at = batch * M * N + m * N + n;
          VC[at] = tg::canonical(best);
          CC[at] = is_zero ? 0 : (i64)count;
          if (overflow && !is_zero) atomicOr(FLAGS, ${overflow_bit});
        }
      }
    }
  }
  if (negative) atomicOr(FLAGS, ${negative_bit});
}
