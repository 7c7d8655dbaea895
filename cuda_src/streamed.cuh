// tropical_gemm: the stream family's forward kernel: the pipelined kernel
// (pipelined.cuh), its tiles' slices shared out evenly over one wave of
// blocks (stream-K); stream_fixup.cu merges the tiles cut between blocks.
// Header map: preamble.cuh.

namespace tg {

// ------------------------------------------------------------ stream-K
//
// Where a launch's tiles would leave the SMs' wave part empty, the host
// (engines/cuda/plan.py: stream_work) cuts every tile's slices into equal
// shares, one per block of a grid the GPU holds at once (Stream-K, Osama
// et al. 2023): every SM then computes about as many slices, whatever the
// shape.  A share covers the end of one tile, whole tiles, and the start
// of another.  A tile inside one share is stored by its block; a tile cut
// between blocks is a partial in each, which the block puts in the
// workspace, and the fixup kernel that follows (stream_fixup.cu) ⊕s a cut
// tile's partials in k order and stores it.  ⊕ is exact and associative, so
// the values are those of one block; the argmax folds the partials as
// fold_slice folds slices.  The merge is a launch of its own, not the
// work of a tile's last block: in the kernel, with its counters, fences and
// loads, it made ptxas spill the main loop's registers and took a third of
// the kernel's compile.
//
// Workspace, laid out by the host: a FixupJob per block; two partial tiles
// per block (the first and the last tile of its share: those between are
// whole), each BM × BN values in the tile's row-major order; then their
// argmaxes, alike.
struct StreamShares {
  i64 iters, blocks;  // the launch's slices (tiles × k_tiles) and blocks
  // The first slice of block b's share; the block whose share holds slice `it`: the last whose share starts
  // at or before it.
  __device__ i64 first(i64 b) const { return b * iters / blocks; }
  __device__ i64 owner(i64 it) const { return ((it + 1) * blocks - 1) / iters; }
  // The slot of block b's partial of tile u: 2b for the first tile of b's share, 2b + 1 for its last.
  __device__ i64 slot(i64 b, i64 u, i64 k_tiles) const { return 2 * b + (first(b) / k_tiles != u); }
};

// What the fixup does for stream block b, which the block works out (its 64-bit divisions, a few thousand
// cycles, would stall each fixup block before its loads): the tile b's share starts inside, where b finishes it
// (lo: the tile's first contributor, lo_slot: that one's slot of it; its corner batch, m0, n0); else lo is -1.
struct FixupJob {
  i64 lo, lo_slot, batch, m0, n0;
};
static_assert(sizeof(FixupJob) == 40, "engines/cuda/plan.py: FIXUP_JOB_BYTES");

template <class SR, class T, bool ARGMAX, bool A_ROW, bool B_ROW, int BM, int BN, int BK, int TM, int TN, int UNROLL,
          int STAGES, int SMEM_BYTES>
struct StreamedKernel
    : PipelinedKernel<SR, T, ARGMAX, A_ROW, B_ROW, BM, BN, BK, TM, TN, UNROLL, STAGES, SMEM_BYTES, 0, false> {
  using Base = PipelinedKernel<SR, T, ARGMAX, A_ROW, B_ROW, BM, BN, BK, TM, TN, UNROLL, STAGES, SMEM_BYTES, 0, false>;
  using Smem = typename Base::Smem;
  using Problem = typename Base::Problem;
  using Place = typename Base::Place;
  using StageA = typename Base::StageA;
  using StageB = typename Base::StageB;

  // This thread's outputs of a partial tile into its slot of the workspace, at their places in the tile.
  __device__ static void put_partial(T* values, int* indices, i64 slot, int ty, int tx, const T (&acc)[TM][TN],
                                     const int (&idx)[TM][TN]) {
    const i64 first = slot * BM * BN;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const i64 at = first + StageA::line_of(i, ty) * BN + StageB::line_of(j, tx);
        values[at] = acc[i][j];
        if constexpr (ARGMAX) indices[at] = idx[i][j];
      }
  }

  __device__ static FixupJob fixup_job(const Problem& p, const StreamShares& shares) {
    const i64 start = shares.first(blockIdx.x), tile = start / p.k_tiles;
    if (start % p.k_tiles == 0 || shares.owner((tile + 1) * p.k_tiles - 1) != blockIdx.x)
      return FixupJob{-1, 0, 0, 0, 0};
    const i64 lo = shares.owner(tile * p.k_tiles);
    const Place at = Base::place(p, tile);
    return FixupJob{lo, shares.slot(lo, tile, p.k_tiles), at.batch, at.m0, at.n0};
  }

  // The stream family's launch: this block's share of every tile's slices (fewer than 2**31 in all: the
  // host's stream_work), a tile's part at a time.
  __device__ static void run(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                             int* __restrict__ IDX, unsigned char* __restrict__ WORK, i64 M, i64 N, i64 K, i64 a_sm,
                             i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn, i64 batches, const Batch& bt,
                             i64 values_offset, i64 index_offset) {
    Smem& s = *reinterpret_cast<Smem*>(dynamic_shared());
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const Problem p = Base::problem(A, B, C, IDX, M, N, K, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, bt);
    const typename Base::Runs& vec = Base::runs(p);
    // The schedule's state lives in local memory (volatile), read and written once a part: in registers
    // it stayed live through the main loop, whose accumulators it pushed out to local memory instead.
    // `end`, where the share ends, too: worked out again each part, ptxas kept it in a register or spilled it.
    volatile int iters = (int)(p.tiles_m * p.tiles_n * batches * p.k_tiles);
    volatile int next = (int)StreamShares{iters, gridDim.x}.first(blockIdx.x);
    volatile int share_end = (int)StreamShares{iters, gridDim.x}.first(blockIdx.x + 1);
    for (;;) {
      const StreamShares shares{iters, gridDim.x};
      const int it = next, end = share_end;
      if (it >= end) break;
      const i64 kt0 = it % p.k_tiles, kt1 = kt0 + (end - it) < p.k_tiles ? kt0 + (end - it) : p.k_tiles;
      next = it + (int)(kt1 - kt0);
      const i64 tile = it / p.k_tiles;
      const Place at = Base::place(p, tile);
      // Where the part goes once computed (C at the tile's corner, or the workspace's slot; -1: C), kept in
      // local memory through its main loop as the schedule's state is: in registers, ptxas pushed values of
      // the slice loop out to local memory instead.
      const KeptCorner<true> kept{at.batch, at.m0, at.n0};
      volatile i64 kept_slot = kt0 == 0 && kt1 == p.k_tiles ? -1 : shares.slot(blockIdx.x, tile, p.k_tiles);
      T acc[TM][TN];
      int idx[TM][TN];
      Base::accumulate(s, p, vec, at, kt0, kt1, ty, tx, acc, idx);
      const i64 slot = kept_slot;
      if (slot < 0)
        Base::store(p.out, Place{kept.batch, kept.m0, kept.n0}, ty, tx, acc, idx);
      else
        put_partial(reinterpret_cast<T*>(WORK + values_offset), reinterpret_cast<int*>(WORK + index_offset),
                    slot, ty, tx, acc, idx);
    }
    // Once the share is done: at the start, its divisions held the whole block back.
    if (threadIdx.x == 0) reinterpret_cast<FixupJob*>(WORK)[blockIdx.x] = fixup_job(p, {iters, gridDim.x});
  }
};

}  // namespace tg
