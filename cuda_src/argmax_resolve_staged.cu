// The argmax's second phase where a tile of outputs' rows and columns fit in shared memory (a short K):
// ${name}.  `edge` × `edge` outputs a block, `pitch` values a staged line (staged.cuh: argmax_resolve_staged).
// Four blocks an SM, as many as their shared memory lets in at the shortest K: left to itself, ptxas held
// the float64 kernel to 32 registers and spilled.
extern "C" __global__ void __launch_bounds__(${threads}, 4) ${name}(
    const ${T}* __restrict__ A, const ${T}* __restrict__ B, const ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 K, i64 a_sm, i64 a_sk, i64 b_sk, i64 b_sn, i64 c_sm, i64 c_sn,
    i64 batches, i64 d1, i64 d2, i64 a0, i64 a1, i64 a2, i64 b0, i64 b1, i64 b2, int slice_depth, int edge,
    int pitch) {
  const tg::Batch bt{d1, d2, a0, a1, a2, b0, b1, b2};
  tg::argmax_resolve_staged<${semiring}, ${T}>(A, B, C, IDX, M, N, K, a_sm, a_sk, b_sk, b_sn, c_sm, c_sn, batches,
                                               bt, slice_depth, edge, pitch);
}
