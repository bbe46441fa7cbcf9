// libcauseway_jaxlib.so: jaxlib's CPU custom-call kernels for a worker
// (cw_jaxlib_bridge.h). jaxlib hands its kernels out only to Python: each
// module's registrations() maps target names to capsules holding XLA FFI
// handlers, and the LAPACK module's initialize() first fills their kernel
// pointers from scipy's LAPACK and BLAS. So this library runs the venv's own
// interpreter once, takes those handlers, and leaves the interpreter idle
// (never finalized: scipy's kernels live in modules it loaded).
//
// Built against the headers of one Python (CW_PYTHON at configure time) and
// linked against no libpython: the worker loads that version's libpython
// with RTLD_GLOBAL before this library.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_jaxlib_bridge.h"

// The modules and what each needs: jaxlib.cpu._lapack must load (JAX's
// linalg on CPU); jaxlib.cpu._sparse (jax.experimental.sparse) may be absent.
typedef struct cw__module_s {
  const char* name;
  bool required;
} cw__module_t;
static const cw__module_t cw__modules[] = {
    {"jaxlib.cpu._lapack", true},
    {"jaxlib.cpu._sparse", false},
};

// The capsule name jaxlib gives its custom-call targets.
#define CW__CAPSULE_NAME "xla._CUSTOM_CALL_TARGET"

static causeway_ffi_target* cw__table;  // the answer, once loaded
static size_t cw__count, cw__cap;

static void cw__say(char* error, size_t size, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void cw__say(char* error, size_t size, const char* fmt, ...) {
  if (!size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error, size, fmt, ap);
  va_end(ap);
}

// The pending Python exception as "Type: message" into `error` (cleared).
static void cw__say_exception(char* error, size_t size, const char* what) {
  PyObject* exc = PyErr_GetRaisedException();
  PyObject* text = exc ? PyObject_Str(exc) : NULL;
  const char* type = exc ? Py_TYPE(exc)->tp_name : "error";
  const char* msg = text ? PyUnicode_AsUTF8(text) : NULL;
  cw__say(error, size, "%s: %s: %s", what, type, msg ? msg : "(no message)");
  Py_XDECREF(text);
  Py_XDECREF(exc);
  PyErr_Clear();
}

static bool cw__add(const char* name, void* handler) {
  for (size_t i = 0; i < cw__count; ++i) {
    if (!strcmp(cw__table[i].name, name)) return true;  // a module repeats one
  }
  if (cw__count + 1 >= cw__cap) {
    size_t cap = cw__cap ? 2 * cw__cap : 128;
    causeway_ffi_target* t = realloc(cw__table, cap * sizeof(*t));
    if (!t) return false;
    cw__table = t;
    cw__cap = cap;
  }
  char* copy = strdup(name);
  if (!copy) return false;
  cw__table[cw__count].name = copy;
  cw__table[cw__count].handler = handler;
  cw__count++;
  cw__table[cw__count].name = NULL;
  cw__table[cw__count].handler = NULL;
  return true;
}

// Starts the interpreter as `python` would run: its venv's site-packages on
// sys.path, no signal handlers (the worker owns SIGINT/SIGTERM), no argv.
static bool cw__start_python(const char* python, char* error, size_t size) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  PyStatus st = PyConfig_SetBytesString(&config, &config.executable, python);
  if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(st)) {
    cw__say(error, size, "cannot start the Python of %s: %s%s%s", python,
            st.func ? st.func : "", st.func ? ": " : "", st.err_msg ? st.err_msg : "");
    return false;
  }
  return true;
}

// Imports `m`, runs its initialize() if it has one, adds its typed FFI
// targets (names ending in "_ffi"; older untyped ones cannot be registered
// through PJRT). Holds the GIL.
static bool cw__load_module(const cw__module_t* m, char* error, size_t size) {
  char what[160];
  PyObject* mod = PyImport_ImportModule(m->name);
  if (!mod) {
    if (!m->required) {
      PyErr_Clear();
      return true;
    }
    snprintf(what, sizeof(what), "cannot import %s", m->name);
    cw__say_exception(error, size, what);
    return false;
  }
  bool ok = false;
  PyObject* regs = NULL;
  if (PyObject_HasAttrString(mod, "initialize")) {
    PyObject* r = PyObject_CallMethod(mod, "initialize", NULL);
    if (!r) {
      snprintf(what, sizeof(what), "%s.initialize() failed", m->name);
      cw__say_exception(error, size, what);
      goto done;
    }
    Py_DECREF(r);
  }
  regs = PyObject_CallMethod(mod, "registrations", NULL);
  if (!regs || !PyDict_Check(regs)) {
    snprintf(what, sizeof(what), "%s.registrations() did not give a dict", m->name);
    if (regs) {
      cw__say(error, size, "%s", what);
    } else {
      cw__say_exception(error, size, what);
    }
    goto done;
  }
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(regs, &pos, &key, &value)) {
    Py_ssize_t len = 0;
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
    if (!name) {
      PyErr_Clear();
      continue;
    }
    if (len < 4 || strcmp(name + len - 4, "_ffi") != 0) continue;
    if (!PyCapsule_IsValid(value, CW__CAPSULE_NAME)) continue;
    void* handler = PyCapsule_GetPointer(value, CW__CAPSULE_NAME);
    if (!handler) {
      PyErr_Clear();
      continue;
    }
    if (!cw__add(name, handler)) {
      cw__say(error, size, "out of memory for jaxlib's targets");
      goto done;
    }
  }
  ok = true;
done:
  Py_XDECREF(regs);
  Py_DECREF(mod);  // sys.modules keeps it, and the handlers' code with it
  return ok;
}

cw_jaxlib_bridge_load_fn cw_jaxlib_bridge_load __attribute__((visibility("default")));

int cw_jaxlib_bridge_load(const char* python, const causeway_ffi_target** out_targets,
                          char* error, size_t error_size) {
  *out_targets = NULL;
  if (error_size) error[0] = '\0';
  if (cw__table) {
    *out_targets = cw__table;
    return 0;
  }
  if (!python || !*python) {
    cw__say(error, error_size, "no Python interpreter given");
    return -1;
  }
  bool started_here = !Py_IsInitialized();
  if (started_here && !cw__start_python(python, error, error_size)) return -1;
  PyGILState_STATE gil = PyGILState_Ensure();
  bool ok = true;
  for (size_t i = 0; ok && i < sizeof(cw__modules) / sizeof(cw__modules[0]); ++i) {
    ok = cw__load_module(&cw__modules[i], error, error_size);
  }
  if (ok && !cw__count) {
    cw__say(error, error_size, "jaxlib's CPU modules registered no FFI handlers");
    ok = false;
  }
  PyGILState_Release(gil);
  // The thread that started Python still holds the GIL: let it go, so no
  // later Python call (none is made) could deadlock on this thread.
  if (started_here) PyEval_SaveThread();
  if (!ok) {
    for (size_t i = 0; i < cw__count; ++i) free((char*)cw__table[i].name);
    free(cw__table);
    cw__table = NULL;
    cw__count = cw__cap = 0;
    return -1;
  }
  *out_targets = cw__table;
  return 0;
}
