// tropical_gemm: the CUDA preamble shared by every kernel.
//
// Each kernel is compiled on its own: this preamble followed by one small
// instantiation fragment (forward_square.cu, forward_skinny.cu,
// argmax_resolve.cu, backward.cu) rendered for one (operation, semiring,
// dtype, variant).  The
// preamble holds everything that is the same for all of them: limits, the
// exact elementwise semantics (which must match the CPU engine bit for bit),
// the semiring functors, and the kernel bodies as templates.
//
// Semantics, as in tropical_gemm/engines/cpu.py:
//  * max/min ignore NaN (fmaxf/fminf, IEEE maxNum/minNum, one FMNMX);
//  * + and * are plain IEEE for floats (no contraction: compiled --fmad=false);
//  * integer ⊗ saturates, and the zero (dtype min for max_plus, max for
//    min_plus) absorbs.  Exactness costs instructions, so integer kernels
//    check each staged tile: when every value is "tame" (no ⊗ of two of them
//    can overflow or meet the zero) they take the fast path, else the exact one;
//  * ties go to the smallest k; a zero float result is stored as +0.0.

// How many k steps of a staged slice the square kernel unrolls.  Each step
// is TM×TN ⊗ and ⊕ in straight-line code, so a full unroll (BK steps) made
// ptxas the bulk of a first call's wait (over a second per kernel); four
// steps keep the loop's own cost to a few instructions per thousand.
// benchmarks/tune_tiles.py swaps this line to compare factors.
#define TG_UNROLL 4
typedef long long i64;
typedef unsigned long long u64;

namespace tg {

template <class T> struct Limits;
template <> struct Limits<float> {
  __device__ static float bottom() { return __int_as_float(0xff800000); }
  __device__ static float top() { return __int_as_float(0x7f800000); }
};
template <> struct Limits<double> {
  __device__ static double bottom() { return __longlong_as_double(0xfff0000000000000ULL); }
  __device__ static double top() { return __longlong_as_double(0x7ff0000000000000ULL); }
};
template <> struct Limits<int> {
  __device__ static int bottom() { return -2147483647 - 1; }
  __device__ static int top() { return 2147483647; }
};
template <> struct Limits<long long> {
  __device__ static long long bottom() { return -9223372036854775807LL - 1; }
  __device__ static long long top() { return 9223372036854775807LL; }
};

template <class T> struct IsFloat { static constexpr bool value = false; };
template <> struct IsFloat<float> { static constexpr bool value = true; };
template <> struct IsFloat<double> { static constexpr bool value = true; };

// ---------------------------------------------------------------- elementwise

__device__ __forceinline__ float op_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double op_max(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ int op_max(int a, int b) { return max(a, b); }
__device__ __forceinline__ long long op_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ float op_min(float a, float b) { return fminf(a, b); }
// ⊕ into an accumulator, which is never NaN: for doubles a compare-select is
// exact (a NaN candidate loses the comparison) and issues faster than fmax.
__device__ __forceinline__ float acc_max(float acc, float c) { return fmaxf(acc, c); }
__device__ __forceinline__ double acc_max(double acc, double c) { return c > acc ? c : acc; }
__device__ __forceinline__ int acc_max(int acc, int c) { return max(acc, c); }
__device__ __forceinline__ long long acc_max(long long acc, long long c) { return c > acc ? c : acc; }
__device__ __forceinline__ float acc_min(float acc, float c) { return fminf(acc, c); }
__device__ __forceinline__ double acc_min(double acc, double c) { return c < acc ? c : acc; }
__device__ __forceinline__ int acc_min(int acc, int c) { return min(acc, c); }
__device__ __forceinline__ long long acc_min(long long acc, long long c) { return c < acc ? c : acc; }
__device__ __forceinline__ double op_min(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ int op_min(int a, int b) { return min(a, b); }
__device__ __forceinline__ long long op_min(long long a, long long b) { return a < b ? a : b; }

__device__ __forceinline__ int sat_add(int a, int b) {
  long long s = (long long)a + (long long)b;
  return s > 2147483647LL ? 2147483647 : (s < -2147483648LL ? (-2147483647 - 1) : (int)s);
}
__device__ __forceinline__ long long sat_add(long long a, long long b) {
  long long s = (long long)((u64)a + (u64)b);
  bool overflow = ((a ^ s) & (b ^ s)) < 0;
  return overflow ? (a < 0 ? Limits<long long>::bottom() : Limits<long long>::top()) : s;
}
__device__ __forceinline__ int sat_mul(int a, int b) {
  long long p = (long long)a * (long long)b;
  return p > 2147483647LL ? 2147483647 : (p < -2147483648LL ? (-2147483647 - 1) : (int)p);
}
__device__ __forceinline__ long long sat_mul(long long a, long long b) {
  long long lo = (long long)((u64)a * (u64)b);
  long long hi = __mul64hi(a, b);
  if (hi == (lo >> 63)) return lo;
  return ((a < 0) != (b < 0)) ? Limits<long long>::bottom() : Limits<long long>::top();
}

// Values whose sums (or products) cannot overflow and cannot be the zero.
// The CPU engine uses the same bounds (engines/cpu.py: _is_tame).
template <class T> __device__ __forceinline__ bool tame_for_plus(T x) {
  const T limit = T(1) << (sizeof(T) * 8 - 2);
  return x >= -limit && x < limit;
}
template <class T> __device__ __forceinline__ bool tame_for_times(T x) {
  const T limit = T(1) << ((sizeof(T) * 8 - 2) / 2);
  return x >= -limit && x < limit;
}

// ------------------------------------------------------------------ semirings
//
// Each functor gives: zero(); add(acc, c) = acc ⊕ c; better(c, best) = c
// strictly beats best (argmax updates); mul_fast (exact on tame values or
// floats), mul_exact (exact on any value); mac(acc, a, b) = acc ⊕ (a ⊗ b) on
// the fast path; tame(x); kArithmetic: whether ⊗ can overflow at all.

struct MaxPlus {
  static constexpr bool kArithmetic = true;
  template <class T> __device__ static T zero() { return Limits<T>::bottom(); }
  template <class T> __device__ static T add(T acc, T c) { return acc_max(acc, c); }
  template <class T> __device__ static bool better(T c, T best) { return c > best; }
  template <class T> __device__ static T mul_fast(T a, T b) { return a + b; }
  template <class T> __device__ static T mul_exact(T a, T b) {
    if constexpr (IsFloat<T>::value) { return a + b; }
    else { return (a == zero<T>() || b == zero<T>()) ? zero<T>() : sat_add(a, b); }
  }
  template <class T> __device__ static T mac(T acc, T a, T b) {
    return add(acc, mul_fast(a, b));
  }
  template <class T> __device__ static bool tame(T x) { return tame_for_plus(x); }
};

struct MinPlus {
  static constexpr bool kArithmetic = true;
  template <class T> __device__ static T zero() { return Limits<T>::top(); }
  template <class T> __device__ static T add(T acc, T c) { return acc_min(acc, c); }
  template <class T> __device__ static bool better(T c, T best) { return c < best; }
  template <class T> __device__ static T mul_fast(T a, T b) { return a + b; }
  template <class T> __device__ static T mul_exact(T a, T b) {
    if constexpr (IsFloat<T>::value) { return a + b; }
    else { return (a == zero<T>() || b == zero<T>()) ? zero<T>() : sat_add(a, b); }
  }
  template <class T> __device__ static T mac(T acc, T a, T b) {
    return add(acc, mul_fast(a, b));
  }
  template <class T> __device__ static bool tame(T x) { return tame_for_plus(x); }
};

struct MaxMul {
  static constexpr bool kArithmetic = true;
  template <class T> __device__ static T zero() { return T(0); }
  template <class T> __device__ static T add(T acc, T c) { return acc_max(acc, c); }
  template <class T> __device__ static bool better(T c, T best) { return c > best; }
  template <class T> __device__ static T mul_fast(T a, T b) { return a * b; }
  template <class T> __device__ static T mul_exact(T a, T b) {
    if constexpr (IsFloat<T>::value) { return a * b; }
    else { return sat_mul(a, b); }
  }
  template <class T> __device__ static T mac(T acc, T a, T b) { return add(acc, mul_fast(a, b)); }
  template <class T> __device__ static bool tame(T x) { return tame_for_times(x); }
};

struct MaxMin {
  static constexpr bool kArithmetic = false;
  template <class T> __device__ static T zero() { return Limits<T>::bottom(); }
  template <class T> __device__ static T add(T acc, T c) { return acc_max(acc, c); }
  template <class T> __device__ static bool better(T c, T best) { return c > best; }
  template <class T> __device__ static T mul_fast(T a, T b) { return op_min(a, b); }
  template <class T> __device__ static T mul_exact(T a, T b) { return op_min(a, b); }
  template <class T> __device__ static T mac(T acc, T a, T b) { return add(acc, mul_fast(a, b)); }
  template <class T> __device__ static bool tame(T) { return true; }
  // Which operand the candidate took, for the gradient: the tie rule of
  // tropical_gemm/semirings.py (Semiring.winner_is_a), A on ties, NaN loses.
  template <class T> __device__ static bool winner_is_a(T a, T b) { return a <= b || b != b; }
};

struct MinMax {
  static constexpr bool kArithmetic = false;
  template <class T> __device__ static T zero() { return Limits<T>::top(); }
  template <class T> __device__ static T add(T acc, T c) { return acc_min(acc, c); }
  template <class T> __device__ static bool better(T c, T best) { return c < best; }
  template <class T> __device__ static T mul_fast(T a, T b) { return op_max(a, b); }
  template <class T> __device__ static T mul_exact(T a, T b) { return op_max(a, b); }
  template <class T> __device__ static T mac(T acc, T a, T b) { return add(acc, mul_fast(a, b)); }
  template <class T> __device__ static bool tame(T) { return true; }
  template <class T> __device__ static bool winner_is_a(T a, T b) { return a >= b || b != b; }
};

// Whether kernels for (SR, T) must check tiles and keep an exact path.
template <class SR, class T> struct NeedsExactPath {
  static constexpr bool value = SR::kArithmetic && !IsFloat<T>::value;
};

// A zero float result is stored as +0.0 whichever signed zero won (x + 0 is
// not folded without fast-math), so reduction order never shows in the bits.
template <class T> __device__ __forceinline__ T canonical(T x) {
  if constexpr (IsFloat<T>::value) { return x + T(0); }
  else { return x; }
}

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
};

// 16 bytes of T, so shared-memory fragments load as one 128-bit access.
template <class T> struct alignas(16) Vec16 { T v[16 / sizeof(T)]; };

// -------------------------------------------------------- forward: square tile
//
// One block computes a BM×BN tile of C over the whole of K; each thread owns
// TM×TN outputs held in registers, split into 16-byte chunks spread across the
// tile so that shared-memory reads are conflict-free 128-bit loads.  Tiles of
// A and B are staged through double-buffered shared memory, one barrier per
// BK step; the next tile's global loads are issued before the current tile is
// consumed.

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

template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BM, int BN, int BK, int TM, int TN>
struct SquareKernel {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static constexpr int CM = TM / V;  // 16-byte chunks per thread along M
  static constexpr int CN = TN / V;
  using LoadA = TileLoader<SR, T, A_ROW, BM, BK, THREADS, BM + V>;
  using LoadB = TileLoader<SR, T, !B_ROW, BN, BK, THREADS, BN + V>;
  static constexpr bool EXACT = NeedsExactPath<SR, T>::value;
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

  // One k step on every owned output.  WIDE picks the exact integer ⊗.
  template <bool WIDE>
  __device__ static void step(const Smem& s, int buf, int kk, int ty, int tx, T (&acc)[TM][TN]) {
    T a[TM], b[TN];
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
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        if constexpr (WIDE) acc[i][j] = SR::template add<T>(acc[i][j], SR::template mul_exact<T>(a[i], b[j]));
        else acc[i][j] = SR::template mac<T>(acc[i][j], a[i], b[j]);
      }
    }
  }

  // The exact (WIDE) path runs only on tiles holding extreme integers: its
  // k loop stays rolled, since unrolling its long saturating ⊗ sixteen times
  // multiplied the compile time (ptxas) for no speed that matters.
  template <bool WIDE>
  __device__ static void consume_values(const Smem& s, int buf, int steps, int ty, int tx, T (&acc)[TM][TN]) {
    if constexpr (WIDE) {
#pragma unroll 1
      for (int kk = 0; kk < steps; ++kk) step<WIDE>(s, buf, kk, ty, tx, acc);
    } else if (steps == BK) {
#pragma unroll TG_UNROLL
      for (int kk = 0; kk < BK; ++kk) step<WIDE>(s, buf, kk, ty, tx, acc);
    } else {
      for (int kk = 0; kk < steps; ++kk) step<WIDE>(s, buf, kk, ty, tx, acc);
    }
  }

  // The argmax variant reduces each BK-deep slice exactly as the plain
  // product does and records, per output, the last slice that strictly
  // improved its value: one compare and one select per output per slice,
  // instead of a compare and two selects per candidate.  That slice holds
  // the first k attaining the final value (ties keep the earlier k), and
  // ArgmaxResolve finds it there afterwards.
  template <bool WIDE>
  __device__ static void consume(const Smem& s, int buf, int steps, int ty, int tx, i64 slice,
                                 T (&acc)[TM][TN], int (&idx)[TM][TN]) {
    if constexpr (ARGMAX) {
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
          if (SR::template better<T>(acc[i][j], before[i][j])) idx[i][j] = (int)slice;
    } else {
      consume_values<WIDE>(s, buf, steps, ty, tx, acc);
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
        if (k_tiles > 1) { la.template load<false>(ra, tame, K); lb.template load<false>(rb, tame, K); }
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
        if constexpr (EXACT) {
          if (wild) consume<true>(s, buf, steps, ty, tx, kt, acc, idx);
          else consume<false>(s, buf, steps, ty, tx, kt, acc, idx);
        } else {
          consume<false>(s, buf, steps, ty, tx, kt, acc, idx);
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

      T* Cb = C + batch * M * N;
      int* Ib = ARGMAX ? IDX + batch * M * N : nullptr;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const i64 m = m0 + row_of(i, ty);
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const i64 n = n0 + col_of(j, tx);
          if (n >= N) continue;
          Cb[m * c_sm + n * c_sn] = canonical(acc[i][j]);
          if constexpr (ARGMAX) Ib[m * c_sm + n * c_sn] = idx[i][j];
        }
      }
    }
  }
};

// Second phase of the square argmax: IDX holds, per output, the BK-deep
// slice in which its value last strictly improved (or -1: never, the value
// is the zero).  The first k of that slice whose candidate equals C is the
// argmax.  Every ⊗ is recomputed with the exact rule, which equals the fast
// rule wherever the first phase used it.
template <class SR, class T>
__device__ void argmax_resolve(const T* __restrict__ A, const T* __restrict__ B, const T* __restrict__ C,
                               int* __restrict__ IDX, i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk,
                               i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt, int slice_depth) {
  const i64 per_batch = M * N;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < per_batch * batches;
       e += (i64)gridDim.x * blockDim.x) {
    const i64 batch = e / per_batch, m = (e % per_batch) / N, n = e % N;
    const i64 at = batch * per_batch + m * c_sm + n * c_sn;
    const int slice = IDX[at];
    if (slice < 0) continue;
    i64 a_off, b_off;
    bt.offsets(batch, a_off, b_off);
    const T target = C[at];
    const i64 k_end = ((i64)slice + 1) * slice_depth < K ? ((i64)slice + 1) * slice_depth : K;
    for (i64 k = (i64)slice * slice_depth; k < k_end; ++k) {
      const T cand = SR::template mul_exact<T>(A[a_off + m * a_sm + k * a_sk], B[b_off + k * b_sk + n * b_sn]);
      if (cand == target) { IDX[at] = (int)k; break; }
    }
  }
}

// -------------------------------------------------------- forward: skinny
//
// For products with few rows (the engine transposes C^T = B^T ⊗ A^T when N is
// the small side, which is exact because every ⊗ here commutes).  Each thread
// owns one column of C and TM rows; the TM×BK slice of A is staged in shared
// memory and read as broadcasts; B streams once from memory, coalesced when
// its rows are contiguous.  No lane idles on a tile edge beyond the last
// column block.

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
#pragma unroll
    for (int c = 0; c < TM / V; ++c) {
      Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(&sa[kk][c * V]);
#pragma unroll
      for (int x = 0; x < V; ++x) a[c * V + x] = v.v[x];
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
#pragma unroll 4
            for (int e = threadIdx.x; e < BK * BN; e += THREADS) {
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

// ------------------------------------------------------------------ backward
//
// The gradient of C[i,j] flows to its argmax k.  The atomic kernel gives one
// thread per output element, which adds into both gradients with atomics
// (one launch, G and IDX read once; fast, order varies).  The ordered
// kernels give one thread per row of grad_a (column of grad_b) and add in
// the CPU engine's order: batch ascending, then j (resp. i) ascending, so
// their bits match the CPU engine.

struct Backward {
  i64 M, N, K;
  i64 a_sm, a_sk, b_sk, b_sn;
  i64 batches;
  Batch bt;            // operand offsets of each broadcast batch entry
  i64 ga0, ga1, ga2;   // grad_a / grad_b batch strides (operand shapes, contiguous)
  i64 gb0, gb1, gb2;

  __device__ void grad_offsets(i64 batch, i64& ga_off, i64& gb_off) const {
    i64 i2 = batch % bt.d2;
    i64 rest = batch / bt.d2;
    i64 i1 = rest % bt.d1;
    i64 i0 = rest / bt.d1;
    ga_off = i0 * ga0 + i1 * ga1 + i2 * ga2;
    gb_off = i0 * gb0 + i1 * gb1 + i2 * gb2;
  }
};

// ⊗ of each semiring as the gradient sees it: 0 = +, 1 = ×, 2 = min or max.
template <class SR> struct MulKind;
template <> struct MulKind<MaxPlus> { static constexpr int value = 0; };
template <> struct MulKind<MinPlus> { static constexpr int value = 0; };
template <> struct MulKind<MaxMul> { static constexpr int value = 1; };
template <> struct MulKind<MaxMin> { static constexpr int value = 2; };
template <> struct MulKind<MinMax> { static constexpr int value = 2; };

// The contribution of one winning candidate to A (TO_A) or B; false = none.
template <class SR, class T, bool TO_A>
__device__ __forceinline__ bool contribution(T g, T a, T b, T& out) {
  if constexpr (MulKind<SR>::value == 0) { out = g; return true; }
  else if constexpr (MulKind<SR>::value == 1) { out = TO_A ? g * b : g * a; return true; }
  else {
    const bool a_won = SR::template winner_is_a<T>(a, b);
    out = g;
    return TO_A ? a_won : !a_won;
  }
}

template <class SR, class T>
__device__ void backward_atomic(const T* __restrict__ G, const T* __restrict__ A, const T* __restrict__ B,
                                const int* __restrict__ IDX, T* __restrict__ GRAD_A, T* __restrict__ GRAD_B,
                                const Backward& p) {
  const i64 per_batch = p.M * p.N;
  const i64 total = per_batch * p.batches;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const int k = IDX[e];
    // -1 means no winner; indices past K are skipped because the API cannot
    // range-check device arrays without stalling the stream.
    if (k < 0 || k >= p.K) continue;
    const i64 batch = e / per_batch, i = (e % per_batch) / p.N, j = e % p.N;
    i64 a_off, b_off, ga_off, gb_off;
    p.bt.offsets(batch, a_off, b_off);
    p.grad_offsets(batch, ga_off, gb_off);
    const T g = G[e];
    const T a = A[a_off + i * p.a_sm + k * p.a_sk];
    const T b = B[b_off + k * p.b_sk + j * p.b_sn];
    T c;
    if (contribution<SR, T, true>(g, a, b, c)) atomicAdd(&GRAD_A[ga_off + i * p.K + k], c);
    if (contribution<SR, T, false>(g, a, b, c)) atomicAdd(&GRAD_B[gb_off + k * p.N + j], c);
  }
}

// One thread per (operand batch, row i of grad_a) or (operand batch, column j of grad_b).
template <class SR, class T, bool TO_A>
__device__ void backward_ordered(const T* __restrict__ G, const T* __restrict__ A, const T* __restrict__ B,
                                 const int* __restrict__ IDX, T* __restrict__ GRAD, const Backward& p,
                                 i64 operand_batches) {
  const i64 lines = TO_A ? p.M : p.N;
  const i64 owners = operand_batches * lines;
  const i64 per_batch = p.M * p.N;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < owners; t += (i64)gridDim.x * blockDim.x) {
    const i64 own_batch = t / lines, line = t % lines;
    const i64 own_off = own_batch * (TO_A ? p.M * p.K : p.K * p.N);
    for (i64 batch = 0; batch < p.batches; ++batch) {
      i64 a_off, b_off, ga_off, gb_off;
      p.grad_offsets(batch, ga_off, gb_off);
      if ((TO_A ? ga_off : gb_off) != own_off) continue;
      p.bt.offsets(batch, a_off, b_off);
      const i64 others = TO_A ? p.N : p.M;
      for (i64 o = 0; o < others; ++o) {
        const i64 i = TO_A ? line : o, j = TO_A ? o : line;
        const i64 e = batch * per_batch + i * p.N + j;
        const int k = IDX[e];
        if (k < 0 || k >= p.K) continue;
        const T a = A[a_off + i * p.a_sm + k * p.a_sk];
        const T b = B[b_off + k * p.b_sk + j * p.b_sn];
        T c;
        if (!contribution<SR, T, TO_A>(G[e], a, b, c)) continue;
        if (TO_A) GRAD[own_off + i * p.K + k] += c;
        else GRAD[own_off + k * p.N + j] += c;
      }
    }
  }
}

}  // namespace tg
