// Helpers for driving islands through a real controller (cw_test_island.h).
#include "cw_test_island.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_frame.h"
#include "proto/xla_compile_options.pb-c.h"

#define MAX_PARTITIONS 64

uint8_t* cw_test_compile_options(const int64_t* ids, size_t n, size_t* out_size) {
  *out_size = 0;
  if (n > MAX_PARTITIONS) return NULL;
  Causeway__Xla__ComputationDevice cds[MAX_PARTITIONS];
  Causeway__Xla__ComputationDevice* cdp[MAX_PARTITIONS];
  int64_t one[MAX_PARTITIONS];
  for (size_t i = 0; i < n; ++i) {
    causeway__xla__computation_device__init(&cds[i]);
    one[i] = ids[i];
    cds[i].replica_device_ids = &one[i];
    cds[i].n_replica_device_ids = 1;
    cdp[i] = &cds[i];
  }
  Causeway__Xla__DeviceAssignment da = CAUSEWAY__XLA__DEVICE_ASSIGNMENT__INIT;
  da.replica_count = 1;
  da.computation_count = (int32_t)n;
  da.computation_devices = cdp;
  da.n_computation_devices = n;
  Causeway__Xla__ExecutableBuildOptions bo = CAUSEWAY__XLA__EXECUTABLE_BUILD_OPTIONS__INIT;
  bo.num_replicas = 1;
  bo.num_partitions = (int64_t)n;
  bo.device_assignment = &da;
  Causeway__Xla__CompileOptions co = CAUSEWAY__XLA__COMPILE_OPTIONS__INIT;
  co.executable_build_options = &bo;
  size_t size = causeway__xla__compile_options__get_packed_size(&co);
  uint8_t* buf = malloc(size);
  if (!buf) return NULL;
  causeway__xla__compile_options__pack(&co, buf);
  *out_size = size;
  return buf;
}

cw_status_t cw_test_call(cw_client_t* c, uint16_t type, const ProtobufCMessage* m,
                         ProtobufCMessage** out_reply) {
  ProtobufCMessage* rep = NULL;
  cw_status_t s = cw_client_call(c, type, m, NULL, 0, NULL, &rep, NULL);
  if (out_reply) *out_reply = rep;
  else if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  return s;
}

cw_status_t cw_test_register(cw_client_t* c, const char* name, const char* address,
                             size_t devices, int32_t previous, Causeway__V1__RegisterReply** out) {
  Causeway__V1__RegisterPrevious prev = CAUSEWAY__V1__REGISTER_PREVIOUS__INIT;
  prev.first_device_id = previous;
  return cw_test_register_previous(c, name, address, devices, previous >= 0 ? &prev : NULL, out);
}

uint32_t cw_test_register_revision = CW_PROTOCOL_REVISION;

cw_status_t cw_test_register_previous(cw_client_t* c, const char* name, const char* address,
                                      size_t devices, Causeway__V1__RegisterPrevious* previous,
                                      Causeway__V1__RegisterReply** out) {
  Causeway__V1__Device* devs = calloc(devices ? devices : 1, sizeof(*devs));
  Causeway__V1__Device** ptrs = calloc(devices ? devices : 1, sizeof(*ptrs));
  if (!devs || !ptrs) {
    free(devs);
    free(ptrs);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < devices; ++i) {
    causeway__v1__device__init(&devs[i]);
    devs[i].local_id = (int32_t)i;
    devs[i].id = (int32_t)i;
    devs[i].kind = (char*)"cpu";
    ptrs[i] = &devs[i];
  }
  Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  inv.worker_name = (char*)name;
  inv.platform_name = (char*)"cpu";
  inv.platform_version = (char*)"test";
  inv.devices = ptrs;
  inv.n_devices = devices;
  Causeway__V1__RegisterRequest req = CAUSEWAY__V1__REGISTER_REQUEST__INIT;
  req.worker_name = (char*)name;
  req.address = (char*)address;
  req.inventory = &inv;
  req.previous = previous;
  req.revision = cw_test_register_revision;
  cw_status_t st = cw_test_call(c, CW_MSG_REGISTER, &req.base, (ProtobufCMessage**)out);
  free(devs);
  free(ptrs);
  return st;
}

// ---- Sessions -----------------------------------------------------------------------

cw_status_t cw_test_session_open(const cw_test_session_options_t* o, cw_test_session_t* s) {
  memset(s, 0, sizeof(*s));
  cw_client_options_t co = {.peer_name = o->name};
  CW_RETURN_IF_ERROR(cw_client_connect(o->controller, &co, &s->ctl), "%s", o->name);
  Causeway__V1__OpenSessionRequest req = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  req.min_workers = o->min_workers;
  req.wait_ms = 60000;
  req.name = (char*)o->name;
  req.num_devices = o->num_devices;
  req.min_island = o->min_island;
  req.share = true;
  req.workers = (char**)o->workers;
  req.n_workers = o->num_workers;
  ProtobufCMessage* rep = NULL;
  CW_RETURN_IF_ERROR(cw_test_call(s->ctl, CW_MSG_OPEN_SESSION, &req.base, &rep), "OPEN_SESSION");
  s->info = (Causeway__V1__SessionInfo*)rep;
  for (size_t i = 0; i < s->info->n_workers; ++i) {
    const Causeway__V1__WorkerInfo* w = s->info->workers[i];
    if (w->index >= CW_TEST_SESSION_MAX_WORKERS) {
      return cw_make_status(CW_INTERNAL, "worker index %u", w->index);
    }
    cw_client_options_t wo = {.peer_name = o->name, .session_id = s->info->session_id};
    CW_RETURN_IF_ERROR(cw_client_connect(w->address, &wo, &s->links[w->index]), "%s",
                       w->address);
  }
  return cw_ok_status();
}

void cw_test_session_close(cw_test_session_t* s) {
  for (size_t i = 0; i < CW_TEST_SESSION_MAX_WORKERS; ++i) {
    if (s->links[i]) cw_client_release(s->links[i]);
  }
  if (s->info) protobuf_c_message_free_unpacked(&s->info->base, NULL);
  if (s->ctl) cw_client_release(s->ctl);
  memset(s, 0, sizeof(*s));
}

static const char* cw__worker_name(const Causeway__V1__SessionInfo* info, uint32_t index) {
  for (size_t i = 0; i < info->n_workers; ++i) {
    if (info->workers[i]->index == index) return info->workers[i]->name;
  }
  return "";
}

cw_status_t cw_test_session_resume(cw_test_session_t* s, const char* controller,
                                   uint32_t num_devices, uint64_t exe, const int64_t* ids,
                                   size_t n) {
  const Causeway__V1__SessionInfo* info = s->info;
  if (s->ctl) cw_client_release(s->ctl);
  s->ctl = NULL;
  cw_client_options_t co = {.peer_name = info->name, .session_id = info->session_id};
  CW_RETURN_IF_ERROR(cw_client_connect(controller, &co, &s->ctl), "resuming %s", info->name);
  Causeway__V1__OpenSessionRequest open = CAUSEWAY__V1__OPEN_SESSION_REQUEST__INIT;
  open.name = info->name;
  open.num_devices = num_devices;
  open.share = true;
  open.wait_ms = 60000;
  size_t nd = info->n_devices;
  Causeway__V1__ResumeDevice* devs = calloc(nd + 1, sizeof(*devs));
  Causeway__V1__ResumeDevice** dptrs = calloc(nd + 1, sizeof(*dptrs));
  int32_t* exe_ids = calloc(n + 1, sizeof(*exe_ids));
  if (!devs || !dptrs || !exe_ids) {
    free(devs);
    free(dptrs);
    free(exe_ids);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < nd; ++i) {
    causeway__v1__resume_device__init(&devs[i]);
    devs[i].id = info->devices[i]->global_id;
    devs[i].worker_name = (char*)cw__worker_name(info, info->devices[i]->worker_index);
    devs[i].local_id = info->devices[i]->device->local_id;
    dptrs[i] = &devs[i];
  }
  for (size_t i = 0; i < n; ++i) exe_ids[i] = (int32_t)ids[i];
  Causeway__V1__ResumeExecutable x = CAUSEWAY__V1__RESUME_EXECUTABLE__INIT;
  x.exe_id = exe;
  x.devices = exe_ids;
  x.n_devices = n;
  Causeway__V1__ResumeExecutable* xp = &x;
  Causeway__V1__SessionResumeRequest req = CAUSEWAY__V1__SESSION_RESUME_REQUEST__INIT;
  req.open = &open;
  req.devices = dptrs;
  req.n_devices = nd;
  req.executables = &xp;
  req.n_executables = 1;
  ProtobufCMessage* rep = NULL;
  cw_status_t st = cw_test_call(s->ctl, CW_MSG_SESSION_RESUME, &req.base, &rep);
  const Causeway__V1__SessionInfo* now = (const Causeway__V1__SessionInfo*)rep;
  for (size_t i = 0; !st && i < nd; ++i) {
    const Causeway__V1__GlobalDevice* d = NULL;
    for (size_t k = 0; k < now->n_devices; ++k) {
      if (now->devices[k]->global_id == devs[i].id) d = now->devices[k];
    }
    if (!d || strcmp(cw__worker_name(now, d->worker_index), devs[i].worker_name) != 0 ||
        d->device->local_id != devs[i].local_id) {
      st = cw_make_status(CW_INTERNAL, "the resumed session lacks device %d (%s:%d)", devs[i].id,
                          devs[i].worker_name, devs[i].local_id);
    }
  }
  if (rep) protobuf_c_message_free_unpacked(rep, NULL);
  free(devs);
  free(dptrs);
  free(exe_ids);
  return st;
}

const Causeway__V1__GlobalDevice* cw_test_session_device(const cw_test_session_t* s, int32_t id) {
  for (size_t i = 0; s->info && i < s->info->n_devices; ++i) {
    if (s->info->devices[i]->global_id == id) return s->info->devices[i];
  }
  return NULL;
}

cw_status_t cw_test_session_locate(const cw_test_session_t* s, int64_t id, cw_client_t** out_link,
                                   int* out_local) {
  const Causeway__V1__GlobalDevice* gd = cw_test_session_device(s, (int32_t)id);
  if (!gd || !gd->device || gd->worker_index >= CW_TEST_SESSION_MAX_WORKERS ||
      !s->links[gd->worker_index]) {
    return cw_make_status(CW_NOT_FOUND, "session device %lld has no worker connection",
                          (long long)id);
  }
  *out_link = s->links[gd->worker_index];
  *out_local = gd->device->local_id;
  return cw_ok_status();
}

cw_status_t cw_test_session_upload_f32(cw_test_session_t* s, int64_t id, uint64_t buffer_id,
                                       const float* data, size_t elems) {
  cw_client_t* link = NULL;
  int local = 0;
  CW_RETURN_IF_ERROR(cw_test_session_locate(s, id, &link, &local), "upload %llu",
                     (unsigned long long)buffer_id);
  int64_t dims[1] = {(int64_t)elems};
  return cw_client_upload(link, buffer_id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1, NULL, local,
                          data, elems * sizeof(float), NULL, NULL);
}

cw_status_t cw_test_session_download_f32(cw_test_session_t* s, int64_t id, uint64_t buffer_id,
                                         float* out, size_t elems) {
  cw_client_t* link = NULL;
  int local = 0;
  CW_RETURN_IF_ERROR(cw_test_session_locate(s, id, &link, &local), "download %llu",
                     (unsigned long long)buffer_id);
  size_t size = 0;
  CW_RETURN_IF_ERROR(cw_client_download(link, buffer_id, out, elems * sizeof(float), &size, NULL),
                     "download %llu", (unsigned long long)buffer_id);
  if (size != elems * sizeof(float)) {
    return cw_make_status(CW_INTERNAL, "buffer %llu holds %zu bytes, want %zu",
                          (unsigned long long)buffer_id, size, elems * sizeof(float));
  }
  return cw_ok_status();
}

cw_status_t cw_test_session_flush(cw_test_session_t* s) {
  for (size_t i = 0; i < CW_TEST_SESSION_MAX_WORKERS; ++i) {
    if (s->links[i]) CW_RETURN_IF_ERROR(cw_client_flush(s->links[i]), "worker %zu", i);
  }
  return cw_ok_status();
}

size_t cw_test_session_ids(const cw_test_session_t* s, const char* const* workers,
                           size_t num_workers, int64_t* out_ids, size_t max) {
  size_t n = 0;
  for (size_t r = 0; r < num_workers; ++r) {
    for (size_t i = 0; i < s->info->n_devices; ++i) {
      const Causeway__V1__GlobalDevice* gd = s->info->devices[i];
      for (size_t k = 0; k < s->info->n_workers; ++k) {
        const Causeway__V1__WorkerInfo* w = s->info->workers[k];
        if (w->index == gd->worker_index && !strcmp(w->name, workers[r]) && n < max) {
          out_ids[n++] = gd->global_id;
        }
      }
    }
  }
  return n;
}

// ---- The gang plugin ----------------------------------------------------------------

cw_status_t cw_test_gang_compile(cw_test_session_t* s, uint64_t exe, size_t elems,
                                 const char* tag, const int64_t* ids, size_t n) {
  char code[96];
  snprintf(code, sizeof(code), "allreduce_sum f32[%zu] %s", elems, tag);
  size_t osize = 0;
  uint8_t* opts = cw_test_compile_options(ids, n, &osize);
  if (!opts) return cw_make_status(CW_RESOURCE_EXHAUSTED, "compile options for %zu devices", n);
  cw_status_t st = cw_client_compile(s->ctl, exe, "cwgang", code, strlen(code), opts, osize, NULL);
  free(opts);
  return st;
}

cw_status_t cw_test_gang_launch(cw_test_session_t* s, uint64_t exe, const uint64_t* in,
                                const uint64_t* out, size_t n) {
  return cw_test_gang_launch_cb(s, exe, in, out, n, NULL, NULL);
}

cw_status_t cw_test_gang_launch_cb(cw_test_session_t* s, uint64_t exe, const uint64_t* in,
                                   const uint64_t* out, size_t n, cw_client_done_fn done,
                                   void* user) {
  if (n > MAX_PARTITIONS) return cw_make_status(CW_INVALID_ARGUMENT, "%zu devices", n);
  const uint64_t* args[MAX_PARTITIONS];
  const uint64_t* outs[MAX_PARTITIONS];
  for (size_t d = 0; d < n; ++d) {
    args[d] = &in[d];
    outs[d] = &out[d];
  }
  return cw_client_launch(s->ctl, exe, n, 1, args, 1, outs, done, user);
}

int cw_test_gang_worker_start(const cw_test_gang_worker_options_t* o, cw_test_worker_t* out) {
  // The strings only need to live through the start: the child's
  // environment is built before fork.
  char env[4][1100];
  snprintf(env[0], sizeof(env[0]), "CW_GANG_DIR=%s", o->dir);
  snprintf(env[1], sizeof(env[1]), "CW_GANG_RANK=%d", o->rank);
  snprintf(env[2], sizeof(env[2]), "CW_GANG_SIZE=%d", o->size);
  snprintf(env[3], sizeof(env[3]), "CW_GANG_INNER_PLUGIN=%s",
           o->inner_plugin ? o->inner_plugin : cw_test_getenv("CAUSEWAY_PJRT_PLUGIN", ""));
  const char* envp[] = {env[0], env[1], env[2], env[3], NULL};
  char size[16];
  snprintf(size, sizeof(size), "%d", o->size);
  const char* args[24] = {"--controller", o->controller, "--island", o->island, "--island-size",
                          size, NULL};
  size_t n = o->island ? 6 : 2;
  for (size_t i = 0; o->extra_args && o->extra_args[i] && n + 1 < 24; ++i) {
    args[n++] = o->extra_args[i];
  }
  args[n] = NULL;
  cw_test_worker_options_t wo = {
      .plugin = o->plugin ? o->plugin : cw_test_getenv("CW_GANGPLUGIN", ""),
      .devices = o->devices,
      .listen = o->listen,
      .name = o->name,
      .extra_args = args,
      .extra_env = envp};
  return cw_test_worker_start(&wo, out);
}
