// A gRPC server on a daemon's libuv loop (no thread of its own): TCP
// connections, each a cw_grpc_session_t (cw_grpc.h). The owner's handlers
// run on the loop thread; responses it queues with cw_grpc_call_send/finish
// (also from later loop callbacks) are written in the loop's next pass.
//
// Admission as the other listeners (cw_net_gate.h): a connection stays in
// the gate, and under its deadline, until its first call is accepted; with a
// token set, a call needs metadata "authorization: Bearer <token>" (else
// UNAUTHENTICATED). A Unix socket (an address with '/') is made 0700: only
// its owner connects, and a peer the kernel says runs as this user needs no
// token (jaxlib's IFRT proxy client cannot send one). Plaintext only: TLS for this listener is not built
// (docs/proxy.md says why); bind TCP to loopback or a trusted network.
#ifndef CW_NET_GRPC_SERVER_H_
#define CW_NET_GRPC_SERVER_H_

#include <uv.h>

#include "cw_grpc.h"
#include "cw_settings.h"
#include "cw_status.h"

#define CW_GRPC_SERVER_MAX_CONNS 512
#define CW_GRPC_SERVER_MAX_CONNS_PER_PEER 256
#define CW_GRPC_SERVER_FIRST_CALL_MS 10000

typedef struct cw_grpc_server_s cw_grpc_server_t;

typedef struct cw_grpc_server_options_s {
  cw_grpc_options_t grpc;
  // NULL or empty: none needed. Borrowed for the server's life; its owner
  // may change it in place on the loop thread (cw_net_creds.h).
  const cw_token_set_t* tokens;
} cw_grpc_server_options_t;

// Listens on `address` (host:port, port 0 picks one; or a Unix socket path). `handlers` and
// `options` are borrowed for the server's life.
CW_MUST_USE cw_status_t cw_grpc_server_create(uv_loop_t* loop, const char* address,
                                              const cw_grpc_server_options_t* options,
                                              const cw_grpc_handlers_t* handlers, void* user,
                                              cw_grpc_server_t** out_server);
// host:port as bound (the port resolved).
const char* cw_grpc_server_address(const cw_grpc_server_t* server);
// Closes the listener; every connection sends its last output and a GOAWAY,
// then closes when its peer does or after a second (their calls close); the
// server frees itself once the loop has closed its handles. Takes `server`.
void cw_grpc_server_close(cw_grpc_server_t* server);

#endif  // CW_NET_GRPC_SERVER_H_
