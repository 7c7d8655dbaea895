// einsum's configuration walk, one thread per output element, every step in one launch: ${name}
//
// The host walk (tropical_gemm/einsum/backtrack.py) read on the device. TABLE (int64, built by
// tropical_gemm/einsum/device_walk.py) holds, after a header [rank, steps, labels, all_dead,
// check_zero, config_wide]: the output's sizes and C strides and the strides of RESULT (rank each),
// each configured label's array address and whether some step chooses it (labels each), then per
// step, last first: [argmax address, argmax is int64, argmax size, reads, writes], reads pairs of
// (source, stride) -- source >= 0 a label's array, < 0 output axis -1-source -- and writes pairs of
// (label, size), the step's chosen labels in order. A read of -1 (nothing won) makes the element
// dead, as is one whose RESULT is ZERO (check_zero) or every element (all_dead): all its labels
// read -1, and it stops there, so a live element's positions are exact (wrapped into the argmax
// anyway, as numpy's take(mode="wrap") would, so that no read leaves it). An element walks its
// own labels only, so the labels' arrays hold the known values on the way.
namespace tg_walk {

__device__ __forceinline__ i64 coordinate(const i64* __restrict__ table, i64 e, i64 axis) {
  const i64 rank = table[0];
  return (e / table[6 + rank + axis]) % table[6 + axis];
}

__device__ __forceinline__ i64 load(i64 address, bool wide, i64 e) {
  return wide ? ((const i64*)address)[e] : (i64)((const int*)address)[e];
}

__device__ __forceinline__ void store(i64 address, bool wide, i64 e, i64 value) {
  if (wide) {
    ((i64*)address)[e] = value;
  } else {
    ((int*)address)[e] = (int)value;
  }
}

}  // namespace tg_walk

extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const i64* __restrict__ table, const ${T}* __restrict__ result, ${T} zero, i64 total) {
  const i64 rank = table[0], steps = table[1], labels = table[2];
  const bool wide = table[5] != 0;
  const i64* addresses = table + 6 + 3 * rank;
  const i64* chosen = addresses + labels;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    bool dead = table[3] != 0;
    if (!dead && table[4] != 0) {
      i64 at = 0;
      for (i64 d = 0; d < rank; ++d) at += tg_walk::coordinate(table, e, d) * table[6 + 2 * rank + d];
      dead = result[at] == zero;
    }
    const i64* step = chosen + labels;
    for (i64 s = 0; s < steps && !dead; ++s) {
      const i64 reads = step[3], writes = step[4];
      const i64 size = step[2];
      i64 flat = 0;
      for (i64 r = 0; r < reads; ++r) {
        const i64 source = step[5 + 2 * r], stride = step[6 + 2 * r];
        const i64 value = source >= 0 ? tg_walk::load(addresses[source], wide, e)
                                      : tg_walk::coordinate(table, e, -1 - source);
        flat += value * stride;
      }
      if (size <= 0) {
        dead = true;
        break;
      }
      flat %= size;
      if (flat < 0) flat += size;
      flat = tg_walk::load(step[0], step[1] != 0, flat);
      if (flat < 0) {
        dead = true;
        break;
      }
      const i64* out = step + 5 + 2 * reads;
      for (i64 w = writes - 1; w >= 0; --w) {
        const i64 k = out[2 * w + 1];
        tg_walk::store(addresses[out[2 * w]], wide, e, flat % k);
        flat /= k;
      }
      step = out + 2 * writes;
    }
    for (i64 j = 0; j < labels; ++j) {
      if (dead) {
        tg_walk::store(addresses[j], wide, e, -1);
      } else if (chosen[j] == 0) {
        tg_walk::store(addresses[j], wide, e, 0);
      }
    }
  }
}
