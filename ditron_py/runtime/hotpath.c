/* The host paths in C: a graph-mode call's cuGraphLaunch, then cuEventRecord on the same stream, in one call from
 * Python (ctypes costs a fraction of a microsecond per call on top of the driver's own work, twice); and the eager
 * call plans' kernel launches, fork, join, memops and copies (below). The driver
 * entry points come in as addresses (ctypes resolves them in libcuda.so.1), so nothing here links against CUDA.
 * Built at run time by ditron.runtime.memops through Triton's own helper builder (as Triton builds its launchers). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*driver_fn)(uintptr_t, uintptr_t);  /* CUresult fn(handle, handle) */

/* launch_graph(launch, record, graph_exec, stream, event) -> 0, or the CUresult of the failed cuGraphLaunch, or
 * minus the CUresult of the failed cuEventRecord (not called when event is 0). */
static PyObject *launch_graph(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t v[5];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "launch_graph(launch, record, graph_exec, stream, event)");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        v[i] = (uintptr_t)PyLong_AsUnsignedLongLong(args[i]);
        if (PyErr_Occurred())
            return NULL;
    }
    long code;
    Py_BEGIN_ALLOW_THREADS  /* as ctypes does: a full launch queue may block the call */
    code = ((driver_fn)v[0])(v[2], v[3]);
    if (!code && v[4]) {
        code = ((driver_fn)v[1])(v[4], v[3]);
        code = -code;
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

/* ------------------------------------------------------------------------------------------ kernel launches
 * The eager call plans' kernel launches (runtime/eager.py): a launch is packed once per plan step
 * (make_launch: the entry points, the function, grid, block, shared memory, stream and every argument in ABI order,
 * each a slot of 8 bytes written at its own width), then each call writes only the arguments that change (the call's
 * tensors' data pointers, values affine in the epoch, the tag) and calls cuLaunchKernel(function, grid, block, smem,
 * stream, params, NULL) -- what Triton's launcher does, without its Python frames, its argument parsing of every
 * argument, or a pointer query per tensor. */

typedef int (*cu_launch_fn)(uintptr_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            uintptr_t, void **, void **);
typedef int (*cu_ctx_fn)(uintptr_t *);
typedef int (*cu_wait_event_fn)(uintptr_t, uintptr_t, unsigned);

typedef struct {
    cu_launch_fn launch;
    cu_ctx_fn ctx;          /* cuCtxGetCurrent: no current context -> launch() returns -1 (the caller falls back) */
    uintptr_t function, stream;
    unsigned grid[3], block[3], smem;
    Py_ssize_t n_args, n_var;
    char *types;            /* per argument: b B h H i I q Q (signed / unsigned 8, 16, 32, 64 bits) */
    uint64_t *slots;        /* per argument: its value's storage */
    void **params;          /* per argument: &slots[i] */
    Py_ssize_t *var;        /* per changing argument: its index */
} Launch;

#define LAUNCH_CAPSULE "ditron_hotpath.Launch"

static void launch_free(PyObject *capsule) {
    Launch *l = (Launch *)PyCapsule_GetPointer(capsule, LAUNCH_CAPSULE);
    if (!l)
        return;
    PyMem_Free(l->types);
    PyMem_Free(l->slots);
    PyMem_Free(l->params);
    PyMem_Free(l->var);
    PyMem_Free(l);
}

/* value -> the slot at the argument's width; -1 with a Python error (not an int, out of range) */
static int put(char type, uint64_t *slot, PyObject *value, Py_ssize_t index) {
    if (type == 'Q') {
        unsigned long long v = PyLong_AsUnsignedLongLong(value);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        memcpy(slot, &v, 8);
        return 0;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    long long lo, hi;
    switch (type) {
    case 'b': lo = INT8_MIN; hi = INT8_MAX; break;
    case 'B': lo = 0; hi = UINT8_MAX; break;
    case 'h': lo = INT16_MIN; hi = INT16_MAX; break;
    case 'H': lo = 0; hi = UINT16_MAX; break;
    case 'i': lo = INT32_MIN; hi = INT32_MAX; break;
    case 'I': lo = 0; hi = UINT32_MAX; break;
    case 'q': lo = INT64_MIN; hi = INT64_MAX; break;
    default:
        PyErr_Format(PyExc_ValueError, "launch argument %zd: unknown type code '%c'", index, type);
        return -1;
    }
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_OverflowError, "launch argument %zd: %lld does not fit its type ('%c')", index, v, type);
        return -1;
    }
    switch (type) {
    case 'b': { int8_t x = (int8_t)v; memcpy(slot, &x, 1); break; }
    case 'B': { uint8_t x = (uint8_t)v; memcpy(slot, &x, 1); break; }
    case 'h': { int16_t x = (int16_t)v; memcpy(slot, &x, 2); break; }
    case 'H': { uint16_t x = (uint16_t)v; memcpy(slot, &x, 2); break; }
    case 'i': { int32_t x = (int32_t)v; memcpy(slot, &x, 4); break; }
    case 'I': { uint32_t x = (uint32_t)v; memcpy(slot, &x, 4); break; }
    default: memcpy(slot, &v, 8);
    }
    return 0;
}

/* make_launch(launch, ctx, function, gx, gy, gz, block_x, smem, stream, types: str, values: tuple,
 *             varying: tuple of argument indices) -> a capsule for launch() */
static PyObject *make_launch(PyObject *self, PyObject *args) {
    unsigned long long entry, ctx, function, stream;
    unsigned gx, gy, gz, bx, smem;
    const char *types;
    Py_ssize_t n_types;
    PyObject *values, *varying;
    if (!PyArg_ParseTuple(args, "KKKIIIIIKs#O!O!", &entry, &ctx, &function, &gx, &gy, &gz, &bx, &smem, &stream,
                          &types, &n_types, &PyTuple_Type, &values, &PyTuple_Type, &varying))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(values), nv = PyTuple_GET_SIZE(varying);
    if (n != n_types) {
        PyErr_Format(PyExc_ValueError, "make_launch: %zd types for %zd values", n_types, n);
        return NULL;
    }
    Launch *l = PyMem_Calloc(1, sizeof(Launch));
    if (!l)
        return PyErr_NoMemory();
    l->launch = (cu_launch_fn)(uintptr_t)entry;
    l->ctx = (cu_ctx_fn)(uintptr_t)ctx;
    l->function = (uintptr_t)function;
    l->stream = (uintptr_t)stream;
    l->grid[0] = gx; l->grid[1] = gy; l->grid[2] = gz;
    l->block[0] = bx; l->block[1] = 1; l->block[2] = 1;
    l->smem = smem;
    l->n_args = n;
    l->n_var = nv;
    l->types = PyMem_Malloc(n + 1);
    l->slots = PyMem_Calloc(n ? n : 1, sizeof(uint64_t));
    l->params = PyMem_Calloc(n ? n : 1, sizeof(void *));
    l->var = PyMem_Calloc(nv ? nv : 1, sizeof(Py_ssize_t));
    PyObject *capsule = NULL;
    if (!l->types || !l->slots || !l->params || !l->var) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(l->types, types, n);
    l->types[n] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        l->params[i] = &l->slots[i];
        if (put(types[i], &l->slots[i], PyTuple_GET_ITEM(values, i), i) < 0)
            goto fail;
    }
    for (Py_ssize_t k = 0; k < nv; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(varying, k));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= n) {
            PyErr_Format(PyExc_IndexError, "make_launch: varying argument %zd of %zd", i, n);
            goto fail;
        }
        l->var[k] = i;
    }
    capsule = PyCapsule_New(l, LAUNCH_CAPSULE, launch_free);
    if (capsule)
        return capsule;
fail:
    PyMem_Free(l->types);
    PyMem_Free(l->slots);
    PyMem_Free(l->params);
    PyMem_Free(l->var);
    PyMem_Free(l);
    return NULL;
}

/* launch(capsule, *values of the varying arguments, in make_launch's order) -> 0, the CUresult of a refused
 * cuLaunchKernel, or -1 where no context is current (nothing launched: the caller launches through Triton's
 * launcher, which makes the primary context current). A value that is not an int or does not fit its argument's
 * type raises before anything is launched; an empty grid launches nothing, as Triton's launcher. */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "launch(capsule, *values)");
        return NULL;
    }
    Launch *l = (Launch *)PyCapsule_GetPointer(args[0], LAUNCH_CAPSULE);
    if (!l)
        return NULL;
    if (nargs - 1 != l->n_var) {
        PyErr_Format(PyExc_TypeError, "launch: %zd values for %zd varying arguments", nargs - 1, l->n_var);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < l->n_var; k++) {
        Py_ssize_t i = l->var[k];
        if (put(l->types[i], &l->slots[i], args[k + 1], i) < 0)
            return NULL;
    }
    if (l->ctx) {
        uintptr_t current = 0;
        if (l->ctx(&current) || !current)
            return PyLong_FromLong(-1);
    }
    if ((unsigned long long)l->grid[0] * l->grid[1] * l->grid[2] == 0)
        return PyLong_FromLong(0);
    long code;
    Py_BEGIN_ALLOW_THREADS
    code = l->launch(l->function, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
                     l->smem, l->stream, l->params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

/* ------------------------------------------------------------------------------------------ fork and join
 * fork(record, wait, event, stream, *streams): cuEventRecord(event, stream), then cuStreamWaitEvent(s, event, 0)
 * for each s. join(record, wait, stream, *(event, s) pairs): for each pair cuEventRecord(event, s), then
 * cuStreamWaitEvent(stream, event, 0). Either returns 0, the CUresult of a refused record, or minus that of a
 * refused wait (stopping there). */

static int handles(PyObject *const *args, Py_ssize_t n, uintptr_t *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = (uintptr_t)PyLong_AsUnsignedLongLong(args[i]);
        if (PyErr_Occurred())
            return -1;
    }
    return 0;
}

#define MAX_HANDLES 64

static PyObject *fork_streams(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t v[MAX_HANDLES + 4];
    if (nargs < 4 || nargs > MAX_HANDLES + 4) {
        PyErr_SetString(PyExc_TypeError, "fork(record, wait, event, stream, *streams) (at most 64 streams)");
        return NULL;
    }
    if (handles(args, nargs, v) < 0)
        return NULL;
    long code;
    Py_BEGIN_ALLOW_THREADS
    code = ((driver_fn)v[0])(v[2], v[3]);
    for (Py_ssize_t i = 4; !code && i < nargs; i++)
        code = -((cu_wait_event_fn)v[1])(v[i], v[2], 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

static PyObject *join_streams(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t v[2 * MAX_HANDLES + 3];
    if (nargs < 3 || nargs > 2 * MAX_HANDLES + 3 || (nargs - 3) % 2) {
        PyErr_SetString(PyExc_TypeError, "join(record, wait, stream, *(event, stream) pairs) (at most 64 pairs)");
        return NULL;
    }
    if (handles(args, nargs, v) < 0)
        return NULL;
    long code = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 3; !code && i < nargs; i += 2) {
        code = ((driver_fn)v[0])(v[i], v[i + 1]);
        if (!code)
            code = -((cu_wait_event_fn)v[1])(v[2], v[i], 0);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

/* ------------------------------------------------------------------------------------------ stream memops
 * memops(write, wait, stream, value, n_writes, *addrs): cuStreamWriteValue32(stream, addr, value, 0) for the first
 * n_writes addresses, then cuStreamWaitValue32(stream, addr, value, GEQ) for the rest (a signal, a wait, a barrier
 * in one call). Returns 0, or the CUresult of the first refused call (stopping there) as (code << 8) | (index + 1)
 * where index is that call's address (the caller names it). */

typedef int (*cu_value_fn)(uintptr_t, uintptr_t, uint32_t, unsigned);

static PyObject *memops(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t v[MAX_HANDLES + 5];
    if (nargs < 5 || nargs > MAX_HANDLES + 5) {
        PyErr_SetString(PyExc_TypeError, "memops(write, wait, stream, value, n_writes, *addrs) (at most 64)");
        return NULL;
    }
    if (handles(args, 3, v) < 0)
        return NULL;
    long long value = PyLong_AsLongLong(args[3]);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n_writes = PyLong_AsSsize_t(args[4]);
    if (n_writes == -1 && PyErr_Occurred())
        return NULL;
    if (handles(args + 5, nargs - 5, v + 5) < 0)
        return NULL;
    long code = 0;
    Py_ssize_t i;
    Py_BEGIN_ALLOW_THREADS
    for (i = 5; !code && i < nargs; i++)
        code = ((cu_value_fn)v[i - 5 < n_writes ? 0 : 1])(v[2], v[i], (uint32_t)value, 0);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code ? (code << 8) | (long)(i - 5) : 0);
}

/* ------------------------------------------------------------------------------------------ copies
 * copy(dtod, copy2d, stream, dst, src, width, height, dst_pitch, src_pitch): a copy of height rows of width bytes
 * between device addresses (a peer's symmetric buffer included: one address space), rows dst_pitch / src_pitch
 * bytes apart -- cuMemcpyDtoDAsync for one row, else cuMemcpy2DAsync: what torch's copy_ of the two views enqueues,
 * without its dispatcher or a switch of torch's current stream. Returns 0 or the CUresult. */

typedef int (*cu_dtod_fn)(uint64_t, uint64_t, size_t, uintptr_t);

typedef struct {            /* CUDA_MEMCPY2D (cuda.h, v2) */
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    uint64_t srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    uint64_t dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} Memcpy2D;

typedef int (*cu_copy2d_fn)(const Memcpy2D *, uintptr_t);

static PyObject *copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t v[9];
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "copy(dtod, copy2d, stream, dst, src, width, height, dst_pitch, src_pitch)");
        return NULL;
    }
    if (handles(args, nargs, v) < 0)
        return NULL;
    long code;
    Py_BEGIN_ALLOW_THREADS
    if (v[6] == 1) {
        code = ((cu_dtod_fn)v[0])(v[3], v[4], v[5], v[2]);
    } else {
        Memcpy2D c;
        memset(&c, 0, sizeof c);
        c.srcMemoryType = c.dstMemoryType = 2;  /* CU_MEMORYTYPE_DEVICE */
        c.srcDevice = v[4];
        c.srcPitch = v[8];
        c.dstDevice = v[3];
        c.dstPitch = v[7];
        c.WidthInBytes = v[5];
        c.Height = v[6];
        code = ((cu_copy2d_fn)v[1])(&c, v[2]);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

/* ------------------------------------------------------------------------------------------ dry entry points
 * Entry points that do nothing and succeed, with the driver's signatures: benchmarks/bench_host.py --cpu-dry times
 * the C path of the call plans on a machine without a GPU through them (dry_entry_points()). */

static int dry_launch(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned smem, uintptr_t stream, void **params, void **extra) { return 0; }
static int dry_ctx(uintptr_t *ctx) { *ctx = 1; return 0; }
static int dry_handles(uintptr_t a, uintptr_t b) { return 0; }
static int dry_wait_event(uintptr_t stream, uintptr_t event, unsigned flags) { return 0; }
static int dry_value(uintptr_t stream, uintptr_t addr, uint32_t value, unsigned flags) { return 0; }
static int dry_dtod(uint64_t dst, uint64_t src, size_t n, uintptr_t stream) { return 0; }
static int dry_copy2d(const Memcpy2D *c, uintptr_t stream) { return 0; }

static PyObject *dry_entry_points(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsK}", "cuLaunchKernel", (unsigned long long)(uintptr_t)dry_launch,
                         "cuGraphLaunch", (unsigned long long)(uintptr_t)dry_handles,
                         "cuCtxGetCurrent", (unsigned long long)(uintptr_t)dry_ctx,
                         "cuEventRecord", (unsigned long long)(uintptr_t)dry_handles,
                         "cuStreamWaitEvent", (unsigned long long)(uintptr_t)dry_wait_event,
                         "cuStreamWriteValue32", (unsigned long long)(uintptr_t)dry_value,
                         "cuStreamWaitValue32", (unsigned long long)(uintptr_t)dry_value,
                         "cuMemcpyDtoDAsync_v2", (unsigned long long)(uintptr_t)dry_dtod,
                         "cuMemcpy2DAsync_v2", (unsigned long long)(uintptr_t)dry_copy2d);
}

static PyMethodDef methods[] = {
    {"launch_graph", (PyCFunction)(void (*)(void))launch_graph, METH_FASTCALL,
     "cuGraphLaunch then cuEventRecord through the given entry points"},
    {"make_launch", make_launch, METH_VARARGS, "a kernel launch packed once (a capsule for launch)"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "cuLaunchKernel of a packed launch"},
    {"fork", (PyCFunction)(void (*)(void))fork_streams, METH_FASTCALL, "cuEventRecord, then cuStreamWaitEvent per stream"},
    {"join", (PyCFunction)(void (*)(void))join_streams, METH_FASTCALL, "per stream cuEventRecord, then a wait on it"},
    {"memops", (PyCFunction)(void (*)(void))memops, METH_FASTCALL, "stream writes, then waits, of one value"},
    {"copy", (PyCFunction)(void (*)(void))copy, METH_FASTCALL, "cuMemcpyDtoDAsync / cuMemcpy2DAsync of a region"},
    {"dry_entry_points", dry_entry_points, METH_NOARGS, "no-op entry points with the driver's signatures"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ditron_hotpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit_ditron_hotpath(void) { return PyModule_Create(&module); }
