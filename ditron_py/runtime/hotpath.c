/* The host path of a graph-mode call in C: cuGraphLaunch, then cuEventRecord on the same stream, in one call from
 * Python (ctypes costs a fraction of a microsecond per call on top of the driver's own work, twice). The driver
 * entry points come in as addresses (ctypes resolves them in libcuda.so.1), so nothing here links against CUDA.
 * Built at run time by ditron.runtime.memops through Triton's own helper builder (as Triton builds its launchers). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"launch_graph", (PyCFunction)(void (*)(void))launch_graph, METH_FASTCALL,
     "cuGraphLaunch then cuEventRecord through the given entry points"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ditron_hotpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit_ditron_hotpath(void) { return PyModule_Create(&module); }
