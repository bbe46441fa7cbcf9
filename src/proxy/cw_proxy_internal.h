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
#include "cw_net_creds.h"
#include "cw_net_gate.h"
#include "cw_proxy.h"
#include "cw_proxy_decode.h"
#include "cw_proxy_pjrt.h"
#include "cw_proxy_table.h"
#include "proto/ifrt_proxy.pb-c.h"

#define CW_PROXY_MAX_RANK 64
#define CW_PROXY_MAX_DEVICES 4096  // of one program
// A host buffer read back in ranges of this many bytes, this many at once.
#define CW_PROXY_READ_RANGE ((size_t)2 << 20)
#define CW_PROXY_READS_AHEAD 4
// A host buffer this big or bigger, still being stored, is streamed on to
// its device as it comes.
#define CW_PROXY_STREAM_MIN ((size_t)2 << 20)
// ... in parts of at least this many bytes (the last may be less).
#define CW_PROXY_STREAM_PART ((size_t)4 << 20)

// What a gRPC call's user pointer is: every such struct starts with its kind.
typedef enum cw_proxy_call_kind_e {
  CW_PROXY_CALL_GET_VERSION = 1,
  CW_PROXY_CALL_SESSION,
  CW_PROXY_CALL_HOST_BUFFER,  // Store, Lookup or Delete
} cw_proxy_call_kind_t;

typedef struct cw_proxy_shard_s cw_proxy_shard_t;
typedef struct cw_proxy_exe_s cw_proxy_exe_t;

typedef struct cw_proxy_array_s {
  int32_t dtype;  // IFRT DType kind (XLA PrimitiveType)
  size_t rank;
  int64_t dims[CW_PROXY_MAX_RANK];
  // The ShardingProto it was made with (packed), if any: where its shards
  // lie (a CopyArrays result's names the new devices; its memory kind is
  // the original's).
  uint8_t* sharding;
  size_t sharding_len;
  size_t n;  // shards
  cw_proxy_shard_t** shards;
  bool deleted;
  cw_status_t error;  // MakeErrorArrays: what every use of it answers
} cw_proxy_array_t;

// A host buffer: being filled (by HostBufferStore or a disk read on the
// loop thread, or a CopyToHostBuffer's read on the session thread), or
// complete: with its bytes, or with the error of the read that failed.
typedef struct cw_proxy_host_buffer_s {
  uint8_t* data;
  size_t len;
  size_t cap;
  size_t declared;
  bool complete;
  int readers;  // lookups sending it now (loop thread); take() waits for none
  bool orphan;  // deleted (or its session ended) while read: the last reader frees it
  const void* filler;  // the store, disk read or download that will complete it, if any
  bool storing;        // filled by a HostBufferStore, its bytes as they come
  cw_status_t error;   // complete: the download that was to fill it failed
  // Being downloaded in ranges: the session's bytes so far (not ours, and
  // only the first `filled` of them are there); lookups send those ahead.
  const uint8_t* partial;
  size_t filled;
  size_t charged;  // bytes of the budget it holds (cw_proxy_t.host_bytes)
} cw_proxy_host_buffer_t;

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
  cw_proxy_call_kind_t kind;  // CW_PROXY_CALL_SESSION
  cw_proxy_t* proxy;
  uint64_t id;
  int32_t protocol_version;
  struct cw_proxy_session_s* next;  // the proxy's list (loop thread)
  cw_grpc_call_t* call;             // retained; loop thread only
  pthread_t thread;
  bool thread_started;
  // A pipe the loop writes when the stream ends: it cuts short a
  // PJRT_Client_Create still waiting for devices (causeway_cancel_fd).
  int cancel[2];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  // Under mu.
  cw_proxy_queue_t requests;
  cw_proxy_queue_t responses;
  bool half_closed;  // the client sends no more requests
  bool send_failed;  // a response could not be sent: the rest are dropped (loop thread)
  bool gone;         // the stream closed: stop now
  bool exited;       // the thread is done; join it
  int ended_by_signal;  // SIGTERM/SIGINT ended it: its stream ends UNAVAILABLE (loop thread)
  size_t handled;    // request bytes handled, not yet credited to the stream
  // Responses not yet taken by the transport: in `responses`, and queued on
  // the call (as the loop thread last saw it). The thread takes no request
  // while they pass CW_PROXY_SESSION_AHEAD (a client that stops reading).
  size_t responses_bytes;
  size_t call_queued;
  cw_proxy_table_t host_buffers;  // handle -> cw_proxy_host_buffer_t
  pthread_cond_t host_buffer_cv;  // one was completed or removed
  size_t host_bytes;              // its share of the budget in use (under proxy->budget_mu)
  // The session thread's own.
  PJRT_Client* client;
  cw_status_t client_status;  // why there is no client
  cw_proxy_table_t arrays;    // handle -> cw_proxy_array_t
  cw_proxy_table_t futures;   // handle -> cw_status_t box (resolved futures)
  cw_proxy_table_t exes;      // handle -> cw_proxy_exe_t
  uint64_t next_handle;
  size_t handling;  // bytes of the request being handled, credited with its response
  size_t taken;     // budget of the host buffers the request took, released after it
  // A CopyToHostBuffer answered before its bytes are here: settled once
  // its response is queued (cw_proxy_host_buffer_settle). A big one is read
  // in ranges, a few at a time, each handed to the lookups as it lands.
  struct {
    bool pending;       // its host buffer waits to be settled
    bool started;       // a read began (its event may still be NULL: done)
    bool ranged;        // PJRT_Buffer_CopyRawToHost ranges, else one ToHostBuffer
    PJRT_Buffer* buffer;  // ranged: the array's, alive until settled
    PJRT_Event* events[CW_PROXY_READS_AHEAD];  // in flight, oldest at `head`
    size_t head, ahead;
    size_t issued;      // bytes asked for
    size_t landed;      // bytes in, from the start
    cw_status_t error;  // a range that could not be asked for
    uint8_t* data;
    size_t len;
    uint64_t handle;
    size_t charge;  // budget held for the bytes until its host buffer has them
  } download;
} cw_proxy_session_t;

struct cw_proxy_s {
  const cw_settings_t* settings;
  uv_loop_t loop;
  uv_async_t wake;  // a session thread queued responses or exited
  uv_signal_t sigterm;
  uv_signal_t sigint;
  cw_net_creds_t creds;  // the token file, read again on SIGHUP (the server borrows its tokens)
  bool stopping;
  bool closed;  // the loop's handles are closing
  cw_grpc_server_t* server;
  cw_grpc_server_options_t server_options;
  cw_proxy_pjrt_t pjrt;
  cw_proxy_session_t* sessions;
  struct cw_proxy_lookup_s* lookups;  // HostBufferLookup calls waiting for their buffer
  size_t num_lookups;
  struct cw_proxy_lookup_s* reading;  // HostBufferLookup calls reading a buffer (loop thread)
  size_t max_host_buffer;             // CAUSEWAY_PROXY_MAX_HOST_BUFFER
  size_t host_buffer_budget;          // CAUSEWAY_PROXY_HOST_BUFFER_BUDGET (or its default)
  pthread_mutex_t budget_mu;          // any thread
  size_t host_bytes;                  // of the budget in use, all sessions (under budget_mu)
  uint64_t disk_session;  // the session that takes files from the transfer directory (0: none)
  cw_net_warn_limit_t warn_refused;  // sessions refused for want of a thread (loop thread)
};

// --- Sessions (cw_proxy_session.c) ----------------------------------------------

// Starts a session's thread (which creates its PJRT client). Takes nothing.
CW_MUST_USE cw_status_t cw_proxy_session_start(cw_proxy_session_t* s);
// Loop thread: queues one request (copied) for the session's thread.
CW_MUST_USE cw_status_t cw_proxy_session_push(cw_proxy_session_t* s, const uint8_t* data,
                                              size_t len);
// Loop thread: no more requests (half) or stop now (!half).
void cw_proxy_session_end(cw_proxy_session_t* s, bool half);
// Loop thread: the session's call took some of its queued responses.
void cw_proxy_session_writable(cw_proxy_session_t* s);
#define CW_PROXY_SESSION_AHEAD (4u << 20)
// Loop thread: writes queued responses; true when the thread has exited
// (then joined: the session may be freed).
bool cw_proxy_session_drain(cw_proxy_session_t* s);
void cw_proxy_session_free(cw_proxy_session_t* s);

// Session thread: queues a response whose metadata the caller filled.
void cw_proxy_session_respond(cw_proxy_session_t* s, CwIfrt__IfrtResponse* response);

// Session thread: a resolved future with status `st` (taken) under
// `handle` (0: one of the proxy's); its handle.
CW_MUST_USE cw_status_t cw_proxy_future_put(cw_proxy_session_t* s, cw_status_t st,
                                            uint64_t handle, uint64_t* out_handle);
// Session thread: the future's status, and the future is gone.
CW_MUST_USE cw_status_t cw_proxy_future_take(cw_proxy_session_t* s, uint64_t handle);

// The session of `id` in the proxy's list (loop thread), or NULL.
cw_proxy_session_t* cw_proxy_session_find(cw_proxy_t* p, uint64_t id);

// --- Host-buffer bytes (cw_proxy_bytes.c) ------------------------------------------------

// Any thread. Bytes of host buffers (and of arrays made from them): released
// with cw_proxy_bytes_free only; large ones are kept for the next that fits.
uint8_t* cw_proxy_bytes_alloc(size_t n);
// Like realloc: the first n bytes are kept (NULL: the old ones stay).
uint8_t* cw_proxy_bytes_grow(uint8_t* data, size_t n);
void cw_proxy_bytes_free(uint8_t* data);
size_t cw_proxy_bytes_cap(const uint8_t* data);
// How many bytes of released buffers to keep (CAUSEWAY_PROXY_BUFFER_CACHE);
// drain frees them.
void cw_proxy_bytes_configure(size_t max_cached);
void cw_proxy_bytes_drain(void);
// Frees the oldest kept buffers until at most `keep` bytes are kept.
void cw_proxy_bytes_trim(size_t keep);
// Bytes kept now.
size_t cw_proxy_bytes_cached(void);

// --- Host buffers (cw_proxy_host_buffer.c) ----------------------------------------------

// Loop thread: the gRPC methods HostBufferStore, HostBufferLookup,
// HostBufferDelete, HostBufferReadFromDisk (`method` is the name after the
// service).
CW_MUST_USE cw_status_t cw_proxy_host_buffer_start(cw_proxy_t* p, cw_grpc_call_t* call,
                                                   const char* method);
void cw_proxy_host_buffer_message(cw_proxy_t* p, cw_grpc_call_t* call, const uint8_t* data,
                                  size_t len);
void cw_proxy_host_buffer_half_close(cw_proxy_t* p, cw_grpc_call_t* call);
void cw_proxy_host_buffer_close(cw_proxy_t* p, cw_grpc_call_t* call);
// A lookup under way has room to send more.
void cw_proxy_host_buffer_writable(cw_proxy_t* p, cw_grpc_call_t* call);
// Loop thread: answers the lookups whose buffer is now there (or whose
// session is gone).
void cw_proxy_host_buffer_retry(cw_proxy_t* p);
// Session thread: waits for host buffer `handle` to be complete (up to
// timeout_ms for its store to begin; then as long as the store goes on),
// then takes it out of the session (data is the caller's, its budget the
// request's: cw_proxy_host_buffer_release_taken), or answers the error of
// the read that was to fill it.
CW_MUST_USE cw_status_t cw_proxy_host_buffer_take(cw_proxy_session_t* s, uint64_t handle,
                                                  int timeout_ms, uint8_t** out_data,
                                                  size_t* out_len);
// Session thread: a host buffer under `handle` that the session's download
// under way (cw_proxy_session_t.download) will fill; lookups wait for it.
CW_MUST_USE cw_status_t cw_proxy_host_buffer_expect(cw_proxy_session_t* s, uint64_t handle,
                                                    size_t len);
// Session thread: streams host buffer `handle` (dense, `bytes` long) on to
// a new buffer of `type` and `dims` in each of the `n` memories while its
// store is under way (waiting up to `timeout_ms` for it to begin),
// consuming it; out[i] the buffer in memories[i]. out[0] stays NULL where
// it cannot stream (then take() it).
CW_MUST_USE cw_status_t cw_proxy_host_buffer_stream(cw_proxy_session_t* s, uint64_t handle,
                                                    size_t bytes, int timeout_ms,
                                                    PJRT_Memory* const* memories, size_t n,
                                                    PJRT_Buffer_Type type, const int64_t* dims,
                                                    size_t rank, PJRT_Buffer** out);
// Session thread: begins reading `buffer` (the array's, `len` dense bytes)
// into the buffer just expected; `ranged` when its raw bytes are those
// (not a packed sub-byte type) and cheap (a CPU device). On error nothing
// was begun.
CW_MUST_USE cw_status_t cw_proxy_host_buffer_read(cw_proxy_session_t* s, PJRT_Buffer* buffer,
                                                  bool ranged);
// Session thread, after the response to the request that began it: waits
// for the session's download and completes its host buffer with the bytes,
// or with the download's error for its lookups.
void cw_proxy_host_buffer_settle(cw_proxy_session_t* s);
// Frees every host buffer of a session that has ended.
void cw_proxy_host_buffers_free(cw_proxy_session_t* s);
// Session thread, after each request: releases the budget of the host
// buffers it took (their bytes are freed by then).
void cw_proxy_host_buffer_release_taken(cw_proxy_session_t* s);

// --- Request families (session thread) ------------------------------------------------

// Fills `resp` for an InitRequest (cw_proxy_init.c).
CW_MUST_USE cw_status_t cw_proxy_init(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                      CwIfrt__IfrtResponse* resp);
// Frees what cw_proxy_init put in `resp`.
void cw_proxy_init_free(CwIfrt__IfrtResponse* resp);
// MakeErrorArrays, ReshardArrays, BitcastArrays (cw_proxy_respec.c); the
// responses are flat (cw_proxy_array_response_free).
CW_MUST_USE cw_status_t cw_proxy_respec_handle(cw_proxy_session_t* s,
                                               const CwIfrt__IfrtRequest* req,
                                               CwIfrt__IfrtResponse* resp);
// LoadedHostCallbackPoll/Return (cw_proxy_callback.c).
CW_MUST_USE cw_status_t cw_proxy_callback_handle(cw_proxy_session_t* s,
                                                 const CwIfrt__IfrtRequest* req,
                                                 CwIfrt__IfrtResponse* resp);
// GetDefaultDeviceAssignment (cw_proxy_init.c), as the plugin assigns them.
CW_MUST_USE cw_status_t cw_proxy_device_assignment(cw_proxy_session_t* s,
                                                   const CwIfrt__IfrtRequest* req,
                                                   CwIfrt__IfrtResponse* resp);
void cw_proxy_device_assignment_free(CwIfrt__IfrtResponse* resp);

// Arrays (cw_proxy_array.c): MakeArrayFromHostBuffer, Assemble, Disassemble,
// FullyReplicatedShard, CopyToHostBuffer, CheckValueReady, Delete,
// IsDeleted, Destruct, CheckFuture.
CW_MUST_USE cw_status_t cw_proxy_array_handle(cw_proxy_session_t* s,
                                              const CwIfrt__IfrtRequest* req,
                                              CwIfrt__IfrtResponse* resp);
void cw_proxy_array_response_free(CwIfrt__IfrtResponse* resp);
void cw_proxy_array_free(cw_proxy_session_t* s, cw_proxy_array_t* a);
// Every array of the session (its end).
void cw_proxy_arrays_free(cw_proxy_session_t* s);
// Forgets the arrays under `handles` (a request that failed part way).
void cw_proxy_arrays_drop(cw_proxy_session_t* s, const uint64_t* handles, size_t n);
// Sets the response to kind `kase`: a message of that kind, empty or, with
// `with_handle`, whose field 1 is the fixed64 `handle`. Freed by
// cw_proxy_array_response_free.
CW_MUST_USE cw_status_t cw_proxy_respond(CwIfrt__IfrtResponse* resp, int kase, bool with_handle,
                                         uint64_t handle);
// The same for a response whose field 1 is a list of handles, room for `n`
// (its count starts at 0).
CW_MUST_USE cw_status_t cw_proxy_respond_handles(CwIfrt__IfrtResponse* resp, int kase, size_t n);
// PJRT named values as an IFRT AttributeMap: the keys and one block are
// the map's own (cw_proxy_attributes_free), values borrow `nv`'s strings
// and lists.
CW_MUST_USE cw_status_t cw_proxy_attributes(const PJRT_NamedValue* nv, size_t n,
                                            CwIfrt__AttributeMap* out);
void cw_proxy_attributes_free(CwIfrt__AttributeMap* map);
// xla.ifrt.proto.ArrayCopySemantics
#define CW_PROXY_REUSE_INPUT 2
#define CW_PROXY_DONATE_INPUT 3

// The live array under `handle` (an error array answers its error).
CW_MUST_USE cw_status_t cw_proxy_array_get(cw_proxy_session_t* s, uint64_t handle,
                                           cw_proxy_array_t** out_array);
// A new array under `handle` with room for `n` shards (none yet).
CW_MUST_USE cw_status_t cw_proxy_array_new(cw_proxy_session_t* s, uint64_t handle, int32_t dtype,
                                           const int64_t* dims, size_t rank, size_t n,
                                           cw_proxy_array_t** out_array);
// The handle the client chose, else one of the proxy's (top bit set).
uint64_t cw_proxy_result_handle(cw_proxy_session_t* s, bool has, uint64_t chosen);
// Keeps the ShardingProto `a` was made with (packed); left out if memory is short.
void cw_proxy_array_keep_sharding(cw_proxy_array_t* a, const CwIfrt__Sharding* sharding);
// With DONATE_INPUT the inputs are deleted once their shards are another's.
void cw_proxy_arrays_donate_if(cw_proxy_session_t* s, int32_t semantics, const uint64_t* handles,
                               size_t n);
// A shard of `a` holding `buffer` (taken on success), on `device_id`.
CW_MUST_USE cw_status_t cw_proxy_array_add_shard(cw_proxy_array_t* a, PJRT_Buffer* buffer,
                                                 int32_t device_id);
// The same, but `buffer` is taken either way (destroyed on failure).
CW_MUST_USE cw_status_t cw_proxy_array_take_shard(cw_proxy_session_t* s, cw_proxy_array_t* a,
                                                  PJRT_Buffer* buffer, int32_t device_id);
// Shard k of `in` becomes `out`'s next shard too (shared).
void cw_proxy_array_share_shard(cw_proxy_array_t* out, const cw_proxy_array_t* in, size_t k);
int32_t cw_proxy_array_shard_device(const cw_proxy_array_t* a, size_t k);
PJRT_Buffer* cw_proxy_array_shard_buffer(const cw_proxy_array_t* a, size_t k);
// The session's device of global id `id`.
CW_MUST_USE cw_status_t cw_proxy_device_lookup(cw_proxy_session_t* s, int32_t id,
                                               PJRT_Device** out_device);
// The memory of `device` of `kind` (NULL or "": *out NULL, the default).
CW_MUST_USE cw_status_t cw_proxy_device_memory(cw_proxy_session_t* s, PJRT_Device* device,
                                               const char* kind, PJRT_Memory** out_memory);
// A buffer on `device_id` holding `data` (an array of `dims`).
CW_MUST_USE cw_status_t cw_proxy_buffer_upload(cw_proxy_session_t* s, const cw_proxy_dtype_t* dt,
                                               const int64_t* dims, size_t rank,
                                               int32_t device_id, const uint8_t* data,
                                               PJRT_Buffer** out_buffer);
// A copy of `buffer` on `device_id`, in its memory of `memory_kind` (NULL
// or "": the default); the plugin copies worker to worker.
CW_MUST_USE cw_status_t cw_proxy_buffer_copy(cw_proxy_session_t* s, PJRT_Buffer* buffer,
                                             int32_t device_id, const char* memory_kind,
                                             PJRT_Buffer** out_buffer);
// The `bytes` of `buffer` (cw_proxy_bytes_free them).
CW_MUST_USE cw_status_t cw_proxy_buffer_download(cw_proxy_session_t* s, PJRT_Buffer* buffer,
                                                 size_t bytes, uint8_t** out_data);
// Begins reading the `bytes` of `buffer` into *out_data (cw_proxy_bytes_free
// it once *out_event is done: cw_proxy_pjrt_await).
CW_MUST_USE cw_status_t cw_proxy_buffer_download_start(cw_proxy_session_t* s,
                                                       PJRT_Buffer* buffer, size_t bytes,
                                                       uint8_t** out_data,
                                                       PJRT_Event** out_event);
// Marks `a` deleted when the plugin deleted one of its shards (a donated
// argument); true when it is deleted.
bool cw_proxy_array_check_deleted(cw_proxy_session_t* s, cw_proxy_array_t* a);
// The buffer of `a`'s shard on `device_id` (NULL: none there).
PJRT_Buffer* cw_proxy_array_buffer_on(const cw_proxy_array_t* a, int32_t device_id);
// A new array under `handle` over `n` buffers, buffer i on device_ids[i]
// (taken on success); dtype and shape from the first (the caller makes the
// shape global).
CW_MUST_USE cw_status_t cw_proxy_array_adopt(cw_proxy_session_t* s, uint64_t handle,
                                             PJRT_Buffer* const* buffers,
                                             const int32_t* device_ids, size_t n,
                                             cw_proxy_array_t** out_array);

// Compile and execute (cw_proxy_exec.c): Compile, LoadedExecutable
// Metadata, Execute, Delete, IsDeleted, Destruct.
CW_MUST_USE cw_status_t cw_proxy_exec_handle(cw_proxy_session_t* s,
                                             const CwIfrt__IfrtRequest* req,
                                             CwIfrt__IfrtResponse* resp);
void cw_proxy_exec_response_free(CwIfrt__IfrtResponse* resp);
void cw_proxy_exe_free(cw_proxy_session_t* s, cw_proxy_exe_t* e);
void cw_proxy_exes_free(cw_proxy_session_t* s);

#endif  // CW_PROXY_INTERNAL_H_
