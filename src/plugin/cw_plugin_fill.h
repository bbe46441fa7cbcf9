// Fills of the seqs that requests relayed through the controller took and
// that never reached their worker (the controller refused one, or never
// came back with it). The worker applies a session's requests in seq order
// and holds later ones until the gap is filled; the later ones sent straight
// to it may be many, and at --max-held-requests the worker stops reading
// the connection they came on. A fill sent there would never be read: it
// goes on a connection of its own, which holds nothing (docs/protocol.md,
// "Ordering across connections"). Connecting waits on the network, so a
// thread of the client's does it, never the reader that took the refusal:
// one per worker with fills under way, so that a worker that does not
// answer holds up only its own. A connection refused (the worker at
// --max-connections) sends the fills on the worker's link and is tried
// again until they are answered there; fills queued for that worker
// meanwhile join them.
#ifndef CW_PLUGIN_FILL_H_
#define CW_PLUGIN_FILL_H_

#include <stdint.h>

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_worker_s cw_plugin_worker_t;

// Queues the fill of `seq`, taken in w's `epoch` and numbered in our
// session's life `life` there (HelloReply.session_key); any thread, without
// w's locks. Dropped if w is replaced or marked dead by then (a replacement
// numbers from 1; a reattach fills every seq not relayed and unanswered).
void cw_plugin_fill_later(cw_plugin_worker_t* w, uint32_t epoch, uint64_t life, uint64_t seq);

// Takes no more fills, and drops those queued (the session ends with the
// client): first at client destroy, before failing the requests parked for
// a controller that is away queues theirs (their connects would hold up
// the destroy, up to the connect timeout for a worker that does not
// answer; one already under way, a retry's too, is still waited for by
// cw_plugin_fill_stop). Idempotent.
void cw_plugin_fill_close(cw_plugin_client_t* c);

// Ends the filling thread: queued fills are dropped, and connections whose
// fills are still held at their worker are closed (the session ends with
// the client). Before the workers are freed; idempotent.
void cw_plugin_fill_stop(cw_plugin_client_t* c);

#endif  // CW_PLUGIN_FILL_H_
