// The CPU engine's tile kernels, compiled ahead of time: the same loop nest as
// the numba kernels (../kernels.py), one instantiation per variant.
//
// Included once per instruction set (isa_*.cpp) after a `#pragma GCC target`,
// inside a namespace of that file's own and an anonymous one: every function
// here has internal linkage, so the linker can never merge the AVX-512 copy of
// a helper into the baseline build (one definition per instruction set).
// Include no standard header below the pragma, for the same reason.
//
// Semantics, shared bit for bit with the numba kernels and the CUDA engine: a
// candidate replaces the accumulator only when strictly better (ties keep the
// smallest k, NaN never wins); min/max as ⊗ ignore NaN (numpy's fmin/fmax);
// saturating integers with the zero absorbing; a zero result is +0.0.

namespace {

enum Add { MAX = 0, MIN = 1 };
enum Mul { PLUS = 0, TIMES = 1, OMIN = 2, OMAX = 3 };

using tropical_native::Index;
constexpr Index GROUP = 8;  // ks per argmax step
using tropical_native::KB;
using tropical_native::NB;
using tropical_native::KB_ARGMAX;
using tropical_native::NB_ARGMAX;
using tropical_native::Operand;
using tropical_native::Tile;

inline Index lmin(Index x, Index y) { return x < y ? x : y; }

template <typename T>
inline unsigned long long magnitude(T x) {
    return x >= 0 ? (unsigned long long)x : (unsigned long long)(-(x + 1)) + 1ull;
}

// Overflow is decided before the arithmetic: signed overflow is undefined.
template <typename T>
inline T saturating_add(T x, T y, T zero, T lo, T hi) {
    if (x == zero || y == zero) return zero;
    if (y > 0 && x > hi - y) return hi;
    if (y < 0 && x < lo - y) return lo;
    return x + y;
}

template <typename T>
inline T saturating_mul(T x, T y, T lo, T hi) {
    bool negative = (x < 0) != (y < 0);
    unsigned long long limit = negative ? (unsigned long long)hi + 1ull : (unsigned long long)hi;
    unsigned long long ux = magnitude(x);
    if (ux != 0 && magnitude(y) > limit / ux) return negative ? lo : hi;
    return x * y;
}

template <typename T, int MUL, bool SAT>
inline T mul(T x, T y, T zero, T lo, T hi) {
    if constexpr (MUL == PLUS) {
        if constexpr (SAT) return saturating_add(x, y, zero, lo, hi); else return x + y;
    } else if constexpr (MUL == TIMES) {
        if constexpr (SAT) return saturating_mul(x, y, lo, hi); else return x * y;
    } else if constexpr (MUL == OMIN) {
        return (y < x || x != x) ? y : x;
    } else {
        return (y > x || x != x) ? y : x;
    }
}

template <typename T, int ADD>
inline bool better(T t, T c) { if constexpr (ADD == MAX) return t > c; else return t < c; }

template <typename T, int ADD, int MUL, bool SAT>
inline T fold4(T c, T x0, T x1, T x2, T x3, T y0, T y1, T y2, T y3, T zero, T lo, T hi) {
    T t = mul<T, MUL, SAT>(x0, y0, zero, lo, hi); c = better<T, ADD>(t, c) ? t : c;
    t = mul<T, MUL, SAT>(x1, y1, zero, lo, hi); c = better<T, ADD>(t, c) ? t : c;
    t = mul<T, MUL, SAT>(x2, y2, zero, lo, hi); c = better<T, ADD>(t, c) ? t : c;
    t = mul<T, MUL, SAT>(x3, y3, zero, lo, hi); return better<T, ADD>(t, c) ? t : c;
}

template <typename T>
inline T at(const Operand& x, Index i, Index k) { return *(const T*)(x.data + i * x.s0 + k * x.s1); }

// Rows o0 and o1 of C (rows i and ii of A) folded with the panel's ks k0..k1, four at a time.
template <typename T, int ADD, int MUL, bool SAT>
void pass4(const Operand& a, const T* __restrict panel, T* __restrict o0, T* __restrict o1,
           Index i, Index ii, Index k0, Index k1, Index w, T zero, T lo, T hi) {
    for (Index k = k0; k < k1; k += 4) {
        Index ka = lmin(k + 1, k1 - 1), kb = lmin(k + 2, k1 - 1), kc = lmin(k + 3, k1 - 1);
        const T* __restrict b0 = panel + (k - k0) * w;
        const T* __restrict b1 = panel + (ka - k0) * w;
        const T* __restrict b2 = panel + (kb - k0) * w;
        const T* __restrict b3 = panel + (kc - k0) * w;
        T x0 = at<T>(a, i, k), x1 = at<T>(a, i, ka), x2 = at<T>(a, i, kb), x3 = at<T>(a, i, kc);
        T z0 = at<T>(a, ii, k), z1 = at<T>(a, ii, ka), z2 = at<T>(a, ii, kb), z3 = at<T>(a, ii, kc);
#pragma GCC ivdep
#pragma GCC unroll 4
        for (Index j = 0; j < w; ++j) {
            T y0 = b0[j], y1 = b1[j], y2 = b2[j], y3 = b3[j];
            o0[j] = fold4<T, ADD, MUL, SAT>(o0[j], x0, x1, x2, x3, y0, y1, y2, y3, zero, lo, hi);
            o1[j] = fold4<T, ADD, MUL, SAT>(o1[j], z0, z1, z2, z3, y0, y1, y2, y3, zero, lo, hi);
        }
    }
}

// As pass4, GROUP ks at a time, recording in i0 (i1) the first k of the group
// that last improved each entry: one compare per group, not per candidate.
template <typename T, typename I, int ADD, int MUL, bool SAT>
void pass_groups(const Operand& a, const T* __restrict panel, T* __restrict o0, T* __restrict o1,
                 I* __restrict i0, I* __restrict i1, Index i, Index ii, Index k0, Index k1, Index w,
                 T zero, T lo, T hi) {
    for (Index k = k0; k < k1; k += GROUP) {
        const Index k1m = k1 - 1;
        const Index q1 = lmin(k + 1, k1m), q2 = lmin(k + 2, k1m), q3 = lmin(k + 3, k1m), q4 = lmin(k + 4, k1m);
        const Index q5 = lmin(k + 5, k1m), q6 = lmin(k + 6, k1m), q7 = lmin(k + 7, k1m);
        const T* __restrict b0 = panel + (k - k0) * w;
        const T* __restrict b1 = panel + (q1 - k0) * w;
        const T* __restrict b2 = panel + (q2 - k0) * w;
        const T* __restrict b3 = panel + (q3 - k0) * w;
        const T* __restrict b4 = panel + (q4 - k0) * w;
        const T* __restrict b5 = panel + (q5 - k0) * w;
        const T* __restrict b6 = panel + (q6 - k0) * w;
        const T* __restrict b7 = panel + (q7 - k0) * w;
        const T x0 = at<T>(a, i, k), x1 = at<T>(a, i, q1), x2 = at<T>(a, i, q2), x3 = at<T>(a, i, q3);
        const T x4 = at<T>(a, i, q4), x5 = at<T>(a, i, q5), x6 = at<T>(a, i, q6), x7 = at<T>(a, i, q7);
        const T z0 = at<T>(a, ii, k), z1 = at<T>(a, ii, q1), z2 = at<T>(a, ii, q2), z3 = at<T>(a, ii, q3);
        const T z4 = at<T>(a, ii, q4), z5 = at<T>(a, ii, q5), z6 = at<T>(a, ii, q6), z7 = at<T>(a, ii, q7);
        const I group = (I)k;
#pragma GCC ivdep
#pragma GCC unroll 4
        for (Index j = 0; j < w; ++j) {
            T y0 = b0[j], y1 = b1[j], y2 = b2[j], y3 = b3[j];
            T y4 = b4[j], y5 = b5[j], y6 = b6[j], y7 = b7[j];
            T c = o0[j];
            T v = fold4<T, ADD, MUL, SAT>(c, x0, x1, x2, x3, y0, y1, y2, y3, zero, lo, hi);
            v = fold4<T, ADD, MUL, SAT>(v, x4, x5, x6, x7, y4, y5, y6, y7, zero, lo, hi);
            i0[j] = better<T, ADD>(v, c) ? group : i0[j];
            o0[j] = v;
            T d = o1[j];
            T u = fold4<T, ADD, MUL, SAT>(d, z0, z1, z2, z3, y0, y1, y2, y3, zero, lo, hi);
            u = fold4<T, ADD, MUL, SAT>(u, z4, z5, z6, z7, y4, y5, y6, y7, zero, lo, hi);
            i1[j] = better<T, ADD>(u, d) ? group : i1[j];
            o1[j] = u;
        }
    }
}

// The winning groups found in this panel become the first k whose candidate
// equals C: within a group a candidate replaced the best only when strictly
// better, so that is the smallest k, as the tie rule asks.  Indices from
// earlier panels are below k0 and stay.
template <typename T, typename I, int MUL, bool SAT>
void first_winners(const Operand& a, const T* panel, Index w, Index k0, Index k1, Index i,
                   const T* row, I* row_idx, T zero, T lo, T hi) {
    for (Index j = 0; j < w; ++j) {
        Index q = (Index)row_idx[j];
        if (q >= k0) {
            T value = row[j];
            Index first = q;
            for (Index g = GROUP - 1; g >= 0; --g) {
                Index k = lmin(q + g, k1 - 1);
                T t = mul<T, MUL, SAT>(at<T>(a, i, k), panel[(k - k0) * w + j], zero, lo, hi);
                first = t == value ? k : first;
            }
            row_idx[j] = (I)first;
        }
    }
}

// One tile of C, and of its argmax, from A and B.  Odd rows and ks left over at
// the edges repeat a row or a k: ⊕ is idempotent and a repeated candidate only
// ties, so the result is unchanged and ties still keep the smallest k.
template <typename T, typename I, int ADD, int MUL, bool SAT, bool ARGMAX, bool FLOATING>
void tile(const Tile& t) {
    const T* s = (const T*)t.scalars;
    const T zero = s[0], lo = s[1], hi = s[2];
    constexpr Index kb_size = ARGMAX ? KB_ARGMAX : KB, nb_size = ARGMAX ? NB_ARGMAX : NB;
    T* out = (T*)t.out;
    I* idx = (I*)t.idx;
    for (Index i = t.r0; i < t.r1; ++i)
        for (Index j = t.c0; j < t.c1; ++j) {
            out[i * t.n + j] = zero;
            if constexpr (ARGMAX) idx[i * t.n + j] = (I)-1;
        }
    T* panel = (T*)t.panel;                         // panel_values(...) values, then a spare row and its indices
    T* spare = panel + tropical_native::panel_values(t.k, t.c1 - t.c0, ARGMAX);
    I* spare_idx = (I*)(spare + nb_size);
    for (Index j0 = t.c0; j0 < t.c1; j0 += nb_size) {
        const Index j1 = lmin(j0 + nb_size, t.c1), w = j1 - j0;
        for (Index k0 = 0; k0 < t.k; k0 += kb_size) {
            const Index k1 = lmin(k0 + kb_size, t.k);
            for (Index k = k0; k < k1; ++k)
                for (Index j = 0; j < w; ++j) panel[(k - k0) * w + j] = at<T>(t.b, k, j0 + j);
            for (Index i = t.r0; i < t.r1; i += 2) {
                // Rows go in pairs; a last odd row pairs with a copy of itself in scratch
                // (the loops' rows must not alias), whose result is dropped.
                const bool pair = i + 1 < t.r1;
                T* o0 = out + i * t.n + j0;
                T* o1 = pair ? o0 + t.n : spare;
                if (!pair) for (Index j = 0; j < w; ++j) spare[j] = o0[j];
                if constexpr (ARGMAX) {
                    I* i0 = idx + i * t.n + j0;
                    I* i1 = pair ? i0 + t.n : spare_idx;
                    if (!pair) for (Index j = 0; j < w; ++j) spare_idx[j] = i0[j];
                    pass_groups<T, I, ADD, MUL, SAT>(t.a, panel, o0, o1, i0, i1, i, pair ? i + 1 : i, k0, k1, w,
                                                     zero, lo, hi);
                    first_winners<T, I, MUL, SAT>(t.a, panel, w, k0, k1, i, o0, i0, zero, lo, hi);
                    if (pair) first_winners<T, I, MUL, SAT>(t.a, panel, w, k0, k1, i + 1, o1, i1, zero, lo, hi);
                } else {
                    pass4<T, ADD, MUL, SAT>(t.a, panel, o0, o1, i, pair ? i + 1 : i, k0, k1, w, zero, lo, hi);
                }
            }
        }
    }
    if constexpr (FLOATING)
        for (Index i = t.r0; i < t.r1; ++i)
            for (Index j = t.c0; j < t.c1; ++j) out[i * t.n + j] += (T)0;  // a zero result is +0.0
}

}  // namespace
