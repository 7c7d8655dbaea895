// What the instruction-set builds of the tile kernels (isa_*.cpp) share with
// the Python module (module.cpp): plain data and the table's layout, no code.
#pragma once

namespace tropical_native {

using Index = long long;  // 64 bits on every platform

constexpr Index KB = 256, NB = 512;                  // panel of B: rows (ks) by columns
constexpr Index KB_ARGMAX = 1024, NB_ARGMAX = 512;   // with argmax: taller, so the first-k pass runs about once per entry

// Values in one packed panel of B for a tile of ``width`` columns.
constexpr Index panel_values(Index k, Index width, bool argmax) {
    const Index kb = argmax ? KB_ARGMAX : KB, nb = argmax ? NB_ARGMAX : NB;
    return (k < kb ? (k > 0 ? k : 1) : kb) * (width < nb ? width : nb);
}

// Bytes of scratch a tile needs: its panel, then a spare row of values and one of 8-byte indices.
constexpr Index scratch_bytes(Index k, Index width, bool argmax, Index itemsize) {
    return panel_values(k, width, argmax) * itemsize + (argmax ? NB_ARGMAX : NB) * (itemsize + 8);
}

struct Operand {            // a strided 2-D view: byte strides, any sign
    const char* data;
    Index s0, s1;
};

struct Tile {
    Operand a, b;
    char* out;              // C-contiguous rows of n values
    char* idx;              // C-contiguous rows of n indices (argmax only)
    Index k, n, r0, r1, c0, c1;
    const void* scalars;    // the semiring's zero, then the value type's lowest and highest value
    void* panel;            // scratch_bytes(...): a packed panel of B and a spare row
};

using TileFn = void (*)(const Tile&);

// A variant's index in a table: its bits, from the lowest, are argmax (1),
// saturating (1), ⊗ (2: plus, times, min, max), ⊕ (1: max, min), int64 argmax
// (1), value type (2: float32, float64, int32, int64).
constexpr int VARIANTS = 256;

struct Table {
    TileFn fn[VARIANTS];
};

extern const Table table_base;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
extern const Table table_avx2;
extern const Table table_avx512;
#endif

}  // namespace tropical_native
