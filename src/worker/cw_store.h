// The worker's object store: (session key, object id) -> entry. Entries are
// buffers or executables in state pending, ready or error; deleting removes
// them. Waiters registered on a pending entry run when it leaves pending (or
// is freed). Single-threaded: only the worker's loop thread touches it.
//
// References: a request that uses an entry (a launch's executable and inputs,
// a download's source, ...) retains it when the request is applied and
// releases it when done. Removing an entry takes its id out of the table at
// once (lookups say NOT_FOUND, the id may be created again), but a retained
// entry lives on *detached* -- its handle, state and waiters kept, still
// filled by its producer -- until the last holder releases it.
#ifndef CW_WORKER_STORE_H_
#define CW_WORKER_STORE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

typedef enum cw_store_kind_e {
  CW_STORE_BUFFER = 1,
  CW_STORE_EXECUTABLE = 2,
} cw_store_kind_t;

typedef enum cw_store_state_e {
  CW_STORE_PENDING = 0,
  CW_STORE_READY = 1,
  CW_STORE_ERROR = 2,
} cw_store_state_t;

typedef void (*cw_store_waiter_fn)(void* user);

// An array shape: dtype (PJRT_Buffer_Type, -1 unknown) and owned dims.
typedef struct cw_store_shape_s {
  int dtype;
  size_t rank;
  int64_t* dims;
  bool donated;  // parameters: aliased to an output, PJRT may take the buffer
} cw_store_shape_t;

typedef struct cw_store_waiter_s {
  struct cw_store_waiter_s* next;
  cw_store_waiter_fn fn;
  void* user;
} cw_store_waiter_t;

typedef struct cw_store_entry_s {
  uint64_t session;  // the session's key (never reused by another session)
  uint64_t id;
  uint64_t serial;   // unique per entry: detects a removed-and-recreated id
  cw_store_kind_t kind;
  cw_store_state_t state;
  cw_status_t error;  // owned; set in state ERROR
  void* handle;       // PJRT_Buffer* or PJRT_LoadedExecutable*; released by the store's fn
  // Buffers.
  int dtype;
  int64_t* dims;  // owned
  size_t rank;
  int device;
  uint64_t bytes;  // dense size
  bool from_put;   // created by a peer's PUT (EXPECT may follow)
  bool filling;    // bytes for it are arriving (UPLOAD or PUT)
  // An UPLOAD in parts being put together (the worker's; the release fn
  // frees it when the entry goes or fails first).
  void* parts;
  // The bytes the worker's memory budget counts for it on charge_device
  // (cw_worker_mem.c), taken before its memory is: the release fn also runs
  // for an entry that has a charge and no handle, and gives them back.
  uint64_t charge;
  int charge_device;
  // Executables.
  uint32_t num_outputs;
  uint32_t num_devices;
  char* name;  // owned
  // Per-device parameter shapes (owned); params_known false when the plugin
  // cannot say, and then only XLA's own size check guards launches.
  bool params_known;
  size_t num_params;
  cw_store_shape_t* params;
  // What a launch takes in memory (outputs_known false: the plugin cannot
  // say, and outputs are charged once they exist): the local device of each
  // launch position [num_devices], each output's bytes per device [num_outputs].
  bool outputs_known;
  bool host_callbacks;  // it may call back to the client (cw_worker_hostcb.h)
  int* devices;             // owned
  uint64_t* output_bytes;   // owned
  cw_store_waiter_t* waiters;
  cw_store_waiter_t* waiters_tail;  // the last of `waiters` (when there are any)
  // References held by applied requests; removal while held detaches.
  uint32_t refs;
  bool detached;    // removed from the table; freed with the last release
  bool awaits_put;  // declared by EXPECT: a peer's PUT fills it
  struct cw_store_entry_s* detached_prev;
  struct cw_store_entry_s* detached_next;
  struct cw_store_entry_s* dhnext;  // its chain in the store's index of detached entries
  // Its session's entries in the table (the live ones not detached), which
  // cw_store_stats counts.
  struct cw_store_entry_s* snext;
  struct cw_store_entry_s* sprev;
} cw_store_entry_t;

typedef struct cw_store_s cw_store_t;

// Releases an entry's handle (PJRT destroy) and charge when the entry is
// removed or fails.
typedef void (*cw_store_release_fn)(void* user, cw_store_entry_t* entry);

CW_MUST_USE cw_status_t cw_store_create(cw_store_release_fn release, void* user,
                                        cw_store_t** out_store);
// Removes every entry (waiters run), then frees the store.
void cw_store_release(cw_store_t* store);

// Adds a pending entry; ALREADY_EXISTS if the key is taken, INVALID_ARGUMENT
// for id 0. *out_entry is borrowed (valid until removed).
CW_MUST_USE cw_status_t cw_store_insert(cw_store_t* store, uint64_t session, uint64_t id,
                                        cw_store_kind_t kind, cw_store_entry_t** out_entry);
// NULL if absent.
cw_store_entry_t* cw_store_lookup(cw_store_t* store, uint64_t session, uint64_t id);
// Like lookup, but makes NOT_FOUND naming the id (and the kind wanted).
CW_MUST_USE cw_status_t cw_store_find(cw_store_t* store, uint64_t session, uint64_t id,
                                      cw_store_kind_t kind, cw_store_entry_t** out_entry);

// Registers `fn(user)` to run once the entry leaves pending or is removed.
// Waiters re-look their entries up; they may change the store.
CW_MUST_USE cw_status_t cw_store_add_waiter(cw_store_t* store, cw_store_entry_t* entry,
                                            cw_store_waiter_fn fn, void* user);
// Sets a buffer's dense size; counted by cw_store_stats while the entry is in
// the table (so set it here, not in the entry).
void cw_store_set_bytes(cw_store_t* store, cw_store_entry_t* entry, uint64_t bytes);
// Pending -> ready with `handle` (taken), then runs waiters.
void cw_store_set_ready(cw_store_t* store, cw_store_entry_t* entry, void* handle);
// -> error (takes `status`); releases any handle, then runs waiters.
void cw_store_set_error(cw_store_t* store, cw_store_entry_t* entry, cw_status_t status);
// Removes the entry from the table. Unreferenced, it is freed at once (handle
// released, waiters run afterwards); referenced, it is detached and freed by
// the last cw_store_entry_release. Removing a detached entry does nothing.
void cw_store_remove(cw_store_t* store, cw_store_entry_t* entry);
// Removes every entry of `session` (all sessions when 0); detached entries of
// it still pending are put in error (CANCELLED), so their holders finish.
void cw_store_remove_session(cw_store_t* store, uint64_t session);

// Takes a reference to `entry` (in the table or detached).
void cw_store_entry_retain(cw_store_entry_t* entry);
// Drops a reference; frees a detached entry with its last one. NULL is a no-op.
void cw_store_entry_release(cw_store_t* store, cw_store_entry_t* entry);
// The entry (session, id) numbered `serial`, in the table or detached; NULL
// once it is freed (or the id names another entry).
cw_store_entry_t* cw_store_lookup_serial(cw_store_t* store, uint64_t session, uint64_t id,
                                         uint64_t serial);
// The oldest detached entry (session, id) still pending and awaiting a PUT
// (EXPECT, then DELETE while a request held it); NULL if none.
cw_store_entry_t* cw_store_lookup_detached_put(cw_store_t* store, uint64_t session, uint64_t id);
// Detached entries still referenced (all sessions).
size_t cw_store_detached_count(const cw_store_t* store);

typedef struct cw_store_stats_s {
  uint64_t buffers;
  uint64_t buffer_bytes;
  uint64_t executables;
} cw_store_stats_t;
// The entries in the table (all sessions when session is 0): buffers not in
// error and their bytes, executables. Kept as entries change, so O(1).
void cw_store_stats(const cw_store_t* store, uint64_t session, cw_store_stats_t* out_stats);
size_t cw_store_size(const cw_store_t* store);

#endif  // CW_WORKER_STORE_H_
