// Host callbacks in the client (see cw_plugin_hostcb.h).
#include "cw_plugin_hostcb.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cw_hostcb.h"
#include "cw_msg.h"
#include "cw_pjrt_ffi.h"
#include "cw_plugin_error.h"
#include "cw_plugin_event.h"
#include "cw_plugin_executable.h"
#include "cw_pool.h"

// Threads that run callables; each may block in Python for long.
#define CW__MAX_THREADS 64
// More callables than any program has: user data claiming more is not ours.
#define CW__MAX_CALLABLES (1u << 20)

// What JAX puts in the execute context (jaxlib's layout).
typedef struct cw__loaded_callbacks_s {
  void** callbacks;
  uint32_t num_callbacks;
} cw__loaded_callbacks_t;

// PJRT_ExecuteContext: the user data added to it.
typedef struct cw__context_s {
  size_t n;
  PJRT_FFI_UserData items[8];
} cw__context_t;

struct cw__job_s;

// A launch that may call back, by the id its LAUNCH carries: its callables
// (JAX keeps them alive until the launch completes, then drops them), and
// its caller, who waits in Execute (cw_plugin_hostcb_serve) and runs a
// callback itself while it runs none: stock JAX runs a program that calls
// back on the calling thread, whose thread-local JAX state (config
// contexts, an abstract mesh) callables read. Callbacks that come while the
// caller is busy go to the pool (a multi-device launch's shards may call
// back at once, as on XLA's threads on stock JAX).
typedef struct cw__launch_s {
  struct cw__launch_s* next;
  uint64_t id;
  void** callables;  // owned copy of the pointers (the objects are JAX's)
  uint32_t n;
  bool busy;                // its caller runs a callback (g_mu)
  bool done;                // the launch completed (g_mu)
  uint32_t users;           // jobs that hold one of its callables (g_mu)
  struct cw__job_s* queue;  // a callback handed to its caller (g_mu)
  pthread_cond_t cv;        // with g_mu: a job or the end
} cw__launch_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cw__launch_t* g_launches;
static uint64_t g_next_id = 1;
static int64_t g_next_type = 1;
static int64_t g_callbacks_type;  // the id JAX registered for its callbacks' type (0: none)
static cw_pool_t* g_pool;
static _Atomic(cw_plugin_hostcb_runner_fn) g_runner;
static _Atomic(cw_plugin_hostcb_buffer_runner_fn) g_buffer_runner;

void CausewayHostCallbackRunner(cw_plugin_hostcb_runner_fn runner) { atomic_store(&g_runner, runner); }
void CausewayBufferCallbackRunner(cw_plugin_hostcb_buffer_runner_fn runner) {
  atomic_store(&g_buffer_runner, runner);
}

// --- The execute context and the FFI extension ------------------------------------

PJRT_Error* cw_plugin_execute_context_create(PJRT_ExecuteContext_Create_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_ExecuteContext_Create_Args, context);
  cw__context_t* c = calloc(1, sizeof(*c));
  if (!c) return cw_plugin_error_from_status(cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
  args->context = (PJRT_ExecuteContext*)c;
  return NULL;
}

PJRT_Error* cw_plugin_execute_context_destroy(PJRT_ExecuteContext_Destroy_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_ExecuteContext_Destroy_Args, context);
  free(args->context);
  return NULL;
}

static PJRT_Error* cw__type_register(PJRT_FFI_Type_Register_Args* args) {
  if (!args || args->struct_size < CW_PJRT_STRUCT_SIZE(PJRT_FFI_Type_Register_Args, type_id)) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "PJRT_FFI_Type_Register: bad arguments"));
  }
  pthread_mutex_lock(&g_mu);
  if (!args->type_id) args->type_id = g_next_type++;
  static const char kName[] = "FfiLoadedHostCallbacks";
  if (args->type_name && args->type_name_size >= sizeof(kName) - 1 &&
      memcmp(args->type_name + args->type_name_size - (sizeof(kName) - 1), kName,
             sizeof(kName) - 1) == 0) {
    g_callbacks_type = args->type_id;
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static PJRT_Error* cw__user_data_add(PJRT_FFI_UserData_Add_Args* args) {
  if (!args || args->struct_size < CW_PJRT_STRUCT_SIZE(PJRT_FFI_UserData_Add_Args, user_data) ||
      !args->context) {
    return cw_plugin_error_from_status(
        cw_make_status(CW_INVALID_ARGUMENT, "PJRT_FFI_UserData_Add: bad arguments"));
  }
  cw__context_t* c = (cw__context_t*)args->context;
  if (c->n == sizeof(c->items) / sizeof(c->items[0])) {
    return cw_plugin_error_from_status(cw_make_status(
        CW_RESOURCE_EXHAUSTED, "PJRT_FFI_UserData_Add: the causeway context holds 8 entries"));
  }
  c->items[c->n++] = args->user_data;
  return NULL;
}

static PJRT_Error* cw__register_handler(PJRT_FFI_Register_Handler_Args* args) {
  (void)args;
  return cw_plugin_error_from_status(cw_make_status(
      CW_UNIMPLEMENTED, "causeway runs custom calls on its workers: a handler registered in the "
                        "client would never run (see docs/host_callbacks.md)"));
}

PJRT_FFI_Extension cw_plugin_hostcb_ffi = {
    .base = {.struct_size = sizeof(PJRT_FFI_Extension), .type = PJRT_Extension_Type_FFI},
    .type_register = cw__type_register,
    .user_data_add = cw__user_data_add,
    .register_handler = cw__register_handler,
};


// --- Launches -------------------------------------------------------------------

// The context's callbacks: the entry of JAX's registered type, else the one
// entry there is.
static const cw__loaded_callbacks_t* cw__callbacks(const cw__context_t* c) {
  pthread_mutex_lock(&g_mu);
  int64_t type = g_callbacks_type;
  pthread_mutex_unlock(&g_mu);
  const PJRT_FFI_UserData* u = NULL;
  for (size_t i = 0; i < c->n; ++i) {
    if (type && c->items[i].type_id == type) u = &c->items[i];
  }
  if (!u && c->n == 1) u = &c->items[0];
  const cw__loaded_callbacks_t* lc = u ? u->data : NULL;
  if (!lc || !lc->callbacks || !lc->num_callbacks || lc->num_callbacks > CW__MAX_CALLABLES) {
    return NULL;
  }
  return lc;
}

uint64_t cw_plugin_hostcb_for_launch(PJRT_ExecuteContext* context) {
  const cw__loaded_callbacks_t* lc = context ? cw__callbacks((const cw__context_t*)context) : NULL;
  if (!lc) return 0;
  cw__launch_t* l = calloc(1, sizeof(*l));
  void** copy = malloc(lc->num_callbacks * sizeof(void*));
  if (!l || !copy) {
    free(l);
    free(copy);
    return 0;
  }
  memcpy(copy, lc->callbacks, lc->num_callbacks * sizeof(void*));
  l->callables = copy;
  l->n = lc->num_callbacks;
  pthread_cond_init(&l->cv, NULL);
  pthread_mutex_lock(&g_mu);
  l->id = g_next_id++;
  l->next = g_launches;
  g_launches = l;
  pthread_mutex_unlock(&g_mu);
  return l->id;
}

// With g_mu held.
static cw__launch_t* cw__launch_find(uint64_t id) {
  cw__launch_t* l = g_launches;
  while (l && l->id != id) l = l->next;
  return l;
}

// Takes `l` off g_launches and frees it (g_mu held).
static void cw__launch_free_locked(cw__launch_t* l) {
  for (cw__launch_t** p = &g_launches; *p; p = &(*p)->next) {
    if (*p == l) {
      *p = l->next;
      break;
    }
  }
  pthread_cond_destroy(&l->cv);
  free(l->callables);
  free(l);
}

// --- Requests from workers --------------------------------------------------------

typedef struct cw__job_s {
  struct cw__job_s* next;  // g_jobs (g_mu)
  cw_client_t* client;     // NULL once the connection is going (g_mu)
  bool replying;           // the job is writing its answer (g_mu)
  uint64_t request_id;
  Causeway__V1__HostCallbackRequest* req;
  uint8_t* bulk;
  void* callable;
  struct cw__launch_s* launch;     // whose callable it holds, until it has run (g_mu)
  struct cw__launch_s* caller_of;  // run by this launch's caller (its busy flag)
} cw__job_t;

static cw__job_t* g_jobs;  // jobs submitted and not yet answered (g_mu)
static pthread_cond_t g_jobs_cv = PTHREAD_COND_INITIALIZER;

// Takes `j` off g_jobs (g_mu held).
static void cw__job_unlink(cw__job_t* j) {
  for (cw__job_t** q = &g_jobs; *q; q = &(*q)->next) {
    if (*q == j) {
      *q = j->next;
      return;
    }
  }
}

static void cw__job_free(cw__job_t* j) {
  protobuf_c_message_free_unpacked(&j->req->base, NULL);
  free(j->bulk);
  free(j);
}

static void cw__answer_error(cw_client_t* client, uint64_t request_id, cw_status_t st) {
  cw_status_free(cw_client_reply_error(client, CW_MSG_HOST_CALLBACK, request_id, st));
}

// Ends `l` (g_mu held): no callback of it starts from now on, and it is
// freed once none runs. A callback on the pool may still run after a failed
// launch (a worker died mid-callback): JAX drops the callables once Execute
// returns, so Execute waits for it, as stock XLA's execution waits for its
// callbacks.
static void cw__launch_end_locked(cw__launch_t* l) {
  l->done = true;
  while (l->users) pthread_cond_wait(&l->cv, &g_mu);
  cw__launch_free_locked(l);
}

// A job lets go of its launch's callable (g_mu held): the launch may end.
static void cw__launch_unhold_locked(cw__launch_t* l) {
  if (--l->users == 0) pthread_cond_broadcast(&l->cv);
}

// A job answered (or never will): off g_jobs, and freed.
static void cw__job_done(cw__job_t* j) {
  pthread_mutex_lock(&g_mu);
  cw__job_unlink(j);
  j->replying = false;
  pthread_cond_broadcast(&g_jobs_cv);
  pthread_mutex_unlock(&g_mu);
  cw__job_free(j);
}

void cw_plugin_hostcb_abandon(uint64_t id) {
  if (!id) return;
  pthread_mutex_lock(&g_mu);
  cw__launch_t* l = cw__launch_find(id);
  struct cw__job_s* j = l ? l->queue : NULL;
  cw_client_t* client = NULL;
  if (j) {
    l->queue = NULL;
    cw__launch_unhold_locked(l);
    j->launch = NULL;
    client = j->client;
    j->replying = client != NULL;
  }
  if (l) cw__launch_end_locked(l);  // the send failed; it may have reached the worker
  pthread_mutex_unlock(&g_mu);
  if (!j) return;
  if (client) {
    cw__answer_error(client, j->request_id,
                     cw_make_status(CW_UNAVAILABLE, "the launch that calls back failed"));
  }
  cw__job_done(j);
}

// Dtypes, ranks and dims (concatenated) of `arrays` for the runner.
static cw_status_t cw__shapes(Causeway__V1__HostCallbackArray* const* arrays, size_t n,
                              int32_t* dtypes, int32_t* ranks, int64_t** out_dims) {
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += arrays[i]->n_dims;
  int64_t* dims = malloc((total + 1) * sizeof(*dims));
  if (!dims) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    dtypes[i] = arrays[i]->token ? -1 : (int32_t)arrays[i]->dtype;
    ranks[i] = (int32_t)arrays[i]->n_dims;
    for (size_t d = 0; d < arrays[i]->n_dims; ++d) dims[k++] = arrays[i]->dims[d];
  }
  *out_dims = dims;
  return cw_ok_status();
}

// A pool thread, or the launch's caller (serve): runs the callable and answers.
static void cw__run(void* user) {
  cw__job_t* j = user;
  const Causeway__V1__HostCallbackRequest* r = j->req;
  size_t no = r->n_operands, nr = r->n_results;
  uint64_t* offsets = calloc(no + nr + 1, sizeof(*offsets));
  int32_t* dtypes = calloc(no + nr + 1, sizeof(*dtypes));
  int32_t* ranks = calloc(no + nr + 1, sizeof(*ranks));
  void** data = calloc(no + nr + 1, sizeof(*data));
  int32_t* aliases = calloc(nr + 1, sizeof(*aliases));
  int64_t* op_dims = NULL;
  int64_t* res_dims = NULL;
  uint8_t* out = NULL;
  uint64_t out_len = 0, in_len = 0;
  char err[16384] = "";  // a traceback (the runner keeps its last lines)
  cw_status_t st = (offsets && dtypes && ranks && data && aliases)
                       ? cw_ok_status()
                       : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) st = cw_hostcb_layout(r->operands, no, "operand", offsets, &in_len);
  if (!st) st = cw_hostcb_layout(r->results, nr, "result", offsets + no, &out_len);
  if (!st) st = cw__shapes(r->operands, no, dtypes, ranks, &op_dims);
  if (!st) st = cw__shapes(r->results, nr, dtypes + no, ranks + no, &res_dims);
  if (!st && !(out = malloc(out_len ? (size_t)out_len : 1))) {
    st = cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for %llu bytes of results",
                        (unsigned long long)out_len);
  }
  cw_plugin_hostcb_runner_fn runner = atomic_load(&g_runner);
  cw_plugin_hostcb_buffer_runner_fn buffer_runner = atomic_load(&g_buffer_runner);
  // A job the pool starts after its launch ended: its callable may be gone.
  pthread_mutex_lock(&g_mu);
  cw__launch_t* l = j->launch;
  if (!st && (!l || l->done)) {
    st = cw_make_status(CW_UNAVAILABLE, "the launch that calls back is over");
  }
  pthread_mutex_unlock(&g_mu);
  if (!st && (r->buffer ? !buffer_runner : !runner)) {
    st = cw_make_status(CW_FAILED_PRECONDITION,
                        "host callbacks need the causeway_jax package, which installs the "
                        "runner of Python callables (JAX loaded libcauseway_pjrt.so without it)");
  }
  if (!st) {
    for (size_t i = 0; i < no; ++i) data[i] = j->bulk + offsets[i];
    for (size_t i = 0; i < nr; ++i) data[no + i] = out + offsets[no + i];
    memset(out, 0, out_len ? (size_t)out_len : 1);
    int rc;
    if (r->buffer) {
      // An aliased result starts as its operand (the message table checked
      // that the two are alike).
      for (size_t i = 0; i < nr; ++i) {
        aliases[i] = r->n_aliased_operand ? (int32_t)r->aliased_operand[i] - 1 : -1;
        if (aliases[i] >= 0) {
          memcpy(data[no + i], data[aliases[i]], (size_t)cw_hostcb_array_bytes(r->results[i]));
        }
      }
      rc = buffer_runner(j->callable, (int32_t)no, dtypes, ranks, op_dims, data, (int32_t)nr,
                         dtypes + no, ranks + no, res_dims, data + no, aliases, err,
                         (int64_t)sizeof(err));
    } else {
      rc = runner(j->callable, (int32_t)no, dtypes, ranks, op_dims, data, (int32_t)nr,
                  dtypes + no, ranks + no, res_dims, data + no, err, (int64_t)sizeof(err));
    }
    if (rc) {
      err[sizeof(err) - 1] = 0;
      st = cw_make_status(CW_INTERNAL, "%s", err[0] ? err : "host callback failed");
    }
  }
  // The connection may be released meanwhile (PJRT_Client_Destroy, a dead
  // worker): answer only while it is ours (cw_plugin_hostcb_released), and
  // say we are writing.
  pthread_mutex_lock(&g_mu);
  cw_client_t* client = j->client;
  j->replying = client != NULL;
  // The caller takes the launch's next callback, which may come as soon as
  // this answer is written.
  if (j->caller_of) j->caller_of->busy = false;
  // The callable has run: the launch may end (and `l` be freed).
  j->launch = NULL;
  if (l) cw__launch_unhold_locked(l);
  pthread_mutex_unlock(&g_mu);
  if (!client) {
    cw_status_free(st);
  } else if (st) {
    cw__answer_error(client, j->request_id, st);
  } else {
    Causeway__V1__HostCallbackReply rep = CAUSEWAY__V1__HOST_CALLBACK_REPLY__INIT;
    struct iovec iov = {.iov_base = out, .iov_len = (size_t)out_len};
    cw_status_free(cw_client_reply(client, CW_MSG_HOST_CALLBACK, j->request_id, &rep.base,
                                   &iov, out_len ? 1 : 0));
  }
  free(offsets);
  free(dtypes);
  free(ranks);
  free(data);
  free(aliases);
  free(op_dims);
  free(res_dims);
  free(out);
  cw__job_done(j);
}

void cw_plugin_hostcb_on_request(void* user, cw_client_t* client, uint16_t type,
                                 uint64_t request_id, ProtobufCMessage* request, uint8_t* bulk,
                                 uint64_t bulk_len) {
  (void)user;
  (void)bulk_len;  // the reader checked it against the operands
  cw__job_t* j = calloc(1, sizeof(*j));
  if (!j) {
    protobuf_c_message_free_unpacked(request, NULL);
    free(bulk);
    cw__answer_error(client, request_id,
                     cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a host callback"));
    return;
  }
  j->client = client;
  j->request_id = request_id;
  j->req = (Causeway__V1__HostCallbackRequest*)request;
  j->bulk = bulk;
  cw_status_t st = type == CW_MSG_HOST_CALLBACK
                       ? cw_ok_status()
                       : cw_make_status(CW_UNIMPLEMENTED, "the client does not serve %s",
                                        cw_msg_type_name(type));
  pthread_mutex_lock(&g_mu);
  cw__launch_t* l = NULL;
  if (!st) {
    l = cw__launch_find(j->req->host_callbacks);
    if (!l || l->done) {
      st = cw_make_status(CW_NOT_FOUND, "host callbacks %llu are not known here (their "
                          "launch is over)", (unsigned long long)j->req->host_callbacks);
    } else if (j->req->index >= l->n) {
      st = cw_make_status(CW_INVALID_ARGUMENT, "host callback %llu of %u does not exist",
                          (unsigned long long)j->req->index, l->n);
    } else {
      j->callable = l->callables[j->req->index];
      j->launch = l;
      l->users++;
    }
  }
  bool to_caller = !st && !l->busy && !l->queue;
  if (!st && !to_caller && !g_pool) {
    st = cw_pool_create("cw-callbacks", CW__MAX_THREADS, &g_pool);
    if (st) cw__launch_unhold_locked(l);  // the job will not run
  }
  if (!st) {
    j->next = g_jobs;
    g_jobs = j;
  }
  if (to_caller) {
    l->queue = j;
    pthread_cond_signal(&l->cv);
  }
  pthread_mutex_unlock(&g_mu);
  if (to_caller) return;
  if (!st) {
    st = cw_pool_submit(g_pool, cw__run, j);
    if (st) {
      pthread_mutex_lock(&g_mu);
      cw__job_unlink(j);
      cw__launch_unhold_locked(l);
      pthread_mutex_unlock(&g_mu);
    }
  }
  if (st) {
    cw__answer_error(client, request_id, st);
    cw__job_free(j);
  }
}

// The launch's future completed (on the completing thread): its caller
// stops serving.
static void cw__launch_done(PJRT_Error* error, void* user) {
  cw__launch_t* l = user;
  if (error) {
    PJRT_Error_Destroy_Args d = {.struct_size = sizeof(d), .error = error};
    cw_plugin_error_destroy(&d);
  }
  pthread_mutex_lock(&g_mu);
  l->done = true;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&g_mu);
}

cw_status_t cw_plugin_hostcb_serve(uint64_t id, cw_plugin_future_t* f) {
  pthread_mutex_lock(&g_mu);
  cw__launch_t* l = cw__launch_find(id);
  pthread_mutex_unlock(&g_mu);
  if (!l) return cw_plugin_future_wait(f);
  // Its end must wake us now, not at this thread's next launch.
  cw_plugin_future_expect_wait(f);
  PJRT_Event_OnReady_Args a = {.struct_size = sizeof(a), .event = (PJRT_Event*)f,
                               .callback = cw__launch_done, .user_arg = l};
  PJRT_Error* e = cw_plugin_event_on_ready(&a);
  bool poll = e != NULL;  // out of memory for the callback: look every 10 ms
  if (e) {
    PJRT_Error_Destroy_Args d = {.struct_size = sizeof(d), .error = e};
    cw_plugin_error_destroy(&d);
  }
  pthread_mutex_lock(&g_mu);
  for (;;) {
    cw__job_t* j = l->queue;
    if (j) {
      l->queue = NULL;
      l->busy = true;
      j->caller_of = l;
      pthread_mutex_unlock(&g_mu);
      cw__run(j);
      pthread_mutex_lock(&g_mu);
      l->busy = false;
      continue;
    }
    if (l->done || (poll && cw_plugin_future_is_done(f))) break;
    if (poll) {
      struct timespec t;
      clock_gettime(CLOCK_REALTIME, &t);
      t.tv_nsec += 10 * 1000 * 1000;
      if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&l->cv, &g_mu, &t);
    } else {
      pthread_cond_wait(&l->cv, &g_mu);
    }
  }
  cw__launch_end_locked(l);
  pthread_mutex_unlock(&g_mu);
  return cw_plugin_future_wait(f);  // done: its status at once
}

void cw_plugin_hostcb_released(void* user, cw_client_t* client) {
  (void)user;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    bool busy = false;
    for (cw__job_t* j = g_jobs; j; j = j->next) {
      if (j->client != client) continue;
      if (j->replying) busy = true;  // its write fails: the connection is broken
      else j->client = NULL;
    }
    if (!busy) break;
    pthread_cond_wait(&g_jobs_cv, &g_mu);
  }
  pthread_mutex_unlock(&g_mu);
}
