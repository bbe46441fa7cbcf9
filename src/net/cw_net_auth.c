// HELLO credentials shared by the controller and the worker: one check, one
// refusal text, one log line, so every connection kind (client, worker,
// controller links, worker PUT links) is refused the same way.
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_log.h"
#include "cw_net.h"
#include "cw_net_internal.h"
#include "proto/causeway.pb-c.h"

static const char* cw__role_name(int role) {
  switch (role) {
    case CAUSEWAY__V1__ROLE__ROLE_CLIENT: return "client";
    case CAUSEWAY__V1__ROLE__ROLE_WORKER: return "worker";
    case CAUSEWAY__V1__ROLE__ROLE_CONTROLLER: return "controller";
    default: return "unknown";
  }
}

// In constant time for a given `want`: every byte is compared wherever they differ.
static bool cw__token_matches(const char* want, const uint8_t* got, size_t got_len) {
  size_t n = strlen(want);
  unsigned diff = (unsigned)(n != got_len);
  for (size_t i = 0; i < n; ++i) diff |= (unsigned)(want[i] ^ (i < got_len ? got[i] : 0));
  return diff == 0;
}

bool cw_net_tokens_accept(const cw_token_set_t* tokens, const uint8_t* got, size_t got_len) {
  if (!tokens || tokens->count == 0) return true;
  bool ok = false;
  for (size_t i = 0; i < tokens->count; ++i) ok |= cw__token_matches(tokens->tokens[i], got, got_len);
  return ok;
}

cw_status_t cw_net_hello_authenticate(const cw_token_set_t* tokens, const uint8_t* got,
                                      size_t got_len, const char* peer, int role) {
  if (cw_net_tokens_accept(tokens, got, got_len)) return cw_ok_status();
  // Saying "none" versus "wrong" tells a peer nothing about the secret.
  const char* why = got_len ? "wrong token" : "no token presented";
  CW_LOGW("refused HELLO from %s (role %s): credentials refused (%s)", peer,
          cw__role_name(role), why);
  return cw_make_status(CW_UNAUTHENTICATED,
                        "credentials refused: %s (this cluster requires its shared token: "
                        "CAUSEWAY_TOKEN or CAUSEWAY_TOKEN_FILE, or --token-file for "
                        "daemons)", why);
}

void cw_net_use_tokens(cw_net_t* net, const cw_token_set_t* tokens) { net->tokens = tokens; }

int cw_net_unix_peer_pid_same_user(int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.uid == geteuid() && cred.pid > 0 ? (int)cred.pid : 0;
}

int cw_net_conn_peer_pid(const cw_net_conn_t* c) {
  if (!c || c->h.handle.type != UV_NAMED_PIPE) return 0;
  uv_os_fd_t fd = -1;
  if (uv_fileno(&c->h.handle, &fd) != 0 || fd < 0) return 0;
  return cw_net_unix_peer_pid_same_user(fd);
}

void cw_net_describe_unix_peer(int fd, char* out, size_t capacity) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    snprintf(out, capacity, "unix-peer pid %d uid %u", (int)cred.pid, (unsigned)cred.uid);
  } else {
    snprintf(out, capacity, "unix-peer");
  }
}
