// tropical_gemm: the register-tiled forward kernel (square and small families)
// and the second phase of its argmax.  Header map: preamble.cuh.

namespace tg {

// A store that happens only where OK: one predicated instruction, no branch
// (CUTLASS's global_store is written the same way).  For the integer
// kernels' epilogue: see LEAN_EDGES.
__device__ __forceinline__ void store_if(int* p, int v, bool ok) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q st.global.b32 [%0], %1;\n}"
               :: "l"(p), "r"(v), "r"((int)ok) : "memory");
}
__device__ __forceinline__ void store_if(long long* p, long long v, bool ok) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q st.global.b64 [%0], %1;\n}"
               :: "l"(p), "l"(v), "r"((int)ok) : "memory");
}

// -------------------------------------------------------- forward: square tile
//
// One block computes a BM×BN tile of C over the whole of K; each thread owns
// TM×TN outputs held in registers, split into 16-byte chunks spread across the
// tile so that shared-memory reads are conflict-free 128-bit loads.  Tiles of
// A and B are staged through double-buffered shared memory, one barrier per
// BK step; the next tile's global loads are issued before the current tile is
// consumed.

// EACH_K: the argmax of a K up to this deep compares every candidate (consume_each_k; jit/source.py:
// each_k_depth), deeper ones record slices.
template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BM, int BN, int BK, int TM, int TN, int UNROLL,
          int EACH_K>
struct SquareKernel {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static constexpr int CM = TM / V;  // 16-byte chunks per thread along M
  static constexpr int CN = TN / V;
  using LoadA = TileLoader<SR, T, A_ROW, BM, BK, THREADS, BM + V>;
  using LoadB = TileLoader<SR, T, !B_ROW, BN, BK, THREADS, BN + V>;
  static constexpr bool EXACT = NeedsExactPath<SR, T>::value;
  // The integer kernels (those with the exact path) hold the most code
  // outside the k loop and had the longest compiles (issue 15's budget), so
  // theirs is kept lean: the epilogue's TM×TN bounds-checked stores go
  // through store_if (as branches they were a block each for NVVM and
  // ptxas: a fifth of the code, over a tenth of the compile), and the first
  // slice always takes the checked load (one copy of it there, not two).
  // The other kernels keep both as they were: they are within the budget,
  // and there the change moved ptxas's allocation at the 128-register cap
  // into spills.
  static constexpr bool LEAN_EDGES = EXACT && !ARGMAX;
  // What the thread mapping assumes of a tile shape: whole 16-byte chunks
  // per thread, staging loads that divide evenly over the block in either
  // operand layout, and at most 32 staged elements per thread (a bit mask).
  static_assert(TM % V == 0 && TN % V == 0, "TM and TN must be multiples of 16 bytes / sizeof(T)");
  static_assert(THREADS % BK == 0 && THREADS % BM == 0 && THREADS % BN == 0,
                "the block's threads must divide over BK and over BM and BN");
  static_assert(LoadA::PER <= 32 && LoadB::PER <= 32, "at most 32 staged elements per thread");

  struct Smem {
    T a[2][BK][BM + V];
    T b[2][BK][BN + V];
  };

  // Row (col) within the block tile of this thread's i-th (j-th) output.
  __device__ static int row_of(int i, int ty) { return (i / V) * (BM / CM) + ty * V + (i % V); }
  __device__ static int col_of(int j, int tx) { return (j / V) * (BN / CN) + tx * V + (j % V); }

  // This thread's A and B values of k step kk: 128-bit shared-memory loads.
  __device__ static void fragments(const Smem& s, int buf, int kk, int ty, int tx, T (&a)[TM], T (&b)[TN]) {
#pragma unroll
    for (int c = 0; c < CM; ++c) {
      Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(&s.a[buf][kk][c * (BM / CM) + ty * V]);
#pragma unroll
      for (int x = 0; x < V; ++x) a[c * V + x] = v.v[x];
    }
#pragma unroll
    for (int c = 0; c < CN; ++c) {
      Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(&s.b[buf][kk][c * (BN / CN) + tx * V]);
#pragma unroll
      for (int x = 0; x < V; ++x) b[c * V + x] = v.v[x];
    }
  }

  // One k step on every owned output (the fast ⊗).
  __device__ static void step(const Smem& s, int buf, int kk, int ty, int tx, T (&acc)[TM][TN]) {
    T a[TM], b[TN];
    fragments(s, buf, kk, ty, tx, a, b);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = SR::template mac<T>(acc[i][j], a[i], b[j]);
    }
  }

  // The first k step of a slice alone: its ⊗, with no ⊕ (the argmax's slice value starts there).
  __device__ static void first_step(const Smem& s, int buf, int ty, int tx, T (&part)[TM][TN]) {
    T a[TM], b[TN];
    fragments(s, buf, 0, ty, tx, a, b);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) part[i][j] = SR::template mul_fast<T>(a[i], b[j]);
    }
  }

  // The exact path (exact integer ⊗) runs only on slices holding extreme integers (tiles.cuh:
  // exact_candidates).  Each output still sees the same ⊕ of the same ⊗ in the same k order as on the
  // fast path.
  __device__ static void consume_exact(const Smem& s, int buf, int steps, int ty, int tx, T (&acc)[TM][TN]) {
    exact_candidates<SR>(acc, steps, [&](int kk, int i) { return s.a[buf][kk][row_of(i, ty)]; },
                         [&](int kk, int j) { return s.b[buf][kk][col_of(j, tx)]; },
                         [](T& value, int, int, int, T c) { value = SR::template add<T>(value, c); });
  }

  // A staged slice: UNROLL k steps of straight-line code at a time (the
  // tile table's choice: see TileShape.unroll in jit/source.py).  WIDE takes
  // the exact path.
  template <bool WIDE>
  __device__ static void consume_values(const Smem& s, int buf, int steps, int ty, int tx, T (&acc)[TM][TN]) {
    if constexpr (WIDE) {
      consume_exact(s, buf, steps, ty, tx, acc);
    } else if (steps == BK) {
#pragma unroll UNROLL
      for (int kk = 0; kk < BK; ++kk) step(s, buf, kk, ty, tx, acc);
    } else {
      for (int kk = 0; kk < steps; ++kk) step(s, buf, kk, ty, tx, acc);
    }
  }

  // A slice's own ⊕ of its ⊗ (the argmax's slice value), from its first ⊗ where tiles.cuh's
  // slice_from_first allows.
  __device__ static void slice_values(const Smem& s, int buf, int steps, int ty, int tx, T (&part)[TM][TN]) {
    constexpr bool FROM_FIRST = slice_from_first<T>;
    constexpr int from = FROM_FIRST ? 1 : 0;
    if constexpr (FROM_FIRST) {
      first_step(s, buf, ty, tx, part);
    } else {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) part[i][j] = SR::template zero<T>();
    }
    if (steps == BK) {
#pragma unroll
      for (int kk = from; kk < BK; ++kk) step(s, buf, kk, ty, tx, part);
    } else {
      for (int kk = from; kk < steps; ++kk) step(s, buf, kk, ty, tx, part);
    }
  }

  // The argmax variant reduces each BK-deep slice exactly as the plain
  // product does and records, per output, the first k of the last slice
  // that strictly improved its value: a compare and a select per output
  // per slice, instead of a compare and two selects per candidate.  That
  // slice holds the first k attaining the final value (ties keep the
  // earlier k), and argmax_resolve (or the split-K combine) finds the
  // winner from there afterwards.  A product no deeper than EACH_K
  // compares every candidate instead (consume_each_k): its argmax is exact
  // where the kernel ends, and no resolve follows.
  //
  // Kernels without the exact path (floats; integers under min and max)
  // reduce the slice on its own (slice_values) and fold it in: ⊕ is exact
  // and associative, so the value is the plain product's, bit for bit (as
  // with K slices), and the loop keeps no copy of the running value, whose
  // register moves cost more than the compare.  The integer kernels with
  // the exact path compare against such a copy: there the slice's own
  // values pushed the tile's registers into spills in the k loop.
  template <bool WIDE>
  __device__ static void consume(const Smem& s, int buf, int steps, int ty, int tx, int slice_k,
                                 T (&acc)[TM][TN], int (&idx)[TM][TN]) {
    if constexpr (ARGMAX && !EXACT) {
      T part[TM][TN];
      slice_values(s, buf, steps, ty, tx, part);
      fold_slice<SR>(acc, part, idx, slice_k);
    } else if constexpr (ARGMAX) {
      T before[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) before[i][j] = acc[i][j];
      consume_values<WIDE>(s, buf, steps, ty, tx, acc);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          if (SR::template better<T>(acc[i][j], before[i][j])) idx[i][j] = slice_k;
    } else {
      consume_values<WIDE>(s, buf, steps, ty, tx, acc);
    }
  }

  // Every k of a slice (from slice_k) of a product no deeper than EACH_K, each candidate compared: the
  // winner's k itself.  Its ⊗ is always the exact one (one copy of the loop, not two): such products are
  // short, and the float kernels' exact ⊗ is their fast one.
  __device__ static void consume_each_k(const Smem& s, int buf, int steps, int ty, int tx, int slice_k,
                                        T (&acc)[TM][TN], int (&idx)[TM][TN]) {
#pragma unroll 1
    for (int kk = 0; kk < steps; ++kk) {
      T a[TM], b[TN];
      fragments(s, buf, kk, ty, tx, a, b);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const T c = SR::template mul_exact<T>(a[i], b[j]);
          if (SR::template better<T>(c, acc[i][j])) {
            acc[i][j] = c;
            idx[i][j] = slice_k + kk;
          }
        }
    }
  }

  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk,
                             i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt) {
    __shared__ __align__(16) Smem s;
    const int tx = threadIdx.x % (BN / TN);
    const int ty = threadIdx.x / (BN / TN);
    const i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const i64 tiles = tiles_m * tiles_n * batches;
    const i64 k_tiles = (K + BK - 1) / BK;

    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const i64 batch = tile / (tiles_m * tiles_n);
      const i64 in_batch = tile % (tiles_m * tiles_n);
      const i64 m0 = (in_batch / tiles_n) * BM, n0 = (in_batch % tiles_n) * BN;
      const KeptCorner<EXACT && corner_in_memory<TM, TN>> kept{batch, m0, n0};
      i64 a_off, b_off;
      bt.offsets(batch, a_off, b_off);
      const T* Ab = A + a_off;
      const T* Bb = B + b_off;

      T acc[TM][TN];
      int idx[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) { acc[i][j] = SR::template zero<T>(); idx[i][j] = -1; }

      LoadA la;
      LoadB lb;
      la.init(Ab, m0, M, a_sm, a_sk);
      lb.init(Bb, n0, N, b_sn, b_sk);
      T ra[LoadA::PER], rb[LoadB::PER];
      bool tame = true;
      bool wild = false;
      if (k_tiles > 0) {
        if (!LEAN_EDGES && k_tiles > 1) { la.template load<false>(ra, tame, K); lb.template load<false>(rb, tame, K); }
        else { la.template load<true>(ra, tame, K); lb.template load<true>(rb, tame, K); }
        la.store(s.a[0], ra);
        lb.store(s.b[0], rb);
        if constexpr (EXACT) wild = __syncthreads_or(!tame); else __syncthreads();
      }
      for (i64 kt = 0; kt < k_tiles; ++kt) {
        const int buf = (int)(kt & 1);
        const bool more = kt + 1 < k_tiles;
        bool next_tame = true;
        if (more) {
          const i64 k_left = K - (kt + 1) * BK;
          if (k_left >= BK) { la.template load<false>(ra, next_tame, k_left); lb.template load<false>(rb, next_tame, k_left); }
          else { la.template load<true>(ra, next_tame, k_left); lb.template load<true>(rb, next_tame, k_left); }
        }
        const int steps = more ? BK : (int)(K - kt * BK);
        if (ARGMAX && K <= EACH_K) {
          consume_each_k(s, buf, steps, ty, tx, (int)(kt * BK), acc, idx);
        } else if constexpr (EXACT) {
          if (wild) consume<true>(s, buf, steps, ty, tx, (int)(kt * BK), acc, idx);
          else consume<false>(s, buf, steps, ty, tx, (int)(kt * BK), acc, idx);
        } else {
          consume<false>(s, buf, steps, ty, tx, (int)(kt * BK), acc, idx);
        }
        if (more) {
          la.store(s.a[buf ^ 1], ra);
          lb.store(s.b[buf ^ 1], rb);
          if constexpr (EXACT) wild = __syncthreads_or(!next_tame); else __syncthreads();
        }
      }
      // Every thread must be done with the last buffer before the next tile
      // (grid-stride loop) overwrites it.
      __syncthreads();

      T* Cb = C + kept.batch * M * N;
      int* Ib = ARGMAX ? IDX + kept.batch * M * N : nullptr;
      const i64 m_first = kept.m0, n_first = kept.n0;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const i64 m = m_first + row_of(i, ty);
        if (!LEAN_EDGES && m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const i64 n = n_first + col_of(j, tx);
          if constexpr (LEAN_EDGES) {
            store_if(&Cb[m * c_sm + n * c_sn], canonical(acc[i][j]), m < M && n < N);
          } else {
            if (n >= N) continue;
            Cb[m * c_sm + n * c_sn] = canonical(acc[i][j]);
            if constexpr (ARGMAX) Ib[m * c_sm + n * c_sn] = idx[i][j];
          }
        }
      }
    }
  }
};

// The first k of the R × 16 bytes of ks from k whose candidate equals target (-1: none; k moves past them).
template <class SR, class T, int R>
__device__ __forceinline__ int first_in_run(const T* __restrict__ a_row, const T* __restrict__ b_col, T target,
                                            i64& k) {
  constexpr int V = 16 / sizeof(T);
  Vec16<T> a[R], b[R];
#pragma unroll
  for (int q = 0; q < R; ++q) {
    a[q] = *reinterpret_cast<const Vec16<T>*>(a_row + k + q * V);
    b[q] = *reinterpret_cast<const Vec16<T>*>(b_col + k + q * V);
  }
  int hit = -1;
#pragma unroll
  for (int x = R * V - 1; x >= 0; --x)
    if (SR::template mul_exact<T>(a[x / V].v[x % V], b[x / V].v[x % V]) == target) hit = x;
  const i64 first = k;
  k += R * V;
  return hit < 0 ? -1 : (int)(first + hit);
}

// Second phase of the square argmax: IDX holds, per output, the first k of
// the BK-deep slice in which its value last strictly improved (or -1: never,
// the value is the zero).  No k before that slice attains C, so the first k
// from there whose candidate equals C is the winner.  The split-K combine
// resolves the same way, from the slice's start in the whole K.  Every ⊗ is
// recomputed with the exact rule, which equals the fast rule wherever the
// first phase used it.

// One k at a time, stopping at the winner (from start to end).
template <class SR, class T>
__device__ __forceinline__ int first_attaining_each(const T* __restrict__ a_row, i64 a_sk,
                                                    const T* __restrict__ b_col, i64 b_sk, T target, i64 start,
                                                    i64 end) {
  for (i64 k = start; k < end; ++k)
    if (SR::template mul_exact<T>(a_row[k * a_sk], b_col[k * b_sk]) == target) return (int)k;
  return (int)start;  // not reached: the slice holds the winner
}

template <class SR, class T>
__device__ __forceinline__ int first_attaining(const T* __restrict__ a_row, i64 a_sk, const T* __restrict__ b_col,
                                               i64 b_sk, T target, i64 start, i64 depth, i64 K) {
  const i64 end = start + depth < K ? start + depth : K;
  // Both runs contiguous and 16-byte aligned (A row-major; B column-major, or the transposed copy the plan
  // makes of a row-major B): 4 (then 1) 16-byte loads of each, all in flight before the first compare.
  constexpr i64 V = 16 / sizeof(T);
  const u64 misaligned = (u64)(a_row + start) % 16 | (u64)(b_col + start) % 16;
  if (a_sk == 1 && b_sk == 1 && misaligned == 0) {
    int hit = -1;
    while (hit < 0 && start + 4 * V <= end) hit = first_in_run<SR, T, 4>(a_row, b_col, target, start);
    while (hit < 0 && start + V <= end) hit = first_in_run<SR, T, 1>(a_row, b_col, target, start);
    if (hit >= 0) return hit;
  }
  // Else one k at a time: each k of a strided B is a sector of its own, and loading the whole slice ahead
  // of the compares measured slower (more sectors) than waiting on each.
  return first_attaining_each<SR, T>(a_row, a_sk, b_col, b_sk, target, start, end);
}

template <class SR, class T>
__device__ void argmax_resolve(const T* __restrict__ A, const T* __restrict__ B, const T* __restrict__ C,
                               int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk,
                               i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt, int slice_depth) {
  const i64 per_batch = M * N;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < per_batch * batches;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 batch = e / per_batch, m = (e % per_batch) / N, n = e % N;
    const i64 at = batch * per_batch + m * c_sm + n * c_sn;
    const int start = IDX[at];
    if (start < 0) continue;
    i64 a_off, b_off;
    bt.offsets(batch, a_off, b_off);
    IDX[at] = first_attaining<SR, T>(A + a_off + m * a_sm, a_sk, B + b_off + n * b_sn, b_sk, C[at], start,
                                     slice_depth, K);
  }
}

}  // namespace tg
