// tropical_gemm: operand geometry and the tile loader shared by the forward kernels.
// Part of the program source.py assembles (header map: preamble.cuh).

namespace tg {

// ------------------------------------------------------------------- geometry

// Up to three broadcast batch dimensions (d0 × d1 × d2); the engine folds
// more into these or loops.  Strides are in elements; 0 means broadcast.
struct Batch {
  i64 d1, d2;
  i64 a0, a1, a2;
  i64 b0, b1, b2;
  __device__ void offsets(i64 batch, i64& a_off, i64& b_off) const {
    i64 i2 = batch % d2;
    i64 rest = batch / d2;
    i64 i1 = rest % d1;
    i64 i0 = rest / d1;
    a_off = i0 * a0 + i1 * a1 + i2 * a2;
    b_off = i0 * b0 + i1 * b1 + i2 * b2;
  }
  struct Tile { i64 batch, m0, n0, a_off, b_off; };
  // Output tile t of a grid-stride loop over batches of per_batch tiles, tiles_n to a row of bm x bn
  // outputs (columns fastest): its batch, first row and column, and the operands' offsets.
  __device__ Tile tile(i64 t, i64 tiles_n, i64 per_batch, i64 bm, i64 bn) const {
    Tile o;
    o.batch = t / per_batch;
    const i64 rest = t % per_batch;
    o.m0 = (rest / tiles_n) * bm;
    o.n0 = (rest % tiles_n) * bn;
    offsets(o.batch, o.a_off, o.b_off);
    return o;
  }
};

// An output tile's batch and corner, which the tile's store reads once its main loop is done.  IN_MEMORY:
// kept in local memory through the main loop, read once a tile.  Kernels of 64 outputs a thread and more
// (corner_in_memory) run at their register cap, where ptxas otherwise spilled a word of it there anyway,
// and more around it; in those of fewer, it moved ptxas's allocation into spills of its own.
template <int TM, int TN>
inline constexpr bool corner_in_memory = TM * TN >= 64;
template <bool IN_MEMORY>
struct KeptCorner {
  i64 batch, m0, n0;
};
template <>
struct KeptCorner<true> {
  volatile i64 batch, m0, n0;
};

// 16 bytes of T, so shared-memory fragments load as one 128-bit access.
template <class T> struct alignas(16) Vec16 { T v[16 / sizeof(T)]; };
// 8 bytes of T: a 64-bit shared-memory access.
template <class T> struct alignas(8) Vec8 { T v[8 / sizeof(T)]; };

// ------------------------------------------------------------ slice record

// The argmax's record of a slice: its own ⊕ (part) folded into the running
// values, and first_k kept where it strictly improved one (ties keep the
// earlier slice, whose first k argmax_resolve then searches).  record(i, j):
// output (i, j)'s entry, wherever the kernel keeps it.
template <class SR, class T, int TM, int TN, class Record>
__device__ __forceinline__ void fold_slice(T (&acc)[TM][TN], const T (&part)[TM][TN], Record record, int first_k) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      if (SR::template better<T>(part[i][j], acc[i][j])) record(i, j) = first_k;
      acc[i][j] = SR::template add<T>(acc[i][j], part[i][j]);
    }
}
template <class SR, class T, int TM, int TN>
__device__ __forceinline__ void fold_slice(T (&acc)[TM][TN], const T (&part)[TM][TN], int (&idx)[TM][TN],
                                           int first_k) {
  fold_slice<SR>(acc, part, [&](int i, int j) -> int& { return idx[i][j]; }, first_k);
}

// Whether an argmax slice's own ⊕ may start from its first ⊗, paying no ⊕
// with the zero there: where ⊕ takes a NaN on either side (float's fmaxf
// and fminf; integers have none).  double's ⊕ is a compare-select that
// assumes the running value is never NaN (preamble.cuh: acc_max), so there
// a slice starts from the zero.
template <class T> inline constexpr bool slice_from_first = !IsFloat<T>::value || sizeof(T) == 4;

// ----------------------------------------------------------- the exact path

// The exact path's candidates of a slice, steps k steps deep: visit(value,
// i, j, kk, c) takes output (i, j)'s candidate c, the exact ⊗ of a(kk, i)
// and b(kk, j), in k order.  Slices holding values that are not tame are
// rare, so this is written for the compiler: unrolled, the saturating ⊗
// was a large share of the code NVVM and ptxas optimise in every integer
// kernel.  The running values go to a local-memory copy and every loop
// but the innermost stays rolled.
template <class SR, class T, int TM, int TN, class A, class B, class Visit>
__device__ __forceinline__ void exact_candidates(T (&acc)[TM][TN], int steps, A a, B b, Visit visit) {
  T held[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) held[i][j] = acc[i][j];
#pragma unroll 1
  for (int kk = 0; kk < steps; ++kk) {
#pragma unroll 1
    for (int i = 0; i < TM; ++i) {
      const T x = a(kk, i);
#pragma unroll
      for (int j = 0; j < TN; ++j) visit(held[i][j], i, j, kk, SR::template mul_exact<T>(x, b(kk, j)));
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = held[i][j];
}

// ------------------------------------------------------------- tile loader

// Stages one operand's BK-deep slice of a tile from global memory into
// registers (issued early, to overlap the current step's arithmetic) and
// then into shared memory as [k][line], where a line is a row of A or a
// column of B.  K_FAST: consecutive threads walk k, which is coalesced when k
// is the operand's contiguous axis.  All 64-bit address arithmetic happens
// once per output tile; each k-slice only bumps one pointer.
template <class SR, class T, bool K_FAST, int LINES, int BK, int THREADS, int STRIDE>
struct TileLoader {
  static constexpr int PER = LINES * BK / THREADS;
  static constexpr bool EXACT = NeedsExactPath<SR, T>::value;
  const T* base;
  i64 step;      // from one of this thread's elements to the next
  i64 advance;   // from one k-slice to the next
  int kk0, line0;
  unsigned line_ok;  // bit r: element r's line is inside the matrix

  __device__ static constexpr int kk_step() { return K_FAST ? 0 : THREADS / LINES; }
  __device__ static constexpr int line_step() { return K_FAST ? THREADS / BK : 0; }

  __device__ void init(const T* p, i64 line_begin, i64 lines, i64 line_stride, i64 k_stride) {
    kk0 = K_FAST ? threadIdx.x % BK : threadIdx.x / LINES;
    line0 = K_FAST ? threadIdx.x / BK : threadIdx.x % LINES;
    base = p + (line_begin + line0) * line_stride + kk0 * k_stride;
    step = K_FAST ? (i64)line_step() * line_stride : (i64)kk_step() * k_stride;
    advance = (i64)BK * k_stride;
    line_ok = 0;
#pragma unroll
    for (int r = 0; r < PER; ++r) line_ok |= (unsigned)(line_begin + line0 + r * line_step() < lines) << r;
  }
  // K_LEFT: how many k remain from this slice on (only checked on the last slice).
  template <bool CHECK_K>
  __device__ void load(T (&regs)[PER], bool& tame, i64 k_left) {
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      const bool ok = ((line_ok >> r) & 1) && (!CHECK_K || kk0 + r * kk_step() < k_left);
      const T x = ok ? base[r * step] : T(0);
      regs[r] = x;
      if constexpr (EXACT) tame &= SR::tame(x);
    }
    base += advance;
  }
  __device__ void store(T (*tile)[STRIDE], const T (&regs)[PER]) const {
#pragma unroll
    for (int r = 0; r < PER; ++r) tile[kk0 + r * kk_step()][line0 + r * line_step()] = regs[r];
  }
};

}  // namespace tg
