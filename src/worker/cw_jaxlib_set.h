// jaxlib's CPU kernels as a worker's handler set (cw_handler_set.h): finding
// the Python environment that has jaxlib, its libpython, and the bridge
// library (cw_jaxlib_bridge.h) that hands the kernels out.
#ifndef CW_WORKER_JAXLIB_SET_H_
#define CW_WORKER_JAXLIB_SET_H_

#include <stdbool.h>

#include "causeway_ffi.h"
#include "cw_status.h"

// The Python interpreter whose jaxlib a worker uses, when the setting
// (CAUSEWAY_JAXLIB_PYTHON) is empty: the environment that holds the PJRT
// plugin `plugin_path` (a wheel in .../lib/python3.N/site-packages), else
// $VIRTUAL_ENV's. *out_python is malloc'd; NULL when there is none.
CW_MUST_USE cw_status_t cw_jaxlib_find_python(const char* plugin_path, char** out_python);

// The bridge library beside this program (bin/../lib); malloc'd.
CW_MUST_USE cw_status_t cw_jaxlib_default_bridge(char** out_path);

// Loads libpython of `python`'s environment (it must be the version the
// bridge was built for), then the bridge at `bridge_path`, which imports
// jaxlib there. *out_targets (ended by a NULL name) lives as long as the
// process. Not thread-safe: the caller serializes. The error names the
// interpreter, the library or the module that failed.
CW_MUST_USE cw_status_t cw_jaxlib_load(const char* python, const char* bridge_path,
                                       const causeway_ffi_target** out_targets);

// Whether this build has the bridge (Python headers were found).
bool cw_jaxlib_bridge_built(void);

#endif  // CW_WORKER_JAXLIB_SET_H_
