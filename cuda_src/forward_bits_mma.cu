// Forward product of the boolean semiring on tensor cores: ${name}
// AP holds A's rows and BP B's columns packed 32 ks to a word by pack_bits, C-contiguous:
// AP[batch][M][W], BP[batch][N][W], batch strides in words (0 where an operand broadcasts); W is a
// multiple of 8 (one mma's 256 ks: the engine packs the pad words, all 0).  C[m, n] is whether
// popcount over k of (A[m, k] AND B[k, n]) is nonzero: mma.sync m16n8k256 .b1 .and.popc does 32768
// boolean multiply-adds an instruction, where the integer pipe's LOP3 does 32 a thread.  Same
// arguments as forward_bits.cu (IDX unused: the argmax takes that kernel).
// A block computes BM x BN outputs with 4 warps, each a 64 x 64 tile of 4 x 8 mma fragments; slices of
// BK words of its A rows and B columns go through two shared-memory stages by cp.async, rows padded to
// BK + 4 words so that ldmatrix's eight 16-byte rows fall in distinct banks.  Counts stay below K < 2**31.
// The instructions need sm_80; on older GPUs the engine launches forward_bits.cu instead, and this
// kernel, still in the catalogue of every architecture, compiles there to a trap.
#if __CUDA_ARCH__ >= 800
// 16 bytes from global to shared memory, or 16 zero bytes where FULL is false (src is then not read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* src, bool full) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(full ? 16 : 0));
}

// Four 8 x 16-byte matrices from shared memory; lane L gives the row address of matrix L / 8, and
// receives word L % 4 of row L / 4 of each.
__device__ __forceinline__ void ldmatrix_x4(const void* smem, unsigned (&r)[4]) {
  const unsigned at = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}
#endif

extern "C" __global__ void __launch_bounds__(${threads}, ${min_blocks}) ${name}(
    const unsigned* __restrict__ AP, const unsigned* __restrict__ BP, bool* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 W, i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2) {
#if __CUDA_ARCH__ >= 800
  constexpr int BM = ${bm}, BN = ${bn}, BK = ${bk}, THREADS = ${threads};
  constexpr int WM = 64, WN = 64, MI = WM / 16, NJ = WN / 8, STRIDE = BK + 4, CHUNKS = BK / 4;
  static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "one warp per 64 x 64 outputs");
  static_assert(BK % 8 == 0 && (BM * CHUNKS) % THREADS == 0 && (BN * CHUNKS) % THREADS == 0, "whole mma slices");
  __shared__ __align__(16) unsigned As[2][BM][STRIDE];
  __shared__ __align__(16) unsigned Bs[2][BN][STRIDE];

  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  const i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const i64 per_batch = tiles_m * tiles_n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int g = lane / 4, t = lane % 4;
  const i64 slices = (W + BK - 1) / BK;

  for (i64 tile = blockIdx.x; tile < per_batch * batches; tile += gridDim.x) {
    const tg::Batch::Tile at = bt.tile(tile, tiles_n, per_batch, BM, BN);
    const i64 batch = at.batch, m0 = at.m0, n0 = at.n0;
    const unsigned* ap = AP + at.a_off;
    const unsigned* bp = BP + at.b_off;

    // Slice s of both operands into stage `buf`: 16-byte chunks, 0 past M, N or W.
    auto stage = [&](i64 s, int buf) {
#pragma unroll
      for (int r = 0; r < BM * CHUNKS / THREADS; ++r) {
        const int e = threadIdx.x + r * THREADS, line = e / CHUNKS, word = (e % CHUNKS) * 4;
        const bool ok = m0 + line < M && s * BK + word < W;
        cp_async_16(&As[buf][line][word], ok ? ap + (m0 + line) * W + s * BK + word : ap, ok);
      }
#pragma unroll
      for (int r = 0; r < BN * CHUNKS / THREADS; ++r) {
        const int e = threadIdx.x + r * THREADS, line = e / CHUNKS, word = (e % CHUNKS) * 4;
        const bool ok = n0 + line < N && s * BK + word < W;
        cp_async_16(&Bs[buf][line][word], ok ? bp + (n0 + line) * W + s * BK + word : bp, ok);
      }
      asm volatile("cp.async.commit_group;\n" ::);
    };

    int acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0;

    if (slices > 0) stage(0, 0);
    for (i64 s = 0; s < slices; ++s) {
      const int buf = (int)(s & 1);
      if (s + 1 < slices) {
        stage(s + 1, buf ^ 1);  // its stage was last read before the previous iteration's closing barrier
        asm volatile("cp.async.wait_group 1;\n" ::);
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::);
      }
      __syncthreads();
#pragma unroll
      for (int k8 = 0; k8 < BK; k8 += 8) {
        unsigned a[MI][4], b[NJ][2];
#pragma unroll
        for (int i = 0; i < MI; ++i)  // rows +0..7 / +8..15 (lane / 8 % 2), words +0..3 / +4..7 (lane / 16)
          ldmatrix_x4(&As[buf][wm0 + 16 * i + lane % 8 + (lane / 8 % 2) * 8][k8 + (lane / 16) * 4], a[i]);
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {  // two fragments: columns +0..7 / +8..15 (lane / 16), words (lane / 8 % 2)
          unsigned q[4];
          ldmatrix_x4(&Bs[buf][wn0 + 8 * j + lane % 8 + (lane / 16) * 8][k8 + (lane / 8 % 2) * 4], q);
          b[j][0] = q[0]; b[j][1] = q[1]; b[j + 1][0] = q[2]; b[j + 1][1] = q[3];
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
            asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+r"(acc[i][j][0]), "+r"(acc[i][j][1]), "+r"(acc[i][j][2]), "+r"(acc[i][j][3])
                         : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
      }
      __syncthreads();  // every warp is done with this stage before the next iteration refills it
    }

    // Fragment (i, j): rows g and g + 8, columns 2t and 2t + 1 of its 16 x 8 outputs.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = m0 + wm0 + 16 * i + g + 8 * h;
        if (row >= M) continue;
        bool* c_row = C + (batch * M + row) * N;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const i64 col = n0 + wn0 + 8 * j + 2 * t;
          const bool x = acc[i][j][2 * h] != 0, y = acc[i][j][2 * h + 1] != 0;
          if (col + 1 < N && (N % 2 == 0)) {  // both in one 2-byte store (N even: it is aligned)
            *reinterpret_cast<unsigned short*>(c_row + col) = (unsigned short)(x | (y << 8));
          } else {
            if (col < N) c_row[col] = x;
            if (col + 1 < N) c_row[col + 1] = y;
          }
        }
      }
    }
  }
#else
  __trap();
#endif
}
