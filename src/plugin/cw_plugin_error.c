// PJRT_Error: a cw_status_t becomes one only here, at the API boundary. The
// error object starts with its vtable, which callers read directly.
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_error.h"

// cw_status codes are PJRT codes by construction (cw_status.h); pin it here
// where both headers meet.
_Static_assert((int)CW_UNAVAILABLE == (int)PJRT_Error_Code_UNAVAILABLE, "status codes");
_Static_assert((int)CW_UNIMPLEMENTED == (int)PJRT_Error_Code_UNIMPLEMENTED, "status codes");
_Static_assert((int)CW_UNAUTHENTICATED == (int)PJRT_Error_Code_UNAUTHENTICATED, "status codes");

typedef struct cw__error_s {
  const PJRT_Error_FunctionTable* vtable;  // first: callers read it directly
  PJRT_Error_Code code;
  size_t message_size;
  char message[];
} cw__error_t;

static void cw__error_vt_destroy(PJRT_Error* error) { free(error); }

static void cw__error_vt_message(const PJRT_Error* error, const char** message,
                                 size_t* message_size) {
  const cw__error_t* e = (const cw__error_t*)error;
  *message = e->message;
  *message_size = e->message_size;
}

static PJRT_Error_Code cw__error_vt_code(const PJRT_Error* error) {
  return ((const cw__error_t*)error)->code;
}

static void cw__error_vt_payloads(const PJRT_Error* error, PJRT_Error_PayloadVisitor visitor,
                                  void* user_arg) {
  (void)error;
  (void)visitor;
  (void)user_arg;  // our errors carry no payloads
}

static const PJRT_Error_FunctionTable cw__error_vtable = {
    .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Error_FunctionTable, for_each_payload),
    .instance_size = sizeof(cw__error_t),
    .extension_start = NULL,
    .destroy = cw__error_vt_destroy,
    .message = cw__error_vt_message,
    .get_code = cw__error_vt_code,
    .for_each_payload = cw__error_vt_payloads,
};

// Returned when even an error cannot be allocated; never freed.
static cw__error_t cw__oom_error = {&cw__error_vtable, PJRT_Error_Code_RESOURCE_EXHAUSTED, 0};

PJRT_Error* cw_plugin_error_from_status(cw_status_t status) {
  const char* msg = cw_status_message(status);
  size_t n = strlen(msg);
  cw__error_t* e = malloc(sizeof(*e) + n + 1);
  if (!e) {
    cw_status_free(status);
    return (PJRT_Error*)&cw__oom_error;
  }
  e->vtable = &cw__error_vtable;
  e->code = status ? (PJRT_Error_Code)cw_status_code(status) : PJRT_Error_Code_UNKNOWN;
  e->message_size = n;
  memcpy(e->message, msg, n + 1);
  cw_status_free(status);
  return (PJRT_Error*)e;
}

PJRT_Error* cw_plugin_error_or_null(cw_status_t status) {
  return status ? cw_plugin_error_from_status(status) : NULL;
}

void cw_plugin_error_destroy(PJRT_Error_Destroy_Args* args) {
  if (!args || !args->error || args->error == (PJRT_Error*)&cw__oom_error) return;
  free(args->error);
}

void cw_plugin_error_message(PJRT_Error_Message_Args* args) {
  if (!args) return;
  if (!args->error) {
    args->message = "";
    args->message_size = 0;
    return;
  }
  cw__error_vt_message(args->error, &args->message, &args->message_size);
}

PJRT_Error* cw_plugin_error_get_code(PJRT_Error_GetCode_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Error_GetCode_Args, code);
  args->code = args->error ? cw__error_vt_code(args->error) : PJRT_Error_Code_OK;
  return NULL;
}

PJRT_Error* cw_plugin_error_for_each_payload(PJRT_Error_ForEachPayload_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Error_ForEachPayload_Args, user_arg);
  return NULL;
}
