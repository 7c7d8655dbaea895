// Forward product, baseline family: one thread per output, k ascending: ${name}
// It compiles in a fraction of the tuned kernels' time, so a first call is served by it while the tuned
// kernel compiles in the background (jit/tiering.py).  Same rules and bits as the tuned kernels: ⊗ by the
// exact rule (the fast rule equals it wherever the tuned kernels use that), NaN never wins, the smallest k
// wins ties, a zero result is stored as +0.0.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ A, const ${T}* __restrict__ B, ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn,
    i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2) {
  typedef ${semiring} SR;
  typedef ${T} T;
  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  const i64 per_batch = M * N;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < per_batch * batches;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 batch = e / per_batch, m = (e % per_batch) / N, n = e % N;
    i64 a_off, b_off;
    bt.offsets(batch, a_off, b_off);
    const T* a = A + a_off + m * a_sm;
    const T* b = B + b_off + n * b_sn;
    T acc = SR::template zero<T>();
    int idx = -1;
    for (i64 k = 0; k < K; ++k) {
      const T cand = SR::template mul_exact<T>(a[k * a_sk], b[k * b_sk]);
      if constexpr (${argmax}) {
        if (SR::template better<T>(cand, acc)) { acc = cand; idx = (int)k; }
      } else {
        acc = SR::template add<T>(acc, cand);
      }
    }
    const i64 at = batch * per_batch + m * c_sm + n * c_sn;
    C[at] = tg::canonical(acc);
    if constexpr (${argmax}) IDX[at] = idx;
  }
}
