// A request in progress that outlives its frame (cw_worker_op.c): it waits
// on store entries, PJRT events, the threadpool or a peer's reply, then
// answers on its connection. Also the staging memory such requests move
// bytes through.
#ifndef CW_WORKER_OP_H_
#define CW_WORKER_OP_H_

#include "cw_worker_internal.h"

typedef void (*cw_op_fn)(cw_op_t* op, cw_store_entry_t* entry);

struct cw_op_s {
  cw_worker_t* w;
  cw_conn_t* conn;  // referenced
  uint16_t type;
  uint64_t request_id;
  uint64_t skey;
  uint64_t id;       // the object waited on (source)
  uint64_t serial;   // of the entry this op creates or fills
  uint64_t dst_id;
  int dst_device;
  cw_op_fn cont;
  ProtobufCMessage* msg;  // owned request
  uint8_t* staging;       // owned (cw_worker_staging_alloc)
  uint64_t size;
  int dtype;
  int64_t* dims;  // owned
  size_t rank;
  int device;
  // UPLOAD, PUT, COPY: the new buffer's memory (NULL: the device's default).
  PJRT_Memory* memory;
  char* memory_kind;  // SEND: the PUT's dst_memory_kind (owned; NULL: default)
  // UPLOAD/DOWNLOAD straight from/to the peer's memory (cw_worker_direct.h):
  // the address there (0: over the socket), and the copy's outcome.
  uint64_t direct_address;
  uint64_t direct_capacity;  // DOWNLOAD: bytes writable there
  int part;  // UPLOAD: its kind of part (Causeway__V1__UploadPart)
  uint64_t part_offset;
  void* parts;  // referenced while its bytes are read into them (cw_worker_transfer.c)
  cw_op_t* next_part;  // waiting with other parts for the first one's bytes
  // DOWNLOAD of a range of the dense bytes (op->size is the range's once
  // the whole is fetched).
  uint64_t range_offset;
  uint64_t range_length;  // 0: to the end
  int direct_errno;
  const void* direct_src;  // DOWNLOAD: the bytes copied out, and their release
  void (*direct_free)(void*);
  void* direct_free_user;
  char* peer_address;
  uint64_t dst_session;
  cw_status_t status;  // SEND: the source's error, sent on as a poisoned PUT
  // Threadpool jobs (COMPILE, LOAD).
  uv_work_t work;
  PJRT_LoadedExecutable* exe;
  uint32_t num_outputs, num_devices;
  char* name;
  cw_pjrt_shape_t* params;  // owned; parameter shapes when params_known
  size_t num_params;
  bool params_known;
  // What its launches take in memory (cw_pjrt_executable_outputs); owned.
  int* exe_devices;
  uint64_t* output_bytes;
  size_t num_exe_devices, num_output_bytes;
  bool outputs_known;
  bool host_callbacks;  // COMPILE/LOAD: the program calls back (cw_worker_hostcb.h)
  // Waiting for memory (cw_worker_mem.h); NULL when not. Freeing the op ends it.
  struct cw_worker_mem_wait_s* mem_wait;
  bool mem_admitted;  // COPY: its memory is charged
  // op->staging came from elsewhere (a held request's bytes): plain free().
  bool staging_foreign;
  // DOWNLOAD/SEND straight from device memory: the source kept until it is
  // ready (pinning then would block the loop until it is), then pinned, and
  // its bytes.
  cw_pin_t* keep;  // owned (cw_worker_pin_keep)
  cw_pin_t* pin;   // owned reference
  const void* view;
  // The entry op->id named when the request was applied (retained; NULL if
  // absent): waiting resumes on it, not on whatever op->id names by then.
  cw_store_entry_t* src;
  bool src_resolved;
  // Nonzero (EXE_INFO, SERIALIZE: CW_STORE_EXECUTABLE): a pending entry of
  // another kind is answered at once (cont says what it is), not waited for.
  int want_kind;
  int64_t trace_start_ns;  // when the request arrived
};

// NULL without memory. References `c`.
cw_op_t* cw_worker_op_create(cw_conn_t* c, uint16_t type, uint64_t request_id);
void cw_worker_op_free(cw_op_t* op);
// Replies with an error (takes status) and frees the op.
void cw_worker_op_fail(cw_op_t* op, cw_status_t status);
// Replies Ack(id) and frees the op.
void cw_worker_op_ack(cw_op_t* op, uint64_t id);
// The entry op->serial names if it still exists and waits for this op (in
// the table, or deleted but held by a request that uses it); NULL otherwise.
cw_store_entry_t* cw_worker_op_own_entry(cw_op_t* op, uint64_t id);
// An op that waits for object `id` and continues with `cont`; NULL after
// replying when out of memory. Start it with cw_worker_op_start_wait.
cw_op_t* cw_worker_op_for_wait(cw_conn_t* c, const cw_frame_header_t* h, uint64_t id,
                               cw_op_fn cont);
// Looks op->id up (once; the entry is retained so a later DELETE cannot
// take it from the op) and runs op->cont once it is not pending (entry NULL
// if it did not exist).
void cw_worker_op_start_wait(cw_op_t* op);
// Fails `op` unless `e` is a usable `kind` object (named `what` / `a_what`
// in messages) that did not fail; true if usable.
bool cw_worker_op_need_kind(cw_op_t* op, const cw_store_entry_t* e, int kind, const char* what,
                            const char* a_what);
CW_MUST_USE cw_status_t cw_worker_op_copy_dims(cw_op_t* op, const int64_t* dims, size_t rank);
// Takes op->staging: *out_fn(*out_user) gives it back when a write or PJRT
// is done with it.
void cw_worker_op_staging_ref(cw_op_t* op, void (**out_fn)(void*), void** out_user);

// Staging memory for `size` bulk bytes (64-byte aligned, reused through the
// worker's staging cache); give it back with cw_worker_staging_free.
void* cw_worker_staging_alloc(cw_worker_t* w, uint64_t size);
void cw_worker_staging_free(cw_worker_t* w, void* p, uint64_t size);

// Records a buffer's metadata on its entry (dims copied).
CW_MUST_USE cw_status_t cw_worker_entry_set_array(cw_worker_t* w, cw_store_entry_t* e,
                                                  int dtype, const int64_t* dims, size_t rank,
                                                  int device);
// INVALID_ARGUMENT unless `device` is one of this worker's.
CW_MUST_USE cw_status_t cw_worker_check_device(cw_worker_t* w, int device);

#endif  // CW_WORKER_OP_H_
