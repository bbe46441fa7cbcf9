// causeway-proxy: the IFRT proxy front. Stock JAX's `proxy` backend
// (jaxlib's IFRT proxy client, gRPC) talks to it; it serves each IfrtSession
// stream as one causeway session through the plugin's PJRT C API
// (cw_proxy_pjrt.h). One libuv loop thread does the gRPC I/O; each session
// has a thread of its own for the PJRT calls, which may block (docs/proxy.md).
#ifndef CW_PROXY_PROXY_H_
#define CW_PROXY_PROXY_H_

#include "cw_settings.h"
#include "cw_status.h"

// The IFRT proxy protocol versions served (the wire schema of jaxlib 0.11.2,
// proto/ifrt_proxy.proto) and the IFRT serialization versions accepted.
#define CW_PROXY_PROTOCOL_MIN 25
#define CW_PROXY_PROTOCOL_MAX 25

typedef struct cw_proxy_s cw_proxy_t;

// Loads the PJRT plugin, starts listening and prints "causeway-proxy
// listening on ADDR" to stdout. `settings` is borrowed for the proxy's life.
CW_MUST_USE cw_status_t cw_proxy_create(const cw_settings_t* settings, cw_proxy_t** out_proxy);
// Runs until SIGTERM/SIGINT; open sessions end (their clients are told).
CW_MUST_USE cw_status_t cw_proxy_run(cw_proxy_t* proxy);
void cw_proxy_release(cw_proxy_t* proxy);

#endif  // CW_PROXY_PROXY_H_
