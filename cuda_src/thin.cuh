// tropical_gemm: the forward kernel for thin products (a short K and a short
// side).  Header map: preamble.cuh.

namespace tg {

// -------------------------------------------------------- forward: thin
//
// For products such as 2^21 × 4 · 4 × 4 (the engine transposes C^T = B^T ⊗
// A^T when M is the short side): the whole of B, at most KMAX × NMAX, sits in
// shared memory, and each thread computes one row of C from its row of A,
// held in registers, both moved in 16-byte accesses where the row is
// contiguous.  Such a product reads A and writes C once and is bound by
// memory; the skinny kernel's staging spent most of its time on index
// arithmetic and barriers for a K of a few steps.  One pass in k order with
// the exact ⊗, as the baseline kernel does, so the bits and the argmax (the
// smallest k wins ties, NaN never wins) are every other kernel's.

template <class SR, class T, bool ARGMAX, int BM, int NMAX, int KMAX>
struct ThinKernel {
  static constexpr int V = 16 / sizeof(T);
  static_assert(NMAX % V == 0 && KMAX % V == 0, "whole 16-byte chunks");

  // A contiguous run of `count` elements at p goes in 16-byte loads or stores: a thread's own row, a
  // few elements, in scalar accesses would fill each 32-byte sector over several instructions.
  __device__ static bool vectors(const T* p, i64 count) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0 && count % V == 0;
  }

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
      const T* a_row = A + a_off + m * a_sm;
      T a[KMAX];
      if (a_sk == 1 && vectors(a_row, K)) {  // the row in 16-byte loads
#pragma unroll
        for (int c = 0; c < KMAX / V; ++c) {
          if (c * V >= K) break;
          const Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(a_row + c * V);
#pragma unroll
          for (int x = 0; x < V; ++x) a[c * V + x] = v.v[x];
        }
      } else {
#pragma unroll
        for (int k = 0; k < KMAX; ++k) a[k] = k < K ? a_row[k * a_sk] : T(0);
      }
      T out[NMAX];
      int idx[NMAX];
#pragma unroll
      for (int n = 0; n < NMAX; ++n) {
        out[n] = SR::template zero<T>();
        idx[n] = -1;
        if (n >= N) continue;
#pragma unroll
        for (int k = 0; k < KMAX; ++k) {
          if (k >= K) break;
          const T cand = SR::template mul_exact<T>(a[k], sb[k][n]);
          if constexpr (ARGMAX) {
            if (SR::template better<T>(cand, out[n])) { out[n] = cand; idx[n] = k; }
          } else {
            out[n] = SR::template add<T>(out[n], cand);
          }
        }
        out[n] = canonical(out[n]);
      }
      const i64 row = batch * M * N + m * c_sm;
      if (c_sn == 1 && vectors(C + row, N)) {  // the row in 16-byte stores
#pragma unroll
        for (int c = 0; c < NMAX / V; ++c) {
          if (c * V >= N) break;
          Vec16<T> v;
#pragma unroll
          for (int x = 0; x < V; ++x) v.v[x] = out[c * V + x];
          *reinterpret_cast<Vec16<T>*>(C + row + c * V) = v;
        }
      } else {
#pragma unroll
        for (int n = 0; n < NMAX; ++n)
          if (n < N) C[row + n * c_sn] = out[n];
      }
      if constexpr (ARGMAX) {
#pragma unroll
        for (int n = 0; n < NMAX; ++n)
          if (n < N) IDX[row + n * c_sn] = idx[n];
      }
    }
  }
};

}  // namespace tg
