// A chunk's argmax moved from its own k to the product's: k + offset, -1 (the zero) kept: ${name}
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(int* __restrict__ IDX, i64 total, i64 offset) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const int k = IDX[e];
    if (k >= 0) IDX[e] = (int)(k + offset);
  }
}
