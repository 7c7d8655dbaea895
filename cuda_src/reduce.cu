// ⊕-reduction of each row of a strided (R, K) view, with the winning k: ${name}
// One warp per row: each lane scans k = lane, lane + 32, ... keeping the
// first strictly better candidate, then the lanes merge pairwise, equal
// values going to the smaller k.  So the argmax is the smallest k attaining
// the result, NaN never wins, and a row that stays at the semiring's zero
// reports -1: the rules of the products' argmax.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ X, ${T}* __restrict__ OUT, int* __restrict__ IDX, i64 R, i64 K, i64 x_sr, i64 x_sk) {
  const int lane = threadIdx.x & 31;
  const i64 row = (i64)blockIdx.x * (${threads} / 32) + (threadIdx.x >> 5);
  if (row >= R) return;
  const ${T}* x = X + row * x_sr;
  ${T} best = ${semiring}::zero<${T}>();
  i64 best_k = -1;
  for (i64 k = lane; k < K; k += 32) {
    const ${T} c = x[k * x_sk];
    if (${semiring}::better(c, best)) { best = c; best_k = k; }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const ${T} other = __shfl_down_sync(0xffffffffu, best, offset);
    const i64 other_k = __shfl_down_sync(0xffffffffu, best_k, offset);
    const bool takes = other_k >= 0 && (best_k < 0 || ${semiring}::better(other, best) ||
                                        (other == best && other_k < best_k));
    if (takes) { best = other; best_k = other_k; }
  }
  if (lane == 0) {
    OUT[row] = tg::canonical(best);
    IDX[row] = (int)best_k;
  }
}
