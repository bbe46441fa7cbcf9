// Credentials of the plugin's connections (docs/operations.md "Tokens").
//
// Joining a cluster (CAUSEWAY_CONTROLLER set): the token is CAUSEWAY_TOKEN,
// else the first line of the file CAUSEWAY_TOKEN_FILE, else none. The
// variable wins so that a one-off override needs no file edit.
// The embedded cluster ignores both: it makes its own random token per
// cluster (cw_plugin_cluster.c) and the plugin presents that one.
#include <stdlib.h>
#include <string.h>

#include "cw_plugin.h"
#include "cw_settings.h"

cw_status_t cw__client_token_load(char** out_token) {
  *out_token = NULL;
  const char* token = getenv("CAUSEWAY_TOKEN");
  if (token && *token) {
    *out_token = strdup(token);
    return *out_token ? cw_ok_status() : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  const char* path = getenv("CAUSEWAY_TOKEN_FILE");
  if (path && *path) {
    CW_RETURN_IF_ERROR(cw_settings_read_token_file(path, out_token),
                       "causeway: CAUSEWAY_TOKEN_FILE");
    return cw_ok_status();
  }
  *out_token = strdup("");  // none: the cluster must not require one
  return *out_token ? cw_ok_status() : cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
}

cw_status_t cw__client_token_refused(cw_status_t status, const char* what, const char* address) {
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
