// tropical_gemm.engines.cpu._native: the tile kernels compiled ahead of time.
//
// One function, tile(), runs one tile of one variant with the GIL released
// (the engine's own thread pool runs tiles side by side).  The instruction set
// is chosen once, at import, from what the CPU supports; no threads, no global
// state beyond that choice, so a fork at any time leaves a working child.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <cstring>

#include "tile_api.h"

using namespace tropical_native;

namespace {

struct Isa {
    const char* name;
    const Table* table;
    bool supported;
};

Isa isas[3];
int n_isas = 0;
const Isa* chosen = nullptr;

void find_isas() {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    isas[n_isas++] = Isa{"avx512", &table_avx512, avx512};
    isas[n_isas++] = Isa{"avx2", &table_avx2, avx2};
#endif
    isas[n_isas++] = Isa{"baseline", &table_base, true};
    for (int i = 0; i < n_isas && !chosen; ++i)
        if (isas[i].supported) chosen = &isas[i];
}

const Py_ssize_t ITEMSIZE[4] = {4, 8, 4, 8};

struct Buffers {
    Py_buffer views[7];
    int held = 0;
    ~Buffers() {
        for (int i = 0; i < held; ++i) PyBuffer_Release(&views[i]);
    }
    Py_buffer* get(PyObject* obj, int flags) {
        if (PyObject_GetBuffer(obj, &views[held], flags) != 0) return nullptr;
        return &views[held++];
    }
};

bool check_2d(const Py_buffer* v, Py_ssize_t itemsize, const char* name) {
    if (v->ndim != 2 || v->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "tile: %s must be 2-D with %zd-byte items", name, itemsize);
        return false;
    }
    return true;
}

bool c_contiguous_rows(const Py_buffer* v, const char* name) {
    if (v->strides[1] != v->itemsize || (v->shape[0] > 1 && v->strides[0] != v->shape[1] * v->itemsize)) {
        PyErr_Format(PyExc_ValueError, "tile: %s must be C-contiguous", name);
        return false;
    }
    return true;
}

PyObject* tile(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "tile(variant, a, b, out, idx, r0, r1, c0, c1, scalars) takes 10 arguments");
        return nullptr;
    }
    long variant = PyLong_AsLong(args[0]);
    Index bounds[4];
    for (int i = 0; i < 4; ++i) bounds[i] = PyLong_AsLongLong(args[5 + i]);
    if (PyErr_Occurred()) return nullptr;
    if (variant < 0 || variant >= VARIANTS) {
        PyErr_SetString(PyExc_ValueError, "tile: no such variant");
        return nullptr;
    }
    const bool argmax = variant & 1;
    const Py_ssize_t itemsize = ITEMSIZE[(variant >> 6) & 3], idx_itemsize = ((variant >> 5) & 1) ? 8 : 4;
    Buffers buffers;
    Py_buffer* a = buffers.get(args[1], PyBUF_STRIDES);
    Py_buffer* b = a ? buffers.get(args[2], PyBUF_STRIDES) : nullptr;
    Py_buffer* out = b ? buffers.get(args[3], PyBUF_STRIDES | PyBUF_WRITABLE) : nullptr;
    Py_buffer* idx = out ? buffers.get(args[4], PyBUF_STRIDES | PyBUF_WRITABLE) : nullptr;
    Py_buffer* scalars = idx ? buffers.get(args[9], PyBUF_SIMPLE) : nullptr;
    if (!scalars) return nullptr;
    if (!check_2d(a, itemsize, "a") || !check_2d(b, itemsize, "b") || !check_2d(out, itemsize, "out") ||
        !c_contiguous_rows(out, "out"))
        return nullptr;
    if (argmax && (!check_2d(idx, idx_itemsize, "idx") || !c_contiguous_rows(idx, "idx")))
        return nullptr;
    const Index m = out->shape[0], n = out->shape[1], k = a->shape[1];
    const Index r0 = bounds[0], r1 = bounds[1], c0 = bounds[2], c1 = bounds[3];
    if (a->shape[0] != m || b->shape[0] != k || b->shape[1] != n ||
        (argmax && (idx->shape[0] != m || idx->shape[1] != n)) ||
        !(0 <= r0 && r0 <= r1 && r1 <= m && 0 <= c0 && c0 <= c1 && c1 <= n) ||
        scalars->len != 3 * itemsize) {
        PyErr_SetString(PyExc_ValueError, "tile: shapes, bounds or scalars do not agree");
        return nullptr;
    }
    if (r0 == r1 || c0 == c1) Py_RETURN_NONE;
    void* panel = std::malloc((size_t)scratch_bytes(k, c1 - c0, argmax, itemsize));
    if (!panel) return PyErr_NoMemory();
    Tile t{{(const char*)a->buf, (Index)a->strides[0], (Index)a->strides[1]},
           {(const char*)b->buf, (Index)b->strides[0], (Index)b->strides[1]},
           (char*)out->buf, argmax ? (char*)idx->buf : nullptr, k, n, r0, r1, c0, c1, scalars->buf, panel};
    TileFn fn = chosen->table->fn[variant] ? chosen->table->fn[variant] : table_base.fn[variant];
    if (!fn) {
        std::free(panel);
        PyErr_SetString(PyExc_ValueError, "tile: variant not built (variant() returns None for it)");
        return nullptr;
    }
    Py_BEGIN_ALLOW_THREADS
    fn(t);
    Py_END_ALLOW_THREADS
    std::free(panel);
    Py_RETURN_NONE;
}

// The backward loops' arguments: a code (float32: 0, float64: 1; +4 for an int64 argmax) then 2-D buffers
// of the given item sizes (0: the code's value size, 8: the argmax's index size), the last `writable` of them
// written; those in `contiguous` (a bit each) C-contiguous.  False, with the Python error set, if any is off.
bool backward_arguments(const char* fn, PyObject* const* args, int count, const char* const* names,
                        const int* sizes, int writable, unsigned contiguous, Buffers& buffers, const Py_buffer** v,
                        long* code) {
    *code = PyLong_AsLong(args[0]);
    if (PyErr_Occurred()) return false;
    if (*code < 0 || *code >= 8 || (*code & 2)) {
        PyErr_Format(PyExc_ValueError, "%s: no such code", fn);
        return false;
    }
    for (int i = 0; i < count; ++i) {
        const Py_ssize_t size = sizes[i] == 0 ? ITEMSIZE[*code & 3] : sizes[i] == 8 ? ((*code & 4) ? 8 : 4) : sizes[i];
        v[i] = buffers.get(args[1 + i], PyBUF_STRIDES | (i >= count - writable ? PyBUF_WRITABLE : 0));
        if (!v[i] || !check_2d(v[i], size, names[i]) || (((contiguous >> i) & 1) && !c_contiguous_rows(v[i], names[i])))
            return false;
    }
    return true;
}

// The backward's scatter: grad_a[i, k] += to_a[i, j] and grad_b[k, j] += to_b[i, j] for
// k = argmax[i, j] >= 0, as routes[i, j] says (bit 0: A, bit 1: B), in row-major (i, j) order,
// in the operands' float type: the order of additions the CUDA engine's deterministic mode reproduces.
template <typename T, typename I>
void scatter_rows(const I* argmax, const T* to_a, const T* to_b, const unsigned char* routes, T* grad_a, T* grad_b,
                  Index m, Index n, Index k) {
    for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
            const Index w = (Index)argmax[i * n + j];
            if (w < 0 || w >= k) continue;
            const unsigned char route = routes[i * n + j];
            if (route & 1) grad_a[i * k + w] += to_a[i * n + j];
            if (route & 2) grad_b[w * n + j] += to_b[i * n + j];
        }
}

template <typename T>
void scatter_typed(bool wide_index, const Py_buffer* const* v, Index m, Index n, Index k) {
    const T* to_a = (const T*)v[1]->buf;
    const T* to_b = (const T*)v[2]->buf;
    const unsigned char* routes = (const unsigned char*)v[3]->buf;
    T* grad_a = (T*)v[4]->buf;
    T* grad_b = (T*)v[5]->buf;
    if (wide_index)
        scatter_rows<T, long long>((const long long*)v[0]->buf, to_a, to_b, routes, grad_a, grad_b, m, n, k);
    else
        scatter_rows<T, int>((const int*)v[0]->buf, to_a, to_b, routes, grad_a, grad_b, m, n, k);
}

PyObject* scatter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "scatter(code, argmax, to_a, to_b, routes, grad_a, grad_b) takes 7 arguments");
        return nullptr;
    }
    static const char* const names[] = {"argmax", "to_a", "to_b", "routes", "grad_a", "grad_b"};
    static const int sizes[] = {8, 0, 0, 1, 0, 0};
    Buffers buffers;
    const Py_buffer* v[6];
    long code;
    if (!backward_arguments("scatter", args, 6, names, sizes, 2, 0x3f, buffers, v, &code)) return nullptr;
    const Index m = v[0]->shape[0], n = v[0]->shape[1], k = v[4]->shape[1];
    for (int i = 1; i < 4; ++i)
        if (v[i]->shape[0] != m || v[i]->shape[1] != n) {
            PyErr_SetString(PyExc_ValueError, "scatter: to_a, to_b and routes must be shaped like argmax");
            return nullptr;
        }
    if (v[4]->shape[0] != m || v[5]->shape[0] != k || v[5]->shape[1] != n) {
        PyErr_SetString(PyExc_ValueError, "scatter: grad_a must be (M, K) and grad_b (K, N)");
        return nullptr;
    }
    const bool wide = code & 4;
    Py_BEGIN_ALLOW_THREADS
    if (code & 1)
        scatter_typed<double>(wide, v, m, n, k);
    else
        scatter_typed<float>(wide, v, m, n, k);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

// The backward's gather: a_won[i, j] = a[i, k] and b_won[i, j] = b[k, j] for k = argmax[i, j]
// (k = 0 where it is -1); a and b with any strides, the outputs C-contiguous.
template <typename T, typename I>
void gather_rows(const I* argmax, const char* a, Index as0, Index as1, const char* b, Index bs0, Index bs1,
                 T* a_won, T* b_won, Index m, Index n) {
    for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
            const Index w = argmax[i * n + j] < 0 ? 0 : (Index)argmax[i * n + j];
            a_won[i * n + j] = *(const T*)(a + i * as0 + w * as1);
            b_won[i * n + j] = *(const T*)(b + w * bs0 + j * bs1);
        }
}

template <typename T>
void gather_typed(bool wide_index, const Py_buffer* const* v, Index m, Index n) {
    const char* a = (const char*)v[1]->buf;
    const char* b = (const char*)v[2]->buf;
    const Index as0 = v[1]->strides[0], as1 = v[1]->strides[1], bs0 = v[2]->strides[0], bs1 = v[2]->strides[1];
    if (wide_index)
        gather_rows<T, long long>((const long long*)v[0]->buf, a, as0, as1, b, bs0, bs1, (T*)v[3]->buf,
                                  (T*)v[4]->buf, m, n);
    else
        gather_rows<T, int>((const int*)v[0]->buf, a, as0, as1, b, bs0, bs1, (T*)v[3]->buf, (T*)v[4]->buf, m, n);
}

PyObject* gather(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "gather(code, argmax, a, b, a_won, b_won) takes 6 arguments");
        return nullptr;
    }
    static const char* const names[] = {"argmax", "a", "b", "a_won", "b_won"};
    static const int sizes[] = {8, 0, 0, 0, 0};
    Buffers buffers;
    const Py_buffer* v[5];
    long code;
    if (!backward_arguments("gather", args, 5, names, sizes, 2, 0x19, buffers, v, &code)) return nullptr;
    const Index m = v[0]->shape[0], n = v[0]->shape[1], k = v[1]->shape[1];
    if (v[1]->shape[0] != m || v[2]->shape[0] != k || v[2]->shape[1] != n || k == 0 || v[3]->shape[0] != m ||
        v[3]->shape[1] != n || v[4]->shape[0] != m || v[4]->shape[1] != n) {
        PyErr_SetString(PyExc_ValueError, "gather: a must be (M, K) with K > 0, b (K, N), the rest (M, N)");
        return nullptr;
    }
    const bool wide = code & 4;
    Py_BEGIN_ALLOW_THREADS
    if (code & 1)
        gather_typed<double>(wide, v, m, n);
    else
        gather_typed<float>(wide, v, m, n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

// The backward of the plus and times ⊗, one gradient and one range at a time, for k = argmax[i, j] >= 0:
// side 0 adds into grad_a[i, k] (rows lo..hi) g, or g·b[k, j] for times, over j ascending; side 1 adds into
// grad_b[k, j] (columns lo..hi) g, or g·a[i, k], over i ascending.  Each cell receives its terms in the
// row-major (i, j) order of the gather-then-scatter path, with the same products (one rounding each),
// without its M×N temporaries; ranges of one side touch disjoint cells, so they run side by side.
template <typename T, typename I>
void route_products(bool times, int side, Index lo, Index hi, const I* argmax, const T* g, const char* a, Index as0,
                    Index as1, const char* b, Index bs0, Index bs1, T* grad, Index m, Index n, Index k) {
    const Index i0 = side == 0 ? lo : 0, i1 = side == 0 ? hi : m, j0 = side == 0 ? 0 : lo, j1 = side == 0 ? n : hi;
    for (Index i = i0; i < i1; ++i)
        for (Index j = j0; j < j1; ++j) {
            const Index w = (Index)argmax[i * n + j];
            if (w < 0 || w >= k) continue;
            const T gij = g[i * n + j];
            if (side == 0) {
                const T to_a = times ? gij * *(const T*)(b + w * bs0 + j * bs1) : gij;
                grad[i * k + w] += to_a;
            } else {
                const T to_b = times ? gij * *(const T*)(a + i * as0 + w * as1) : gij;
                grad[w * n + j] += to_b;
            }
        }
}

template <typename T>
void route_typed(bool times, int side, Index lo, Index hi, bool wide_index, const Py_buffer* const* v, Index m,
                 Index n, Index k) {
    const char* a = (const char*)v[2]->buf;
    const char* b = (const char*)v[3]->buf;
    const Index as0 = v[2]->strides[0], as1 = v[2]->strides[1], bs0 = v[3]->strides[0], bs1 = v[3]->strides[1];
    const T* g = (const T*)v[1]->buf;
    if (wide_index)
        route_products<T, long long>(times, side, lo, hi, (const long long*)v[0]->buf, g, a, as0, as1, b, bs0, bs1,
                                     (T*)v[4]->buf, m, n, k);
    else
        route_products<T, int>(times, side, lo, hi, (const int*)v[0]->buf, g, a, as0, as1, b, bs0, bs1,
                               (T*)v[4]->buf, m, n, k);
}

PyObject* backward_products(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "backward_products(code, times, side, lo, hi, argmax, grad_c, a, b, grad) takes 10 arguments");
        return nullptr;
    }
    const int times = PyObject_IsTrue(args[1]);
    const long side = PyLong_AsLong(args[2]);
    const Index lo = PyLong_AsLongLong(args[3]), hi = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred() || times < 0) return nullptr;
    if (side != 0 && side != 1) {
        PyErr_SetString(PyExc_ValueError, "backward_products: side is 0 (grad_a) or 1 (grad_b)");
        return nullptr;
    }
    // backward_arguments takes the code followed by the buffers.
    PyObject* const shifted[] = {args[0], args[5], args[6], args[7], args[8], args[9]};
    static const char* const names[] = {"argmax", "grad_c", "a", "b", "grad"};
    static const int sizes[] = {8, 0, 0, 0, 0};
    Buffers buffers;
    const Py_buffer* v[5];
    long code;
    if (!backward_arguments("backward_products", shifted, 5, names, sizes, 1, 0x13, buffers, v, &code))
        return nullptr;
    const Index m = v[0]->shape[0], n = v[0]->shape[1], k = v[2]->shape[1];
    const Index rows = side == 0 ? m : k, cols = side == 0 ? k : n, extent = side == 0 ? m : n;
    if (v[1]->shape[0] != m || v[1]->shape[1] != n || v[2]->shape[0] != m || v[3]->shape[0] != k ||
        v[3]->shape[1] != n || v[4]->shape[0] != rows || v[4]->shape[1] != cols || !(0 <= lo && lo <= hi && hi <= extent)) {
        PyErr_SetString(PyExc_ValueError, "backward_products: shapes or range do not agree");
        return nullptr;
    }
    const bool wide = code & 4;
    Py_BEGIN_ALLOW_THREADS
    if (code & 1)
        route_typed<double>(times, side, lo, hi, wide, v, m, n, k);
    else
        route_typed<float>(times, side, lo, hi, wide, v, m, n, k);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyObject* use_isa(PyObject*, PyObject* name) {
    const char* wanted = PyUnicode_AsUTF8(name);
    if (!wanted) return nullptr;
    for (int i = 0; i < n_isas; ++i)
        if (std::strcmp(isas[i].name, wanted) == 0) {
            if (!isas[i].supported) {
                PyErr_Format(PyExc_ValueError, "this CPU does not support %s", wanted);
                return nullptr;
            }
            chosen = &isas[i];
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "no kernels built for %s", wanted);
    return nullptr;
}

int position(const char* name, const char* const* names, int count) {
    for (int i = 0; i < count; ++i)
        if (std::strcmp(name, names[i]) == 0) return i;
    return -1;
}

// The variant's index in the tables (tile_api.h gives the bits), or None where
// it is not built: the caller's numba engine serves it.
PyObject* variant(PyObject*, PyObject* args) {
    static const char* const values[] = {"float32", "float64", "int32", "int64"};
    static const char* const adds[] = {"max", "min"};
    static const char* const muls[] = {"plus", "times", "min", "max"};
    static const char* const indices[] = {"int32", "int64"};
    const char *value, *add, *mul, *index;
    int saturating, argmax;
    if (!PyArg_ParseTuple(args, "ssspps", &value, &add, &mul, &saturating, &argmax, &index)) return nullptr;
    const int v = position(value, values, 4), a = position(add, adds, 2), m = position(mul, muls, 4),
              i = position(index, indices, 2);
    if (v < 0 || a < 0 || m < 0 || i < 0) Py_RETURN_NONE;
    const int code = (v << 6) | (i << 5) | (a << 4) | (m << 2) | (saturating << 1) | argmax;
    if (!table_base.fn[code]) Py_RETURN_NONE;
    return PyLong_FromLong(code);
}

PyObject* isa(PyObject*, PyObject*) { return PyUnicode_FromString(chosen->name); }

PyObject* supported_isas(PyObject*, PyObject*) {
    PyObject* names = PyList_New(0);
    for (int i = 0; names && i < n_isas; ++i) {
        if (!isas[i].supported) continue;
        PyObject* s = PyUnicode_FromString(isas[i].name);
        if (!s || PyList_Append(names, s) != 0) {
            Py_XDECREF(s);
            Py_DECREF(names);
            return nullptr;
        }
        Py_DECREF(s);
    }
    return names;
}

PyMethodDef methods[] = {
    {"tile", (PyCFunction)(void (*)(void))tile, METH_FASTCALL,
     "tile(variant, a, b, out, idx, r0, r1, c0, c1, scalars): one tile of C (and its argmax), GIL released."},
    {"scatter", (PyCFunction)(void (*)(void))scatter, METH_FASTCALL,
     "scatter(code, argmax, to_a, to_b, routes, grad_a, grad_b): the backward's ordered scatter, GIL released; "
     "code = value type (float32: 0, float64: 1) + 4 for an int64 argmax."},
    {"backward_products", (PyCFunction)(void (*)(void))backward_products, METH_FASTCALL,
     "backward_products(code, times, side, lo, hi, argmax, grad_c, a, b, grad): the plus and times ⊗ backward "
     "into grad_a's rows (side 0) or grad_b's columns (side 1) lo..hi, in order, GIL released; code as scatter's."},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(code, argmax, a, b, a_won, b_won): the backward's gather of the winning operands, GIL released; "
     "code as scatter's."},
    {"variant", variant, METH_VARARGS,
     "variant(value_type, add, mul, saturating, argmax, index_type): the code tile() takes, or None where not built."},
    {"isa", isa, METH_NOARGS, "The instruction set the kernels run with."},
    {"supported_isas", supported_isas, METH_NOARGS, "The instruction sets built and supported here, best first."},
    {"use_isa", use_isa, METH_O, "Run the kernels built for this instruction set (for tests)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The CPU engine's tile kernels, compiled ahead of time.",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
    find_isas();
    PyObject* m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "KB", KB) || PyModule_AddIntConstant(m, "NB", NB) ||
              PyModule_AddIntConstant(m, "KB_ARGMAX", KB_ARGMAX) || PyModule_AddIntConstant(m, "NB_ARGMAX", NB_ARGMAX))) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
