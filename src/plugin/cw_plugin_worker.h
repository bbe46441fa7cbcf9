// The client's side of each worker of its session (cw_plugin_worker.c): the
// direct connection, the per-session `seq` every ordered request carries
// (the worker applies them in seq order whichever path they took:
// docs/protocol.md, "Ordering across connections"), the batched DELETEs of
// dropped buffers, errors of pipelined requests nobody waits on, and whether
// the worker is dead. Its loss and replacement: cw_plugin_health.h.
#ifndef CW_PLUGIN_WORKER_H_
#define CW_PLUGIN_WORKER_H_

#include <stdbool.h>
#include <stdint.h>

#include "cw_client.h"
#include "cw_plugin_event.h"
#include "cw_status.h"
#include "proto/causeway.pb-c.h"

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_worker_s cw_plugin_worker_t;

// Fills `w` (zeroed storage in the client's table) from the session's
// WorkerInfo (borrowed). On failure `w` still needs deinitializing.
CW_MUST_USE cw_status_t cw_plugin_worker_initialize(cw_plugin_worker_t* w, cw_plugin_client_t* c,
                                                    const Causeway__V1__WorkerInfo* wi);
// Frees what `w` holds; its connection is released by the caller first.
void cw_plugin_worker_deinitialize(cw_plugin_worker_t* w);

// The worker of the session with controller index `index` (NULL if none).
cw_plugin_worker_t* cw_plugin_worker_find(cw_plugin_client_t* c, uint32_t index);
// Marks `w` dead with `why` (the first reason sticks until it is revived).
void cw_plugin_worker_mark_dead(cw_plugin_worker_t* w, const char* why);
// UNAVAILABLE naming the worker, if it is known dead and has no replacement
// to connect to; else OK.
CW_MUST_USE cw_status_t cw_plugin_worker_check(cw_plugin_worker_t* w);
// Takes `status`: if it shows the worker's connection is lost, marks the
// worker dead and returns UNAVAILABLE naming it; a refusal of a request
// numbered in an earlier life of the session there (CW_MSG_SEQ_OTHER_LIFE)
// is UNAVAILABLE naming it too; otherwise returns `status`.
CW_MUST_USE cw_status_t cw_plugin_worker_map_error(cw_plugin_worker_t* w, cw_status_t status);

// What `epoch` means to the senders below: the epoch (cw_plugin_worker_epoch)
// in which the buffer ids the request names were checked. A request of an
// older epoch is refused with UNAVAILABLE ("was replaced"): w reconnected to
// a replacement in between, which never had those ids (it would answer
// NOT_FOUND). CW_PLUGIN_ANY_EPOCH: the request names no buffer.
#define CW_PLUGIN_ANY_EPOCH UINT32_MAX
// w's epoch, after reconnecting to a replacement announced for a worker
// marked dead: checks against it then agree with where requests go.
uint32_t cw_plugin_worker_epoch(cw_plugin_worker_t* w);
// Sends a seq'd request directly to `w`, after its batched DELETEs. On a
// local failure that happened before the frame went out, fills the seq hole
// so the worker does not stall. `req_seq` points at the request's seq field,
// set here. Same completion contract as cw_client_send.
CW_MUST_USE cw_status_t cw_plugin_worker_send(cw_plugin_worker_t* w, uint32_t epoch, uint16_t type,
                                              ProtobufCMessage* req, uint64_t* req_seq,
                                              const struct iovec* bulk, int bulk_count,
                                              const cw_client_sink_t* sink, cw_client_done_fn done,
                                              void* user);
// Sends a seq'd request for `w` on w's own connection (`direct`) or on the
// controller's, which relays it to w; batched DELETEs go first. Whether it
// fails here or in its reply, its seq is filled on w's connection, so w's
// order keeps no hole. `done` gets the reply (not called when this fails).
CW_MUST_USE cw_status_t cw_plugin_worker_send_ordered(cw_plugin_worker_t* w, uint32_t epoch,
                                                      bool direct, uint16_t type,
                                                      ProtobufCMessage* req, uint64_t* req_seq,
                                                      cw_client_done_fn done, void* user);
// The same for a LAUNCH answered without our help (no host callbacks): back
// to back, such launches share writes (cw_client_send_batched). Relayed ones
// only while two or more of w's relayed requests are unanswered: the
// controller's connection carries every worker's, and w's own replies must
// be the ones that let a held launch go.
CW_MUST_USE cw_status_t cw_plugin_worker_send_batched(cw_plugin_worker_t* w, uint32_t epoch,
                                                      bool direct, uint16_t type,
                                                      ProtobufCMessage* req, uint64_t* req_seq,
                                                      cw_client_done_fn done, void* user);
// The lease changed (LEASE_CHANGED, a resumed session's SessionInfo): LAUNCH
// goes straight to `w` (direct) or through the controller from now on.
// Leaving w's connection, the launches held there for a shared write go out
// at once (those held on the controller's go with the next send either way);
// one sent by a thread that read the old lease just before goes the old
// way, in its seq order all the same.
void cw_plugin_worker_set_direct(cw_plugin_worker_t* w, bool direct);
// Every worker of the session to the controller's path (leases_withdrawn).
void cw_plugin_worker_withdraw_leases(cw_plugin_client_t* c);
// Someone waits for a buffer of `w`: launches held for a shared write on w's
// connection, or on the controller's for a relayed w, go now.
void cw_plugin_worker_write_held(cw_plugin_worker_t* w);
// For a thread about to wait for `f`, which a reply from `w` completes:
// polls for up to `budget_us` (cw_plugin_future_spin), taking the replies
// that have arrived on w's own connection itself (relayed replies stay the
// reader's). True when `f` is done (the client hears that polling paid,
// cw_client_waited); false after waking w's reader to read again at once
// (the thread sleeps next).
bool cw_plugin_worker_poll(cw_plugin_worker_t* w, cw_plugin_future_t* f, int64_t budget_us);
// Deletes buffer `id` (`bytes` on the worker) on `w`: batched into one
// DELETE that takes its seq when it goes: before w's next direct request
// other than a LAUNCH, with a LAUNCH once enough wait, when the batch is full
// (ids or bytes), or at cw_plugin_worker_flush_deletes.
// A buffer of an older epoch is not on w: nothing is sent.
void cw_plugin_worker_delete(cw_plugin_worker_t* w, uint32_t epoch, uint64_t id, uint64_t bytes);
// Sends the DELETEs that wait now: someone is about to sleep waiting for
// `w`, whose launch may wait there for the memory they free.
void cw_plugin_worker_flush_deletes(cw_plugin_worker_t* w);
// With w->relayed_mu held: whether `seq` of `epoch` is a relayed request's
// not answered yet.
bool cw_plugin_worker_relayed_pending_locked(const cw_plugin_worker_t* w, uint32_t epoch,
                                             uint64_t seq);
// Fills `seq` of `epoch` with an empty DELETE on w's own connection,
// unless w was joined again since (cw_plugin_fill.c, when it cannot open
// one of its own). `done(user, ...)` runs once with its answer when this
// returns true (sent); never when false. `done` NULL: the answer is dropped.
bool cw_plugin_worker_fill_seq(cw_plugin_worker_t* w, uint64_t seq, uint32_t epoch,
                               cw_client_done_fn done, void* user);
// The recorded error(s) of pipelined requests, cleared; OK if none.
CW_MUST_USE cw_status_t cw_plugin_worker_take_deferred(cw_plugin_worker_t* w);

#endif  // CW_PLUGIN_WORKER_H_
