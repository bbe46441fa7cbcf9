// Credentials of the plugin's connections when it joins a cluster
// (cw_plugin_token.c; docs/operations.md, "Tokens"). The embedded cluster
// makes its own token (cw_plugin_cluster.h).
#ifndef CW_PLUGIN_TOKEN_H_
#define CW_PLUGIN_TOKEN_H_

#include "cw_settings.h"
#include "cw_status.h"

// CAUSEWAY_TOKEN, else the first line of CAUSEWAY_TOKEN_FILE, else "", from
// `settings` (the token file's line is kept there too). *out_token is heap
// (caller frees).
CW_MUST_USE cw_status_t cw_plugin_token_load(cw_settings_t* settings, char** out_token);
// Takes `status`: an UNAUTHENTICATED refusal by the `what` at `address` is
// reworded to say the token was refused and how to set it; others pass.
CW_MUST_USE cw_status_t cw_plugin_token_refused(cw_status_t status, const char* what,
                                                const char* address);

#endif  // CW_PLUGIN_TOKEN_H_
