// tropical_gemm: the forward kernel for skinny products (M or N below a tile, or
// small K).  Header map: preamble.cuh.

namespace tg {

// -------------------------------------------------------- forward: skinny
//
// For products with few rows (the engine transposes C^T = B^T ⊗ A^T when N is
// the small side, which is exact because every ⊗ here commutes).  Each thread
// owns one column of C and TM rows; the TM×BK slice of A is staged in shared
// memory and read as broadcasts; B streams once from memory, coalesced when
// its rows are contiguous.  No lane idles on a tile edge beyond the last
// column block.  The vector tile (TM = 1) serves products with one row,
// matrix-vector steps such as an HMM's: TM = 8 would spend seven eighths of
// its ⊗ on rows that do not exist, which an argmax pays four times over.

template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BN, int BK, int TM>
struct SkinnyKernel {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int THREADS = BN;
  static constexpr bool EXACT = NeedsExactPath<SR, T>::value;
  // Shared scratch, reused: the staged B slice (when B's columns run along k,
  // so that its loads are coalesced across the block), then the staged C tile
  // (when C's rows are its contiguous axis, i.e. the transposed problem).
  static constexpr int SB_BYTES = B_ROW ? 0 : BK * (BN + 1) * (int)sizeof(T);
  static constexpr int SC_BYTES = BN * (TM + 1) * ((int)sizeof(T) + (ARGMAX ? 4 : 0));
  static constexpr int RAW_BYTES = SB_BYTES > SC_BYTES ? SB_BYTES : SC_BYTES;

  // One k step on this thread's TM outputs, with the fast or the exact (WIDE) ⊗.
  template <bool WIDE>
  __device__ static void step(const T (&sa)[BK][TM], T b, int kk, i64 k, T (&acc)[TM], int (&idx)[TM]) {
    T a[TM];
    if constexpr (TM % V == 0) {
#pragma unroll
      for (int c = 0; c < TM / V; ++c) {
        Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(&sa[kk][c * V]);
#pragma unroll
        for (int x = 0; x < V; ++x) a[c * V + x] = v.v[x];
      }
    } else {  // the vector tile (TM = 1): a broadcast of one value
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = sa[kk][i];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      if constexpr (ARGMAX) {
        T cand = WIDE ? SR::template mul_exact<T>(a[i], b) : SR::template mul_fast<T>(a[i], b);
        if (SR::template better<T>(cand, acc[i])) { acc[i] = cand; idx[i] = (int)k; }
      } else if constexpr (WIDE) {
        acc[i] = SR::template add<T>(acc[i], SR::template mul_exact<T>(a[i], b));
      } else {
        acc[i] = SR::template mac<T>(acc[i], a[i], b);
      }
    }
  }

  // The exact path runs only on slices holding extreme integers: its k loop
  // stays rolled (unrolled, it multiplied the compile time), so it reads
  // this thread's B values again from memory (bcol: its column at k0)
  // rather than from the register array, which a run-time index would move
  // to local memory.
  template <bool WIDE>
  __device__ static void consume(const T (&sa)[BK][TM], const T (&bv)[BK], const T (*sb)[BN + 1], int steps,
                                 i64 k0, T (&acc)[TM], int (&idx)[TM], const T* bcol, i64 b_sk, bool n_ok) {
    if constexpr (WIDE) {
#pragma unroll 1
      for (int kk = 0; kk < steps; ++kk) {
        T b;
        if constexpr (B_ROW) b = n_ok ? bcol[kk * b_sk] : T(0); else b = sb[kk][threadIdx.x];
        step<true>(sa, b, kk, k0 + kk, acc, idx);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        if (kk >= steps) break;
        step<false>(sa, B_ROW ? bv[kk] : sb[kk][threadIdx.x], kk, k0 + kk, acc, idx);
      }
    }
  }

  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk,
                             i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt) {
    __shared__ __align__(16) T sa[BK][TM];
    __shared__ __align__(16) unsigned char raw[RAW_BYTES];
    T (*sb)[BN + 1] = reinterpret_cast<T (*)[BN + 1]>(raw);
    const i64 tiles_m = (M + TM - 1) / TM, tiles_n = (N + BN - 1) / BN;
    const i64 tiles = tiles_m * tiles_n * batches;
    const bool stage_c = c_sm == 1;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const i64 batch = tile / (tiles_m * tiles_n);
      const i64 in_batch = tile % (tiles_m * tiles_n);
      const i64 m0 = (in_batch / tiles_n) * TM;
      const i64 n0 = (in_batch % tiles_n) * BN;
      const i64 n = n0 + threadIdx.x;
      i64 a_off, b_off;
      bt.offsets(batch, a_off, b_off);
      const T* Ab = A + a_off;
      const T* Bb = B + b_off;

      T acc[TM];
      int idx[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) { acc[i] = SR::template zero<T>(); idx[i] = -1; }

      for (i64 k0 = 0; k0 < K; k0 += BK) {
        const int steps = (int)((K - k0) < BK ? (K - k0) : BK);
        bool tame = true;
        // This loop and the C tile's write-back below run a few times per
        // thread and tile (this one once for the 4-byte tile, that one at most
        // TM times), so they stay rolled: NVVM unrolls a loop with a run-time
        // trip count by itself, and those copies were about a sixth of the
        // compile (issue 15's budget).
#pragma unroll 1
        for (int e = threadIdx.x; e < BK * TM; e += THREADS) {
          const int mm = A_ROW ? e / BK : e % TM;
          const int kk = A_ROW ? e % BK : e / TM;
          const i64 m = m0 + mm, k = k0 + kk;
          T x = (m < M && k < K) ? Ab[m * a_sm + k * a_sk] : T(0);
          if constexpr (EXACT) tame &= SR::tame(x);
          sa[kk][mm] = x;
        }
        T bv[BK];
        if constexpr (B_ROW) {
#pragma unroll
          for (int kk = 0; kk < BK; ++kk) {
            T x = (n < N && kk < steps) ? Bb[(k0 + kk) * b_sk + n * b_sn] : T(0);
            if constexpr (EXACT) tame &= SR::tame(x);
            bv[kk] = x;
          }
        } else {
          if (steps == BK) {  // the common case: index arithmetic by a constant power of two
            // A constant trip count (the block has THREADS threads): unrolled
            // by 4 with no remainder loop, for fewer registers and less compile.
#pragma unroll 4
            for (int r = 0; r < BK * BN / THREADS; ++r) {
              const int e = threadIdx.x + r * THREADS;
              const int kk = e % BK, col = e / BK;
              T x = (n0 + col < N) ? Bb[(k0 + kk) * b_sk + (n0 + col) * b_sn] : T(0);
              if constexpr (EXACT) tame &= SR::tame(x);
              sb[kk][col] = x;
            }
          } else {
            for (int e = threadIdx.x; e < steps * BN; e += THREADS) {
              const int kk = e % steps, col = e / steps;
              T x = (n0 + col < N) ? Bb[(k0 + kk) * b_sk + (n0 + col) * b_sn] : T(0);
              if constexpr (EXACT) tame &= SR::tame(x);
              sb[kk][col] = x;
            }
          }
        }
        bool wild = false;
        if constexpr (EXACT) wild = __syncthreads_or(!tame); else __syncthreads();
        if constexpr (EXACT) {
          const T* bcol = Bb + k0 * b_sk + (n < N ? n : 0) * b_sn;
          if (wild) consume<true>(sa, bv, sb, steps, k0, acc, idx, bcol, b_sk, n < N);
          else consume<false>(sa, bv, sb, steps, k0, acc, idx, bcol, b_sk, n < N);
        } else {
          consume<false>(sa, bv, sb, steps, k0, acc, idx, nullptr, 0, false);
        }
        __syncthreads();
      }
      const i64 c_off = batch * M * N;
      if (stage_c) {
        // C's rows are contiguous: write this tile's columns of TM values as
        // runs, through shared memory, instead of TM strided stores per lane.
        T* sc = reinterpret_cast<T*>(raw);
        int* si = reinterpret_cast<int*>(raw + BN * (TM + 1) * sizeof(T));
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          sc[threadIdx.x * (TM + 1) + i] = canonical(acc[i]);
          if constexpr (ARGMAX) si[threadIdx.x * (TM + 1) + i] = idx[i];
        }
        __syncthreads();
        const int rows = (int)((M - m0) < TM ? (M - m0) : TM);
        const int cols = (int)((N - n0) < BN ? (N - n0) : BN);
#pragma unroll 1
        for (int e = threadIdx.x; e < rows * cols; e += THREADS) {
          const int col = e / rows, mm = e % rows;
          const i64 at = c_off + (m0 + mm) * c_sm + (n0 + col) * c_sn;
          C[at] = sc[col * (TM + 1) + mm];
          if constexpr (ARGMAX) IDX[at] = si[col * (TM + 1) + mm];
        }
        __syncthreads();
      } else if (n < N) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const i64 m = m0 + i;
          if (m < M) {
            C[c_off + m * c_sm + n * c_sn] = canonical(acc[i]);
            if constexpr (ARGMAX) IDX[c_off + m * c_sm + n * c_sn] = idx[i];
          }
        }
      }
    }
  }
};

}  // namespace tg
