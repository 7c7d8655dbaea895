// The tile kernels for x86-64 with AVX-512 (F, BW, DQ, VL; chosen at run time, see module.cpp).
#include <utility>
#include "tile_api.h"
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2")
#define ISA_TABLE table_avx512
#include "isa_table.inc"
#endif
