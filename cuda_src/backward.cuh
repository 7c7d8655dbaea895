// tropical_gemm: the gradient scatters (atomic and ordered).  Header map: preamble.cuh.

namespace tg {

// ------------------------------------------------------------------ backward
//
// The gradient of C[i,j] flows to its argmax k.  The atomic kernel gives one
// thread per output element, which adds into both gradients with atomics
// (one launch, G and IDX read once; fast, order varies).  The ordered
// kernels give one thread per row of grad_a (column of grad_b) and add in
// the CPU engine's order: batch ascending, then j (resp. i) ascending, so
// their bits match the CPU engine.

struct Backward {
  i64 M, N, K;
  i64 a_sm, a_sk, b_sk, b_sn;
  i64 batches;
  Batch bt;            // operand offsets of each broadcast batch entry
  i64 ga0, ga1, ga2;   // grad_a / grad_b batch strides (operand shapes, contiguous)
  i64 gb0, gb1, gb2;

  __device__ void grad_offsets(i64 batch, i64& ga_off, i64& gb_off) const {
    i64 i2 = batch % bt.d2;
    i64 rest = batch / bt.d2;
    i64 i1 = rest % bt.d1;
    i64 i0 = rest / bt.d1;
    ga_off = i0 * ga0 + i1 * ga1 + i2 * ga2;
    gb_off = i0 * gb0 + i1 * gb1 + i2 * gb2;
  }
};

// ⊗ of each semiring as the gradient sees it (MulKind<SR>::value, generated with
// the functors: jit/functors.py): 0 = +, 1 = ×, 2 = min or max.
// The contribution of one winning candidate to A (TO_A) or B; false = none.
template <class SR, class T, bool TO_A>
__device__ __forceinline__ bool contribution(T g, T a, T b, T& out) {
  if constexpr (MulKind<SR>::value == 0) { out = g; return true; }
  else if constexpr (MulKind<SR>::value == 1) { out = TO_A ? g * b : g * a; return true; }
  else {
    const bool a_won = SR::template winner_is_a<T>(a, b);
    out = g;
    return TO_A ? a_won : !a_won;
  }
}

template <class SR, class T>
__device__ void backward_atomic(const T* __restrict__ G, const T* __restrict__ A, const T* __restrict__ B,
                                const int* __restrict__ IDX, T* __restrict__ GRAD_A, T* __restrict__ GRAD_B,
                                const Backward& p) {
  const i64 per_batch = p.M * p.N;
  const i64 total = per_batch * p.batches;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const int k = IDX[e];
    // -1 means no winner; indices past K are skipped because the API cannot
    // range-check device arrays without stalling the stream.
    if (k < 0 || k >= p.K) continue;
    const i64 batch = e / per_batch, i = (e % per_batch) / p.N, j = e % p.N;
    i64 a_off, b_off, ga_off, gb_off;
    p.bt.offsets(batch, a_off, b_off);
    p.grad_offsets(batch, ga_off, gb_off);
    const T g = G[e];
    const T a = A[a_off + i * p.a_sm + k * p.a_sk];
    const T b = B[b_off + k * p.b_sk + j * p.b_sn];
    T c;
    if (contribution<SR, T, true>(g, a, b, c)) atomicAdd(&GRAD_A[ga_off + i * p.K + k], c);
    if (contribution<SR, T, false>(g, a, b, c)) atomicAdd(&GRAD_B[gb_off + k * p.N + j], c);
  }
}

// One thread per (operand batch, row i of grad_a) or (operand batch, column j of grad_b).
template <class SR, class T, bool TO_A>
__device__ void backward_ordered(const T* __restrict__ G, const T* __restrict__ A, const T* __restrict__ B,
                                 const int* __restrict__ IDX, T* __restrict__ GRAD, const Backward& p,
                                 i64 operand_batches) {
  const i64 lines = TO_A ? p.M : p.N;
  const i64 owners = operand_batches * lines;
  const i64 per_batch = p.M * p.N;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < owners; t += (i64)gridDim.x * blockDim.x) {
    const i64 own_batch = t / lines, line = t % lines;
    const i64 own_off = own_batch * (TO_A ? p.M * p.K : p.K * p.N);
    for (i64 batch = 0; batch < p.batches; ++batch) {
      i64 a_off, b_off, ga_off, gb_off;
      p.grad_offsets(batch, ga_off, gb_off);
      if ((TO_A ? ga_off : gb_off) != own_off) continue;
      p.bt.offsets(batch, a_off, b_off);
      const i64 others = TO_A ? p.N : p.M;
      for (i64 o = 0; o < others; ++o) {
        const i64 i = TO_A ? line : o, j = TO_A ? o : line;
        const i64 e = batch * per_batch + i * p.N + j;
        const int k = IDX[e];
        if (k < 0 || k >= p.K) continue;
        const T a = A[a_off + i * p.a_sm + k * p.a_sk];
        const T b = B[b_off + k * p.b_sk + j * p.b_sn];
        T c;
        if (!contribution<SR, T, TO_A>(G[e], a, b, c)) continue;
        if (TO_A) GRAD[own_off + i * p.K + k] += c;
        else GRAD[own_off + k * p.N + j] += c;
      }
    }
  }
}

}  // namespace tg
