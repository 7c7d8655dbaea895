// tropical_gemm: the forward kernel for thin products (a short K and a short
// side).  Header map: preamble.cuh.

namespace tg {

// -------------------------------------------------------- forward: thin
//
// For products such as 2^21 × 4 · 4 × 4 (the engine transposes C^T = B^T ⊗
// A^T when M is the short side): the whole of B, at most KMAX × NMAX, sits in
// shared memory, and each thread computes one row of C from its row of A,
// held in registers.  Such a product reads A and writes C once and is bound
// by memory; the skinny kernel's staging spent most of its time on index
// arithmetic and barriers for a K of a few steps.  One pass in k order with
// the exact ⊗, as the baseline kernel does, so the bits and the argmax (the
// smallest k wins ties, NaN never wins) are every other kernel's.

template <class SR, class T, bool ARGMAX, int BM, int NMAX, int KMAX>
struct ThinKernel {
  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk,
                             i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt) {
    __shared__ T sb[KMAX][NMAX];
    const i64 tiles_m = (M + BM - 1) / BM;
    for (i64 tile = blockIdx.x; tile < tiles_m * batches; tile += gridDim.x) {
      const i64 batch = tile / tiles_m;
      const i64 m = (tile % tiles_m) * BM + threadIdx.x;
      i64 a_off, b_off;
      bt.offsets(batch, a_off, b_off);
      __syncthreads();  // the previous tile's reads of sb are done
      for (int e = threadIdx.x; e < KMAX * NMAX; e += BM) {
        const int k = e / NMAX, n = e % NMAX;
        sb[k][n] = (k < K && n < N) ? B[b_off + k * b_sk + n * b_sn] : T(0);
      }
      __syncthreads();
      if (m >= M) continue;
      T a[KMAX];
#pragma unroll
      for (int k = 0; k < KMAX; ++k) a[k] = k < K ? A[a_off + m * a_sm + k * a_sk] : T(0);
      const i64 row = batch * M * N + m * c_sm;
#pragma unroll
      for (int n = 0; n < NMAX; ++n) {
        if (n >= N) break;
        T acc = SR::template zero<T>();
        int idx = -1;
#pragma unroll
        for (int k = 0; k < KMAX; ++k) {
          if (k >= K) break;
          const T cand = SR::template mul_exact<T>(a[k], sb[k][n]);
          if constexpr (ARGMAX) {
            if (SR::template better<T>(cand, acc)) { acc = cand; idx = k; }
          } else {
            acc = SR::template add<T>(acc, cand);
          }
        }
        C[row + n * c_sn] = canonical(acc);
        if constexpr (ARGMAX) IDX[row + n * c_sn] = idx;
      }
    }
  }
};

}  // namespace tg
