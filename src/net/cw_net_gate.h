// Admission of connections nobody has authenticated yet: the daemons'
// connections before HELLO, every connection of the HTTP server. Those get a
// budget of their own and a budget per peer address; when one is full the
// connection that has been waiting longest makes room, never a newcomer and
// never a connection that authenticated (it has left the gate). Which one:
// those that have sent nothing go before those part way through a handshake,
// except that the latter may hold at most half of a budget (beyond that the
// oldest of them goes first), so that dribbling peers (slowloris) cannot
// leave newcomers too few places to get their first bytes in. The gate says
// which entry to close; its owner closes it. No I/O.
//
// Why eviction and not refusal: refusing newcomers lets a peer that opens
// connections and sends nothing lock everyone else out; closing the oldest
// waiting one makes such a flood cost the flooder a connection per newcomer,
// and a client that sends its HELLO at once is through long before it would
// be the oldest. On loopback every peer has the same address (127.0.0.1),
// so the per-peer budget is then the whole budget; the eviction order is what
// keeps the legitimate client in.
//
// cw_net_pacer_t: at most N accepts per loop pass, the rest deferred to the
// next pass, so that reads (the HELLO of a connection just accepted) are not
// starved by a burst of connects.
#ifndef CW_NET_GATE_H_
#define CW_NET_GATE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "cw_status.h"

// An address family and 16 address bytes; all zero for a peer of a Unix
// socket (one budget for all of them).
typedef struct cw_net_peer_key_s {
  uint8_t bytes[17];
} cw_net_peer_key_t;

// The address of `sa` (IPv4, IPv6; NULL or anything else: the zero key).
void cw_net_peer_key_from_sockaddr(const struct sockaddr* sa, cw_net_peer_key_t* out_key);

// Embedded in whatever the gate admits (a connection).
typedef struct cw_net_gate_entry_s {
  struct cw_net_gate_entry_s* prev;
  struct cw_net_gate_entry_s* next;
  cw_net_peer_key_t peer;
  bool in;      // admitted and not left
  bool active;  // has sent bytes (cw_net_gate_progress)
} cw_net_gate_entry_t;

typedef struct cw_net_gate_peer_s {
  cw_net_peer_key_t key;
  uint32_t count;   // 0: a free slot
  uint32_t active;  // of those, how many have sent bytes
} cw_net_gate_peer_t;

typedef struct cw_net_gate_s {
  size_t max_total;     // entries at once (before the newcomer)
  size_t max_per_peer;  // entries of one address at once
  // Oldest first: those that have sent nothing, then those that have.
  cw_net_gate_entry_t* silent_head;
  cw_net_gate_entry_t* silent_tail;
  cw_net_gate_entry_t* active_head;
  cw_net_gate_entry_t* active_tail;
  size_t count;
  size_t active;  // entries that have sent bytes
  // Entries per address: open addressing, at most half full.
  cw_net_gate_peer_t* peers;
  size_t peers_cap;  // a power of two
  size_t distinct;   // addresses with entries
  uint64_t evicted;  // entries the gate named for closing
} cw_net_gate_t;

// `gate` is caller storage. max_total >= 1; max_per_peer 0 or above
// max_total means max_total.
CW_MUST_USE cw_status_t cw_net_gate_initialize(cw_net_gate_t* gate, size_t max_total,
                                               size_t max_per_peer);
// Entries still in the gate are simply forgotten.
void cw_net_gate_deinitialize(cw_net_gate_t* gate);

// Admits `entry` (its peer set; borrowed until it leaves). Returns the entry
// to close to make room (still in the gate: closing it calls
// cw_net_gate_leave), or NULL when there was room. The victim is of the
// newcomer's address when that address is at its budget, else, when the gate
// is full, of the address holding most entries; the longest-waiting silent
// one, or the longest-waiting active one when active ones hold more than half
// of that budget (or no silent one is left); never `entry` itself.
cw_net_gate_entry_t* cw_net_gate_admit(cw_net_gate_t* gate, cw_net_gate_entry_t* entry);
// The entry sent bytes: it now goes after every silent one.
void cw_net_gate_progress(cw_net_gate_t* gate, cw_net_gate_entry_t* entry);
// The entry authenticated or closed. A no-op for one not in the gate.
void cw_net_gate_leave(cw_net_gate_t* gate, cw_net_gate_entry_t* entry);
// Entries of the address `key` now.
size_t cw_net_gate_peer_count(const cw_net_gate_t* gate, const cw_net_peer_key_t* key);

// --- Accept pacing ------------------------------------------------------------

typedef struct cw_net_warn_limit_s {
  int64_t last_ms;
  uint64_t suppressed;
} cw_net_warn_limit_t;

typedef struct cw_net_pacer_s {
  uv_idle_t idle;
  uv_timer_t retry;  // an accept that could not take its connection tries again
  uv_stream_t* listener;
  void (*accept)(uv_stream_t* listener);  // takes the deferred connection (uv_accept)
  unsigned per_pass;
  unsigned used;
  bool deferred;
  bool open;
  int closing;  // handles not yet closed
  uv_close_cb done;
  cw_net_warn_limit_t warn_retry;
  // Out of descriptors, libuv accepts each connection and closes it at once
  // (it keeps a spare descriptor for that) and tells nobody: a probe once a
  // second says so, once a minute.
  uv_timer_t fd_probe;
  const char* who;
  uint64_t fds_out;  // probes that found no descriptor free
  cw_net_warn_limit_t warn_fds;
} cw_net_pacer_t;

// `pacer` is caller storage that stays put until cw_net_pacer_close's close
// completes. `accept(listener)` runs for a connection that was deferred.
// `who` names the listener in log lines ("" or "HTTP port: "; borrowed).
void cw_net_pacer_initialize(cw_net_pacer_t* pacer, uv_loop_t* loop, uv_stream_t* listener,
                             unsigned per_pass, void (*accept)(uv_stream_t* listener),
                             const char* who);
// In the listener's connection callback: true to accept now; false when this
// pass has had its share (libuv then stops watching the listener until the
// pacer's next idle pass hands the connection to `accept`).
bool cw_net_pacer_take(cw_net_pacer_t* pacer);
// The connection callback could not take its connection (out of memory):
// libuv keeps it and stops watching the listener until an accept, so
// `accept(listener)` runs again in 100 ms, and again while it fails. Logged
// once a minute, with the listener's `who`.
void cw_net_pacer_retry(cw_net_pacer_t* pacer);
// Closes the pacer's handles; `done` (may be NULL) runs once, when all are
// closed, with the idle handle (data: the pacer).
void cw_net_pacer_close(cw_net_pacer_t* pacer, uv_close_cb done);

// --- Rate-limited warnings ---------------------------------------------------------

// One warning per period for events a flood repeats (a line per refused
// connection would be a flood of its own).

// True when a warning may be logged now; *out_suppressed (then reset) says
// how many were held back since the last one.
bool cw_net_warn_limit_pass(cw_net_warn_limit_t* limit, int64_t now_ms, int64_t period_ms,
                            uint64_t* out_suppressed);

#endif  // CW_NET_GATE_H_
