// A PJRT_Client_Create still waiting for its session (the controller's
// device queue) given up by its caller. The create option
// "causeway_cancel_fd" names a descriptor the caller makes readable (a byte
// written, or the other end of a pipe closed); the wait then ends CANCELLED
// and the controller drops the request. causeway-proxy passes one for each
// session, so a client that leaves while its session waits frees its place
// (docs/proxy.md).
#ifndef CW_PLUGIN_CANCEL_H_
#define CW_PLUGIN_CANCEL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "cw_client.h"
#include "cw_status.h"

typedef struct cw_plugin_cancel_s {
  int fd;                // the caller's (borrowed); -1: none
  int stop[2];           // ends the watch
  pthread_t thread;
  bool started;
  atomic_bool fired;
  pthread_mutex_t mu;    // orders the watch's shutdown against a new connection
  cw_client_t** ctrl;    // the connection the wait is on (the client's own field)
} cw_plugin_cancel_t;

// Starts watching `fd` (< 0: nothing to watch) while the session opens on
// *ctrl; a cancel shuts *ctrl down, which ends the call waiting on it.
CW_MUST_USE cw_status_t cw_plugin_cancel_start(cw_plugin_cancel_t* c, int fd,
                                               cw_client_t** ctrl);
// Whether the caller gave up; then `s` (taken) becomes CANCELLED.
bool cw_plugin_cancel_fired(cw_plugin_cancel_t* c);
cw_status_t cw_plugin_cancel_status(cw_plugin_cancel_t* c, cw_status_t s);
// Replaces *ctrl (a reconnection) unless the caller gave up: false then,
// and `fresh` is released.
bool cw_plugin_cancel_swap(cw_plugin_cancel_t* c, cw_client_t* fresh);
// Ends the watch (idempotent; a zeroed or never started one is fine).
void cw_plugin_cancel_stop(cw_plugin_cancel_t* c);

#endif  // CW_PLUGIN_CANCEL_H_
