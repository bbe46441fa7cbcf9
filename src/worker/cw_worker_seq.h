// Per-session ordering of requests that arrive on several connections
// (docs/protocol.md, "Ordering across connections (seq)"). A client reaches a
// worker directly and through the controller; requests that carry a non-zero
// `seq` are applied in seq order per session: seq == next applies now, a
// larger one is held until its predecessors arrived (bounded), a smaller one
// is a duplicate. No I/O here: the worker owns connections and dispatch, this
// module owns the decision and the held requests (with the bulk bytes of a
// held UPLOAD, received while it waits).
#ifndef CW_WORKER_SEQ_H_
#define CW_WORKER_SEQ_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_frame.h"
#include "cw_status.h"

typedef struct cw_seq_held_s {
  struct cw_seq_held_s* next;  // sorted by seq
  uint64_t seq;
  void* conn;                  // the worker's connection; the worker holds a reference
  cw_frame_header_t header;
  ProtobufCMessage* msg;       // owned
  uint8_t* bulk;               // owned (64-byte aligned, free()): bytes of a held UPLOAD
  bool bulk_ready;             // every bulk byte arrived (or there are none)
  bool bulk_failed;            // the connection closed before they arrived
} cw_seq_held_t;

typedef struct cw_seq_s {
  uint64_t next;  // the seq applied next; 1 for a new session
  cw_seq_held_t* held;
  cw_seq_held_t* held_tail;  // the largest seq held: arrivals in order append in O(1)
  size_t held_count;
  uint64_t held_bytes;
  bool draining;  // the worker is applying held requests (no re-entry)
  size_t blocked;  // the worker's connections of this session not read (flow control)
} cw_seq_t;

void cw_seq_initialize(cw_seq_t* seq);

// Frees every held request; `release_conn(conn, held)` runs first for each
// (the worker drops its connection reference there). May be NULL.
void cw_seq_deinitialize(cw_seq_t* seq, void (*release_conn)(void* conn, cw_seq_held_t* held));

// The `seq` of an ordered request type (UPLOAD, LAUNCH, DOWNLOAD, COPY, SEND,
// EXPECT, DELETE, AWAIT); 0 for every other type (unordered).
uint64_t cw_seq_of_request(uint16_t type, const ProtobufCMessage* msg);

// Decides on a request that carries `seq` (non-zero), arriving on `conn`
// (borrowed; stored in a held entry):
// - seq == next: OK, *out_held NULL: apply it now (next has advanced).
// - seq > next: OK, *out_held set: held, taking `*msg` (set to NULL), with
//   memory for the frame's bulk bytes (the caller points the parser there and
//   sets bulk_ready when they are in).
// - seq < next or already held: INVALID_ARGUMENT (a duplicate).
// - more than `max_requests` held or `max_bytes` of held bulk: RESOURCE_EXHAUSTED.
//   These are hard limits: the worker keeps the number held under its soft
//   caps by not reading from a connection (flow control), so only a peer that
//   breaks the protocol's ordering reaches them (docs/protocol.md). A single
//   request whose bulk bytes exceed `max_bytes` is admitted while no other
//   held request has bulk bytes.
CW_MUST_USE cw_status_t cw_seq_admit(cw_seq_t* seq, uint64_t request_seq,
                                     const cw_frame_header_t* header, ProtobufCMessage** msg,
                                     void* conn, int64_t max_requests, int64_t max_bytes,
                                     cw_seq_held_t** out_held);

// Unlinks and returns the held request whose turn has come (seq == next, its
// bytes all in) and advances next; NULL when there is none. The caller
// applies it and frees it with cw_seq_held_free.
cw_seq_held_t* cw_seq_take_ready(cw_seq_t* seq);

// Removes every request `conn` has held, unapplied and without advancing
// next: their seqs stay unfilled, for the sender to send again (or fill).
// `release_conn(conn, held)` runs first for each (may be NULL). Returns how
// many were removed.
size_t cw_seq_forget_conn(cw_seq_t* seq, const void* conn,
                          void (*release_conn)(void* conn, cw_seq_held_t* held));

// The held request with `request_seq`; NULL if none waits.
cw_seq_held_t* cw_seq_held_find(const cw_seq_t* seq, uint64_t request_seq);

// Unlinks held request `held` without applying it or advancing next: its seq
// is unfilled again. The caller frees it (cw_seq_held_free).
void cw_seq_unhold(cw_seq_t* seq, cw_seq_held_t* held);

// Frees msg and bulk (not conn) and the entry.
void cw_seq_held_free(cw_seq_held_t* held);

#endif  // CW_WORKER_SEQ_H_
