// Liveness (cw_client_options_t.liveness_ms): a watchdog thread pings a
// peer that owes answers and has been quiet for half the period, and gives up
// on one that stays quiet for all of it (shutting the socket down, so the
// reader fails everything outstanding with the reason in c->hung).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cw_client_internal.h"
#include "cw_time.h"

static void cw__ping_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  cw_client_t* c = user;
  cw_status_free(status);
  pthread_mutex_lock(&c->mu);
  c->ping_out = false;
  pthread_mutex_unlock(&c->mu);
}

void* cw_client_watchdog_main(void* arg) {
  cw_client_t* c = arg;
  int tick = c->liveness_ms >= 8 ? c->liveness_ms / 4 : 2;
  pthread_mutex_lock(&c->mu);
  while (!c->closing && !c->dead) {
    struct timespec ts = cw_time_deadline_ms(tick);
    pthread_cond_timedwait(&c->watchdog_cv, &c->mu, &ts);
    if (c->closing || c->dead) break;
    // Quiet is fine while nothing is owed (the PING itself does not count).
    if (c->outstanding <= (c->ping_out ? 1u : 0u)) continue;
    int64_t quiet = cw_time_now_ms() - atomic_load_explicit(&c->last_rx_ms, memory_order_relaxed);
    if (quiet >= c->liveness_ms) {
      size_t n = strlen(c->address) + 160;
      c->hung = malloc(n);
      if (c->hung) {
        snprintf(c->hung, n, "no answer from %s for %lld ms: it is hung or unreachable (the "
                 "client waits %d ms)", c->address, (long long)quiet, c->liveness_ms);
      }
      pthread_mutex_unlock(&c->mu);
      cw_client_break(c);  // the reader fails everything outstanding
      return NULL;
    }
    if (quiet >= c->liveness_ms / 2 && !c->ping_out) {
      c->ping_out = true;
      pthread_mutex_unlock(&c->mu);
      Causeway__V1__Ping req = CAUSEWAY__V1__PING__INIT;
      // Blocks at most liveness_ms (SO_SNDTIMEO) on a peer that stopped reading.
      cw_status_t st = cw_client_send_flags(c, CW_MSG_PING, &req.base, NULL, 0, NULL, 0,
                                            cw__ping_done, c, NULL);
      pthread_mutex_lock(&c->mu);
      if (st) c->ping_out = false;
      cw_status_free(st);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}
