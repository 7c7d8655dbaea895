// tropical_gemm: the square family's pipelined forward kernel: slices copied
// global -> shared by cp.async (staged.cuh) into a multi-stage pipeline in
// dynamic shared memory.  The stream family's kernel (streamed.cuh) is this
// one with stream-K.
// Header map: preamble.cuh.

namespace tg {

// -------------------------------------------------------- forward: pipelined
//
// The square family's product and its argmax, wherever source.pipelined
// says so.  Each thread owns TM×TN outputs in registers; the
// operands' BK-deep slices are copied by cp.async into STAGES buffers of
// dynamic shared memory (its size: source.dynamic_shared_bytes, which the
// fragment passes as SMEM_BYTES), so that STAGES - 1 slices are in flight
// while one is computed, with no registers held for the loads and one
// barrier per slice.  A [line][k] operand is read KG ks at a time (one 8- or
// 16-byte read per line); when both operands are, KG is half a 16-byte run,
// which keeps both groups in registers beside the accumulators; so too in
// the 4-byte plain products with the exact path, whose tame check and
// wild-slice branch need registers of their own at the same cap.  Output
// tiles are visited in groups of SWIZZLE rows of tiles, so that the blocks
// resident together share B's column panels in L2.
//
// With the exact integer path (integer ⊗ that saturates), each thread checks
// the values it copied once they have landed, and the slice's barrier is
// also the OR of the answers: a slice holding a value that is not tame
// (preamble.cuh) takes the exact ⊗ (exact_apart, apart from the main loop),
// the others the fast ⊗.
//
// The argmax variant computes each slice's own ⊕ apart (part), then folds
// it in and records, per output, the first k of the last slice that
// strictly improved it, as the square kernel does (square.cuh: the same
// values bit for bit, ⊕ being exact and associative, and the same slice for
// argmax_resolve to search); a product one slice deep compares every
// candidate instead and needs no resolve.
// An output tile's batch, and its row and column among its batch's tiles_m × tiles_n tiles, from its number:
// SWIZZLE rows of tiles at a time, column by column within the group, so that the blocks resident together
// share B's column panels in L2.  The stream-K fixup (stream_fixup.cu) finds a tile the same way.
constexpr int SWIZZLE = 8;
struct TilePlace {
  i64 batch, row, col;
};
__device__ inline TilePlace tile_place(i64 tile, i64 tiles_m, i64 tiles_n) {
  const i64 batch = tile / (tiles_m * tiles_n), in_batch = tile % (tiles_m * tiles_n);
  const i64 group = in_batch / (SWIZZLE * tiles_n), first_row = group * SWIZZLE;
  const i64 rows_here = tiles_m - first_row < SWIZZLE ? tiles_m - first_row : SWIZZLE;
  const i64 in_group = in_batch % (SWIZZLE * tiles_n);
  return TilePlace{batch, first_row + in_group % rows_here, in_group / rows_here};
}

// EACH_K: the argmax of a K up to this deep compares every candidate (each_k; jit/source.py: each_k_depth),
// deeper ones record slices; 0 in the stream family.
template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BM, int BN, int BK, int TM, int TN, int UNROLL,
          int STAGES, int SMEM_BYTES, int EACH_K, bool SHARED_RECORD>
struct PipelinedKernel {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static constexpr bool A_LK = A_ROW, B_LK = !B_ROW;
  static constexpr bool EXACT = NeedsExactPath<SR, T>::value;
  static constexpr int KG = (A_LK && B_LK) || (EXACT && !ARGMAX && sizeof(T) == 4) ? V / 2 : V;
  // Whether the kernel has each_k at all (a constant, so that the stream kernels have none of its code).
  static constexpr bool COMPARES_EACH_K = ARGMAX && EACH_K > 0;
  static_assert(KG >= 1 && BK % KG == 0 && TM % V == 0 && TN % V == 0, "whole groups and 16-byte runs");
  static_assert(STAGES >= 2, "one slice in flight while one is computed");
  using StageA = StagedOperand<T, A_LK, BM, BK, TM, THREADS, (A_LK ? KG : V)>;
  using StageB = StagedOperand<T, B_LK, BN, BK, TN, THREADS, (B_LK ? KG : V)>;
  struct Smem {
    typename StageA::Tile a[STAGES];
    typename StageB::Tile b[STAGES];
  };
  // SHARED_RECORD: the argmax's record (idx) of the first TM / 2 rows of a thread's outputs lives in shared
  // memory past the stages, a row of THREADS ints per output (a warp's entries in consecutive banks), the rest
  // in registers.  With 8×8 outputs a thread the whole record in registers kept ptxas at the 255-register cap,
  // where the slice loop spilled unless unrolled in full, and that code was a large share of the compile; all
  // of it in shared memory would not fit the 99 KiB a block may take on sm_86, sm_89 and sm_120.
  static constexpr int SHARED_ROWS = ARGMAX && SHARED_RECORD ? TM / 2 : 0;
  static constexpr int RECORD_BYTES = SHARED_ROWS * TN * THREADS * (int)sizeof(int);
  static_assert(sizeof(Smem) + RECORD_BYTES == SMEM_BYTES, "source.dynamic_shared_bytes must give the stages' size");
  // Output (i, j)'s record entry (i and j are constants once the loops unroll, so the test costs nothing).
  __device__ static int& record(int (&idx)[TM][TN], int i, int j) {
    if (i < SHARED_ROWS)
      return reinterpret_cast<int*>(dynamic_shared() + sizeof(Smem))[(i * TN + j) * THREADS + threadIdx.x];
    return idx[i][j];
  }

  // The KG ks of group g.  ASSIGN: the group's first k assigns its ⊗ rather than ⊕ing it in (the first
  // group of an argmax slice that starts from its first ⊗: see slice).
  template <bool ASSIGN>
  __device__ static void group(const Smem& s, int buf, int g, int ty, int tx, T (&acc)[TM][TN]) {
    T ag[A_LK ? TM : 1][A_LK ? KG : 1], bg[B_LK ? TN : 1][B_LK ? KG : 1];
    if constexpr (A_LK) StageA::group(s.a[buf], g, ty, ag);
    if constexpr (B_LK) StageB::group(s.b[buf], g, tx, bg);
#pragma unroll
    for (int v = 0; v < KG; ++v) {
      T a[TM], b[TN];
      if constexpr (A_LK) {
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = ag[i][v];
      } else {
        StageA::step(s.a[buf], g * KG + v, ty, a);
      }
      if constexpr (B_LK) {
#pragma unroll
        for (int j = 0; j < TN; ++j) b[j] = bg[j][v];
      } else {
        StageB::step(s.b[buf], g * KG + v, tx, b);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          acc[i][j] = ASSIGN && v == 0 ? SR::template mul_fast<T>(a[i], b[j])
                                       : SR::template mac<T>(acc[i][j], a[i], b[j]);
    }
  }

  // Every k of a full slice, a group of KG ks at a time.  FROM_FIRST: acc holds nothing yet, and the
  // slice's first ⊗ is assigned to it.
  template <bool FROM_FIRST>
  __device__ static void full_slice(const Smem& s, int buf, int ty, int tx, T (&acc)[TM][TN]) {
    if constexpr (FROM_FIRST) group<true>(s, buf, 0, ty, tx, acc);
#pragma unroll UNROLL
    for (int g = FROM_FIRST ? 1 : 0; g < BK / KG; ++g) group<false>(s, buf, g, ty, tx, acc);
  }

  // Each candidate of a slice one k at a time, by its operands: visit(i, j, kk, a, b).
  template <class Visit>
  __device__ static void each_step(const Smem& s, int buf, int steps, int ty, int tx, Visit visit) {
    for (int kk = 0; kk < steps; ++kk) {
      T a[TM], b[TN];
      StageA::step(s.a[buf], kk, ty, a);
      StageB::step(s.b[buf], kk, tx, b);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) visit(i, j, kk, a[i], b[j]);
    }
  }

  // A slice one k at a time (the last, partial one).
  __device__ static void partial_slice(const Smem& s, int buf, int steps, int ty, int tx, T (&acc)[TM][TN]) {
    each_step(s, buf, steps, ty, tx,
              [&](int i, int j, int, T a, T b) { acc[i][j] = SR::template mac<T>(acc[i][j], a, b); });
  }

  // The block's stages, where a function is not passed them (the exact path, which is not inlined).
  __device__ static const Smem& staged() { return *reinterpret_cast<const Smem*>(dynamic_shared()); }

  // The slices holding values that are not tame (wild: the exact integer path's kernels only) take the
  // exact ⊗, each output seeing the same ⊕ of the same ⊗ in the same k order as on the fast path, and
  // the argmax the same record (see slice; each_k where K is at most EACH_K).  That path is kept apart
  // from the main loop (__noinline__), so that NVVM and ptxas work on each alone (NVVM's passes take
  // superlinear time in a function's size: inlined, the path was a large share of the compile), and
  // it takes this thread's outputs as a copy in local memory: a reference to the accumulators themselves
  // would make them addressable, so local memory, in the main loop too.  It walks one row of outputs at
  // a time, held in registers through the slice's ks: the loops stay rolled, so the code small, and the
  // local copy is read and written once a row, not once a candidate.
  struct Held {
    T acc[TM][TN];
    int idx[TM][TN];
  };
  __device__ __noinline__ static void exact_apart(int buf, int steps, int first_k, bool each, int ty, int tx,
                                                  Held* held) {
    const Smem& s = staged();
    auto candidate = [&](int line, int kk, int j) {
      return SR::template mul_exact<T>(StageA::at(s.a[buf], line, kk),
                                       StageB::at(s.b[buf], StageB::line_of(j, tx), kk));
    };
#pragma unroll 1
    for (int i = 0; i < TM; ++i) {
      const int line = StageA::line_of(i, ty);
      T row[TN], part[TN];
      int at[TN];
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        row[j] = held->acc[i][j];
        part[j] = ARGMAX ? SR::template zero<T>() : row[j];
        if constexpr (ARGMAX) at[j] = held->idx[i][j];
      }
      if (ARGMAX && each) {  // each_k's record: every candidate compared, the winner's k kept
#pragma unroll 1
        for (int kk = 0; kk < steps; ++kk)
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            const T c = candidate(line, kk, j);
            if (SR::template better<T>(c, row[j])) row[j] = c, at[j] = first_k + kk;
          }
      } else {  // the slice's own ⊕, then (argmax) folded in as fold_slice folds it
#pragma unroll 1
        for (int kk = 0; kk < steps; ++kk)
#pragma unroll
          for (int j = 0; j < TN; ++j) part[j] = SR::template add<T>(part[j], candidate(line, kk, j));
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          if (ARGMAX && SR::template better<T>(part[j], row[j])) at[j] = first_k;
          row[j] = ARGMAX ? SR::template add<T>(row[j], part[j]) : part[j];
        }
      }
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        held->acc[i][j] = row[j];
        if constexpr (ARGMAX) held->idx[i][j] = at[j];
      }
    }
  }
  // Slice kt, wild, into acc (and idx): the kernel's one call of the exact path.  each: compare every
  // candidate (each_k's record).
  __device__ static void exact(int buf, int steps, i64 kt, bool each, int ty, int tx, T (&acc)[TM][TN],
                               int (&idx)[TM][TN]) {
    Held held;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        held.acc[i][j] = acc[i][j];
        if constexpr (ARGMAX) held.idx[i][j] = record(idx, i, j);
      }
    exact_apart(buf, steps, (int)(kt * BK), each, ty, tx, &held);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i][j] = held.acc[i][j];
        if constexpr (ARGMAX) record(idx, i, j) = held.idx[i][j];
      }
  }

  // The argmax of a product no deeper than EACH_K, slice kt: every candidate compared with its output and
  // the winner's k kept in idx, so that no resolve follows (a wild slice: exact_apart, which does the same).
  __device__ static void each_k(const Smem& s, int buf, int steps, i64 kt, int ty, int tx, T (&acc)[TM][TN],
                                int (&idx)[TM][TN]) {
    const int first_k = (int)(kt * BK);
    each_step(s, buf, steps, ty, tx, [&](int i, int j, int kk, T a, T b) {
      const T c = SR::template mul_fast<T>(a, b);
      if (SR::template better<T>(c, acc[i][j])) acc[i][j] = c, record(idx, i, j) = first_k + kk;
    });
  }

  // Slice kt (steps ks of it), tame, into acc; the argmax's slice apart, then folded in (see the struct's
  // comment).  The argmax's full slice starts from its first ⊗ where tiles.cuh's slice_from_first
  // allows: the same value, and a move and an ⊕ fewer per output.
  __device__ static void slice(const Smem& s, int buf, int steps, i64 kt, int ty, int tx, T (&acc)[TM][TN],
                               int (&idx)[TM][TN]) {
    constexpr bool FROM_FIRST = slice_from_first<T>;
    if constexpr (ARGMAX) {
      T part[TM][TN];
      if (FROM_FIRST && steps == BK) {
        full_slice<FROM_FIRST>(s, buf, ty, tx, part);
      } else {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) part[i][j] = SR::template zero<T>();
        if (!FROM_FIRST && steps == BK) full_slice<false>(s, buf, ty, tx, part);  // one copy of the slice
        else partial_slice(s, buf, steps, ty, tx, part);
      }
      fold_slice<SR>(acc, part, [&](int i, int j) -> int& { return record(idx, i, j); }, (int)(kt * BK));
    } else if (steps == BK) {
      full_slice<false>(s, buf, ty, tx, acc);
    } else {
      partial_slice(s, buf, steps, ty, tx, acc);
    }
  }

  // Where a launch writes its results.
  struct Output {
    T* C;
    int* IDX;
    i64 M, N, c_sm, c_sn;
  };
  // One launch's operands and output, and its tiles and slices.
  struct Problem {
    const T* A;
    const T* B;
    Output out;
    i64 M, N, K, a_sm, a_sk, b_sk, b_sn;
    Batch bt;
    i64 tiles_m, tiles_n, k_tiles;
  };
  struct Place {
    i64 batch, m0, n0;
  };

  // Output tile `tile`'s batch and corner (tile_place).
  __device__ static Place place(const Problem& p, i64 tile) {
    const TilePlace at = tile_place(tile, p.tiles_m, p.tiles_n);
    return Place{at.batch, at.row * BM, at.col * BN};
  }

  // acc from the zero, and idx without a winner.
  __device__ static void clear(T (&acc)[TM][TN], int (&idx)[TM][TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i][j] = SR::template zero<T>();
        if constexpr (ARGMAX) record(idx, i, j) = -1;
      }
  }

  // Whether each operand's slices move 16 bytes a copy (runs_aligned), kept in shared memory and read once
  // a tile: they are the launch's, and in registers they lived through the main loop, where ptxas spilled
  // them.  The block's barriers in the main loop keep NVVM from hoisting the reads.
  struct Runs {
    bool a_vec, b_vec;
  };
  __device__ static const Runs& runs(const Problem& p) {
    __shared__ Runs shared_runs;
    const Batch& bt = p.bt;
    const Runs launch{A_LK ? runs_aligned(p.A, p.a_sk, p.a_sm, bt.a0, bt.a1, bt.a2)
                           : runs_aligned(p.A, p.a_sm, p.a_sk, bt.a0, bt.a1, bt.a2),
                      B_LK ? runs_aligned(p.B, p.b_sk, p.b_sn, bt.b0, bt.b1, bt.b2)
                           : runs_aligned(p.B, p.b_sn, p.b_sk, bt.b0, bt.b1, bt.b2)};
    if (threadIdx.x == 0) shared_runs = launch;
    __syncthreads();
    return shared_runs;
  }

  // Slices kt0 .. kt1 - 1 of the output tile at `at` into acc and idx, from the zero.
  __device__ static void accumulate(Smem& s, const Problem& p, const Runs& runs, const Place& at, i64 kt0, i64 kt1,
                                    int ty, int tx, T (&acc)[TM][TN], int (&idx)[TM][TN]) {
    i64 a_off, b_off;
    p.bt.offsets(at.batch, a_off, b_off);
    typename StageA::Cursor ca;
    typename StageB::Cursor cb;
    StageA::aim(ca, s.a[0], p.A + a_off, at.m0, p.M, p.a_sm, p.a_sk, runs.a_vec);
    StageB::aim(cb, s.b[0], p.B + b_off, at.n0, p.N, p.b_sn, p.b_sk, runs.b_vec);
    ca.p += kt0 * StageA::slice_step(p.a_sk);
    cb.p += kt0 * StageB::slice_step(p.b_sk);
    // Slices counted from kt0 in 32 bits (a tile's slices fit), the last one `steps_last` deep and
    // the others BK.
    const int slices = (int)(kt1 - kt0), steps_last = p.K - (kt1 - 1) * BK < BK ? (int)(p.K - (kt1 - 1) * BK) : BK;
    auto steps_of = [&](int t) { return t == slices - 1 ? steps_last : BK; };
    // The cursors' slice t into its stage.  Every thread commits a group per slice, empty past the
    // last, so that "at most STAGES - 2 groups pending" always means "this slice has landed".
    auto stage = [&](int t) {
      if (t < slices) {
        StageA::copy(t % STAGES, ca, steps_of(t), p.a_sm, p.a_sk);
        StageB::copy(t % STAGES, cb, steps_of(t), p.b_sn, p.b_sk);
      }
      copies_issued();
    };
    clear(acc, idx);
#pragma unroll
    for (int d = 0; d < STAGES - 1; ++d) stage(d);
    for (int t = 0; t < slices; ++t) {
      copies_landed<STAGES - 2>();
      const int buf = t % STAGES, steps = steps_of(t);
      // All of slice t is in shared memory, and every thread is done with slice t - 1, whose stage the
      // next copy overwrites.
      bool wild = false;
      if constexpr (EXACT) {
        const bool tame = StageA::template copies_tame<SR>(s.a[buf], ca, steps) &
                          StageB::template copies_tame<SR>(s.b[buf], cb, steps);
        wild = __syncthreads_or(!tame);
      } else {
        __syncthreads();
      }
      stage(t + STAGES - 1);
      const i64 kt = kt0 + t;
      if constexpr (EXACT) {  // constexpr: the other kernels do not instantiate the exact path at all
        if (wild) {
          exact(buf, steps, kt, COMPARES_EACH_K && p.K <= EACH_K, ty, tx, acc, idx);
          continue;
        }
      }
      if (COMPARES_EACH_K && p.K <= EACH_K) each_k(s, buf, steps, kt, ty, tx, acc, idx);
      else slice(s, buf, steps, kt, ty, tx, acc, idx);
    }
    // No copy in flight, and every thread done reading, before the next tile's copies.
    copies_landed<0>();
    __syncthreads();
  }

  __device__ static void store(const Output& out, const Place& at, int ty, int tx, const T (&acc)[TM][TN],
                               int (&idx)[TM][TN]) {
    T* Cb = out.C + at.batch * out.M * out.N;
    int* Ib = ARGMAX ? out.IDX + at.batch * out.M * out.N : nullptr;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const i64 m = at.m0 + StageA::line_of(i, ty);
      if (m >= out.M) continue;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const i64 n = at.n0 + StageB::line_of(j, tx);
        if (n >= out.N) continue;
        Cb[m * out.c_sm + n * out.c_sn] = canonical(acc[i][j]);
        if constexpr (ARGMAX) Ib[m * out.c_sm + n * out.c_sn] = record(idx, i, j);
      }
    }
  }

  __device__ static Problem problem(const T* A, const T* B, T* C, int* IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk,
                                    i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, const Batch& bt) {
    return Problem{A, B, Output{C, IDX, M, N, c_sm, c_sn}, M, N, K, a_sm, a_sk, b_sk, b_sn, bt, (M + BM - 1) / BM,
                   (N + BN - 1) / BN, (K + BK - 1) / BK};
  }

  // The square family's launch: one block per output tile, all of K.
  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn,
                             i64 c_sm, i64 c_sn, i64 batches, const Batch& bt) {
    Smem& s = *reinterpret_cast<Smem*>(dynamic_shared());
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const Problem p = problem(A, B, C, IDX, M, N, K, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, bt);
    const Runs& vec = runs(p);
    for (i64 tile = blockIdx.x; tile < p.tiles_m * p.tiles_n * batches; tile += gridDim.x) {
      const Place at = place(p, tile);
      const KeptCorner<corner_in_memory<TM, TN>> kept{at.batch, at.m0, at.n0};
      T acc[TM][TN];
      int idx[TM][TN];  // the argmax's; unused (and dropped by the compiler) in the plain product
      accumulate(s, p, vec, at, 0, p.k_tiles, ty, tx, acc, idx);
      store(p.out, Place{kept.batch, kept.m0, kept.n0}, ty, tx, acc, idx);
    }
  }
};

}  // namespace tg
