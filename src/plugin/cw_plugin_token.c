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

static cw_status_t cw__begin(const char* token, const char* path, cw_file_sig_t sig,
                             cw_plugin_token_t* out) {
  memset(out, 0, sizeof(*out));
  pthread_mutex_init(&out->mu, NULL);
  out->now = strdup(token);
  out->path = path ? strdup(path) : NULL;
  if (!out->now || (path && !out->path)) {
    cw_plugin_token_deinitialize(out);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  out->sig = sig;
  return cw_ok_status();
}

cw_status_t cw_plugin_token_load(cw_settings_t* settings, cw_plugin_token_t* out) {
  memset(out, 0, sizeof(*out));
  const char* path = cw_settings_string(settings, CW_SET_TOKEN_FILE);
  bool from_file = !cw_settings_given(settings, CW_SET_TOKEN) && path[0];
  // Before the read: a change in between is seen at the next connection.
  cw_file_sig_t sig = from_file ? cw_file_sig(path) : (cw_file_sig_t){0};
  CW_RETURN_IF_ERROR(cw_settings_load_token(settings), "causeway: CAUSEWAY_TOKEN_FILE");
  return cw__begin(cw_settings_string(settings, CW_SET_TOKEN), from_file ? path : NULL, sig,
                   out);
}

cw_status_t cw_plugin_token_fixed(const char* token, cw_plugin_token_t* out) {
  return cw__begin(token, NULL, (cw_file_sig_t){0}, out);
}

const char* cw_plugin_token_now(cw_plugin_token_t* t) {
  if (!t->path) return t->now;
  pthread_mutex_lock(&t->mu);
  cw_file_sig_t sig = cw_file_sig(t->path);
  if (!cw_file_sig_equal(&sig, &t->sig)) {
    // Read in full each time; a file being rewritten is read again at the
    // next connection, as its signature differs again.
    t->sig = sig;
    cw_token_set_t set;
    cw_status_t st = cw_token_set_read_file(t->path, &set);
    char** grown = st ? NULL : realloc(t->old, (t->num_old + 1) * sizeof(*grown));
    char* fresh = grown ? strdup(set.tokens[0]) : NULL;
    if (grown) t->old = grown;
    if (fresh && strcmp(fresh, t->now)) {
      t->old[t->num_old++] = t->now;
      t->now = fresh;
    } else {
      free(fresh);
    }
    cw_token_set_clear(&set);
    cw_status_free(st);
  }
  const char* now = t->now;
  pthread_mutex_unlock(&t->mu);
  return now;
}

static void cw__wipe(char* s) {
  if (!s) return;
  explicit_bzero(s, strlen(s));
  free(s);
}

void cw_plugin_token_deinitialize(cw_plugin_token_t* t) {
  if (!t->now && !t->path && !t->old) return;
  cw__wipe(t->now);
  for (size_t i = 0; i < t->num_old; ++i) cw__wipe(t->old[i]);
  free(t->old);
  free(t->path);
  pthread_mutex_destroy(&t->mu);
  memset(t, 0, sizeof(*t));
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
