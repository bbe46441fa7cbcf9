// Handler sets: where a worker's custom-call handlers come from (docs/ffi.md).
// A JAX program's custom calls (jaxlib's LAPACK kernels, a user's jax.ffi
// kernels) run where the program runs, so each worker registers their XLA
// FFI handlers with its PJRT plugin (platform "Host") before it compiles.
// Two kinds of set:
//   - a user's FFI library, CAUSEWAY_FFI_LIBRARIES / --ffi-libraries
//     "PATH:SYMBOL" (SYMBOL returns a table, causeway_ffi.h) or
//     "PATH:TARGET=SYMBOL" (SYMBOL is the handler of TARGET), comma-separated;
//     loaded at start-up, and a worker that cannot load one refuses to start.
//   - jaxlib's CPU kernels from a Python environment
//     (CAUSEWAY_JAXLIB_PYTHON / --jaxlib-python: "" finds one beside the PJRT
//     plugin, "off" disables, a path is required and loaded at start-up);
//     one found by itself loads when a compile first misses a handler, so
//     workers that never need it never start Python.
// A compile or load that fails for want of a handler gets an error naming
// the target and how to provide it.
#ifndef CW_WORKER_HANDLER_SET_H_
#define CW_WORKER_HANDLER_SET_H_

#include <stdbool.h>
#include <stddef.h>

#include "cw_pjrt.h"
#include "cw_status.h"

typedef struct cw_handler_sets_s cw_handler_sets_t;

typedef struct cw_handler_sets_options_s {
  const char* ffi_libraries;  // "" or NULL: none
  const char* jaxlib_python;  // "": find one, "off": none, else that interpreter
  const char* plugin_path;    // the PJRT plugin (where "" looks for jaxlib)
  const char* bridge_path;    // NULL: lib/libcauseway_jaxlib.so beside bin/
} cw_handler_sets_options_t;

// One entry of an ffi-libraries list; exposed for tests.
typedef struct cw_handler_spec_s {
  char* path;
  char* symbol;
  char* target;  // "PATH:TARGET=SYMBOL"; NULL for a table
} cw_handler_spec_t;
CW_MUST_USE cw_status_t cw_handler_specs_parse(const char* text, cw_handler_spec_t** out_specs,
                                               size_t* out_count);
void cw_handler_specs_free(cw_handler_spec_t* specs, size_t count);

// Loads what `options` names and registers it with `pjrt` (borrowed; it must
// outlive the sets). An error names the library, symbol, target or Python
// that failed: the worker should refuse to start.
CW_MUST_USE cw_status_t cw_handler_sets_create(const cw_handler_sets_options_t* options,
                                               const cw_pjrt_t* pjrt,
                                               cw_handler_sets_t** out_sets);
void cw_handler_sets_release(cw_handler_sets_t* sets);

// Given the error of a compile or load: true when it is a missing custom-call
// handler, `may_retry` (the caller tries once more at most) and the target
// is registered now (a set not loaded before was loaded, here or by a
// concurrent call), so the caller should try again. Otherwise false, and when the error
// names a missing handler *io_status is replaced by one that also says which
// sets this worker has and how to provide the target. Any thread.
bool cw_handler_sets_resolve(cw_handler_sets_t* sets, bool may_retry, cw_status_t* io_status);

// How many targets are registered; whether `target` is one of them.
size_t cw_handler_sets_count(cw_handler_sets_t* sets);
bool cw_handler_sets_has(cw_handler_sets_t* sets, const char* target);

#endif  // CW_WORKER_HANDLER_SET_H_
