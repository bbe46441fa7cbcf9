// Internal declarations of libcauseway_pjrt.so, the PJRT C API plugin that
// makes a causeway cluster look like one local client to JAX.
//
// Object model (every PJRT handle is one of these structs, cast):
//   PJRT_Client            -> cw_plugin_client_t
//   PJRT_Device            -> cw_plugin_device_t (also its PJRT_DeviceDescription)
//   PJRT_Memory            -> cw_plugin_memory_t (starts with the memory vtable)
//   PJRT_Buffer            -> cw_plugin_buffer_t (a proxy for a worker-side id)
//   PJRT_LoadedExecutable  -> cw_plugin_loaded_t, PJRT_Executable -> cw_plugin_exe_t
//   PJRT_Event             -> cw_plugin_future_t (one reference of a shared future)
//   PJRT_Error             -> cw__error_t (starts with the error vtable)
// Status travels as cw_status_t internally and becomes a PJRT_Error* only in
// the API entry points (cw_plugin_error_from_status).
#ifndef CW_PLUGIN_PLUGIN_H_
#define CW_PLUGIN_PLUGIN_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cw_client.h"
#include "cw_pjrt_c_api.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_executable.h"
#include "cw_plugin_execute.h"
#include "cw_plugin_trace.h"
#include "cw_plugin_transfer.h"
#include "cw_plugin_worker.h"
#include "cw_settings.h"
#include "cw_status.h"

// ---- Cluster, workers, devices, memories -----------------------------------

typedef struct cw_plugin_client_s cw_plugin_client_t;
typedef struct cw_plugin_device_s cw_plugin_device_t;

typedef struct cw_plugin_worker_s {
  cw_plugin_client_t* client;
  uint32_t index;
  char* name;
  char* address;
  uint32_t island;
  // Direct connection in the session. Replaced (under send_mu) when the
  // worker is: readers load it atomically; the old one stays valid in
  // `retired` until the client is destroyed.
  _Atomic(cw_client_t*) conn;
  bool direct_launch;           // LAUNCH goes on `conn`, not through the controller
  _Atomic uint64_t seq;         // last seq handed out (first request gets 1)
  // Held from taking a seq to sending its request: each connection then
  // carries this worker's seqs in increasing order, which the worker's flow
  // control relies on (docs/protocol.md, "Ordering across connections").
  pthread_mutex_t send_mu;
  // Ids of dropped buffers whose DELETE waits (guarded by send_mu): sent as
  // one DELETE before this worker's next seq'd request, or when the batch is full.
  uint64_t* pending_deletes;
  size_t n_pending_deletes, cap_pending_deletes;
  _Atomic bool dead;
  pthread_mutex_t mu;           // guards dead_reason, deferred_error
  char* dead_reason;
  // The first error reply to a pipelined request nobody waits on (DELETE):
  // surfaced by the next blocking call on this worker (cw_plugin_worker_take_deferred).
  char* deferred_error;
  int deferred_code;            // its cw_status_code_t
  uint64_t deferred_count;      // such errors since it was last surfaced
  // Health (cw_plugin_health.c). epoch counts this client's reconnections to
  // replacements; buffers made in an older epoch lived on a lost worker.
  _Atomic uint32_t epoch;
  uint32_t incarnation;         // guarded by mu: the controller's, of the worker we talk to
  char* next_address;           // guarded by mu: a replacement announced (WORKER_UP)
  uint32_t next_incarnation;
  struct cw_plugin_retired_s* retired;  // guarded by send_mu: old connections and addresses
  size_t num_retired;
} cw_plugin_worker_t;

typedef struct cw_plugin_memory_s {
  const PJRT_Memory_FunctionTable* vtable;  // first: callers read it
  cw_plugin_device_t* device;
  int id;
  int kind_id;
  char* debug_string;
  char* to_string;
  pthread_mutex_t mu;
  struct cw_plugin_memory_user_data_s* user_data;  // cw_plugin_device.c
} cw_plugin_memory_t;

struct cw_plugin_device_s {
  cw_plugin_client_t* client;
  int global_id;
  int local_id;            // index on its worker
  cw_plugin_worker_t* worker;
  uint32_t island;
  char* kind;
  char* debug_string;
  char* to_string;
  PJRT_NamedValue* attributes;
  size_t num_attributes;
  char** attr_strings;     // owned storage behind `attributes`
  size_t num_attr_strings;
  int64_t** attr_lists;
  size_t num_attr_lists;
  cw_plugin_memory_t memory;  // one memory per device: kind "device"
  PJRT_Memory* memory_ptr;  // &memory, as an array of one
  PJRT_Device* self_ptr;    // this, as an array of one
};

typedef struct cw_plugin_cluster_s cw_plugin_cluster_t;

struct cw_plugin_client_s {
  cw_client_t* ctrl;        // connection to the controller
  char* ctrl_address;
  uint64_t session_id;
  cw_plugin_worker_t* workers;
  size_t num_workers;
  cw_plugin_device_t* devices;
  size_t num_devices;
  PJRT_Device** device_ptrs;
  PJRT_Memory** memory_ptrs;
  char* platform_name;
  char* platform_version;
  _Atomic uint64_t next_id;  // client-chosen object ids
  cw_plugin_cluster_t* cluster;  // embedded cluster, NULL when joining one
  char* token;               // presented in every HELLO ("" when none)
  cw_settings_t settings;    // CW_SCOPE_PLUGIN, read once at client creation
  _Atomic bool ready;        // workers and devices are set up (events may look)
};

// Next object id (never 0, never reused).
static inline uint64_t cw_plugin_client_new_id(cw_plugin_client_t* c) {
  return atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed);
}

// ---- Health: worker loss and replacement (cw_plugin_health.c) ---------------

// A ClusterEvent from the controller (reader thread). WORKER_DOWN marks the
// worker dead and closes our connection to it (what is pending there fails);
// WORKER_UP for a worker of this session with a new incarnation records
// its replacement, which the next operation on it connects to.
void cw_plugin_health_on_event(cw_plugin_client_t* c, const Causeway__V1__ClusterEvent* ev);
// Called by cw_plugin_worker_check on a dead worker: if a replacement was
// announced, connects to it in this session, tells the controller
// (HEALTH_REJOIN), restarts seq numbering and returns true.
bool cw_plugin_health_revive(cw_plugin_worker_t* w);
// Whether `status` (borrowed) says the controller connection is lost.
bool cw_plugin_health_controller_lost(const cw_plugin_client_t* c, cw_status_t status);
// Takes `status`: when the controller connection is lost, UNAVAILABLE
// "causeway: the controller at ADDRESS is unavailable: ..."; else unchanged.
CW_MUST_USE cw_status_t cw_plugin_health_controller_error(cw_plugin_client_t* c,
                                                          cw_status_t status);
// Frees the worker's health state (retired connections and addresses).
void cw_plugin_health_worker_free(cw_plugin_worker_t* w);

// ---- Embedded cluster ------------------------------------------------------

// Starts a private controller and CAUSEWAY_LOCAL_WORKERS workers as child
// processes, as `settings` (borrowed) say; *out_num_workers is how many.
// *out_controller_address is borrowed from the cluster.
CW_MUST_USE cw_status_t cw_plugin_cluster_start(const cw_settings_t* settings,
                                                cw_plugin_cluster_t** out_cluster,
                                                const char** out_controller_address,
                                                uint32_t* out_num_workers);
// Appends the tail of the children's logs (for error messages); may be NULL.
CW_MUST_USE cw_status_t cw_plugin_cluster_annotate(cw_plugin_cluster_t* cluster,
                                                   cw_status_t status);
// True if a child has exited (with a description in buf).
bool cw_plugin_cluster_child_exited(cw_plugin_cluster_t* cluster, char* buf, size_t cap);
void cw_plugin_cluster_stop(cw_plugin_cluster_t* cluster);
// The embedded cluster's random token (borrowed; lives with the cluster).
const char* cw_plugin_cluster_token(const cw_plugin_cluster_t* cluster);

// ---- Credentials (cw_plugin_token.c) ----------------------------------------

// CAUSEWAY_TOKEN, else the first line of CAUSEWAY_TOKEN_FILE, else "", from
// `settings` (the token file's line is kept there too). *out_token is heap
// (caller frees).
CW_MUST_USE cw_status_t cw_plugin_token_load(cw_settings_t* settings, char** out_token);
// Takes `status`: an UNAUTHENTICATED refusal by the `what` at `address` is
// reworded to say the token was refused and how to set it; others pass.
CW_MUST_USE cw_status_t cw_plugin_token_refused(cw_status_t status, const char* what,
                                                const char* address);

// ---- API entry points implemented across files ------------------------------

PJRT_Error* cw_plugin_client_create(PJRT_Client_Create_Args* args);
PJRT_Error* cw_plugin_client_destroy(PJRT_Client_Destroy_Args* args);
PJRT_Error* cw_plugin_client_platform_name(PJRT_Client_PlatformName_Args* args);
PJRT_Error* cw_plugin_client_process_index(PJRT_Client_ProcessIndex_Args* args);
PJRT_Error* cw_plugin_client_platform_version(PJRT_Client_PlatformVersion_Args* args);
PJRT_Error* cw_plugin_client_devices(PJRT_Client_Devices_Args* args);
PJRT_Error* cw_plugin_client_addressable_devices(PJRT_Client_AddressableDevices_Args* args);
PJRT_Error* cw_plugin_client_lookup_device(PJRT_Client_LookupDevice_Args* args);
PJRT_Error* cw_plugin_client_lookup_addressable_device(
    PJRT_Client_LookupAddressableDevice_Args* args);
PJRT_Error* cw_plugin_client_addressable_memories(PJRT_Client_AddressableMemories_Args* args);
PJRT_Error* cw_plugin_client_default_device_assignment(
    PJRT_Client_DefaultDeviceAssignment_Args* args);

// Plugin attributes: the workers' plugin attributes once a session exists
// (defaults before). Set by client creation; never freed (process lifetime).
void cw_plugin_api_attributes_set(Causeway__V1__NamedValue* const* values, size_t count);

// ---- cw_plugin_alloc.c: what the session asks for (CAUSEWAY_DEVICES...) ----
typedef struct cw_plugin_alloc_s {
  char* buf;     // CAUSEWAY_WORKERS, split in place
  char** names;
  size_t count;
} cw_plugin_alloc_t;
// Fills req's allocation fields from `settings` (borrowed, and pointed at by
// req until it is freed); `keep` owns the other strings req points at until
// cw_plugin_alloc_free.
CW_MUST_USE cw_status_t cw_plugin_alloc_read(const cw_settings_t* settings,
                                             Causeway__V1__OpenSessionRequest* req,
                                             cw_plugin_alloc_t* keep);
void cw_plugin_alloc_free(cw_plugin_alloc_t* keep);

#endif  // CW_PLUGIN_PLUGIN_H_
