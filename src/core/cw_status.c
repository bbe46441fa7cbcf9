#include "cw_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Codes are pinned to PJRT_Error_Code where both headers meet (worker/cw_pjrt.c).

struct cw_status_payload_s {
  cw_status_code_t code;
  char origin[96];
  char* message;
};

static char* cw__vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char* out = malloc((size_t)n + 1);
  if (!out) return NULL;
  vsnprintf(out, (size_t)n + 1, fmt, ap);
  return out;
}

// Returned when even the status cannot be allocated.
static struct cw_status_payload_s cw__oom_status = {
    CW_RESOURCE_EXHAUSTED, "", "out of memory while reporting an error"};

cw_status_t cw_status_make(cw_status_code_t code, const char* file, int line,
                           const char* fmt, ...) {
  if (code == CW_OK) return cw_ok_status();
  struct cw_status_payload_s* s = calloc(1, sizeof(*s));
  if (!s) return &cw__oom_status;
  s->code = code;
  const char* base = file ? strrchr(file, '/') : NULL;
  snprintf(s->origin, sizeof(s->origin), "%s:%d", base ? base + 1 : (file ? file : "?"), line);
  va_list ap;
  va_start(ap, fmt);
  s->message = cw__vformat(fmt, ap);
  va_end(ap);
  if (!s->message) {
    free(s);
    return &cw__oom_status;
  }
  return s;
}

cw_status_t cw_status_annotate(cw_status_t status, const char* fmt, ...) {
  if (!status || status == &cw__oom_status) return status;
  va_list ap;
  va_start(ap, fmt);
  char* ctx = cw__vformat(fmt, ap);
  va_end(ap);
  if (!ctx) return status;
  if (ctx[0]) {
    size_t n = strlen(ctx) + 2 + strlen(status->message) + 1;
    char* joined = malloc(n);
    if (joined) {
      snprintf(joined, n, "%s: %s", ctx, status->message);
      free(status->message);
      status->message = joined;
    }
  }
  free(ctx);
  return status;
}

cw_status_code_t cw_status_code(cw_status_t status) {
  return status ? status->code : CW_OK;
}

const char* cw_status_message(cw_status_t status) {
  return status ? status->message : "";
}

const char* cw_status_origin(cw_status_t status) {
  return status ? status->origin : "";
}

const char* cw_status_code_name(cw_status_code_t code) {
  static const char* const names[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
      "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  if ((unsigned)code < sizeof(names) / sizeof(names[0])) return names[code];
  return "INVALID_CODE";
}

cw_status_code_t cw_status_code_from_u32(uint32_t code) {
  if (code >= 1 && code <= 16) return (cw_status_code_t)code;
  return CW_UNKNOWN;
}

cw_status_t cw_status_clone(cw_status_t status) {
  if (!status) return cw_ok_status();
  return cw_make_status(status->code, "%s", status->message);
}

cw_status_t cw_status_carry(cw_status_t cause, const char* lead, const char* fmt, ...) {
  if (!cause) return cw_ok_status();
  if (strncmp(cause->message, lead, strlen(lead)) == 0) return cw_status_clone(cause);
  va_list ap;
  va_start(ap, fmt);
  char* ctx = cw__vformat(fmt, ap);
  va_end(ap);
  cw_status_t s = cw_make_status(cause->code, "%s: %s", ctx ? ctx : "", cause->message);
  free(ctx);
  return s;
}

void cw_status_free(cw_status_t status) {
  if (!status || status == &cw__oom_status) return;
  free(status->message);
  free(status);
}
