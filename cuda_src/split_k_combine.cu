// ⊕ of the K slices of a split product, and its argmax (the earliest slice attaining the result): ${name}
// P holds `count` partial results of `total` elements each, slice s covering k from s * chunk; PI their
// argmax within the slice (-1: the slice's value is the zero), or null.  Partials are never NaN and their
// zeros are +0.0, so ⊕ is exact in any order and equal values are equal bits.
// The combine_resolve op (resolve_depth > 0): the slices' kernels left the first k of a BK-deep slice holding
// the winner (the square argmax's first phase), and the winner is found here from that k, once per output of
// the whole product, whose arguments (A, B, M...) follow; as in argmax_resolve.  The combine op: PI holds
// exact winners, and A, B... are unused (its code has no resolve: it compiles in a third of the time).
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ P, const int* __restrict__ PI, ${T}* __restrict__ C, int* __restrict__ IDX,
    const ${T}* __restrict__ A, const ${T}* __restrict__ B, i64 count, i64 total, i64 chunk,
    i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn,
    i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2, int resolve_depth) {
  typedef ${semiring} SR;
  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    ${T} best = P[e];
    for (i64 s = 1; s < count; ++s) best = SR::template add<${T}>(best, P[s * total + e]);
    C[e] = best;
    if (IDX != nullptr) {
      i64 s = 0;
      while (s + 1 < count && P[s * total + e] != best) ++s;
      const int k = PI[s * total + e];
      int winner = k < 0 ? -1 : (int)(k + s * chunk);
      if (${resolve} && winner >= 0 && resolve_depth > 0) {  // C contiguous: tiles that resolve never transpose
        const i64 per_batch = M * N, batch = e / per_batch, m = (e % per_batch) / N, n = e % N;
        i64 a_off, b_off;
        bt.offsets(batch, a_off, b_off);
        winner = tg::first_attaining<SR, ${T}>(A + a_off + m * a_sm, a_sk, B + b_off + n * b_sn, b_sk, best, winner,
                                              resolve_depth, K);
      }
      IDX[e] = winner;
    }
  }
}
