// The proxy's backend: a PJRT plugin (libcauseway_pjrt.so by default) loaded
// once and driven through its C API, one PJRT client per IFRT session. The
// proxy is thus a second front on what the plugin already does (sessions and
// allocations, compile once, island order, host callbacks, health), and an
// IFRT request becomes the PJRT calls the plugin serves (docs/proxy.md).
#ifndef CW_PROXY_PJRT_H_
#define CW_PROXY_PJRT_H_

#include "cw_pjrt_c_api.h"
#include "cw_status.h"

typedef struct cw_proxy_pjrt_s {
  void* dl;
  const PJRT_Api* api;
} cw_proxy_pjrt_t;

// dlopens `path`, checks its API major version and initializes it.
CW_MUST_USE cw_status_t cw_proxy_pjrt_load(const char* path, cw_proxy_pjrt_t* out_pjrt);
// The plugin stays loaded (its threads may outlive a dlclose).
void cw_proxy_pjrt_unload(cw_proxy_pjrt_t* pjrt);

// A PJRT error as a status with `what` before its message; takes `err`
// (NULL: OK).
CW_MUST_USE cw_status_t cw_proxy_pjrt_status(const cw_proxy_pjrt_t* pjrt, PJRT_Error* err,
                                             const char* what);

// Waits for `ev` and destroys it (NULL: OK at once); its error as a status.
CW_MUST_USE cw_status_t cw_proxy_pjrt_await(const cw_proxy_pjrt_t* pjrt, PJRT_Event* ev,
                                            const char* what);
// Destroys `buffer` (NULL: nothing); errors are logged.
void cw_proxy_pjrt_buffer_destroy(const cw_proxy_pjrt_t* pjrt, PJRT_Buffer* buffer);

// The struct_size initializer of a PJRT args struct whose last known field
// is `last`.
#define CW_PROXY_ARGS(type, last) .struct_size = CW_PJRT_STRUCT_SIZE(type, last)

// Runs PJRT call `fn` with `args` (struct_size set by the caller) and
// returns its status annotated with the call's name.
#define CW_PROXY_PJRT_CALL(pjrt, fn, args) \
  cw_proxy_pjrt_status((pjrt), (pjrt)->api->fn(args), #fn)

#endif  // CW_PROXY_PJRT_H_
