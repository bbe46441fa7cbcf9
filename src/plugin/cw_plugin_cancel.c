// The caller's cancel of a session still opening (cw_plugin_cancel.h).
#include "cw_plugin_cancel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

static void* cw__watch(void* arg) {
  cw_plugin_cancel_t* c = arg;
  struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->stop[0], .events = POLLIN}};
  for (;;) {
    int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || p[1].revents) return NULL;
    if (p[0].revents) break;  // readable, closed, or not a descriptor: given up
  }
  pthread_mutex_lock(&c->mu);
  atomic_store(&c->fired, true);
  if (*c->ctrl) cw_client_shutdown(*c->ctrl);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

cw_status_t cw_plugin_cancel_start(cw_plugin_cancel_t* c, int fd, cw_client_t** ctrl) {
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->stop[0] = c->stop[1] = -1;
  c->ctrl = ctrl;
  atomic_init(&c->fired, false);
  pthread_mutex_init(&c->mu, NULL);
  if (fd < 0) return cw_ok_status();
  if (pipe2(c->stop, O_CLOEXEC) != 0) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "causeway: causeway_cancel_fd: pipe: %s",
                          strerror(errno));
  }
  int rc = pthread_create(&c->thread, NULL, cw__watch, c);
  if (rc != 0) {
    close(c->stop[0]);
    close(c->stop[1]);
    c->stop[0] = c->stop[1] = -1;
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "causeway: causeway_cancel_fd: thread: %s",
                          strerror(rc));
  }
  c->started = true;
  return cw_ok_status();
}

bool cw_plugin_cancel_fired(cw_plugin_cancel_t* c) { return atomic_load(&c->fired); }

cw_status_t cw_plugin_cancel_status(cw_plugin_cancel_t* c, cw_status_t s) {
  if (!cw_plugin_cancel_fired(c)) return s;
  cw_status_free(s);
  return cw_make_status(CW_CANCELLED, "causeway: the caller gave up the session while it was "
                        "opening (causeway_cancel_fd)");
}

bool cw_plugin_cancel_swap(cw_plugin_cancel_t* c, cw_client_t* fresh) {
  pthread_mutex_lock(&c->mu);
  bool ok = !atomic_load(&c->fired);
  if (ok) *c->ctrl = fresh;
  pthread_mutex_unlock(&c->mu);
  if (!ok && fresh) cw_client_release(fresh);
  return ok;
}

void cw_plugin_cancel_stop(cw_plugin_cancel_t* c) {
  if (c->started) {
    char b = 1;
    ssize_t w;
    do {
      w = write(c->stop[1], &b, 1);
    } while (w < 0 && errno == EINTR);
    pthread_join(c->thread, NULL);
    c->started = false;
  }
  for (int i = 0; i < 2; ++i) {
    if (c->stop[i] >= 0) close(c->stop[i]);
    c->stop[i] = -1;
  }
  if (c->ctrl) pthread_mutex_destroy(&c->mu);
  c->ctrl = NULL;
}
