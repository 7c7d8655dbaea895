// tropical_gemm: the forward kernel for thin products (a short K and a short
// side).  Header map: preamble.cuh.

namespace tg {

// -------------------------------------------------------- forward: thin
//
// For products such as 2^21 × 4 · 4 × 4 (the engine transposes C^T = B^T ⊗
// A^T when M is the short side): the whole of B, at most KMAX × NMAX, sits in
// shared memory, and each thread computes one row of C from its row of A.
// Such a product reads A and writes C once and is bound by memory, so the
// block's rows of A and of C pass through shared memory, where the block
// reads and writes them along whichever axis is contiguous in global memory
// (a thread's own row, 4 to 32 bytes, would leave most of each sector to
// the next instruction).  The skinny kernel's staging spent most of such a
// product on index arithmetic and barriers for a K of a few steps.  One
// pass in k order with the exact ⊗, as the baseline kernel makes it, so the
// bits and the argmax (the smallest k wins ties, NaN never wins) are every
// other kernel's.

template <class SR, class T, bool ARGMAX, int BM, int NMAX, int KMAX>
struct ThinKernel {
  // Row and column of element e of a BM × W block, taken along its columns first where those are
  // the contiguous axis in global memory (cols_fast), else along its rows.
  template <int W>
  __device__ static void place(int e, bool cols_fast, int& r, int& c) {
    if (cols_fast) { r = e / W; c = e % W; } else { r = e % BM; c = e / BM; }
  }

  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk,
                             i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt) {
    __shared__ T sb[KMAX][NMAX];
    __shared__ T sa[BM][KMAX + 1];
    __shared__ T sc[BM][NMAX + 1];
    __shared__ int si[ARGMAX ? BM : 1][NMAX + 1];
    const bool a_k_fast = (a_sk < 0 ? -a_sk : a_sk) <= (a_sm < 0 ? -a_sm : a_sm);
    const bool c_n_fast = (c_sn < 0 ? -c_sn : c_sn) <= (c_sm < 0 ? -c_sm : c_sm);
    const i64 tiles_m = (M + BM - 1) / BM;
    for (i64 tile = blockIdx.x; tile < tiles_m * batches; tile += gridDim.x) {
      const i64 batch = tile / tiles_m;
      const i64 m0 = (tile % tiles_m) * BM;
      i64 a_off, b_off;
      bt.offsets(batch, a_off, b_off);
      __syncthreads();  // the previous tile's reads of shared memory are done
      for (int e = threadIdx.x; e < KMAX * NMAX; e += BM) {
        const int k = e / NMAX, n = e % NMAX;
        sb[k][n] = (k < K && n < N) ? B[b_off + k * b_sk + n * b_sn] : T(0);
      }
#pragma unroll
      for (int e = threadIdx.x; e < BM * KMAX; e += BM) {
        int r, k;
        place<KMAX>(e, a_k_fast, r, k);
        if (m0 + r < M && k < K) sa[r][k] = A[a_off + (m0 + r) * a_sm + k * a_sk];
      }
      __syncthreads();
      const int r = threadIdx.x;
#pragma unroll
      for (int n = 0; n < NMAX; ++n) {
        if (n >= N) break;
        T acc = SR::template zero<T>();
        int idx = -1;
#pragma unroll
        for (int k = 0; k < KMAX; ++k) {
          if (k >= K) break;
          const T cand = SR::template mul_exact<T>(sa[r][k], sb[k][n]);
          if constexpr (ARGMAX) {
            if (SR::template better<T>(cand, acc)) { acc = cand; idx = k; }
          } else {
            acc = SR::template add<T>(acc, cand);
          }
        }
        sc[r][n] = canonical(acc);
        if constexpr (ARGMAX) si[r][n] = idx;
      }
      __syncthreads();
      const i64 c_off = batch * M * N;
#pragma unroll
      for (int e = threadIdx.x; e < BM * NMAX; e += BM) {
        int rr, n;
        place<NMAX>(e, c_n_fast, rr, n);
        if (m0 + rr < M && n < N) {
          const i64 at = c_off + (m0 + rr) * c_sm + n * c_sn;
          C[at] = sc[rr][n];
          if constexpr (ARGMAX) IDX[at] = si[rr][n];
        }
      }
    }
  }
};

}  // namespace tg
