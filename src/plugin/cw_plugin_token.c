// Credentials of the plugin's connections (docs/operations.md "Tokens").
//
// Joining a cluster (CAUSEWAY_CONTROLLER set): the token is CAUSEWAY_TOKEN,
// else the first line of the file CAUSEWAY_TOKEN_FILE, else none. The
// variable wins so that a one-off override needs no file edit.
// The embedded cluster ignores both: it makes its own random token per
// cluster (cw_plugin_cluster.c) and the plugin presents that one.
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_token.h"

cw_status_t cw_plugin_token_load(cw_settings_t* settings, char** out_token) {
  *out_token = NULL;
  CW_RETURN_IF_ERROR(cw_settings_load_token(settings), "causeway: CAUSEWAY_TOKEN_FILE");
  *out_token = strdup(cw_settings_string(settings, CW_SET_TOKEN));  // "": none is required
  return *out_token ? cw_ok_status() : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
}

cw_status_t cw_plugin_token_refused(cw_status_t status, const char* what, const char* address) {
  if (!status || cw_status_code(status) != CW_UNAUTHENTICATED) return status;
  cw_status_t out = cw_make_status(
      CW_UNAUTHENTICATED,
      "causeway: the %s at %s refused this client's token (UNAUTHENTICATED). Set "
      "CAUSEWAY_TOKEN to the cluster's token, or CAUSEWAY_TOKEN_FILE to a file whose first line "
      "is the token (CAUSEWAY_TOKEN wins when both are set). Detail: %s",
      what, address, cw_status_message(status));
  cw_status_free(status);
  return out;
}
