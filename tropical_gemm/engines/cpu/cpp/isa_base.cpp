// The tile kernels for the compiler's baseline target (SSE2 on x86-64).
#include <utility>
#include "tile_api.h"
#define ISA_TABLE table_base
#define ISA_SATURATING
#include "isa_table.inc"
