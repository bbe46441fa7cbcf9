// What the client asks the controller for when it opens its session
// (docs/operations.md, "Asking for devices"): CAUSEWAY_DEVICES,
// CAUSEWAY_PLATFORM, CAUSEWAY_MIN_ISLAND, CAUSEWAY_WORKERS, CAUSEWAY_SHARE,
// CAUSEWAY_WEIGHT, CAUSEWAY_QUEUE_TIMEOUT. A malformed value fails client
// creation with an error naming the variable.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_plugin.h"

// An unsigned decimal in [lo, hi]; unset or empty leaves *out alone.
cw_status_t cw_plugin_env_u32(const char* name, uint32_t lo, uint32_t hi, uint32_t* out) {
  const char* v = getenv(name);
  if (!v || !*v) return cw_ok_status();
  char* end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end || v[0] == '-' || v[0] == '+' || x < lo || x > hi) {
    return cw_make_status(CW_INVALID_ARGUMENT, "causeway: %s=%s: want a whole number in %u..%u",
                          name, v, lo, hi);
  }
  *out = (uint32_t)x;
  return cw_ok_status();
}

static bool cw__alloc_printable(const char* s, size_t max) {
  size_t n = 0;
  for (; *s; ++s, ++n) {
    if (n >= max || *s <= 0x20 || *s >= 0x7f) return false;
  }
  return n > 0;
}

cw_status_t cw__alloc_env_read(Causeway__V1__OpenSessionRequest* req, cw__alloc_env_t* keep) {
  memset(keep, 0, sizeof(*keep));
  uint32_t share = 0;
  cw_status_t st = cw_plugin_env_u32("CAUSEWAY_DEVICES", 1, 65536, &req->num_devices);
  if (!st) st = cw_plugin_env_u32("CAUSEWAY_MIN_ISLAND", 1, 65536, &req->min_island);
  if (!st) st = cw_plugin_env_u32("CAUSEWAY_WEIGHT", 1, 1000, &req->weight);
  if (!st) st = cw_plugin_env_u32("CAUSEWAY_SHARE", 0, 1, &share);
  if (st) return st;
  req->share = share != 0;
  const char* t = getenv("CAUSEWAY_QUEUE_TIMEOUT");
  if (t && *t) {
    char* end = NULL;
    errno = 0;
    double sec = strtod(t, &end);
    if (errno || *end || !isfinite(sec) || sec < 0 || sec > 86400.0) {
      return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_QUEUE_TIMEOUT=%s: want "
                            "seconds in 0..86400", t);
    }
    uint32_t ms = (uint32_t)(sec * 1000.0 + 0.5);
    req->queue_timeout_ms = sec > 0 && ms == 0 ? 1 : ms;
  }
  const char* p = getenv("CAUSEWAY_PLATFORM");
  if (p && *p) {
    if (!cw__alloc_printable(p, 64)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_PLATFORM=%s: want a "
                            "platform name such as cpu", p);
    }
    req->platform = (char*)p;
  }
  const char* w = getenv("CAUSEWAY_WORKERS");
  if (w && *w) {
    keep->buf = strdup(w);
    size_t n = 1;
    for (const char* c = w; *c; ++c) n += *c == ',';
    keep->names = calloc(n, sizeof(char*));
    if (!keep->buf || !keep->names) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    char* save = NULL;
    for (char* tok = strtok_r(keep->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      if (!cw__alloc_printable(tok, 127)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_WORKERS=%s: want worker "
                              "names separated by commas", w);
      }
      keep->names[keep->count++] = tok;
    }
    if (keep->count != n) {
      return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_WORKERS=%s: an empty "
                            "worker name", w);
    }
    req->workers = keep->names;
    req->n_workers = keep->count;
  }
  bool other = (req->platform && req->platform[0]) || req->n_workers || req->min_island ||
               req->share || req->weight || req->queue_timeout_ms;
  if (other && !req->num_devices) {
    return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_PLATFORM, CAUSEWAY_WORKERS, "
                          "CAUSEWAY_MIN_ISLAND, CAUSEWAY_SHARE, CAUSEWAY_WEIGHT and "
                          "CAUSEWAY_QUEUE_TIMEOUT need CAUSEWAY_DEVICES (how many devices)");
  }
  return cw_ok_status();
}

void cw__alloc_env_free(cw__alloc_env_t* keep) {
  free(keep->buf);
  free(keep->names);
  memset(keep, 0, sizeof(*keep));
}
