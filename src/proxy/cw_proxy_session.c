// One IFRT session: a thread that owns the session's PJRT client and answers
// its requests in order. The loop thread hands it request bytes and writes
// the response bytes it queues (cw_proxy.c).
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_proxy_internal.h"
#include "cw_time.h"

// What serves each request kind: a handler filling the response's oneof and
// what frees it. Kinds without an entry are answered UNIMPLEMENTED by name.
typedef struct cw__family_s {
  cw_status_t (*handle)(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                        CwIfrt__IfrtResponse* resp);
  void (*free)(CwIfrt__IfrtResponse* resp);
} cw__family_t;

#define CW__ARRAY {cw_proxy_array_handle, cw_proxy_array_response_free}
#define CW__EXEC {cw_proxy_exec_handle, cw_proxy_exec_response_free}
#define CW__RESPEC {cw_proxy_respec_handle, cw_proxy_array_response_free}
static const cw__family_t cw__families[] = {
    [CW_IFRT__IFRT_REQUEST__REQUEST_INIT_REQUEST] = {cw_proxy_init, cw_proxy_init_free},
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_HOST_CALLBACK_POLL_REQUEST] =
        {cw_proxy_callback_handle, NULL},
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_HOST_CALLBACK_RETURN_REQUEST] =
        {cw_proxy_callback_handle, NULL},
    [CW_IFRT__IFRT_REQUEST__REQUEST_GET_DEFAULT_DEVICE_ASSIGNMENT_REQUEST] =
        {cw_proxy_device_assignment, cw_proxy_device_assignment_free},
    [CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_COPY_ARRAYS_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_MAKE_ERROR_ARRAYS_REQUEST] = CW__RESPEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_RESHARD_ARRAYS_REQUEST] = CW__RESPEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_BITCAST_ARRAYS_REQUEST] = CW__RESPEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_REMAP_ARRAYS_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_FULLY_REPLICATED_SHARD_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_COPY_TO_HOST_BUFFER_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_CHECK_VALUE_READY_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_DELETE_ARRAY_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_IS_ARRAY_DELETED_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_DESTRUCT_ARRAY_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_CHECK_FUTURE_REQUEST] = CW__ARRAY,
    [CW_IFRT__IFRT_REQUEST__REQUEST_COMPILE_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_METADATA_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_EXECUTE_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DELETE_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_IS_DELETED_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DESTRUCT_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_GET_DEFAULT_LAYOUT_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_COST_ANALYSIS_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_HUMAN_READABLE_PROGRAM_TEXT_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_MPMD_METADATA_REQUEST] = CW__EXEC,
    [CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_MPMD_COST_ANALYSIS_REQUEST] = CW__EXEC,
};

// --- Futures: the proxy answers in order, so a future is resolved when made.

cw_status_t cw_proxy_future_put(cw_proxy_session_t* s, cw_status_t st, uint64_t handle,
                                uint64_t* out_handle) {
  cw_status_t* box = malloc(sizeof(*box));
  if (!box) {
    cw_status_free(st);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  *box = st;
  uint64_t h = handle ? handle : (1ull << 63) | ++s->next_handle;
  cw_status_t pst = cw_proxy_table_put(&s->futures, h, box);
  if (pst) {
    cw_status_free(st);
    free(box);
    return pst;
  }
  *out_handle = h;
  return cw_ok_status();
}

cw_status_t cw_proxy_future_take(cw_proxy_session_t* s, uint64_t handle) {
  cw_status_t* box = cw_proxy_table_remove(&s->futures, handle);
  if (!box) return cw_make_status(CW_NOT_FOUND, "no future with handle %llu in this session",
                                  (unsigned long long)handle);
  cw_status_t st = *box;
  free(box);
  return st;
}

static void cw__future_free(void* user, uint64_t key, void* value) {
  cw_status_t* box = value;
  cw_status_free(*box);
  free(box);
}

static void cw__push(cw_proxy_queue_t* q, cw_proxy_item_t* it) {
  it->next = NULL;
  if (q->tail) q->tail->next = it; else q->head = it;
  q->tail = it;
}

static cw_proxy_item_t* cw__pop(cw_proxy_queue_t* q) {
  cw_proxy_item_t* it = q->head;
  if (it) {
    q->head = it->next;
    if (!q->head) q->tail = NULL;
  }
  return it;
}

static void cw__queue_free(cw_proxy_queue_t* q) {
  for (cw_proxy_item_t* it; (it = cw__pop(q));) free(it);
}

void cw_proxy_session_respond(cw_proxy_session_t* s, CwIfrt__IfrtResponse* resp) {
  size_t n = cw_ifrt__ifrt_response__get_packed_size(resp);
  cw_proxy_item_t* it = malloc(sizeof(*it) + n);
  if (!it) {
    CW_LOGE("proxy session %016llx: out of memory for a response", (unsigned long long)s->id);
    return;
  }
  it->len = cw_ifrt__ifrt_response__pack(resp, it->data);
  pthread_mutex_lock(&s->mu);
  cw__push(&s->responses, it);
  s->responses_bytes += it->len;
  s->handled += s->handling;  // the request's bytes may come again
  s->handling = 0;
  pthread_mutex_unlock(&s->mu);
  uv_async_send(&s->proxy->wake);
}

// Sends `resp` with its metadata, or on error a response carrying only the
// status (resp's own content is left for its family to free). Takes `st`.
static void cw__respond_status(cw_proxy_session_t* s, uint64_t op_id, cw_status_t st,
                               CwIfrt__IfrtResponse* resp) {
  CwIfrt__IfrtResponse err = CW_IFRT__IFRT_RESPONSE__INIT;
  CwIfrt__ResponseMetadata md = CW_IFRT__RESPONSE_METADATA__INIT;
  CwIfrt__StatusProto sp = CW_IFRT__STATUS_PROTO__INIT;
  md.has_op_id = true;
  md.op_id = op_id;
  if (st) {
    sp.has_code = true;
    sp.code = (int32_t)cw_status_code(st);
    sp.message = (char*)cw_status_message(st);
    md.status = &sp;
    resp = &err;
  }
  resp->response_metadata = &md;
  cw_proxy_session_respond(s, resp);
  resp->response_metadata = NULL;
  cw_status_free(st);
}

static void cw__handle(cw_proxy_session_t* s, const uint8_t* data, size_t len) {
  CwIfrt__IfrtRequest* req = cw_ifrt__ifrt_request__unpack(NULL, len, data);
  CwIfrt__IfrtResponse resp = CW_IFRT__IFRT_RESPONSE__INIT;
  if (!req) {
    cw__respond_status(s, 0,
                       cw_make_status(CW_INVALID_ARGUMENT,
                                      "causeway-proxy: an IfrtRequest of %zu bytes does not "
                                      "decode", len),
                       &resp);
    return;
  }
  uint64_t op_id = req->request_metadata ? req->request_metadata->op_id : 0;
  size_t kind = (size_t)req->request_case;
  const cw__family_t* f =
      kind < sizeof(cw__families) / sizeof(cw__families[0]) && cw__families[kind].handle
          ? &cw__families[kind]
          : NULL;
  const ProtobufCFieldDescriptor* kd =
      protobuf_c_message_descriptor_get_field(&cw_ifrt__ifrt_request__descriptor, (int)kind);
  CW_LOGD("session %016llx: op %llu %s", (unsigned long long)s->id, (unsigned long long)op_id,
          kd ? kd->name : "(unknown kind)");
  cw_status_t st;
  if (kind == CW_IFRT__IFRT_REQUEST__REQUEST__NOT_SET) {
    st = cw_make_status(CW_INVALID_ARGUMENT,
                        "causeway-proxy: IfrtRequest op %llu names no request kind this proxy "
                        "knows (protocol version %d)", (unsigned long long)op_id,
                        s->protocol_version);
  } else if (!f) {
    st = cw_make_status(CW_UNIMPLEMENTED, "causeway-proxy does not serve %s yet",
                        kd ? kd->name : "this request");
  } else if (s->client_status) {
    st = cw_status_clone(s->client_status);
  } else {
    st = f->handle(s, req, &resp);
    // Before the response: a client that stores again once it has it fits.
    cw_proxy_host_buffer_release_taken(s);
  }
  cw__respond_status(s, op_id, st, &resp);
  cw_proxy_host_buffer_settle(s);  // a read back the response did not wait for
  if (f && f->free) f->free(&resp);
  cw_ifrt__ifrt_request__free_unpacked(req, NULL);
}

static void cw__client_create(cw_proxy_session_t* s) {
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  static const char kCancel[] = "causeway_cancel_fd";
  PJRT_NamedValue cancel = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_NamedValue, value_size),
                            .name = kCancel,
                            .name_size = sizeof(kCancel) - 1,
                            .type = PJRT_NamedValue_kInt64,
                            .int64_value = s->cancel[0],
                            .value_size = 1};
  PJRT_Client_Create_Args a = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_Create_Args,
                                                                  kv_try_get_user_arg),
                               .create_options = &cancel,
                               .num_options = 1};
  s->client_status = CW_PROXY_PJRT_CALL(p, PJRT_Client_Create, &a);
  if (s->client_status) {
    s->client_status = cw_status_annotate(s->client_status, "causeway-proxy session %016llx",
                                          (unsigned long long)s->id);
    CW_LOGW("%s", cw_status_message(s->client_status));
  }
  s->client = a.client;
}

static void cw__client_destroy(cw_proxy_session_t* s) {
  if (!s->client) return;
  const cw_proxy_pjrt_t* p = &s->proxy->pjrt;
  PJRT_Client_Destroy_Args a = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Client_Destroy_Args,
                                                                   client),
                                .client = s->client};
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Client_Destroy, &a);
  if (st) CW_LOGW("proxy session %016llx: %s", (unsigned long long)s->id, cw_status_message(st));
  cw_status_free(st);
  s->client = NULL;
}

static void* cw__main(void* arg) {
  cw_proxy_session_t* s = arg;
  cw__client_create(s);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->gone && ((!s->requests.head && !s->half_closed) ||
                        s->responses_bytes + s->call_queued > CW_PROXY_SESSION_AHEAD)) {
      pthread_cond_wait(&s->cv, &s->mu);
    }
    cw_proxy_item_t* it = s->gone ? NULL : cw__pop(&s->requests);
    pthread_mutex_unlock(&s->mu);
    if (!it) break;
    s->handling = it->len + 5;  // with gRPC's prefix, as it arrived
    cw__handle(s, it->data, it->len);
    if (s->handling) {  // no response: credited with the next one
      pthread_mutex_lock(&s->mu);
      s->handled += s->handling;
      s->handling = 0;
      pthread_mutex_unlock(&s->mu);
    }
    free(it);
  }
  // Objects go before the client that made them.
  cw_proxy_arrays_free(s);
  cw_proxy_exes_free(s);
  cw_proxy_table_each(&s->futures, cw__future_free, NULL);
  cw_proxy_table_deinitialize(&s->futures);
  cw__client_destroy(s);
  pthread_mutex_lock(&s->mu);
  s->exited = true;
  pthread_mutex_unlock(&s->mu);
  uv_async_send(&s->proxy->wake);
  return NULL;
}

cw_status_t cw_proxy_session_start(cw_proxy_session_t* s) {
  s->kind = CW_PROXY_CALL_SESSION;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  cw_time_cond_init(&s->host_buffer_cv);  // cw_time_deadline_ms's clock
  if (pipe2(s->cancel, O_CLOEXEC | O_NONBLOCK) != 0) {
    s->cancel[0] = s->cancel[1] = -1;
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start a session: pipe: %s",
                          strerror(errno));
  }
  int rc = pthread_create(&s->thread, NULL, cw__main, s);
  if (rc) return cw_make_status(CW_RESOURCE_EXHAUSTED, "cannot start a session thread: %s",
                                strerror(rc));
  s->thread_started = true;
  pthread_setname_np(s->thread, "cw-proxy-sess");
  return cw_ok_status();
}

cw_status_t cw_proxy_session_push(cw_proxy_session_t* s, const uint8_t* data, size_t len) {
  cw_proxy_item_t* it = malloc(sizeof(*it) + len);
  if (!it) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a request");
  it->len = len;
  memcpy(it->data, data, len);
  pthread_mutex_lock(&s->mu);
  cw__push(&s->requests, it);
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return cw_ok_status();
}

void cw_proxy_session_end(cw_proxy_session_t* s, bool half) {
  if (!s->thread_started) return;
  pthread_mutex_lock(&s->mu);
  if (half) s->half_closed = true; else s->gone = true;
  if (!half) {
    char b = 1;  // a create still waiting ends (full or closed: it was told already)
    ssize_t w = write(s->cancel[1], &b, 1);
    (void)w;
  }
  pthread_cond_signal(&s->cv);
  pthread_cond_broadcast(&s->host_buffer_cv);  // a MakeArray waiting for bytes stops
  pthread_mutex_unlock(&s->mu);
}

void cw_proxy_session_writable(cw_proxy_session_t* s) {
  if (!s->thread_started) return;
  bool open = s->call && cw_grpc_call_open(s->call);
  size_t q = open ? cw_grpc_call_queued(s->call) : 0;
  pthread_mutex_lock(&s->mu);
  s->call_queued = q;
  bool held = s->responses_bytes + q > CW_PROXY_SESSION_AHEAD;
  // Always: the thread may have waited on an older, larger figure (every
  // response it queues brings a drain, and so this, after it).
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  // Still held: told again once the transport has taken enough.
  if (held && open) cw_grpc_call_when_writable(s->call, CW_PROXY_SESSION_AHEAD / 2);
}

bool cw_proxy_session_drain(cw_proxy_session_t* s) {
  if (!s->thread_started) return true;
  pthread_mutex_lock(&s->mu);
  cw_proxy_queue_t out = s->responses;
  s->responses = (cw_proxy_queue_t){0};
  s->responses_bytes = 0;
  bool exited = s->exited;
  size_t handled = s->handled;
  s->handled = 0;
  pthread_mutex_unlock(&s->mu);
  if (s->call && handled) cw_grpc_call_consume(s->call, handled);
  for (cw_proxy_item_t* it; (it = cw__pop(&out));) {
    if (!s->send_failed && s->call && cw_grpc_call_open(s->call)) {
      cw_status_t st = cw_grpc_call_send(s->call, it->data, it->len);
      if (st) {
        // Once: the session ends, and what it still answers is dropped (each
        // dropped response logged was 645,084 lines for a client that
        // stopped reading).
        CW_LOGW("proxy session %016llx: %s; ending the session", (unsigned long long)s->id,
                cw_status_message(st));
        s->send_failed = true;
        cw_proxy_session_end(s, false);
      }
      cw_status_free(st);
    }
    free(it);
  }
  cw_proxy_session_writable(s);
  if (!exited) return false;
  pthread_join(s->thread, NULL);
  s->thread_started = false;
  return true;
}

void cw_proxy_session_free(cw_proxy_session_t* s) {
  if (!s) return;
  if (s->call) cw_grpc_call_release(s->call);
  cw__queue_free(&s->requests);
  cw__queue_free(&s->responses);
  cw_status_free(s->client_status);
  cw_proxy_host_buffers_free(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pthread_cond_destroy(&s->host_buffer_cv);
  for (int i = 0; i < 2; ++i) {
    if (s->cancel[i] >= 0) close(s->cancel[i]);
  }
  free(s);
}
