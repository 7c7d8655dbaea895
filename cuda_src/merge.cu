// ⊕ of two partial products over consecutive K ranges, the earlier range winning ties: ${name}
// C = C1 ⊕ C2; IDX = IDX1 where C1 attains C, else IDX2 (both global k, -1 for the zero), unless IDX is null.
// Partials are never NaN and their zeros are +0.0, so ⊕ is exact and equal values are equal bits.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ C1, const int* __restrict__ IDX1, const ${T}* __restrict__ C2,
    const int* __restrict__ IDX2, ${T}* __restrict__ C, int* __restrict__ IDX, i64 total) {
  typedef ${semiring} SR;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const ${T} first = C1[e];
    const ${T} best = SR::template add<${T}>(first, C2[e]);
    C[e] = best;
    if (IDX != nullptr) IDX[e] = first == best ? IDX1[e] : IDX2[e];
  }
}
