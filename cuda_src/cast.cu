// Half-precision storage, converted by bits (no cuda_fp16.h, so no include path): ${name}
//
// float16 products compute in float32 and round once (docs/semantics.md says
// why that is exact). widen: float16 -> float32, exact, from an array of any
// strides (up to 6 dimensions, leading ones padded with size 1) into a
// C-contiguous one. narrow: float32 -> float16, round to nearest even,
// overflow to +-inf, NaN kept quiet with its sign, between C-contiguous arrays.
namespace tg_cast {

__device__ __forceinline__ float half_to_float(unsigned short h) {
  const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  const unsigned int exponent = (h >> 10) & 0x1fu;
  const unsigned int mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float32
    return __uint_as_float(__float_as_uint((float)mantissa * 5.9604644775390625e-8f) | sign);
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ __forceinline__ unsigned short float_to_half_rn(float f) {
  const unsigned int bits = __float_as_uint(f);
  const unsigned int sign = (bits >> 16) & 0x8000u;
  const unsigned int magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // NaN
  if (magnitude >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 (and inf) rounds to inf
  if (magnitude >= 0x38800000u) {  // a normal half: drop 13 bits, to nearest even; a carry bumps the exponent
    const unsigned int rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return (unsigned short)(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Below 2^-14: a subnormal half m * 2^-24 (m = 1024 is the smallest normal). The scaling is
  // exact, and __float2uint_rn rounds to nearest even.
  return (unsigned short)(sign | __float2uint_rn(__uint_as_float(magnitude) * 16777216.0f));
}

}  // namespace tg_cast

#if ${widen}
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const unsigned short* __restrict__ src, float* __restrict__ dst, i64 n,
    i64 s0, i64 s1, i64 s2, i64 s3, i64 s4, i64 s5, i64 t0, i64 t1, i64 t2, i64 t3, i64 t4, i64 t5) {
  const i64 sizes[6] = {s0, s1, s2, s3, s4, s5};
  const i64 strides[6] = {t0, t1, t2, t3, t4, t5};
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 rest = i, offset = 0;
    for (int d = 5; d >= 0; --d) {
      offset += (rest % sizes[d]) * strides[d];
      rest /= sizes[d];
    }
    dst[i] = tg_cast::half_to_float(src[offset]);
  }
}
#else
extern "C" __global__ void __launch_bounds__(${threads}) ${name}(
    const float* __restrict__ src, unsigned short* __restrict__ dst, i64 n) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    dst[i] = tg_cast::float_to_half_rn(src[i]);
  }
}
#endif
