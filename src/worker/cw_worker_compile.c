// COMPILE, LOAD, SERIALIZE, EXE_INFO (see cw_worker_compile.h).
#include "cw_worker_compile.h"

#include <inttypes.h>
#include <stdlib.h>

#include "cw_handler_set.h"
#include "cw_log.h"
#include "cw_pjrt_info.h"
#include "cw_worker_conn.h"
#include "cw_worker_hostcb.h"
#include "cw_worker_op.h"
#include "cw_xla_options.h"

// Threadpool: builds the executable and reads what the store keeps of it.
static void cw__compile_work(uv_work_t* req) {
  cw_op_t* op = req->data;
  const cw_pjrt_t* p = op->w->pjrt;
  // The plugin aborts on some option values: check them first.
  const ProtobufCBinaryData* raw = op->type == CW_MSG_COMPILE
      ? &((const Causeway__V1__CompileRequest*)op->msg)->compile_options
      : &((const Causeway__V1__LoadRequest*)op->msg)->compile_options;
  uint8_t* opts = NULL;
  size_t opts_len = 0;
  if (op->type == CW_MSG_COMPILE || raw->len) {
    op->status = cw_xla_options_normalize(raw->data, raw->len, (int64_t)p->num_devices, &opts,
                                          &opts_len);
  }
  // A custom call without a handler may load a handler set (jaxlib's
  // kernels load when first needed): then once more.
  for (int attempt = 0; !op->status; ++attempt) {
    if (op->type == CW_MSG_COMPILE) {
      const Causeway__V1__CompileRequest* r = (const Causeway__V1__CompileRequest*)op->msg;
      const char* format = (r->format && r->format[0]) ? r->format : "mlir";
      op->status = cw_pjrt_compile(p, format, r->code.data, r->code.len, opts, opts_len,
                                   &op->exe);
      op->host_callbacks = cw_worker_hostcb_in_program(r->code.data, r->code.len);
    } else {
      op->status = cw_pjrt_deserialize(p, op->staging, (size_t)op->size, opts, opts_len,
                                       &op->exe);
      op->host_callbacks = cw_worker_hostcb_in_program(op->staging, (size_t)op->size);
    }
    if (!op->status || !cw_handler_sets_resolve(op->w->handlers, attempt == 0, &op->status)) {
      break;
    }
    cw_status_free(op->status);
    op->status = NULL;
  }
  free(opts);
  if (!op->status) {
    op->status = cw_pjrt_executable_info(p, op->exe, &op->num_outputs, &op->num_devices,
                                         &op->name);
  }
  if (!op->status) {
    // Parameter shapes, read once here and kept with the executable: XLA's
    // Execute checks only byte sizes. Without them (a plugin that cannot
    // return its optimized program) that size check is all launches get.
    cw_status_t pst = cw_pjrt_executable_params(p, op->exe, &op->params, &op->num_params);
    if (pst) {
      CW_LOGW("executable %" PRIu64 ": no parameter shapes (%s); launches get only XLA's size "
              "check", op->dst_id, cw_status_message(pst));
      cw_status_free(pst);
    } else {
      op->params_known = true;
    }
    // Output sizes: a launch's memory is checked before it is issued.
    cw_status_t ost = cw_pjrt_executable_outputs(p, op->exe, &op->exe_devices,
                                                 &op->num_exe_devices, &op->output_bytes,
                                                 &op->num_output_bytes);
    if (ost) {
      CW_LOGW("executable %" PRIu64 ": no output sizes (%s); its launches' outputs count "
              "against the memory budget only once they exist", op->dst_id,
              cw_status_message(ost));
      cw_status_free(ost);
    } else {
      op->outputs_known = op->num_exe_devices == op->num_devices &&
                          op->num_output_bytes == op->num_outputs;
    }
  }
}

// Loop thread: the built executable goes into its entry (or the entry fails).
static void cw__compile_done(uv_work_t* req, int status) {
  cw_op_t* op = req->data;
  cw_worker_t* w = op->w;
  cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
  if (!e) {
    cw_worker_op_fail(op, cw_make_status(CW_CANCELLED, "executable %" PRIu64
                                         " was deleted before it was built", op->dst_id));
  } else if (op->status) {
    cw_status_t st = op->status;
    op->status = NULL;
    cw_store_set_error(w->store, e, cw_status_clone(st));
    cw_worker_op_fail(op, st);
  } else {
    e->num_outputs = op->num_outputs;
    e->num_devices = op->num_devices;
    e->host_callbacks = op->host_callbacks;
    e->name = op->name;
    op->name = NULL;
    if (op->params_known) {
      // cw_pjrt_shape_t and cw_store_shape_t have the same fields.
      e->params = calloc(op->num_params ? op->num_params : 1, sizeof(*e->params));
      if (e->params) {
        for (size_t i = 0; i < op->num_params; ++i) {
          e->params[i] = (cw_store_shape_t){op->params[i].dtype, op->params[i].rank,
                                            op->params[i].dims, op->params[i].donated};
          op->params[i].dims = NULL;
        }
        e->num_params = op->num_params;
        e->params_known = true;
      }
    }
    if (op->outputs_known) {
      e->outputs_known = true;
      e->devices = op->exe_devices;
      e->output_bytes = op->output_bytes;
      op->exe_devices = NULL;
      op->output_bytes = NULL;
    }
    PJRT_LoadedExecutable* exe = op->exe;
    op->exe = NULL;
    Causeway__V1__CompileReply rep = CAUSEWAY__V1__COMPILE_REPLY__INIT;
    rep.exe_id = op->dst_id;
    rep.num_outputs = e->num_outputs;
    rep.num_devices = e->num_devices;
    rep.name = e->name;
    cw_worker_reply(op->conn, op->type, op->request_id, &rep.base);
    cw_store_set_ready(w->store, e, exe);  // may run waiters that change the store
    cw_worker_op_free(op);
  }
  cw_worker_job_done(w);
}

static void cw__queue_compile(cw_op_t* op) {
  op->work.data = op;
  cw_worker_job_started(op->w);
  int rc = uv_queue_work(&op->w->loop, &op->work, cw__compile_work, cw__compile_done);
  if (rc < 0) {
    cw_store_entry_t* e = cw_worker_op_own_entry(op, op->dst_id);
    cw_status_t st = cw_make_status(CW_INTERNAL, "cannot queue compilation: %s", uv_strerror(rc));
    if (e) cw_store_set_error(op->w->store, e, cw_status_clone(st));
    cw_worker_t* w = op->w;
    cw_worker_op_fail(op, st);
    cw_worker_job_done(w);
  }
}

// Creates the pending executable entry for COMPILE/LOAD; NULL after replying.
static cw_op_t* cw__begin_exe(cw_conn_t* c, const cw_frame_header_t* h, uint64_t exe_id,
                              ProtobufCMessage** msg) {
  cw_op_t* op = cw_worker_op_create(c, h->type, h->request_id);
  if (!op) {
    cw_worker_reply_error(c, h->type, h->request_id,
                          cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"));
    return NULL;
  }
  cw_store_entry_t* e = NULL;
  cw_status_t st = cw_store_insert(c->w->store, op->skey, exe_id, CW_STORE_EXECUTABLE, &e);
  if (st) {
    cw_worker_op_fail(op, st);
    return NULL;
  }
  op->dst_id = exe_id;
  op->serial = e->serial;
  op->msg = *msg;
  *msg = NULL;
  return op;
}

void cw_worker_handle_compile(cw_net_conn_t* nc, const cw_frame_header_t* h,
                              ProtobufCMessage** msg) {
  const Causeway__V1__CompileRequest* r = (const Causeway__V1__CompileRequest*)*msg;
  cw_op_t* op = cw__begin_exe(cw_net_conn_user(nc), h, r->exe_id, msg);
  if (op) cw__queue_compile(op);
}

void cw_worker_handle_load(cw_net_conn_t* nc, const cw_frame_header_t* h,
                           ProtobufCMessage** msg) {
  cw_conn_t* c = cw_net_conn_user(nc);
  const Causeway__V1__LoadRequest* r = (const Causeway__V1__LoadRequest*)*msg;
  cw_op_t* op = cw__begin_exe(c, h, r->exe_id, msg);
  if (op) cw_worker_conn_receive_bulk(c, h, op);
}

void cw_worker_compile_received(cw_op_t* op) {
  if (!cw_worker_op_own_entry(op, op->dst_id)) {
    cw_worker_op_fail(op, cw_make_status(CW_CANCELLED, "executable %" PRIu64
                                         " was deleted before its bytes arrived", op->dst_id));
    return;
  }
  cw__queue_compile(op);
}

static bool cw__need_executable(cw_op_t* op, const cw_store_entry_t* e) {
  return cw_worker_op_need_kind(op, e, CW_STORE_EXECUTABLE, "executable", "an executable");
}

static void cw__serialize_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__need_executable(op, e)) return;
  const uint8_t* bytes = NULL;
  size_t size = 0;
  void* handle = NULL;
  void (*deleter)(void*) = NULL;
  cw_status_t st = cw_pjrt_serialize(op->w->pjrt, (PJRT_LoadedExecutable*)e->handle, &bytes,
                                     &size, &handle, &deleter);
  if (st) {
    cw_worker_op_fail(op, st);
    return;
  }
  Causeway__V1__SerializeReply rep = CAUSEWAY__V1__SERIALIZE_REPLY__INIT;
  rep.exe_id = op->id;
  rep.size = size;
  // The serialized bytes are written straight from PJRT's memory.
  cw_net_conn_send(op->conn->nc, op->type, CW_FRAME_REPLY, op->request_id, &rep.base, bytes, size,
                   deleter, handle);
  cw_worker_op_free(op);
}

void cw_worker_handle_serialize(cw_net_conn_t* nc, const cw_frame_header_t* h,
                                ProtobufCMessage** msg) {
  uint64_t id = ((const Causeway__V1__SerializeRequest*)*msg)->exe_id;
  cw_op_t* op = cw_worker_op_for_wait(cw_net_conn_user(nc), h, id, cw__serialize_cont);
  if (!op) return;
  op->want_kind = CW_STORE_EXECUTABLE;
  cw_worker_op_start_wait(op);
}

static void cw__exe_info_cont(cw_op_t* op, cw_store_entry_t* e) {
  if (!cw__need_executable(op, e)) return;
  if (((const Causeway__V1__ExeInfoRequest*)op->msg)->presence_only) {
    Causeway__V1__ExecutableInfo present = CAUSEWAY__V1__EXECUTABLE_INFO__INIT;
    present.exe_id = op->id;
    cw_worker_reply(op->conn, op->type, op->request_id, &present.base);
    cw_worker_op_free(op);
    return;
  }
  Causeway__V1__ExecutableInfo info;
  cw_status_t st = cw_pjrt_exe_info_initialize(op->w->pjrt, (PJRT_LoadedExecutable*)e->handle,
                                               &info);
  if (st) {
    cw_pjrt_exe_info_deinitialize(&info);
    cw_worker_op_fail(op, cw_status_annotate(st, "EXE_INFO %" PRIu64, op->id));
    return;
  }
  info.exe_id = op->id;
  cw_worker_reply(op->conn, op->type, op->request_id, &info.base);
  cw_pjrt_exe_info_deinitialize(&info);
  cw_worker_op_free(op);
}

void cw_worker_handle_exe_info(cw_net_conn_t* nc, const cw_frame_header_t* h,
                               ProtobufCMessage** msg) {
  uint64_t id = ((const Causeway__V1__ExeInfoRequest*)*msg)->exe_id;
  cw_op_t* op = cw_worker_op_for_wait(cw_net_conn_user(nc), h, id, cw__exe_info_cont);
  if (!op) return;
  op->msg = *msg;
  *msg = NULL;
  op->want_kind = CW_STORE_EXECUTABLE;
  cw_worker_op_start_wait(op);
}
