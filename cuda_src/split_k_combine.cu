// ⊕ of the K slices of a split product, and its argmax (the earliest slice attaining the result): ${name}
// P holds `count` partial results of `total` elements each, slice s covering k from s * chunk; PI their
// argmax within the slice (-1: the slice's value is the zero), or null.  Partials are never NaN and their
// zeros are +0.0, so ⊕ is exact in any order and equal values are equal bits.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ P, const int* __restrict__ PI, ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 count, i64 total, i64 chunk) {
  typedef ${semiring} SR;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    ${T} best = P[e];
    for (i64 s = 1; s < count; ++s) best = SR::template add<${T}>(best, P[s * total + e]);
    C[e] = best;
    if (IDX != nullptr) {
      i64 s = 0;
      while (s + 1 < count && P[s * total + e] != best) ++s;
      const int k = PI[s * total + e];
      IDX[e] = k < 0 ? -1 : (int)(k + s * chunk);
    }
  }
}
