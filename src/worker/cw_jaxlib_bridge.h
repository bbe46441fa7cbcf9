// The jaxlib bridge (libcauseway_jaxlib.so, cw_jaxlib_bridge.c): the one
// piece of causeway that embeds Python. A worker dlopens it only when it
// needs jaxlib's CPU kernels, after loading the matching libpython with
// RTLD_GLOBAL (cw_jaxlib_set.c), so the worker itself never links Python.
#ifndef CW_WORKER_JAXLIB_BRIDGE_H_
#define CW_WORKER_JAXLIB_BRIDGE_H_

#include <stddef.h>

#include "causeway_ffi.h"

#define CW_JAXLIB_BRIDGE_LIBRARY "libcauseway_jaxlib.so"
#define CW_JAXLIB_BRIDGE_SYMBOL "cw_jaxlib_bridge_load"

// Starts the interpreter of `python` (a venv's bin/python: its site-packages
// are searched), imports jaxlib's CPU kernel modules, calls their
// initialize() and collects their typed FFI handlers. On success returns 0
// and sets *out_targets to a table ended by a NULL name, valid for the
// process's life; a second call returns the same table. Otherwise returns -1
// with a message in `error` (NUL-terminated, truncated to `error_size`).
// Takes nothing; not thread-safe (the caller serializes).
typedef int cw_jaxlib_bridge_load_fn(const char* python, const causeway_ffi_target** out_targets,
                                     char* error, size_t error_size);

#endif  // CW_WORKER_JAXLIB_BRIDGE_H_
