// Copy of a strided array of up to 24 dims into a C-contiguous one, converting ${S} to ${D}: ${name}
// The backward kernels read grad_c and the int32 argmax row-major; callers may pass any layout and int dtype.
// Einsum regroups views with one axis per label: a network's intermediates fold into many dims, so a gather
// indexes 24 and walks only the ``ndim`` innermost (the sizes and strides are padded at the front), in a loop
// rather than unrolled: a copy waits on memory, and 24 unrolled 64-bit divisions would double its compile.
#define TG_GATHER_DIMS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
                          X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define TG_SIZE_PARAM(i) , i64 n##i
#define TG_STRIDE_PARAM(i) , i64 s##i
#define TG_SIZE_ITEM(i) n##i,
#define TG_STRIDE_ITEM(i) s##i,
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${S}* __restrict__ X, ${D}* __restrict__ Y, i64 total, i64 ndim
    TG_GATHER_DIMS(TG_SIZE_PARAM) TG_GATHER_DIMS(TG_STRIDE_PARAM)) {
  const i64 sizes[24] = {TG_GATHER_DIMS(TG_SIZE_ITEM)};
  const i64 strides[24] = {TG_GATHER_DIMS(TG_STRIDE_ITEM)};
  const int first = 24 - (int)ndim;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 rest = e, at = 0;
    for (int d = 23; d >= first; --d) {
      at += (rest % sizes[d]) * strides[d];
      rest /= sizes[d];
    }
    Y[e] = (${D})X[at];
  }
}
