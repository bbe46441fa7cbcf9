#include "cw_proxy_pjrt.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cw_log.h"

cw_status_t cw_proxy_pjrt_load(const char* path, cw_proxy_pjrt_t* out) {
  *out = (cw_proxy_pjrt_t){0};
  // The plugin's calls come from the proxy's loop, which must never poll
  // for a result (CAUSEWAY_WAIT_SPIN_US is for a JAX thread about to sleep).
  setenv("CAUSEWAY_WAIT_SPIN_US", "0", 1);
  void* dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) return cw_make_status(CW_NOT_FOUND, "cannot load PJRT plugin %s: %s", path, dlerror());
  const PJRT_Api* (*get)(void) = (const PJRT_Api* (*)(void))dlsym(dl, "GetPjrtApi");
  const PJRT_Api* api = get ? get() : NULL;
  if (!api) {
    return cw_make_status(CW_INVALID_ARGUMENT, "%s has no GetPjrtApi or it returned nothing",
                          path);
  }
  if (api->pjrt_api_version.major_version != CW_PJRT_API_MAJOR) {
    return cw_make_status(CW_FAILED_PRECONDITION, "%s speaks PJRT C API %d.%d; this build %d.x",
                          path, api->pjrt_api_version.major_version,
                          api->pjrt_api_version.minor_version, CW_PJRT_API_MAJOR);
  }
  out->dl = dl;
  out->api = api;
  PJRT_Plugin_Initialize_Args a = {.struct_size = CW_PJRT_STRUCT_SIZE(
                                       PJRT_Plugin_Initialize_Args, extension_start)};
  return CW_PROXY_PJRT_CALL(out, PJRT_Plugin_Initialize, &a);
}

void cw_proxy_pjrt_unload(cw_proxy_pjrt_t* p) { *p = (cw_proxy_pjrt_t){0}; }

cw_status_t cw_proxy_pjrt_status(const cw_proxy_pjrt_t* p, PJRT_Error* err, const char* what) {
  if (!err) return cw_ok_status();
  PJRT_Error_Message_Args m = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_Message_Args,
                                                                  message_size),
                               .error = err};
  p->api->PJRT_Error_Message(&m);
  PJRT_Error_GetCode_Args g = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_GetCode_Args, code),
                               .error = err};
  PJRT_Error* gerr = p->api->PJRT_Error_GetCode(&g);
  cw_status_code_t code = gerr ? CW_UNKNOWN : (cw_status_code_t)g.code;
  if (gerr) {
    PJRT_Error_Destroy_Args d = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_Destroy_Args, error),
                                 .error = gerr};
    p->api->PJRT_Error_Destroy(&d);
  }
  if (code == CW_OK) code = CW_UNKNOWN;
  cw_status_t st = cw_make_status(code, "%s: %.*s", what, (int)m.message_size, m.message);
  PJRT_Error_Destroy_Args d = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_Destroy_Args, error),
                               .error = err};
  p->api->PJRT_Error_Destroy(&d);
  return st;
}

cw_status_t cw_proxy_pjrt_await(const cw_proxy_pjrt_t* p, PJRT_Event* ev, const char* what) {
  if (!ev) return cw_ok_status();
  PJRT_Event_Await_Args a = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Event_Await_Args, event),
                             .event = ev};
  cw_status_t st = cw_proxy_pjrt_status(p, p->api->PJRT_Event_Await(&a), what);
  PJRT_Event_Destroy_Args d = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Event_Destroy_Args, event),
                               .event = ev};
  cw_status_t dst = cw_proxy_pjrt_status(p, p->api->PJRT_Event_Destroy(&d), "PJRT_Event_Destroy");
  if (dst) CW_LOGW("%s", cw_status_message(dst));
  cw_status_free(dst);
  return st;
}

void cw_proxy_pjrt_buffer_destroy(const cw_proxy_pjrt_t* p, PJRT_Buffer* b) {
  if (!b) return;
  PJRT_Buffer_Destroy_Args a = {.struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Buffer_Destroy_Args,
                                                                   buffer),
                                .buffer = b};
  cw_status_t st = CW_PROXY_PJRT_CALL(p, PJRT_Buffer_Destroy, &a);
  if (st) CW_LOGW("%s", cw_status_message(st));
  cw_status_free(st);
}
