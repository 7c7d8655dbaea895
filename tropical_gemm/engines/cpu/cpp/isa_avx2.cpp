// The tile kernels for x86-64 with AVX2 and FMA (chosen at run time, see module.cpp).
#include <utility>
#include "tile_api.h"
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("avx2,fma,bmi,bmi2")
#define ISA_TABLE table_avx2
#include "isa_table.inc"
#endif
