// Shared by the proxy's files: the service (cw_proxy.c, loop thread), the
// session threads (cw_proxy_session.c) and the request families
// (cw_proxy_init.c, ...), which run on a session's thread.
#ifndef CW_PROXY_INTERNAL_H_
#define CW_PROXY_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "cw_grpc_server.h"
#include "cw_proxy.h"
#include "cw_proxy_pjrt.h"
#include "proto/ifrt_proxy.pb-c.h"

typedef struct cw_proxy_item_s {
  struct cw_proxy_item_s* next;
  size_t len;
  uint8_t data[];
} cw_proxy_item_t;

typedef struct cw_proxy_queue_s {
  cw_proxy_item_t* head;
  cw_proxy_item_t* tail;
} cw_proxy_queue_t;

typedef struct cw_proxy_session_s {
  cw_proxy_t* proxy;
  uint64_t id;
  int32_t protocol_version;
  struct cw_proxy_session_s* next;  // the proxy's list (loop thread)
  cw_grpc_call_t* call;             // retained; loop thread only
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  // Under mu.
  cw_proxy_queue_t requests;
  cw_proxy_queue_t responses;
  bool half_closed;  // the client sends no more requests
  bool gone;         // the stream closed: stop now
  bool exited;       // the thread is done; join it
  // The session thread's own.
  PJRT_Client* client;
  cw_status_t client_status;  // why there is no client
} cw_proxy_session_t;

struct cw_proxy_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  uv_async_t wake;  // a session thread queued responses or exited
  uv_signal_t sigterm;
  uv_signal_t sigint;
  bool stopping;
  bool closed;  // the loop's handles are closing
  cw_grpc_server_t* server;
  cw_grpc_server_options_t server_options;
  cw_proxy_pjrt_t pjrt;
  cw_proxy_session_t* sessions;
};

// --- Sessions (cw_proxy_session.c) ----------------------------------------------

// Starts a session's thread (which creates its PJRT client). Takes nothing.
CW_MUST_USE cw_status_t cw_proxy_session_start(cw_proxy_session_t* s);
// Loop thread: queues one request (copied) for the session's thread.
CW_MUST_USE cw_status_t cw_proxy_session_push(cw_proxy_session_t* s, const uint8_t* data,
                                              size_t len);
// Loop thread: no more requests (half) or stop now (!half).
void cw_proxy_session_end(cw_proxy_session_t* s, bool half);
// Loop thread: writes queued responses; true when the thread has exited
// (then joined: the session may be freed).
bool cw_proxy_session_drain(cw_proxy_session_t* s);
void cw_proxy_session_free(cw_proxy_session_t* s);

// Session thread: queues a response whose metadata the caller filled.
void cw_proxy_session_respond(cw_proxy_session_t* s, CwIfrt__IfrtResponse* response);

// --- Request families (session thread) ------------------------------------------------

// Fills `resp` for an InitRequest (cw_proxy_init.c).
CW_MUST_USE cw_status_t cw_proxy_init(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                      CwIfrt__IfrtResponse* resp);
// Frees what cw_proxy_init put in `resp`.
void cw_proxy_init_free(CwIfrt__IfrtResponse* resp);

#endif  // CW_PROXY_INTERNAL_H_
