#include "cw_messages.h"

#include <string.h>

#include "cw_frame.h"

cw_status_t cw_error_reply_to_status(const Causeway__V1__ErrorReply* er, const char* context) {
  const char* message = er->message && er->message[0] ? er->message : "(no message)";
  cw_status_code_t code = cw_status_code_from_u32(er->code);
  if (context) return cw_make_status(code, "%s: %s", context, message);
  return cw_make_status(code, "%s", message);
}

cw_status_t cw_error_reply_peer_closing(const Causeway__V1__ErrorReply* er) {
  return cw_make_status(CW_UNAVAILABLE, "peer reported %s: %s",
                        cw_status_code_name(cw_status_code_from_u32(er->code)),
                        er->message ? er->message : "");
}

void cw_error_reply_fill(Causeway__V1__ErrorReply* out, cw_status_t status) {
  causeway__v1__error_reply__init(out);
  out->code = (uint32_t)cw_status_code(status);
  out->message = (char*)cw_status_message(status);
}

uint32_t cw_keepalive_ask(int64_t limit_ms) {
  return limit_ms >= 4 ? (uint32_t)(limit_ms / 4 > UINT32_MAX ? UINT32_MAX : limit_ms / 4) : 1;
}

int64_t cw_keepalive_limit(int64_t limit_ms, uint32_t period_ms) {
  return (int64_t)period_ms * 2 > limit_ms ? 4 * (int64_t)period_ms : limit_ms;
}

void cw_hello_request_fill(Causeway__V1__HelloRequest* out, int role, const char* token,
                           uint64_t session_id, const char* peer_name) {
  causeway__v1__hello_request__init(out);
  out->min_version = CW_PROTOCOL_MIN_VERSION;
  out->max_version = CW_PROTOCOL_VERSION;
  out->role = (Causeway__V1__Role)role;
  if (!token) token = "";
  out->token.data = (uint8_t*)(uintptr_t)token;
  out->token.len = strlen(token);
  out->session_id = session_id;
  out->peer_name = (char*)peer_name;
}
