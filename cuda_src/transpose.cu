// B^T of a strided matrix into a C-contiguous one, through 32×32 tiles of shared memory: ${name}
// X is R × S with strides (rs, ss) in elements; Y (S × R, C-contiguous) = X^T.  The argmax resolves
// (argmax_resolve, combine_resolve) read B one output column at a time, along k: k-contiguous, each output's
// slice of B is one run of memory instead of a sector per k.  Tiles read X along whichever of its axes is contiguous and write Y
// along its own, so both sides coalesce (the gather walks Y's order and reads X a sector per element).
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ X, ${T}* __restrict__ Y, i64 R, i64 S, i64 rs, i64 ss) {
  __shared__ ${T} tile[32][33];  // 33: a column of the tile spans every bank
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;  // ${threads} / 32 rows of threads
  const i64 tiles_s = (S + 31) / 32;
  for (i64 t = blockIdx.x; t < ((R + 31) / 32) * tiles_s; t += gridDim.x) {
    const i64 r0 = (t / tiles_s) * 32, s0 = (t % tiles_s) * 32;
    const bool rows_contiguous = ss == 1 || rs != 1;  // X read along s (its rows) unless r is the close axis
    for (int i = ty; i < 32; i += ${threads} / 32) {
      const i64 r = rows_contiguous ? r0 + i : r0 + tx, s = rows_contiguous ? s0 + tx : s0 + i;
      if (r < R && s < S) tile[rows_contiguous ? i : tx][rows_contiguous ? tx : i] = X[r * rs + s * ss];
    }
    __syncthreads();
    for (int i = ty; i < 32; i += ${threads} / 32) {  // Y's row s0 + i, along r
      const i64 s = s0 + i, r = r0 + tx;
      if (r < R && s < S) Y[s * R + r] = tile[tx][i];
    }
    __syncthreads();
  }
}
