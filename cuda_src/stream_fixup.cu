// The stream-K fixup (streamed.cuh): every tile the stream kernel's blocks cut between them, its partials ⊕ed in
// k order and stored in C, their argmax folded as fold_slice folds slices (IDX null: no argmax): ${name}
// P (PI): two partial tiles of bm × bn per stream block, row-major; blocks: the stream kernel's grid.  The tile
// that stream block b finished, if b's share started inside it, is taken by `parts` blocks here, a band of its
// rows each: enough blocks in flight to hide the loads' latency, as one block per tile did not.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const ${T}* __restrict__ P, const int* __restrict__ PI, ${T}* __restrict__ C, int* __restrict__ IDX,
    i64 M, i64 N, i64 c_sm, i64 c_sn, i64 batches, i64 tiles_m, i64 tiles_n, i64 k_tiles, i64 bm, i64 bn,
    i64 blocks, i64 parts) {
  typedef ${semiring} SR;
  const tg::StreamShares shares{tiles_m * tiles_n * batches * k_tiles, blocks};
  for (i64 job = blockIdx.x; job < blocks * parts; job += gridDim.x) {
    const i64 b = job / parts, start = shares.first(b), tile = start / k_tiles;
    if (start % k_tiles == 0 || shares.owner((tile + 1) * k_tiles - 1) != b) continue;  // no cut tile ends here
    // Contributor c's partial: lo's in its slot of this tile (lo's share may start in an earlier tile), each
    // later one's in its first slot, 2c.
    const i64 lo = shares.owner(tile * k_tiles), lo_slot = shares.slot(lo, tile, k_tiles);
    const tg::TilePlace at = tg::tile_place(tile, tiles_m, tiles_n);
    const i64 band = (bm + parts - 1) / parts, r0 = (job % parts) * band, m0 = at.row * bm + r0, n0 = at.col * bn;
    const int rows = (int)min(min(band, bm - r0), M - m0), cols = (int)min(bn, N - n0), width = (int)bn;
    const i64 out = at.batch * M * N;
    // GROUP outputs a thread: their partials' loads, independent, are in flight together.
    constexpr int GROUP = 4;
    for (int e0 = threadIdx.x; e0 < rows * width; e0 += GROUP * blockDim.x) {
      ${T} best[GROUP];
      int winner[GROUP];
      i64 in_tile[GROUP];
      bool live[GROUP];
#pragma unroll
      for (int q = 0; q < GROUP; ++q) {
        const int e = e0 + q * blockDim.x, r = e / width, c = e - r * width;
        live[q] = e < rows * width && c < cols;
        in_tile[q] = live[q] ? (r0 + r) * bn + c : 0;
        best[q] = SR::template zero<${T}>();
        winner[q] = -1;
      }
      for (i64 from = lo; from <= b; ++from) {
        const i64 part = (from == lo ? lo_slot : 2 * from) * bm * bn;
#pragma unroll
        for (int q = 0; q < GROUP; ++q) {
          const ${T} v = P[part + in_tile[q]];
          if (IDX != nullptr && SR::template better<${T}>(v, best[q])) winner[q] = PI[part + in_tile[q]];
          best[q] = SR::template add<${T}>(best[q], v);
        }
      }
#pragma unroll
      for (int q = 0; q < GROUP; ++q) {
        if (!live[q]) continue;
        const int e = e0 + q * blockDim.x, r = e / width, c = e - r * width;
        C[out + (m0 + r) * c_sm + (n0 + c) * c_sn] = tg::canonical(best[q]);
        if (IDX != nullptr) IDX[out + (m0 + r) * c_sm + (n0 + c) * c_sn] = winner[q];
      }
    }
  }
}
