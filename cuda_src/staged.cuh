// tropical_gemm: operands staged in shared memory by cp.async: the
// asynchronous copies, one operand's slice as kept there for the pipelined
// square kernel (pipelined.cuh), and the argmax resolve of a short K.
// Header map: preamble.cuh.

namespace tg {

// ------------------------------------------------------ asynchronous copies
//
// cp.async (sm_80 and later) moves global memory into shared memory without
// passing through registers: a slice's copies are issued and the block goes on
// computing the previous slice, with no registers held for the loads and no
// stores to shared memory in the instruction stream.  Before sm_80 the same
// calls copy synchronously, so the kernel is correct on every architecture.

// Where a copy lands in shared memory: its address in the shared window where cp.async takes one (sm_80
// and later), which a thread works out once per output tile and then offsets by constants (converted per
// copy, it cost each copy a read of the CTA id and three instructions more); elsewhere a pointer.
#if __CUDA_ARCH__ >= 800
typedef unsigned SharedSpot;
__device__ __forceinline__ SharedSpot shared_spot(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
#else
typedef unsigned char* SharedSpot;
__device__ __forceinline__ SharedSpot shared_spot(const void* p) {
  return static_cast<unsigned char*>(const_cast<void*>(p));
}
#endif

// BYTES (4, 8 or 16) from src to `to`; with VALID < BYTES the rest is zero-filled (16-byte copies only).
template <int BYTES>
__device__ __forceinline__ void copy_async(SharedSpot to, const void* src, int valid = BYTES) {
#if __CUDA_ARCH__ >= 800
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(to), "l"(src), "n"(BYTES));
  }
#else
  if constexpr (BYTES == 16) {
    const unsigned char* from = static_cast<const unsigned char*>(src);
    for (int i = 0; i < 16; ++i) to[i] = i < valid ? from[i] : 0;
  } else if constexpr (BYTES == 8) {
    *reinterpret_cast<unsigned long long*>(to) = *static_cast<const unsigned long long*>(src);
  } else {
    *reinterpret_cast<unsigned*>(to) = *static_cast<const unsigned*>(src);
  }
#endif
}
// 16 bytes from src to `to`, all of them inside the operand.
__device__ __forceinline__ void copy_async_whole(SharedSpot to, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(src));
#else
  copy_async<16>(to, src);
#endif
}
__device__ __forceinline__ void copies_issued() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most PENDING groups of copies issued by this thread are in flight.
template <int PENDING>
__device__ __forceinline__ void copies_landed() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// ------------------------------------------------------------ staged operand
//
// One operand's BK-deep slice in shared memory.  LINE_K: k is the operand's
// contiguous axis (A row-major, B column-major), so the slice is kept as
// [line][k] and a thread reads KG consecutive ks of one of its lines at once;
// its TL lines are then LINES / TL apart, so that the 8 threads of a 16-byte
// read phase read 8 consecutive rows, which the padding puts in distinct
// banks.  Otherwise the slice is kept as [k][line], read V consecutive lines
// of one k at once (V: 16 bytes of T), and a thread's TL lines are TL / V
// runs of V, LINES / (TL / V) apart (the square kernel's row_of / col_of).
// Rows are padded by V, which keeps 16-byte copies aligned.
template <class T, bool LINE_K, int LINES, int BK, int TL, int THREADS, int KG>
struct StagedOperand {
  static constexpr int V = 16 / (int)sizeof(T);
  static constexpr int RUNS = TL / V;
  static constexpr int ROWS = LINE_K ? LINES : BK, COLS = LINE_K ? BK + V : LINES + V;
  static constexpr int CHUNKS = LINES * BK / V;  // 16-byte copies per slice
  static_assert(CHUNKS % THREADS == 0 && (LINES * BK) % THREADS == 0, "copies divide evenly over the block");
  static_assert(KG * sizeof(T) == 8 || KG * sizeof(T) == 16, "a line's KG ks are one 8- or 16-byte read");
  typedef T Tile[ROWS][COLS];

  __device__ static int line_of(int i, int t) {
    return LINE_K ? t + i * (LINES / TL) : (i / V) * (LINES / RUNS) + t * V + (i % V);
  }

  // The line and the k of this thread's first copy of a slice, where copies move UNIT elements: copy r is
  // LINE_K: line `first_line + r * run_step`, ks `first_k..`; otherwise: k `first_k + r * run_step`,
  // lines `first_line..`.  Worked out from the thread's index where needed: kept in the cursor, they
  // were among the registers ptxas spilled in the slice loop of the stream kernels.
  template <int UNIT>
  __device__ static int first_line() {
    return LINE_K ? threadIdx.x / (BK / UNIT) : (threadIdx.x % (LINES / UNIT)) * UNIT;
  }
  template <int UNIT>
  __device__ static int first_k() {
    return LINE_K ? (threadIdx.x % (BK / UNIT)) * UNIT : threadIdx.x / (LINES / UNIT);
  }

  // Where this thread's copies of a slice start, set once per output tile: all 64-bit address arithmetic
  // happens there, and each slice only bumps the pointer (the square kernel's TileLoader does the same).
  // VEC: the contiguous axis has stride 1 and every V-run of it starts 16-byte aligned, so a copy moves V
  // elements; else one.  Copy r lands r rows of the stage after its first, `to` in stage 0.  The cursor
  // is what the slice loop keeps live: the steps between copies and slices are the operand's strides
  // (kernel parameters, which ptxas reads from the constant bank where used), and one word holds both
  // how many of the operand's lines start at this thread's first and the VEC flag.  With each in a
  // register of its own, ptxas spilled some of them in the stream kernels of the exact integer path.
  struct Cursor {
    const T* p;
    SharedSpot to;
    unsigned lines;  // the operand's lines from this thread's first (0..LINES); VEC_BIT: the copies move V elements
    __device__ bool vec() const { return lines >> VEC_BIT; }
    __device__ int left() const { return (int)(lines & ~(1u << VEC_BIT)); }
  };
  static constexpr int VEC_BIT = 31;
  template <int UNIT>
  static constexpr int run_step = LINE_K ? THREADS / (BK / UNIT) : THREADS / (LINES / UNIT);
  // Whether copy r's line (LINE_K) or run (otherwise) starts inside the operand.
  template <int UNIT>
  __device__ static bool inside(const Cursor& c, int r) {
    return c.left() > (LINE_K ? r * run_step<UNIT> : 0);
  }
  // Bytes of the run inside the operand ([k][line]), clamped to 16.
  __device__ static int room(const Cursor& c) { return (c.left() < V ? c.left() : V) * (int)sizeof(T); }
  // From one of this thread's copies of a slice to the next, and from one slice to the next (ls, ks: the
  // operand's line and k strides).
  template <int UNIT>
  __device__ static i64 copy_step(i64 ls, i64 ks) { return (i64)run_step<UNIT> * (LINE_K ? ls : ks); }
  __device__ static i64 slice_step(i64 ks) { return (i64)BK * ks; }
  template <int UNIT>
  __device__ static void aim(Cursor& c, const Tile& stage0, const T* p, i64 line0, i64 lines, i64 ls, i64 ks) {
    const int line = first_line<UNIT>(), kk = first_k<UNIT>();
    c.p = p + (line0 + line) * ls + kk * ks;
    c.to = shared_spot(LINE_K ? &stage0[line][kk] : &stage0[kk][line]);
    const i64 left = lines - (line0 + line);
    c.lines = (unsigned)(left <= 0 ? 0 : (left < LINES ? left : LINES)) | (UNIT == V ? 1u << VEC_BIT : 0u);
  }
  __device__ static void aim(Cursor& c, const Tile& stage0, const T* p, i64 line0, i64 lines, i64 ls, i64 ks,
                             bool vec) {
    if (vec) aim<V>(c, stage0, p, line0, lines, ls, ks);
    else aim<1>(c, stage0, p, line0, lines, ls, ks);
  }

  // CHECK_K: the slice is the last, with k_left (< BK) ks in the operand; ks past them are not copied.
  // The copies of one element each (operands not 16-byte aligned) stay a loop: unrolled, their code was
  // near half of a kernel's compile.
  // WHOLE: every run is 16 bytes inside the operand, so the copies pass no size.
  template <int UNIT, bool CHECK_K, bool WHOLE>
  __device__ static void copy_runs(int stage, const Cursor& c, int k_left, i64 ls, i64 ks) {
    constexpr int PER = LINES * BK / UNIT / THREADS;
    constexpr int UNROLLED = UNIT == 1 ? 1 : PER;
    const SharedSpot to = c.to + stage * (int)sizeof(Tile);
    const int kk = first_k<UNIT>();
    const i64 step = copy_step<UNIT>(ls, ks);
#pragma unroll UNROLLED
    for (int r = 0; r < PER; ++r) {
      const int left = k_left - (LINE_K ? kk : kk + r * run_step<UNIT>);
      const SharedSpot at = to + r * run_step<UNIT> * COLS * (int)sizeof(T);
      if (inside<UNIT>(c, r) && (!CHECK_K || left > 0)) {
        if constexpr (UNIT == 1) {
          copy_async<sizeof(T)>(at, c.p + r * step);
        } else if constexpr (WHOLE) {
          copy_async_whole(at, c.p + r * step);
        } else {
          const int run = LINE_K ? (left < V ? left : V) * (int)sizeof(T) : room(c);
          copy_async<16>(at, c.p + r * step, run);
        }
      }
    }
  }
  // Runs are whole in a full slice of a [line][k] operand, and of a [k][line] one where this thread's
  // run lies inside it (all but the threads at the operand's last lines).
  template <int UNIT, bool CHECK_K>
  __device__ static void copy(int stage, const Cursor& c, int k_left, i64 ls, i64 ks) {
    constexpr bool FULL_RUNS = UNIT == V && !CHECK_K;
    if (FULL_RUNS && (LINE_K || c.left() >= V)) copy_runs<UNIT, CHECK_K, FULL_RUNS>(stage, c, k_left, ls, ks);
    else copy_runs<UNIT, CHECK_K, false>(stage, c, k_left, ls, ks);
  }
  // Whether the values this thread copied into s (as copy<UNIT, CHECK_K> did) are all tame: the exact
  // integer path's check.  Every staged value is some thread's copy, so the block's OR of the answers
  // covers the slice; a thread's own cp.async copies are visible to it once copies_landed has returned.
  // One variant serves full and last slices (k_left: at most BK): a compare a copy costs less than a
  // second copy of the check in the kernel's code.
  template <class SR, int UNIT>
  __device__ static bool copies_tame(const Tile& s, const Cursor& c, int k_left) {
    constexpr int PER = LINES * BK / UNIT / THREADS;
    constexpr int RUN_STEP = run_step<UNIT>;
    constexpr int UNROLLED = UNIT == 1 ? 1 : PER;
    const int first = first_line<UNIT>(), k_first = first_k<UNIT>();
    bool tame = true;
#pragma unroll UNROLLED
    for (int r = 0; r < PER; ++r) {
      const int line = LINE_K ? first + r * RUN_STEP : first, kk = LINE_K ? k_first : k_first + r * RUN_STEP;
      const T* at = LINE_K ? &s[line][kk] : &s[kk][line];
      if (inside<UNIT>(c, r) && k_left - kk > 0) {
        if constexpr (UNIT == 1) {
          tame &= SR::tame(*at);
        } else {
          const Vec16<T> q = *reinterpret_cast<const Vec16<T>*>(at);  // a partial run's rest is zero-filled
#pragma unroll
          for (int v = 0; v < V; ++v) tame &= SR::tame(q.v[v]);
        }
      }
    }
    return tame;
  }
  template <class SR>
  __device__ static bool copies_tame(const Tile& s, const Cursor& c, int k_left) {
    return c.vec() ? copies_tame<SR, V>(s, c, k_left) : copies_tame<SR, 1>(s, c, k_left);
  }

  // One value of the slice, by its line and k.
  __device__ static T at(const Tile& s, int line, int kk) { return LINE_K ? s[line][kk] : s[kk][line]; }

  // The cursor's slice into stage `stage` (k_left: the operand's ks from the slice's first, at most BK),
  // then the cursor onto the next slice.
  __device__ static void copy(int stage, Cursor& c, int k_left, i64 ls, i64 ks) {
    if (k_left == BK) {
      if (c.vec()) copy<V, false>(stage, c, BK, ls, ks);
      else copy<1, false>(stage, c, BK, ls, ks);
    } else {
      if (c.vec()) copy<V, true>(stage, c, k_left, ls, ks);
      else copy<1, true>(stage, c, k_left, ls, ks);
    }
    c.p += slice_step(ks);
  }

  // This thread's values of ks g*KG .. g*KG + KG - 1 (LINE_K), or of k step kk (otherwise).
  __device__ static void group(const Tile& s, int g, int t, T (&out)[TL][KG]) {
#pragma unroll
    for (int i = 0; i < TL; ++i) {
      if constexpr (KG * sizeof(T) == 16) {
        const Vec16<T> q = *reinterpret_cast<const Vec16<T>*>(&s[line_of(i, t)][g * KG]);
#pragma unroll
        for (int v = 0; v < KG; ++v) out[i][v] = q.v[v];
      } else {
        const Vec8<T> q = *reinterpret_cast<const Vec8<T>*>(&s[line_of(i, t)][g * KG]);
#pragma unroll
        for (int v = 0; v < KG; ++v) out[i][v] = q.v[v];
      }
    }
  }
  __device__ static void step(const Tile& s, int kk, int t, T (&out)[TL]) {
#pragma unroll
    for (int run = 0; run < RUNS; ++run) {
      if constexpr (LINE_K) {
#pragma unroll
        for (int x = 0; x < V; ++x) out[run * V + x] = s[line_of(run * V + x, t)][kk];
      } else {
        const Vec16<T> q = *reinterpret_cast<const Vec16<T>*>(&s[kk][run * (LINES / RUNS) + t * V]);
#pragma unroll
        for (int x = 0; x < V; ++x) out[run * V + x] = q.v[x];
      }
    }
  }
};

// Whether an operand's slices can move 16 bytes a copy: unit stride along its contiguous axis, and the
// base, the other stride and the batch strides all multiples of 16 bytes.
template <class T>
__device__ __forceinline__ bool runs_aligned(const T* p, i64 contiguous_stride, i64 other_stride, i64 s0, i64 s1,
                                             i64 s2) {
  constexpr i64 V = 16 / sizeof(T);
  return contiguous_stride == 1 && ((unsigned long long)p % 16) == 0 && other_stride % V == 0 && s0 % V == 0 &&
         s1 % V == 0 && s2 % V == 0;
}

// ------------------------------------------------------ the staged resolve
//
// The argmax's resolve (square.cuh: argmax_resolve) where a tile of outputs' rows and columns fit in shared
// memory (a short K): a block takes `edge` × `edge` outputs of one batch at a time, copies the rows of A and
// the columns of B they read, every k, into its dynamic shared memory (`pitch` values a line), and searches
// each output's slice there.  Per output it moves 2·K/edge values, against the two slices an output reads
// from global memory otherwise; and a row-major B, whose slices cost a sector a k there, is read along its
// rows.  The copies are cp.async ones of an element each: every thread's are in flight at once, with no
// registers held for them (copied through registers, a warp's line at a time, the loads' latency bounded
// the kernel).

// `lines` lines of an operand (line stride ls, k stride ks), every k of each, into s[line][k] (row pitch
// `pitch`).  A warp's lanes take consecutive addresses: the lines where they are contiguous, else the ks.
template <class T>
__device__ void stage_lines(T* s, const T* __restrict__ p, int lines, int K, i64 ls, i64 ks, int pitch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (ls == 1 && ks != 1) {
    for (int k = warp; k < K; k += warps)
      for (int line = lane; line < lines; line += 32)
        copy_async<sizeof(T)>(shared_spot(s + line * pitch + k), p + line + k * ks);
  } else {
    for (int line = warp; line < lines; line += warps)
      for (int k = lane; k < K; k += 32)
        copy_async<sizeof(T)>(shared_spot(s + line * pitch + k), p + line * ls + k * ks);
  }
}

template <class SR, class T>
__device__ void argmax_resolve_staged(const T* __restrict__ A, const T* __restrict__ B, const T* __restrict__ C,
                                      int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk,
                                      i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt, int slice_depth,
                                      int edge, int pitch) {
  T* const a_lines = reinterpret_cast<T*>(dynamic_shared());
  T* const b_lines = a_lines + edge * pitch;
  const i64 tiles_n = (N + edge - 1) / edge, per_batch = (M + edge - 1) / edge * tiles_n;
  for (i64 t = blockIdx.x; t < per_batch * batches; t += gridDim.x) {
    const Batch::Tile tile = bt.tile(t, tiles_n, per_batch, edge, edge);
    const i64 batch = tile.batch, m0 = tile.m0, n0 = tile.n0;
    const int rows = (int)(M - m0 < edge ? M - m0 : edge), cols = (int)(N - n0 < edge ? N - n0 : edge);
    __syncthreads();  // the previous tile's searches are done with the lines
    stage_lines(a_lines, A + tile.a_off + m0 * a_sm, rows, (int)K, a_sm, a_sk, pitch);
    stage_lines(b_lines, B + tile.b_off + n0 * b_sn, cols, (int)K, b_sn, b_sk, pitch);
    copies_issued();
    copies_landed<0>();
    __syncthreads();
    for (int o = threadIdx.x; o < rows * cols; o += blockDim.x) {
      const int r = o / cols, c = o % cols;
      const i64 at = batch * M * N + (m0 + r) * c_sm + (n0 + c) * c_sn;
      const int start = IDX[at];
      if (start >= 0)  // shared memory answers each load soon: one k at a time, as few registers as that takes
        IDX[at] = first_attaining_each<SR, T>(a_lines + r * pitch, 1, b_lines + c * pitch, 1, C[at], start,
                                              start + slice_depth < K ? start + slice_depth : K);
    }
  }
}

}  // namespace tg
