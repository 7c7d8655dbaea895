// Forward product of the boolean semiring on bit-packed operands, register-tiled: ${name}
// AP holds A's rows and BP B's columns, each packed 32 ks to a word by pack_bits (bit j of word w is
// k = 32 w + j; bits past K are 0), C-contiguous: AP[batch][M][W], BP[batch][N][W], batch strides in words
// (0 where an operand broadcasts).  C[m, n] = OR over w of (AP[m][w] AND BP[n][w]) != 0: the functor's mac
// on words, one instruction for 32 multiply-adds.  A block computes BM x BN outputs, each thread TM x TN
// of them, from BK words of its rows and columns staged in shared memory as [word][line] (the next
// slice's words already on their way into registers while this one is computed).  A thread's
// lines are TM / 4 (TN / 4) runs of 4, spread BM / (TM / 4) apart, so each run loads as one uint4 and
// the 8 threads of a 128-bit load phase read 128 consecutive bytes.  With the argmax, each entry keeps
// the first k that makes it true: the lowest set bit of the first nonzero AND (words are visited in
// ascending order), -1 while it is false; C and IDX are C-contiguous [batch][M][N].
// Word e of a slice, for the thread that holds it: line e / BK of the tile, word w0 + e % BK; 0 off the edges.
template <int LINES, int BK, int THREADS, int PER>
__device__ __forceinline__ void fetch_words(const unsigned* __restrict__ p, i64 line0, i64 lines, i64 w0, i64 W,
                                            unsigned (&out)[PER]) {
  static_assert(LINES * BK == PER * THREADS, "every thread fetches the same number of words");
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const int e = threadIdx.x + r * THREADS;
    const i64 line = line0 + e / BK, word = w0 + e % BK;
    out[r] = (line < lines && word < W) ? p[line * W + word] : 0u;
  }
}

// The fetched words into shared memory as [word][line].
template <int LINES, int BK, int THREADS, int PER, int STRIDE>
__device__ __forceinline__ void stage_words(const unsigned (&words)[PER], unsigned (&s)[BK][STRIDE]) {
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const int e = threadIdx.x + r * THREADS;
    s[e % BK][e / BK] = words[r];
  }
}

extern "C" __global__ void __launch_bounds__(${threads}, ${min_blocks}) ${name}(
    const unsigned* __restrict__ AP, const unsigned* __restrict__ BP, bool* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 W, i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2) {
  typedef ${semiring} SR;
  constexpr bool kArgmax = ${argmax};
  constexpr int BM = ${bm}, BN = ${bn}, BK = ${bk}, TM = ${tm}, TN = ${tn}, THREADS = ${threads};
  constexpr int PAD = 4;  // keeps the [word][line] stores free of bank conflicts, and rows 16-byte aligned
  constexpr int A_SPREAD = BM / (TM / 4), B_SPREAD = BN / (TN / 4);
  constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS;
  static_assert(TM % 4 == 0 && TN % 4 == 0 && (BM + PAD) % 4 == 0 && (BN + PAD) % 4 == 0, "uint4 loads");
  static_assert((BM / TM) * (BN / TN) == THREADS, "one thread per TM x TN outputs");
  __shared__ __align__(16) unsigned As[BK][BM + PAD];
  __shared__ __align__(16) unsigned Bs[BK][BN + PAD];

  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  const i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const i64 per_batch = tiles_m * tiles_n;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);

  for (i64 tile = blockIdx.x; tile < per_batch * batches; tile += gridDim.x) {
    const tg::Batch::Tile at = bt.tile(tile, tiles_n, per_batch, BM, BN);
    const i64 batch = at.batch, m0 = at.m0, n0 = at.n0;
    const unsigned* ap = AP + at.a_off;
    const unsigned* bp = BP + at.b_off;

    unsigned acc[TM][TN];
    int idx[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i][j] = SR::template zero<unsigned>();
        idx[i][j] = -1;
      }
    }

    // Each slice's words are fetched into registers while the previous slice is computed.
    unsigned a_next[A_PER], b_next[B_PER];
    fetch_words<BM, BK, THREADS>(ap, m0, M, 0, W, a_next);
    fetch_words<BN, BK, THREADS>(bp, n0, N, 0, W, b_next);
    for (i64 w0 = 0; w0 < W; w0 += BK) {
      __syncthreads();  // every thread is done reading the previous slice
      stage_words<BM, BK, THREADS>(a_next, As);
      stage_words<BN, BK, THREADS>(b_next, Bs);
      __syncthreads();
      if (w0 + BK < W) {
        fetch_words<BM, BK, THREADS>(ap, m0, M, w0 + BK, W, a_next);
        fetch_words<BN, BK, THREADS>(bp, n0, N, w0 + BK, W, b_next);
      }
#pragma unroll ${unroll}
      for (int w = 0; w < BK; ++w) {
        unsigned a[TM], b[TN];
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) {
          const uint4 q = *reinterpret_cast<const uint4*>(&As[w][g * A_SPREAD + ty * 4]);
          a[4 * g] = q.x; a[4 * g + 1] = q.y; a[4 * g + 2] = q.z; a[4 * g + 3] = q.w;
        }
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
          const uint4 q = *reinterpret_cast<const uint4*>(&Bs[w][g * B_SPREAD + tx * 4]);
          b[4 * g] = q.x; b[4 * g + 1] = q.y; b[4 * g + 2] = q.z; b[4 * g + 3] = q.w;
        }
        if constexpr (kArgmax) {
          const int base = (int)((w0 + w) * 32);  // K < 2**31 for an argmax (the engine checks)
#pragma unroll
          for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
              const unsigned both = SR::template mul_fast<unsigned>(a[i], b[j]);
              idx[i][j] = (idx[i][j] < 0 && both != 0u) ? base + __ffs(both) - 1 : idx[i][j];
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < TM; ++i) {
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = SR::template mac<unsigned>(acc[i][j], a[i], b[j]);
          }
        }
      }
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const i64 row = m0 + (i / 4) * A_SPREAD + ty * 4 + i % 4;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const i64 col = n0 + (j / 4) * B_SPREAD + tx * 4 + j % 4;
        if (row < M && col < N) {
          const i64 at = (batch * M + row) * N + col;
          if constexpr (kArgmax) {
            C[at] = idx[i][j] >= 0;
            IDX[at] = idx[i][j];
          } else {
            C[at] = acc[i][j] != 0u;
          }
        }
      }
    }
  }
}
