// tropical_gemm: the stream family's forward kernel: the pipelined kernel
// (pipelined.cuh), its tiles' slices shared out evenly over one wave of
// blocks (stream-K).
// Header map: preamble.cuh.

namespace tg {

// ------------------------------------------------------------ stream-K
//
// Where a launch's tiles would leave the SMs' wave part empty, the host
// (engines/cuda/plan.py: stream_work) cuts every tile's slices into equal
// shares, one per block of a grid the GPU holds at once (Stream-K, Osama
// et al. 2023): every SM then computes about as many slices, whatever the
// shape.  A share covers the end of one tile, whole tiles, and the start
// of another; a tile cut between blocks is a partial in each.  Each block
// writes its partials to the workspace, and the last contributor of a
// tile to finish (counted by an atomic, which the host zeroed) ⊕s them in
// k order and stores the tile: no block ever waits for another, so a grid
// larger than the GPU holds at once is as correct, only slower.  ⊕ is
// exact and associative, so the values are those of one block; the argmax
// folds the partials as fold_slice folds slices.
//
// Workspace, laid out by the host: one int counter per tile at its start;
// at values_offset two partial tiles per block (its first and its last
// tile: those between are whole), each thread's values strided by THREADS
// so that a block's stores and loads coalesce; at index_offset the
// argmaxes, alike.
template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BM, int BN, int BK, int TM, int TN, int UNROLL,
          int STAGES, int SMEM_BYTES>
struct StreamedKernel : PipelinedKernel<SR, T, ARGMAX, A_ROW, B_ROW, BM, BN, BK, TM, TN, UNROLL, STAGES, SMEM_BYTES> {
  using Base = PipelinedKernel<SR, T, ARGMAX, A_ROW, B_ROW, BM, BN, BK, TM, TN, UNROLL, STAGES, SMEM_BYTES>;
  using Smem = typename Base::Smem;
  using Problem = typename Base::Problem;
  using Place = typename Base::Place;
  static constexpr int THREADS = Base::THREADS;

  struct Stream {
    unsigned char* work;
    int iters;
    i64 values_offset, index_offset;
    static constexpr i64 PER_TILE = (i64)THREADS * TM * TN;
    // The block whose share holds slice `it`: the last whose share starts at or before it.
    __device__ i64 owner(i64 it) const { return ((it + 1) * gridDim.x - 1) / iters; }
    __device__ int first(i64 block) const { return (int)(block * iters / gridDim.x); }
    // Where block b's partial of stream-K tile u starts (its first tile's, else its last's).
    __device__ i64 slot(i64 b, i64 u, i64 k_tiles) const { return (2 * b + (first(b) / k_tiles != u)) * PER_TILE; }
  };

  // A partial of stream-K tile u into the workspace; whether this block was the tile's last contributor to
  // finish, in which case acc and idx hold the whole tile's ⊕ and argmax on return (merge).
  __device__ static bool merge_partial(const Stream& w, i64 u, i64 k_tiles, T (&acc)[TM][TN], int (&idx)[TM][TN]) {
    T* values = reinterpret_cast<T*>(w.work + w.values_offset);
    int* indices = reinterpret_cast<int*>(w.work + w.index_offset);
    const i64 lo = w.owner(u * k_tiles), hi = w.owner((u + 1) * k_tiles - 1);
    const i64 mine = w.slot(blockIdx.x, u, k_tiles) + threadIdx.x;
    put_partial(values, indices, mine, acc, idx);
    __threadfence();  // the partial is visible to the device before the counter says so
    __syncthreads();
    int* counter = reinterpret_cast<int*>(w.work) + u;
    if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(counter, 1) == (int)(hi - lo))) return false;
    __threadfence();
    // Tile u is the first tile of every contributor but lo, whose share may start in an earlier tile.
    merge(values, indices, w.slot(lo, u, k_tiles) + threadIdx.x, lo, hi, mine);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i][j] = values[mine + (i * TN + j) * THREADS];
        if constexpr (ARGMAX) idx[i][j] = indices[mine + (i * TN + j) * THREADS];
      }
    return true;
  }

  // This thread's values of a partial tile in the workspace, from `at` on (strided by THREADS).
  __device__ static void put_partial(T* values, int* indices, i64 at, const T (&acc)[TM][TN],
                                     const int (&idx)[TM][TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        values[at + (i * TN + j) * THREADS] = acc[i][j];
        if constexpr (ARGMAX) indices[at + (i * TN + j) * THREADS] = idx[i][j];
      }
  }

  // The ⊕ of contributors lo .. hi's partials of a tile (this thread's values of them), in k order as
  // fold_slice folds a tile's slices, into the partial at `into`.  Not inlined: its registers (a
  // partial's values loaded with no dependence between them, so that they are in flight together) are
  // its own, and the main loop's are not spent on it.
  __device__ __noinline__ static void merge(T* values, int* indices, i64 lo_at, i64 lo, i64 hi, i64 into) {
    T acc[TM][TN];
    int idx[TM][TN];
    Base::clear(acc, idx);
    for (i64 b = lo; b <= hi; ++b) {
      const i64 from = b == lo ? lo_at : 2 * b * Stream::PER_TILE + threadIdx.x;
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const T v = __ldcg(values + from + (i * TN + j) * THREADS);
          if constexpr (ARGMAX) {
            const int k = __ldcg(indices + from + (i * TN + j) * THREADS);
            if (SR::template better<T>(v, acc[i][j])) idx[i][j] = k;
          }
          acc[i][j] = SR::template add<T>(acc[i][j], v);
        }
    }
    put_partial(values, indices, into, acc, idx);
  }

  // The stream family's launch: this block's share of every tile's slices (iters of them, fewer than 2**31:
  // the host's stream_work), a tile's part at a time.
  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                      int* __restrict__ IDX, unsigned char* __restrict__ WORK, i64 M, i64 N, i64 K,
                                      i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches,
                                      const Batch& bt, i64 values_offset, i64 index_offset) {
    Smem& s = *reinterpret_cast<Smem*>(dynamic_shared());
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const Problem p = Base::problem(A, B, C, IDX, M, N, K, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, bt);
    // The schedule's state lives in local memory (volatile), read and written once a part: in registers
    // it stayed live through the main loop, whose accumulators it pushed out to local memory instead.
    volatile int iters = (int)(p.tiles_m * p.tiles_n * batches * p.k_tiles);
    volatile int next = Stream{WORK, iters, values_offset, index_offset}.first(blockIdx.x);
    volatile bool whole;
    for (;;) {
      const Stream w{WORK, iters, values_offset, index_offset};
      const int it = next, end = w.first(blockIdx.x + 1);
      if (it >= end) break;
      const i64 kt0 = it % p.k_tiles, kt1 = kt0 + (end - it) < p.k_tiles ? kt0 + (end - it) : p.k_tiles;
      next = it + (int)(kt1 - kt0);
      whole = kt0 == 0 && kt1 == p.k_tiles;
      const Place at = Base::place(p, it / p.k_tiles);
      T acc[TM][TN];
      int idx[TM][TN];
      Base::template accumulate<false>(s, p, at, kt0, kt1, ty, tx, acc, idx);
      if (whole || merge_partial(Stream{WORK, iters, values_offset, index_offset}, (next - 1) / p.k_tiles, p.k_tiles,
                                 acc, idx))
        Base::store(p.out, at, ty, tx, acc, idx);
    }
  }
};

}  // namespace tg
