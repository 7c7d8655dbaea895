// The stream-K fixup (streamed.cuh): every tile the stream kernel's blocks cut between them, its partials ⊕ed in
// k order and stored in C, their argmax folded as fold_slice folds slices (IDX and PI null: no argmax): ${name}
// P (PI): two partial tiles of bm × bn per stream block, row-major; blocks: the stream kernel's grid.  Block b
// here takes the tile that stream block b finished, if b's share started inside it: that tile's last part.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ P, const int* __restrict__ PI, ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 c_sm, i64 c_sn, i64 batches, i64 tiles_m, i64 tiles_n, i64 k_tiles, i64 bm, i64 bn,
    i64 blocks) {
  typedef ${semiring} SR;
  const tg::StreamShares shares{tiles_m * tiles_n * batches * k_tiles, blocks};
  for (i64 b = blockIdx.x; b < blocks; b += gridDim.x) {
    const i64 start = shares.first(b), tile = start / k_tiles;
    if (start % k_tiles == 0 || shares.owner((tile + 1) * k_tiles - 1) != b) continue;  // no cut tile ends here
    const i64 lo = shares.owner(tile * k_tiles);
    const tg::TilePlace at = tg::tile_place(tile, tiles_m, tiles_n);
    const i64 m0 = at.row * bm, n0 = at.col * bn, out = at.batch * M * N;
    for (i64 e = threadIdx.x; e < bm * bn; e += blockDim.x) {
      const i64 m = m0 + e / bn, n = n0 + e % bn;
      if (m >= M || n >= N) continue;
      ${T} best = SR::template zero<${T}>();
      int winner = -1;
      for (i64 c = lo; c <= b; ++c) {
        const i64 from = shares.slot(c, tile, k_tiles) * bm * bn + e;
        const ${T} v = P[from];
        if (IDX != nullptr && SR::template better<${T}>(v, best)) winner = PI[from];
        best = SR::template add<${T}>(best, v);
      }
      C[out + m * c_sm + n * c_sn] = tg::canonical(best);
      if (IDX != nullptr) IDX[out + m * c_sm + n * c_sn] = winner;
    }
  }
}
