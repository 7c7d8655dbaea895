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
    Py_buffer views[5];
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
