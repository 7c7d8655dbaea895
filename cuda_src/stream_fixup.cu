// The stream-K fixup (streamed.cuh): every tile the stream kernel's blocks cut between them, its partials ⊕ed in
// k order and stored in C, their argmax folded as fold_slice folds slices (IDX null: no argmax): ${name}
// WORK: the stream kernel's workspace (a FixupJob per stream block, then the partials at values_offset and their
// argmaxes at index_offset); blocks: the stream kernel's grid.  The tile stream block b finished is taken by
// `parts` blocks here, a band of its rows each, so that enough loads are in flight to hide their latency.
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const unsigned char* __restrict__ WORK, ${T}* __restrict__ C, int* __restrict__ IDX, i64 values_offset,
    i64 index_offset, i64 M, i64 N, i64 c_sm, i64 c_sn, i64 bm, i64 bn, i64 blocks, i64 parts) {
  typedef ${semiring} SR;
  const ${T}* P = reinterpret_cast<const ${T}*>(WORK + values_offset);
  const int* PI = reinterpret_cast<const int*>(WORK + index_offset);
  const int n_parts = (int)parts, width = (int)bn, band = ((int)bm + n_parts - 1) / n_parts;
  for (int job = blockIdx.x; job < (int)(blocks * parts); job += gridDim.x) {
    const int b = job / n_parts, r0 = (job - b * n_parts) * band;
    const tg::FixupJob task = reinterpret_cast<const tg::FixupJob*>(WORK)[b];
    if (task.lo < 0) continue;  // no cut tile ends in block b's share
    const i64 m0 = task.m0 + r0, out = task.batch * M * N;
    const int rows = (int)min((i64)min(band, (int)bm - r0), M - m0), cols = (int)min(bn, N - task.n0);
    // GROUP outputs a thread: their partials' loads, independent, are in flight together.
    constexpr int GROUP = 4;
    for (int e0 = threadIdx.x; e0 < rows * width; e0 += GROUP * blockDim.x) {
      ${T} best[GROUP];
      int winner[GROUP];
      int in_tile[GROUP];
      bool live[GROUP];
#pragma unroll
      for (int q = 0; q < GROUP; ++q) {
        const int e = e0 + q * blockDim.x, r = e / width, c = e - r * width;
        live[q] = e < rows * width && c < cols;
        in_tile[q] = live[q] ? (r0 + r) * width + c : 0;
        best[q] = SR::template zero<${T}>();
        winner[q] = -1;
      }
      // Contributor `from`'s partial: lo's in its slot of this tile (lo's share may start in an earlier tile),
      // each later one's in its first slot, 2·from.
      for (i64 from = task.lo; from <= b; ++from) {
        const i64 part = (from == task.lo ? task.lo_slot : 2 * from) * bm * bn;
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
        C[out + (m0 + r) * c_sm + (task.n0 + c) * c_sn] = tg::canonical(best[q]);
        if (IDX != nullptr) IDX[out + (m0 + r) * c_sm + (task.n0 + c) * c_sn] = winner[q];
      }
    }
  }
}
