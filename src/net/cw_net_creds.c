// A daemon's credentials read again while it runs (cw_net_creds.h).
#include "cw_net_creds.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cw_dirs.h"
#include "cw_log.h"
#include "cw_time.h"

#define CW__EXPIRY_WARN_S (14 * 24 * 3600)
#define CW__EXPIRY_WARN_EVERY_MS (24LL * 3600 * 1000)
#define CW__EXPIRY_TICK_MS 60000  // the timer's period without a file check

// The files whose change asks for a reload: the token file only when the
// token comes from it (CAUSEWAY_TOKEN is read once), TLS's only when on.
static void cw__paths(const cw_net_creds_t* c, const char* out[CW_NET_CREDS_FILES]) {
  const cw_settings_t* s = c->settings;
  bool from_file = !cw_settings_given(s, CW_SET_TOKEN);
  bool tls = cw_settings_int(s, CW_SET_TLS) != 0 && c->net;
  out[0] = from_file ? cw_settings_string(s, CW_SET_TOKEN_FILE) : "";
  out[1] = tls ? cw_settings_string(s, CW_SET_TLS_CA) : "";
  out[2] = tls ? cw_settings_string(s, CW_SET_TLS_CERT) : "";
  out[3] = tls ? cw_settings_string(s, CW_SET_TLS_KEY) : "";
}

static bool cw__look(cw_net_creds_t* c) {
  const char* paths[CW_NET_CREDS_FILES];
  cw__paths(c, paths);
  bool changed = false;
  for (int i = 0; i < CW_NET_CREDS_FILES; ++i) {
    cw_file_sig_t g = cw_file_sig(paths[i]);
    changed |= !cw_file_sig_equal(&g, &c->files[i]);
    c->files[i] = g;
  }
  return changed;
}

static bool cw__same_tokens(const cw_token_set_t* a, const cw_token_set_t* b) {
  if (a->count != b->count) return false;
  for (size_t i = 0; i < a->count; ++i) {
    if (strcmp(a->tokens[i], b->tokens[i])) return false;
  }
  return true;
}

// "…, certificate /CN=x valid until 2027-12-06 10:00 UTC" into out.
static void cw__describe_cert(cw_net_creds_t* c, char* out, size_t capacity) {
  out[0] = 0;
  char subject[256];
  int64_t end = 0;
  c->not_after = 0;
  if (!c->net || !cw_tls_own_certificate(c->net->tls, subject, sizeof(subject), &end)) return;
  c->not_after = end;
  char when[64] = "an unreadable date";
  time_t t = (time_t)end;
  struct tm tm;
  if (end && gmtime_r(&t, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &tm);
  snprintf(out, capacity, "; TLS certificate %s, valid until %s", subject, when);
}

static void cw__expiry_check(cw_net_creds_t* c, bool force) {
  if (!c->not_after) return;
  int64_t left = c->not_after - (int64_t)time(NULL);
  int64_t now = cw_time_now_ms();
  if (left > CW__EXPIRY_WARN_S) return;
  if (!force && c->expiry_warned_ms && now - c->expiry_warned_ms < CW__EXPIRY_WARN_EVERY_MS) {
    return;
  }
  c->expiry_warned_ms = now;
  if (left <= 0) {
    CW_LOGE("TLS certificate %s has expired: peers refuse new connections to and from this "
            "daemon; put a new one in place (`causeway certs daemon`) and send SIGHUP",
            cw_settings_string(c->settings, CW_SET_TLS_CERT));
  } else {
    CW_LOGW("TLS certificate %s expires in %.1f days: put a new one in place (`causeway certs "
            "daemon`); it is read when the file changes, or on SIGHUP",
            cw_settings_string(c->settings, CW_SET_TLS_CERT), (double)left / 86400.0);
  }
}

cw_status_t cw_net_creds_reload(cw_net_creds_t* c, const char* why) {
  cw_token_set_t fresh;
  cw_status_t st = cw_settings_read_tokens(c->settings, &fresh);
  // TLS first: the token is swapped only once nothing can fail.
  if (!st && c->net) st = cw_net_reload_tls(c->net);
  if (st) {
    cw_token_set_clear(&fresh);
    c->failures++;
    CW_LOGE("credentials not reloaded (%s): %s; the ones in use are kept", why,
            cw_status_message(st));
    return cw_status_annotate(st, "credentials not reloaded");
  }
  bool same = cw__same_tokens(&fresh, &c->tokens);
  cw_token_set_clear(&c->tokens);
  c->tokens = fresh;
  c->reloads++;
  char cert[400];
  cw__describe_cert(c, cert, sizeof(cert));
  CW_LOGW("credentials reloaded (%s): %s%s", why,
          c->tokens.count == 0 ? "no token"
          : same               ? "the same token(s)"
          : c->tokens.count == 1 ? "a new token"
                                 : "new tokens, the first presented and all accepted",
          cert);
  cw__expiry_check(c, true);
  return cw_ok_status();
}

static void cw__on_hup(uv_signal_t* h, int signum) {
  (void)signum;
  cw_net_creds_t* c = h->data;
  (void)cw__look(c);
  cw_status_free(cw_net_creds_reload(c, "SIGHUP"));
}

static void cw__on_tick(uv_timer_t* t) {
  cw_net_creds_t* c = t->data;
  if (c->check_files && cw__look(c)) {
    cw_status_free(cw_net_creds_reload(c, "a credentials file changed"));
  }
  if (!c->not_after && c->net && c->net->tls) {
    char cert[400];  // TLS made since (a worker's first connection to its controller)
    cw__describe_cert(c, cert, sizeof(cert));
  }
  cw__expiry_check(c, false);
}

cw_status_t cw_net_creds_start(cw_net_creds_t* c, uv_loop_t* loop,
                               const cw_settings_t* settings, cw_net_t* net) {
  memset(c, 0, sizeof(*c));
  c->settings = settings;
  c->net = net;
  (void)cw__look(c);  // before the read: a change in between is seen at the next check
  CW_RETURN_IF_ERROR(cw_settings_read_tokens(settings, &c->tokens), "");
  if (net) cw_net_use_tokens(net, &c->tokens);
  uv_signal_init(loop, &c->hup);
  uv_timer_init(loop, &c->timer);
  c->hup.data = c->timer.data = c;
  c->handles_open = true;
  uv_signal_start(&c->hup, cw__on_hup, SIGHUP);
  int64_t every = cw_settings_int(settings, CW_SET_CREDENTIALS_CHECK_MS);
  c->check_files = every > 0;
  // Also without a file check: the certificate's end is watched, and a
  // worker's TLS is made at its first connection out.
  uint64_t period = every > 0 ? (uint64_t)every : CW__EXPIRY_TICK_MS;
  uv_timer_start(&c->timer, cw__on_tick, period, period);
  // Idle timers must not keep a loop that is ending alive.
  uv_unref((uv_handle_t*)&c->timer);
  uv_unref((uv_handle_t*)&c->hup);
  char cert[400];
  cw__describe_cert(c, cert, sizeof(cert));
  cw__expiry_check(c, true);
  return cw_ok_status();
}

void cw_net_creds_stop(cw_net_creds_t* c) {
  if (!c->handles_open) return;
  c->handles_open = false;
  uv_close((uv_handle_t*)&c->hup, NULL);  // libuv restores SIGHUP's default
  uv_close((uv_handle_t*)&c->timer, NULL);
  cw_net_creds_ignore_hup();
}

void cw_net_creds_ignore_hup(void) {
  struct sigaction sa;
  if (sigaction(SIGHUP, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGHUP, SIG_IGN);
}

void cw_net_creds_free(cw_net_creds_t* c) {
  if (c->net && c->net->tokens == &c->tokens) cw_net_use_tokens(c->net, NULL);
  cw_token_set_clear(&c->tokens);
}
