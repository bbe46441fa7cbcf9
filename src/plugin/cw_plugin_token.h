// Credentials of the plugin's connections when it joins a cluster
// (cw_plugin_token.c; docs/operations.md, "Tokens"). The embedded cluster
// makes its own token (cw_plugin_cluster.h).
#ifndef CW_PLUGIN_TOKEN_H_
#define CW_PLUGIN_TOKEN_H_

#include <pthread.h>

#include "cw_dirs.h"
#include "cw_settings.h"
#include "cw_status.h"

// The token a client presents. One from CAUSEWAY_TOKEN_FILE is read again
// when the file changes, so that a client that reconnects after the
// cluster's token was rotated presents the new one (docs/operations.md,
// "Rotating credentials").
typedef struct cw_plugin_token_s {
  pthread_mutex_t mu;
  char* now;   // presented ("" when none)
  char* path;  // its file; NULL: fixed (CAUSEWAY_TOKEN, the embedded cluster's)
  cw_file_sig_t sig;
  // Earlier ones: options made before a change still point at them.
  char** old;
  size_t num_old;
} cw_plugin_token_t;

// CAUSEWAY_TOKEN, else the first line of CAUSEWAY_TOKEN_FILE, else "", from
// `settings`.
CW_MUST_USE cw_status_t cw_plugin_token_load(cw_settings_t* settings, cw_plugin_token_t* out);
// A fixed token (the embedded cluster's).
CW_MUST_USE cw_status_t cw_plugin_token_fixed(const char* token, cw_plugin_token_t* out);
// The token to present now (valid until cw_plugin_token_deinitialize): the
// file's first line again when it changed. A file that cannot be read now
// leaves the last token.
const char* cw_plugin_token_now(cw_plugin_token_t* t);
void cw_plugin_token_deinitialize(cw_plugin_token_t* t);  // wipes; zeroed storage is fine

// Takes `status`: an UNAUTHENTICATED refusal by the `what` at `address` is
// reworded to say the token was refused and how to set it; others pass.
CW_MUST_USE cw_status_t cw_plugin_token_refused(cw_status_t status, const char* what,
                                                const char* address);

#endif  // CW_PLUGIN_TOKEN_H_
