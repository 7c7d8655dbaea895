// A product with nothing to reduce (K = 0): every value the semiring's zero, every argmax -1: ${name}
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(${T}* __restrict__ C, int* __restrict__ IDX, i64 total) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    C[e] = ${semiring}::template zero<${T}>();
    if (IDX != nullptr) IDX[e] = -1;
  }
}
