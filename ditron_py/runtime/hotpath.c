/* The host paths in C: a graph-mode call's cuGraphLaunch, then cuEventRecord on the same stream, in one call from
 * Python (ctypes costs a fraction of a microsecond per call on top of the driver's own work, twice); and the eager
 * call plans' kernel launches, fork, join, memops and copies (below), a plan's whole call as one program, and a
 * torch operator's whole eager call (its arguments matched, its output made, the program run). The driver
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

/* height rows of width bytes, pitches apart, on stream: cuMemcpyDtoDAsync for one row, else cuMemcpy2DAsync (no
 * Python object touched: called without the GIL) */
static int copy_device_rows(cu_dtod_fn dtod, cu_copy2d_fn copy2d, uintptr_t stream, uint64_t dst, uint64_t src,
                     size_t width, size_t height, size_t dst_pitch, size_t src_pitch) {
    if (height == 1)
        return dtod(dst, src, width, stream);
    Memcpy2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = 2;  /* CU_MEMORYTYPE_DEVICE */
    c.srcDevice = src;
    c.srcPitch = src_pitch;
    c.dstDevice = dst;
    c.dstPitch = dst_pitch;
    c.WidthInBytes = width;
    c.Height = height;
    return copy2d(&c, stream);
}

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
    code = copy_device_rows((cu_dtod_fn)v[0], (cu_copy2d_fn)v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(code);
}

/* ------------------------------------------------------------------------------------------ whole calls
 * An eager call plan's whole call in one C call (runtime/eager.py, EagerPlan's native programs): the fork of the
 * caller's stream to the plan's streams, every step in order, the join back -- the work of the fork / launch /
 * memops / copy / join calls above and of the Python frames around each, without those frames.
 *
 * make_program(entries, start, fork, join, steps) -> a capsule for run():
 *   entries  (cuEventRecord, cuStreamWaitEvent, cuStreamWriteValue32, cuStreamWaitValue32, cuMemcpyDtoDAsync,
 *             cuMemcpy2DAsync, cuCtxGetCurrent) addresses;
 *   start    the fork's event; fork: the plan's streams (each waits for start, recorded on the caller's stream);
 *   join     per ring slot a tuple of (event, stream) pairs, flat: each event recorded on its stream, then the
 *            caller's stream waits for it (slot epoch % len(join));
 *   steps    per step a tuple, by its first item:
 *            ("L", row, launch capsule, ((arg, tensor), ...), ((arg, base, slope), ...), tag_arg, pre, post): the
 *                call's tensors' data pointers (row `row` of the call's tensors) and the values affine in the epoch
 *                (base + slope * (epoch - 1)) written into the packed launch, then cuLaunchKernel; pre (or None)
 *                is called first as pre(epoch) -> (tag, lazy): the tag written at tag_arg (-1: none); post (or
 *                None) after as post(epoch, lazy) (lazy None without pre);
 *            ("M", stream, base, slope, n_writes, (addr, ...), after): memops' writes then waits of
 *                base + slope * (epoch - 1); after(epoch) where not None;
 *            ("C", row, stream, src_tensor, src, dst_tensor, dst, width, height, dst_pitch, src_pitch): copy()'s
 *                rows; an end's address is `src` / `dst` itself where its tensor is -1, else that tensor's data
 *                pointer plus it;
 *            ("P", row, fn): a Python step, fn(epoch, the row's tensors).
 * run(program, epoch, stream, rows) -> 0 when all is enqueued; -1 where no context is current (nothing enqueued:
 *   the caller takes its Python path); (index, code) where the driver refused a call (index -1: the fork, -2: the
 *   join, else the step's; code as fork / join / launch / memops / copy return it; the steps before are enqueued).
 *   A Python step's, pre's or post's exception, or a tensor's data_ptr(), propagates.
 * A program borrows the objects of `steps` (capsules, functions): the caller keeps the steps tuple alive as long as
 * the program (EagerPlan.native holds both). A capsule is opaque to Python's garbage collector, so a program that
 * owned them would make a cycle through an executor (a step's function -> the executor -> its plans -> the
 * program) that is never collected. */

#define MAX_VAR 64

typedef struct {
    int kind;
    Py_ssize_t row;
    PyObject *ref;          /* the launch capsule, or a Python step's function (borrowed) */
    Launch *l;
    Py_ssize_t n_ptr, ptr_arg[MAX_VAR], ptr_tensor[MAX_VAR];
    Py_ssize_t n_aff, aff_arg[MAX_VAR];
    long long aff_base[MAX_VAR], aff_slope[MAX_VAR];
    Py_ssize_t tag_arg;
    PyObject *pre, *post;   /* borrowed, or NULL */
    uintptr_t stream;
    long long base, slope;
    Py_ssize_t n_writes, n_addrs;
    uintptr_t addrs[MAX_HANDLES];
    Py_ssize_t src_t, dst_t;
    unsigned long long src, dst, width, height, dst_pitch, src_pitch;
} Step;

typedef struct {
    driver_fn record;
    cu_wait_event_fn wait_event;
    cu_value_fn write, wait_value;
    cu_dtod_fn dtod;
    cu_copy2d_fn copy2d;
    cu_ctx_fn ctx;
    uintptr_t start;
    Py_ssize_t n_fork, ring, n_join, n_steps;
    uintptr_t fork[MAX_HANDLES];
    uintptr_t *join;        /* ring x n_join x (event, stream) */
    Step *steps;
} Program;

#define PROGRAM_CAPSULE "ditron_hotpath.Program"

static void program_free_steps(Program *p) {
    PyMem_Free(p->steps);
    PyMem_Free(p->join);
    PyMem_Free(p);
}

static void program_free(PyObject *capsule) {
    Program *p = (Program *)PyCapsule_GetPointer(capsule, PROGRAM_CAPSULE);
    if (p)
        program_free_steps(p);
}

static int as_handle(PyObject *o, uintptr_t *out) {
    *out = (uintptr_t)PyLong_AsUnsignedLongLong(o);
    return PyErr_Occurred() ? -1 : 0;
}

static int as_ssize(PyObject *o, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int as_ll(PyObject *o, long long *out) {
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *optional(PyObject *o) {  /* o (borrowed), or NULL for None */
    return o == Py_None ? NULL : o;
}

static int bad_step(Py_ssize_t i, const char *what) {
    PyErr_Format(PyExc_ValueError, "make_program: step %zd: %s", i, what);
    return -1;
}

static int parse_step(Step *s, PyObject *t, Py_ssize_t i) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0)))
        return bad_step(i, "not a (kind, ...) tuple");
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
    if (!kind)
        return -1;
    s->kind = kind[0];
    s->tag_arg = -1;
    s->src_t = s->dst_t = -1;
    if (s->kind != 'M' && as_ssize(PyTuple_GET_ITEM(t, 1), &s->row) < 0)
        return -1;
    if (s->kind == 'L') {
        if (n != 8 || !PyTuple_Check(PyTuple_GET_ITEM(t, 3)) || !PyTuple_Check(PyTuple_GET_ITEM(t, 4)))
            return bad_step(i, "a launch is (\"L\", row, capsule, ptrs, affine, tag_arg, pre, post)");
        s->l = (Launch *)PyCapsule_GetPointer(PyTuple_GET_ITEM(t, 2), LAUNCH_CAPSULE);
        if (!s->l)
            return -1;
        s->ref = PyTuple_GET_ITEM(t, 2);
        PyObject *ptrs = PyTuple_GET_ITEM(t, 3), *aff = PyTuple_GET_ITEM(t, 4);
        s->n_ptr = PyTuple_GET_SIZE(ptrs);
        s->n_aff = PyTuple_GET_SIZE(aff);
        if (s->n_ptr > MAX_VAR || s->n_aff > MAX_VAR)
            return bad_step(i, "more than 64 pointers or affine values");
        for (Py_ssize_t k = 0; k < s->n_ptr; k++) {
            PyObject *e = PyTuple_GET_ITEM(ptrs, k);
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2)
                return bad_step(i, "a pointer is (arg, tensor)");
            if (as_ssize(PyTuple_GET_ITEM(e, 0), &s->ptr_arg[k]) < 0 ||
                as_ssize(PyTuple_GET_ITEM(e, 1), &s->ptr_tensor[k]) < 0)
                return -1;
            if (s->ptr_arg[k] < 0 || s->ptr_arg[k] >= s->l->n_args || s->l->types[s->ptr_arg[k]] != 'Q')
                return bad_step(i, "a pointer's argument is not a 64-bit argument of the launch");
        }
        for (Py_ssize_t k = 0; k < s->n_aff; k++) {
            PyObject *e = PyTuple_GET_ITEM(aff, k);
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3)
                return bad_step(i, "an affine value is (arg, base, slope)");
            if (as_ssize(PyTuple_GET_ITEM(e, 0), &s->aff_arg[k]) < 0 ||
                as_ll(PyTuple_GET_ITEM(e, 1), &s->aff_base[k]) < 0 ||
                as_ll(PyTuple_GET_ITEM(e, 2), &s->aff_slope[k]) < 0)
                return -1;
            if (s->aff_arg[k] < 0 || s->aff_arg[k] >= s->l->n_args)
                return bad_step(i, "an affine value's argument is out of range");
        }
        if (as_ssize(PyTuple_GET_ITEM(t, 5), &s->tag_arg) < 0)
            return -1;
        if (s->tag_arg >= s->l->n_args)
            return bad_step(i, "the tag's argument is out of range");
        s->pre = optional(PyTuple_GET_ITEM(t, 6));
        s->post = optional(PyTuple_GET_ITEM(t, 7));
        if (s->tag_arg >= 0 && !s->pre)
            return bad_step(i, "a tag needs pre");
        return 0;
    }
    if (s->kind == 'M') {
        if (n != 7 || !PyTuple_Check(PyTuple_GET_ITEM(t, 5)))
            return bad_step(i, "memops are (\"M\", stream, base, slope, n_writes, addrs, after)");
        PyObject *addrs = PyTuple_GET_ITEM(t, 5);
        s->n_addrs = PyTuple_GET_SIZE(addrs);
        if (s->n_addrs > MAX_HANDLES)
            return bad_step(i, "more than 64 addresses");
        if (as_handle(PyTuple_GET_ITEM(t, 1), &s->stream) < 0 || as_ll(PyTuple_GET_ITEM(t, 2), &s->base) < 0 ||
            as_ll(PyTuple_GET_ITEM(t, 3), &s->slope) < 0 || as_ssize(PyTuple_GET_ITEM(t, 4), &s->n_writes) < 0)
            return -1;
        for (Py_ssize_t k = 0; k < s->n_addrs; k++)
            if (as_handle(PyTuple_GET_ITEM(addrs, k), &s->addrs[k]) < 0)
                return -1;
        s->post = optional(PyTuple_GET_ITEM(t, 6));
        return 0;
    }
    if (s->kind == 'C') {
        if (n != 11)
            return bad_step(i, "a copy is (\"C\", row, stream, src_tensor, src, dst_tensor, dst, width, height, "
                               "dst_pitch, src_pitch)");
        if (as_handle(PyTuple_GET_ITEM(t, 2), &s->stream) < 0 || as_ssize(PyTuple_GET_ITEM(t, 3), &s->src_t) < 0 ||
            as_ssize(PyTuple_GET_ITEM(t, 5), &s->dst_t) < 0)
            return -1;
        unsigned long long *u[6] = {&s->src, &s->dst, &s->width, &s->height, &s->dst_pitch, &s->src_pitch};
        int at[6] = {4, 6, 7, 8, 9, 10};
        for (int k = 0; k < 6; k++) {
            *u[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, at[k]));
            if (PyErr_Occurred())
                return -1;
        }
        return 0;
    }
    if (s->kind == 'P') {
        if (n != 3 || !PyCallable_Check(PyTuple_GET_ITEM(t, 2)))
            return bad_step(i, "a Python step is (\"P\", row, fn)");
        s->ref = PyTuple_GET_ITEM(t, 2);
        return 0;
    }
    return bad_step(i, "unknown kind (L, M, C or P)");
}

static PyObject *make_program(PyObject *self, PyObject *args) {
    PyObject *entries, *fork, *join, *steps;
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "O!KO!O!O!", &PyTuple_Type, &entries, &start, &PyTuple_Type, &fork, &PyTuple_Type,
                          &join, &PyTuple_Type, &steps))
        return NULL;
    uintptr_t e[7];
    if (PyTuple_GET_SIZE(entries) != 7) {
        PyErr_SetString(PyExc_ValueError, "make_program: 7 entry points");
        return NULL;
    }
    for (int i = 0; i < 7; i++) {
        if (as_handle(PyTuple_GET_ITEM(entries, i), &e[i]) < 0)
            return NULL;
        if (!e[i]) {
            PyErr_Format(PyExc_ValueError, "make_program: entry point %d is 0", i);
            return NULL;
        }
    }
    Py_ssize_t n_fork = PyTuple_GET_SIZE(fork), ring = PyTuple_GET_SIZE(join), n_steps = PyTuple_GET_SIZE(steps);
    if (n_fork > MAX_HANDLES || ring < 1) {
        PyErr_SetString(PyExc_ValueError, "make_program: at most 64 streams, at least one join slot");
        return NULL;
    }
    Program *p = PyMem_Calloc(1, sizeof(Program));
    if (!p)
        return PyErr_NoMemory();
    p->record = (driver_fn)e[0];
    p->wait_event = (cu_wait_event_fn)e[1];
    p->write = (cu_value_fn)e[2];
    p->wait_value = (cu_value_fn)e[3];
    p->dtod = (cu_dtod_fn)e[4];
    p->copy2d = (cu_copy2d_fn)e[5];
    p->ctx = (cu_ctx_fn)e[6];
    p->start = (uintptr_t)start;
    p->n_fork = n_fork;
    p->ring = ring;
    for (Py_ssize_t i = 0; i < n_fork; i++)
        if (as_handle(PyTuple_GET_ITEM(fork, i), &p->fork[i]) < 0)
            goto fail;
    PyObject *first = PyTuple_GET_ITEM(join, 0);
    if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) % 2 || PyTuple_GET_SIZE(first) > 2 * MAX_HANDLES) {
        PyErr_SetString(PyExc_ValueError, "make_program: a join slot is a flat tuple of (event, stream) pairs");
        goto fail;
    }
    p->n_join = PyTuple_GET_SIZE(first) / 2;
    p->join = PyMem_Calloc(ring * p->n_join * 2 + 1, sizeof(uintptr_t));
    p->steps = PyMem_Calloc(n_steps ? n_steps : 1, sizeof(Step));
    if (!p->join || !p->steps) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t r = 0; r < ring; r++) {
        PyObject *slot = PyTuple_GET_ITEM(join, r);
        if (!PyTuple_Check(slot) || PyTuple_GET_SIZE(slot) != 2 * p->n_join) {
            PyErr_SetString(PyExc_ValueError, "make_program: every join slot has the same pairs");
            goto fail;
        }
        for (Py_ssize_t k = 0; k < 2 * p->n_join; k++)
            if (as_handle(PyTuple_GET_ITEM(slot, k), &p->join[r * 2 * p->n_join + k]) < 0)
                goto fail;
    }
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        p->n_steps = i + 1;  /* what program_free releases */
        if (parse_step(&p->steps[i], PyTuple_GET_ITEM(steps, i), i) < 0)
            goto fail;
    }
    p->n_steps = n_steps;
    PyObject *capsule = PyCapsule_New(p, PROGRAM_CAPSULE, program_free);
    if (capsule)
        return capsule;
fail:
    program_free_steps(p);
    return NULL;
}

static PyObject *fail_at(Py_ssize_t index, long code) {
    return Py_BuildValue("(nl)", index, code);
}

/* the data pointer of rows[row][index] (0 with a Python error) */
static int data_ptr(PyObject *rows, Py_ssize_t row, Py_ssize_t index, unsigned long long *out) {
    static PyObject *name = NULL;
    if (!name && !(name = PyUnicode_InternFromString("data_ptr")))
        return -1;
    if (row < 0 || row >= PySequence_Fast_GET_SIZE(rows)) {
        PyErr_Format(PyExc_IndexError, "run: no row %zd of the call's tensors", row);
        return -1;
    }
    PyObject *r = PySequence_Fast_GET_ITEM(rows, row);
    if (!PyList_Check(r) || index < 0 || index >= PyList_GET_SIZE(r)) {
        PyErr_Format(PyExc_IndexError, "run: no tensor %zd in row %zd of the call's tensors", index, row);
        return -1;
    }
    PyObject *v = PyObject_CallMethodNoArgs(PyList_GET_ITEM(r, index), name);
    if (!v)
        return -1;
    *out = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* base + slope * (epoch - 1) into out: -1 with OverflowError where it does not fit 64 bits */
static int affine(long long base, long long slope, long long epoch, long long *out) {
    long long step;
    if (__builtin_mul_overflow(slope, epoch - 1, &step) || __builtin_add_overflow(base, step, out)) {
        PyErr_SetString(PyExc_OverflowError, "run: a value affine in the epoch does not fit 64 bits");
        return -1;
    }
    return 0;
}

/* an int at its argument's width: -1 with a Python error where it does not fit */
static int put_ll(Launch *l, Py_ssize_t i, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (!o)
        return -1;
    int rc = put(l->types[i], &l->slots[i], o, i);
    Py_DECREF(o);
    return rc;
}

static PyObject *run_core(Program *p, long long epoch, uintptr_t stream, PyObject *rows_in) {
    PyObject *rows = PySequence_Fast(rows_in, "run: rows is a sequence of lists of tensors");
    if (!rows)
        return NULL;
    PyObject *result = NULL, *epoch_obj = NULL;
    uintptr_t current = 0;
    if (p->ctx(&current) || !current) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (!(epoch_obj = PyLong_FromLongLong(epoch)))
        goto done;
    long code = 0;
    Py_BEGIN_ALLOW_THREADS
    code = p->record(p->start, stream);
    for (Py_ssize_t i = 0; !code && i < p->n_fork; i++)
        code = -p->wait_event(p->fork[i], p->start, 0);
    Py_END_ALLOW_THREADS
    if (code) {
        result = fail_at(-1, code);
        goto done;
    }
    for (Py_ssize_t i = 0; i < p->n_steps; i++) {
        Step *s = &p->steps[i];
        if (s->kind == 'L') {
            Launch *l = s->l;
            PyObject *lazy = NULL;
            if (s->pre) {
                PyObject *got = PyObject_CallOneArg(s->pre, epoch_obj);
                if (!got)
                    goto done;
                if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
                    Py_DECREF(got);
                    PyErr_SetString(PyExc_TypeError, "run: pre(epoch) returns (tag, lazy)");
                    goto done;
                }
                if (s->tag_arg >= 0 && put(l->types[s->tag_arg], &l->slots[s->tag_arg], PyTuple_GET_ITEM(got, 0),
                                           s->tag_arg) < 0) {
                    Py_DECREF(got);
                    goto done;
                }
                lazy = PyTuple_GET_ITEM(got, 1);
                Py_INCREF(lazy);
                Py_DECREF(got);
            }
            for (Py_ssize_t k = 0; k < s->n_ptr; k++) {
                unsigned long long ptr;
                if (data_ptr(rows, s->row, s->ptr_tensor[k], &ptr) < 0) {
                    Py_XDECREF(lazy);
                    goto done;
                }
                l->slots[s->ptr_arg[k]] = ptr;
            }
            for (Py_ssize_t k = 0; k < s->n_aff; k++) {
                long long v;
                if (affine(s->aff_base[k], s->aff_slope[k], epoch, &v) < 0 || put_ll(l, s->aff_arg[k], v) < 0) {
                    Py_XDECREF(lazy);
                    goto done;
                }
            }
            if ((unsigned long long)l->grid[0] * l->grid[1] * l->grid[2]) {
                Py_BEGIN_ALLOW_THREADS
                code = l->launch(l->function, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                                 l->block[2], l->smem, l->stream, l->params, NULL);
                Py_END_ALLOW_THREADS
            }
            if (code) {
                Py_XDECREF(lazy);
                result = fail_at(i, code);
                goto done;
            }
            if (s->post) {
                PyObject *r = PyObject_CallFunctionObjArgs(s->post, epoch_obj, lazy ? lazy : Py_None, NULL);
                Py_XDECREF(lazy);
                if (!r)
                    goto done;
                Py_DECREF(r);
            } else {
                Py_XDECREF(lazy);
            }
        } else if (s->kind == 'M') {
            long long value;
            if (affine(s->base, s->slope, epoch, &value) < 0)
                goto done;
            uint32_t v = (uint32_t)value;
            Py_ssize_t k;
            Py_BEGIN_ALLOW_THREADS
            for (k = 0; !code && k < s->n_addrs; k++)
                code = (k < s->n_writes ? p->write : p->wait_value)(s->stream, s->addrs[k], v, 0);
            Py_END_ALLOW_THREADS
            if (code) {
                result = fail_at(i, (code << 8) | (long)k);
                goto done;
            }
            if (s->post) {
                PyObject *r = PyObject_CallOneArg(s->post, epoch_obj);
                if (!r)
                    goto done;
                Py_DECREF(r);
            }
        } else if (s->kind == 'C') {
            unsigned long long src = s->src, dst = s->dst, base;
            if (s->src_t >= 0) {
                if (data_ptr(rows, s->row, s->src_t, &base) < 0)
                    goto done;
                src += base;
            }
            if (s->dst_t >= 0) {
                if (data_ptr(rows, s->row, s->dst_t, &base) < 0)
                    goto done;
                dst += base;
            }
            Py_BEGIN_ALLOW_THREADS
            code = copy_device_rows(p->dtod, p->copy2d, s->stream, dst, src, (size_t)s->width, (size_t)s->height,
                                    (size_t)s->dst_pitch, (size_t)s->src_pitch);
            Py_END_ALLOW_THREADS
            if (code) {
                result = fail_at(i, code);
                goto done;
            }
        } else {
            if (s->row < 0 || s->row >= PySequence_Fast_GET_SIZE(rows)) {
                PyErr_Format(PyExc_IndexError, "run: no row %zd of the call's tensors", s->row);
                goto done;
            }
            PyObject *r = PyObject_CallFunctionObjArgs(s->ref, epoch_obj, PySequence_Fast_GET_ITEM(rows, s->row),
                                                       NULL);
            if (!r)
                goto done;
            Py_DECREF(r);
        }
    }
    uintptr_t *pairs = p->join + (Py_ssize_t)(((epoch % p->ring) + p->ring) % p->ring) * 2 * p->n_join;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; !code && k < p->n_join; k++) {
        code = p->record(pairs[2 * k], pairs[2 * k + 1]);
        if (!code)
            code = -p->wait_event(stream, pairs[2 * k], 0);
    }
    Py_END_ALLOW_THREADS
    result = code ? fail_at(-2, code) : PyLong_FromLong(0);
done:
    Py_XDECREF(epoch_obj);
    Py_DECREF(rows);
    return result;
}

static PyObject *run_program(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(program, epoch, stream, rows)");
        return NULL;
    }
    Program *p = (Program *)PyCapsule_GetPointer(args[0], PROGRAM_CAPSULE);
    if (!p)
        return NULL;
    long long epoch;
    uintptr_t stream;
    if (as_ll(args[1], &epoch) < 0 || as_handle(args[2], &stream) < 0)
        return NULL;
    return run_core(p, epoch, stream, args[3]);
}

/* ------------------------------------------------------------------------------------------ operator calls
 * A torch operator's eager call with fresh tensors in one C call (ditron.fastcall's operator fronts): the match of
 * the call's arguments against those of a checked earlier call, the output allocated, the executor's epoch taken,
 * the plan's program run, the watchdog's milestones of the call's end queued -- what fastcall.op_call, FastCall.one
 * and EagerPlan.call / enqueue do in Python, without their frames.
 *
 * make_op_call(handle, rest, types, shapes, dtypes, devices, n_slots, slots, aligned, alignment, maker, worlds, entry, ex, max_epoch, programs,
 *              use_parity, raw_stream, index, get_device, capturing, hooks, prune, prune_at, milestone, marks, fail)
 *   -> a capsule for op_call():
 *   handle, rest  the world handle and the arguments after it (a tuple), as the checked call had them;
 *   types, shapes, dtypes, devices  per tensor argument what it had: its exact type (a subclass, a FakeTensor,
 *                 does not match), shape, dtype, device (the call's tensors are contiguous);
 *   n_slots, slots  the plan's argument slots, and per tensor argument (then the output) its slot;
 *   aligned, alignment  the slots whose data pointers the plan wants a multiple of alignment (a kernel specialised
 *                 on it: EagerPlan's prechecks); a call whose tensor is not goes the Python way, which raises;
 *   maker         makes the output; worlds, entry: the registered worlds (a dict) and the call's world's entry;
 *   ex            the executor (its _closed, _broken, epoch); max_epoch: the last epoch the plan serves;
 *   programs      the plan's programs (make_program), each as (program, its steps tuple: kept alive with it): one,
 *                 or one per parity (epoch % 2), when use_parity (not
 *                 None) is called with the epoch's parity first; raw_stream(index): the current stream's handle;
 *   get_device    None, or torch's current device index (the call goes the Python way unless it is index);
 *   capturing()   whether the current stream captures (then the Python way); hooks: Triton's knobs.runtime, or
 *                 None (a launch hook registered: the Python way); prune(): every prune_at calls;
 *   milestone, marks  Milestone and per ring slot ((append, event, rank, stream), ...): each appended
 *                 milestone(event, rank, stream, None, epoch) after the call;
 *   fail(res, epoch)  raises the error of run()'s refused driver call.
 * op_call(calls, args) -> the output tensor, or None where no call of the tuple `calls` matches `args` or the call
 *   must go the Python way (nothing done then). */

typedef struct {
    PyObject *handle, *rest, *maker, *worlds, *entry, *ex, *programs, *use_parity, *raw_stream, *index, *get_device;
    PyObject *capturing, *hooks, *prune, *milestone, *marks, *fail;
    Py_ssize_t n, n_slots, slot[MAX_VAR + 1], n_aligned, aligned[MAX_VAR + 1];
    unsigned long long alignment;
    PyObject *types[MAX_VAR], *shapes[MAX_VAR], *dtypes[MAX_VAR], *devices[MAX_VAR];
    long long max_epoch, prune_at, calls;
} OpCall;

#define OPCALL_CAPSULE "ditron_hotpath.OpCall"

static void op_call_free_fields(OpCall *c) {
    PyObject **refs[] = {&c->handle, &c->rest, &c->maker, &c->worlds, &c->entry, &c->ex, &c->programs,
                         &c->use_parity, &c->raw_stream, &c->index, &c->get_device, &c->capturing, &c->hooks, &c->prune,
                         &c->milestone, &c->marks, &c->fail};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        Py_CLEAR(*refs[i]);
    for (Py_ssize_t i = 0; i < c->n; i++) {
        Py_CLEAR(c->types[i]);
        Py_CLEAR(c->shapes[i]);
        Py_CLEAR(c->dtypes[i]);
        Py_CLEAR(c->devices[i]);
    }
    PyMem_Free(c);
}

static void op_call_free(PyObject *capsule) {
    OpCall *c = (OpCall *)PyCapsule_GetPointer(capsule, OPCALL_CAPSULE);
    if (c)
        op_call_free_fields(c);
}

static int valid_programs(PyObject *programs) {  /* (program, steps) pairs */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(programs); i++) {
        PyObject *pair = PyTuple_GET_ITEM(programs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyCapsule_IsValid(PyTuple_GET_ITEM(pair, 0), PROGRAM_CAPSULE))
            return 0;
    }
    return 1;
}

static int valid_marks(PyObject *marks) {  /* per ring slot a tuple of (append, event, rank, stream) */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(marks); i++) {
        PyObject *slot = PyTuple_GET_ITEM(marks, i);
        if (!PyTuple_Check(slot))
            return 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(slot); k++) {
            PyObject *m = PyTuple_GET_ITEM(slot, k);
            if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) != 4)
                return 0;
        }
    }
    return 1;
}

static PyObject *make_op_call(PyObject *self, PyObject *args) {
    PyObject *handle, *rest, *types, *shapes, *dtypes, *devices, *slots, *aligned, *maker, *worlds, *entry, *ex, *programs;
    PyObject *use_parity, *raw_stream, *index, *get_device, *capturing, *hooks, *prune, *milestone, *marks, *fail;
    Py_ssize_t n_slots;
    unsigned long long alignment;
    long long max_epoch, prune_at;
    if (!PyArg_ParseTuple(args, "UO!O!O!O!O!nO!O!KOO!OOLO!OOOOOOOLOO!O", &handle, &PyTuple_Type, &rest, &PyTuple_Type,
                          &types, &PyTuple_Type, &shapes, &PyTuple_Type, &dtypes, &PyTuple_Type, &devices, &n_slots,
                          &PyTuple_Type, &slots, &PyTuple_Type, &aligned, &alignment,
                          &maker, &PyDict_Type, &worlds, &entry, &ex, &max_epoch, &PyTuple_Type, &programs, &use_parity, &raw_stream, &index,
                          &get_device, &capturing, &hooks, &prune, &prune_at, &milestone, &PyTuple_Type, &marks,
                          &fail))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(shapes);
    if (n > MAX_VAR || PyTuple_GET_SIZE(types) != n || PyTuple_GET_SIZE(dtypes) != n || PyTuple_GET_SIZE(devices) != n ||
        PyTuple_GET_SIZE(slots) != n + 1 || PyTuple_GET_SIZE(marks) < 1 || prune_at < 1 || alignment < 1 ||
        PyTuple_GET_SIZE(aligned) > MAX_VAR + 1 ||
        PyTuple_GET_SIZE(programs) < 1 || PyTuple_GET_SIZE(programs) > 2 || !valid_programs(programs) ||
        !valid_marks(marks)) {
        PyErr_SetString(PyExc_ValueError, "make_op_call: per tensor a shape, dtype, device and slot (then the "
                                          "output's slot), a program, marks per ring slot");
        return NULL;
    }
    OpCall *c = PyMem_Calloc(1, sizeof(OpCall));
    if (!c)
        return PyErr_NoMemory();
    PyObject *given[] = {handle, rest, maker, worlds, entry, ex, programs, use_parity, raw_stream, index, get_device, capturing,
                         hooks, prune, milestone, marks, fail};
    PyObject **refs[] = {&c->handle, &c->rest, &c->maker, &c->worlds, &c->entry, &c->ex, &c->programs,
                         &c->use_parity, &c->raw_stream, &c->index, &c->get_device, &c->capturing, &c->hooks, &c->prune,
                         &c->milestone, &c->marks, &c->fail};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        Py_INCREF(given[i]);
        *refs[i] = given[i];
    }
    c->n = n;
    c->n_slots = n_slots;
    c->alignment = alignment;
    c->n_aligned = PyTuple_GET_SIZE(aligned);
    c->max_epoch = max_epoch;
    c->prune_at = prune_at;
    for (Py_ssize_t i = 0; i < n; i++) {
        c->types[i] = PyTuple_GET_ITEM(types, i);
        Py_INCREF(c->types[i]);
        c->shapes[i] = PyTuple_GET_ITEM(shapes, i);
        c->dtypes[i] = PyTuple_GET_ITEM(dtypes, i);
        c->devices[i] = PyTuple_GET_ITEM(devices, i);
        Py_INCREF(c->shapes[i]);
        Py_INCREF(c->dtypes[i]);
        Py_INCREF(c->devices[i]);
    }
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (as_ssize(PyTuple_GET_ITEM(slots, i), &c->slot[i]) < 0)
            goto fail;
        if (c->slot[i] < 0 || c->slot[i] >= n_slots) {
            PyErr_Format(PyExc_IndexError, "make_op_call: slot %zd of %zd", c->slot[i], n_slots);
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < c->n_aligned; i++) {
        if (as_ssize(PyTuple_GET_ITEM(aligned, i), &c->aligned[i]) < 0)
            goto fail;
        if (c->aligned[i] < 0 || c->aligned[i] >= n_slots) {
            PyErr_Format(PyExc_IndexError, "make_op_call: aligned slot %zd of %zd", c->aligned[i], n_slots);
            goto fail;
        }
    }
    PyObject *capsule = PyCapsule_New(c, OPCALL_CAPSULE, op_call_free);
    if (capsule)
        return capsule;
fail:
    op_call_free_fields(c);
    return NULL;
}

/* 1: the attribute `name` of o equals want (by identity, else ==), 0: not (or o lacks it: no error left) */
static int attr_is(PyObject *o, PyObject *name, PyObject *want, int by_identity) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) {
        PyErr_Clear();
        return 0;
    }
    int same = v == want;
    if (!same && !by_identity) {
        same = PyObject_RichCompareBool(v, want, Py_EQ);
        if (same < 0) {
            PyErr_Clear();
            same = 0;
        }
    }
    Py_DECREF(v);
    return same;
}

static int matches(OpCall *c, PyObject *const *args, Py_ssize_t nargs) {
    static PyObject *s_shape, *s_dtype, *s_device, *s_contiguous;
    if (!s_shape || !s_dtype || !s_device || !s_contiguous) {
        const char *text[] = {"shape", "dtype", "device", "is_contiguous"};
        PyObject **name[] = {&s_shape, &s_dtype, &s_device, &s_contiguous};
        for (int k = 0; k < 4; k++)
            if (!*name[k])
                *name[k] = PyUnicode_InternFromString(text[k]);
        if (!s_shape || !s_dtype || !s_device || !s_contiguous)
            return -1;
    }
    Py_ssize_t n_rest = PyTuple_GET_SIZE(c->rest);
    if (nargs != c->n + 1 + n_rest)
        return 0;
    PyObject *h = args[c->n];
    if (h != c->handle && (!PyUnicode_Check(h) || PyUnicode_Compare(h, c->handle) != 0))
        return 0;
    for (Py_ssize_t k = 0; k < n_rest; k++) {
        PyObject *a = args[c->n + 1 + k], *b = PyTuple_GET_ITEM(c->rest, k);
        if (a == b)
            continue;
        if (Py_TYPE(a) != Py_TYPE(b))  /* 1 is not True, nor 1.0 */
            return 0;
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq <= 0) {
            PyErr_Clear();
            return 0;
        }
    }
    for (Py_ssize_t i = 0; i < c->n; i++) {
        PyObject *t = args[i];
        if ((PyObject *)Py_TYPE(t) != c->types[i])
            return 0;
        if (!attr_is(t, s_shape, c->shapes[i], 0) || !attr_is(t, s_dtype, c->dtypes[i], 1) ||
            !attr_is(t, s_device, c->devices[i], 0))
            return 0;
        PyObject *v = PyObject_CallMethodNoArgs(t, s_contiguous);
        if (!v) {
            PyErr_Clear();
            return 0;
        }
        int yes = v == Py_True;
        Py_DECREF(v);
        if (!yes)
            return 0;
    }
    return 1;
}

/* 1: the call may take its operator call here, 0: the Python way, -1: an error */
static int may_run(OpCall *c) {
    static PyObject *s_closed, *s_broken, *s_enter, *s_leave, *s_calls;
    if (!s_closed || !s_broken || !s_enter || !s_leave || !s_calls) {
        const char *text[] = {"_closed", "_broken", "launch_enter_hook", "launch_exit_hook", "calls"};
        PyObject **name[] = {&s_closed, &s_broken, &s_enter, &s_leave, &s_calls};
        for (int k = 0; k < 5; k++)
            if (!*name[k])
                *name[k] = PyUnicode_InternFromString(text[k]);
        if (!s_closed || !s_broken || !s_enter || !s_leave || !s_calls)
            return -1;
    }
    PyObject *known = PyDict_GetItemWithError(c->worlds, c->handle);  /* borrowed */
    if (known != c->entry)
        return PyErr_Occurred() ? -1 : 0;
    if (!attr_is(c->ex, s_closed, Py_False, 1) || !attr_is(c->ex, s_broken, Py_None, 1))
        return 0;
    if (c->get_device != Py_None) {
        PyObject *d = PyObject_CallNoArgs(c->get_device);
        if (!d)
            return -1;
        int same = PyObject_RichCompareBool(d, c->index, Py_EQ);
        Py_DECREF(d);
        if (same <= 0)
            return same;
    }
    PyObject *cap = PyObject_CallNoArgs(c->capturing);
    if (!cap)
        return -1;
    int capturing = PyObject_IsTrue(cap);
    Py_DECREF(cap);
    if (capturing)
        return capturing < 0 ? -1 : 0;
    if (c->hooks != Py_None) {
        PyObject *names[] = {s_enter, s_leave};
        for (int k = 0; k < 2; k++) {
            PyObject *hook = PyObject_GetAttr(c->hooks, names[k]);
            if (!hook)
                return -1;
            int active = 0;
            if (hook != Py_None) {
                PyObject *calls = PyObject_GetAttr(hook, s_calls);
                if (!calls) {
                    PyErr_Clear();
                    active = 1;         /* a plain function */
                } else {
                    active = PyObject_IsTrue(calls);
                    Py_DECREF(calls);
                }
            }
            Py_DECREF(hook);
            if (active)
                return active < 0 ? -1 : 0;
        }
    }
    return 1;
}

static PyObject *op_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static PyObject *s_epoch;
    if (!s_epoch && !(s_epoch = PyUnicode_InternFromString("epoch")))
        return NULL;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "op_call(calls: tuple, args: tuple)");
        return NULL;
    }
    PyObject *calls = args[0], *call_args = args[1];
    OpCall *c = NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(calls); k++) {
        OpCall *e = (OpCall *)PyCapsule_GetPointer(PyTuple_GET_ITEM(calls, k), OPCALL_CAPSULE);
        if (!e)
            return NULL;
        int m = matches(e, &PyTuple_GET_ITEM(call_args, 0), PyTuple_GET_SIZE(call_args));
        if (m < 0)
            return NULL;
        if (m) {
            c = e;
            break;
        }
    }
    if (!c)
        Py_RETURN_NONE;
    int ok = may_run(c);
    if (ok <= 0) {
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *old = PyObject_GetAttr(c->ex, s_epoch);
    if (!old)
        return NULL;
    long long epoch = PyLong_AsLongLong(old);
    if (epoch == -1 && PyErr_Occurred()) {
        Py_DECREF(old);
        return NULL;
    }
    if (epoch >= c->max_epoch) {  /* epoch + 1 is past it: the Python way (the interpreted call checks, raises) */
        Py_DECREF(old);
        Py_RETURN_NONE;
    }
    epoch += 1;
    PyObject *out = NULL, *row = NULL, *rows = NULL, *stream = NULL, *res = NULL, *epoch_obj = NULL;
    out = PyObject_CallNoArgs(c->maker);
    if (!out)
        goto error;
    if (!(row = PyList_New(c->n_slots)))
        goto error;
    for (Py_ssize_t i = 0; i < c->n_slots; i++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(row, i, Py_None);
    }
    for (Py_ssize_t i = 0; i <= c->n; i++) {
        PyObject *t = i < c->n ? PyTuple_GET_ITEM(call_args, i) : out;
        Py_INCREF(t);
        PyObject *prev = PyList_GET_ITEM(row, c->slot[i]);
        PyList_SET_ITEM(row, c->slot[i], t);
        Py_DECREF(prev);
    }
    if (!(rows = PyTuple_Pack(1, row)) || !(epoch_obj = PyLong_FromLongLong(epoch)))
        goto error;
    for (Py_ssize_t i = 0; i < c->n_aligned; i++) {
        unsigned long long ptr;
        if (PyList_GET_ITEM(row, c->aligned[i]) == Py_None)
            continue;
        if (data_ptr(rows, 0, c->aligned[i], &ptr) < 0)
            goto error;
        if (ptr % c->alignment) {   /* the Python way: the plan's precheck raises the executor's error */
            Py_CLEAR(out);
            goto done;
        }
    }
    if (!(stream = PyObject_CallOneArg(c->raw_stream, c->index)))
        goto error;
    uintptr_t handle;
    if (as_handle(stream, &handle) < 0)
        goto error;
    Py_ssize_t parity = PyTuple_GET_SIZE(c->programs) == 2 ? (Py_ssize_t)(epoch & 1) : 0;
    if (c->use_parity != Py_None) {  /* as EagerPlan.enqueue: the parity's pads bound, then the epoch taken */
        PyObject *r = PyObject_CallFunction(c->use_parity, "n", parity);
        if (!r)
            goto error;
        Py_DECREF(r);
    }
    if (PyObject_SetAttr(c->ex, s_epoch, epoch_obj) < 0)
        goto error;
    res = run_core((Program *)PyCapsule_GetPointer(PyTuple_GET_ITEM(PyTuple_GET_ITEM(c->programs, parity), 0),
                                                   PROGRAM_CAPSULE), epoch, handle, rows);
    if (!res)
        goto error;             /* the epoch stays taken, as on the Python way */
    if (PyLong_Check(res)) {
        long code = PyLong_AsLong(res);
        if (code == -1) {       /* no current context, nothing enqueued: the epoch given back, the Python way */
            if (PyObject_SetAttr(c->ex, s_epoch, old) < 0)
                goto error;
            Py_CLEAR(out);
            goto done;
        }
    } else {
        PyObject *r = PyObject_CallFunctionObjArgs(c->fail, res, epoch_obj, NULL);
        Py_XDECREF(r);
        if (r)
            PyErr_SetString(PyExc_RuntimeError, "op_call: fail() returned instead of raising");
        goto error;
    }
    if (++c->calls % c->prune_at == 0) {
        PyObject *r = PyObject_CallNoArgs(c->prune);
        if (!r)
            goto error;
        Py_DECREF(r);
    }
    Py_ssize_t ring = PyTuple_GET_SIZE(c->marks);
    PyObject *slot = PyTuple_GET_ITEM(c->marks, ((epoch % ring) + ring) % ring);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(slot); k++) {
        PyObject *mk = PyTuple_GET_ITEM(slot, k);   /* (append, event, rank, stream) */
        PyObject *m = PyObject_CallFunctionObjArgs(c->milestone, PyTuple_GET_ITEM(mk, 1), PyTuple_GET_ITEM(mk, 2),
                                                   PyTuple_GET_ITEM(mk, 3), Py_None, epoch_obj, NULL);
        if (!m)
            goto error;
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(mk, 0), m);
        Py_DECREF(m);
        if (!r)
            goto error;
        Py_DECREF(r);
    }
    goto done;
error:
    Py_CLEAR(out);
done:
    Py_DECREF(old);
    Py_XDECREF(row);
    Py_XDECREF(rows);
    Py_XDECREF(stream);
    Py_XDECREF(res);
    Py_XDECREF(epoch_obj);
    if (!out && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
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
    {"make_program", make_program, METH_VARARGS, "a plan's whole call: fork, its steps, join (a capsule for run)"},
    {"run", (PyCFunction)(void (*)(void))run_program, METH_FASTCALL, "a plan's whole call, one C call"},
    {"make_op_call", make_op_call, METH_VARARGS, "a torch operator's checked call, for op_call"},
    {"op_call", (PyCFunction)(void (*)(void))op_call, METH_FASTCALL, "a torch operator's eager call, one C call"},
    {"dry_entry_points", dry_entry_points, METH_NOARGS, "no-op entry points with the driver's signatures"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ditron_hotpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit_ditron_hotpath(void) { return PyModule_Create(&module); }
