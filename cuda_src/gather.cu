// Copy of a strided array of up to six dims into a C-contiguous one, converting ${S} to ${D}: ${name}
// The backward kernels read grad_c and the int32 argmax row-major; callers may pass any layout and int dtype.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${S}* __restrict__ X, ${D}* __restrict__ Y, i64 total,
    i64 n0, i64 n1, i64 n2, i64 n3, i64 n4, i64 n5, i64 s0, i64 s1, i64 s2, i64 s3, i64 s4, i64 s5) {
  const i64 sizes[6] = {n0, n1, n2, n3, n4, n5};
  const i64 strides[6] = {s0, s1, s2, s3, s4, s5};
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 rest = e, at = 0;
#pragma unroll
    for (int d = 5; d >= 0; --d) {
      at += (rest % sizes[d]) * strides[d];
      rest /= sizes[d];
    }
    Y[e] = (${D})X[at];
  }
}
