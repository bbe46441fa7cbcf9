// What the client asks the controller for when it opens its session
// (docs/operations.md, "Asking for devices"): CAUSEWAY_DEVICES,
// CAUSEWAY_PLATFORM, CAUSEWAY_MIN_ISLAND, CAUSEWAY_WORKERS, CAUSEWAY_SHARE,
// CAUSEWAY_WEIGHT, CAUSEWAY_QUEUE_TIMEOUT. The settings table parses and
// bounds them; here they are checked for meaning, and a value that makes no
// sense fails client creation with an error naming the variable.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_alloc.h"

static bool cw__alloc_printable(const char* s, size_t max) {
  size_t n = 0;
  for (; *s; ++s, ++n) {
    if (n >= max || *s <= 0x20 || *s >= 0x7f) return false;
  }
  return n > 0;
}

cw_status_t cw_plugin_alloc_initialize(cw_plugin_alloc_t* out, const cw_settings_t* settings,
                                       Causeway__V1__OpenSessionRequest* req) {
  memset(out, 0, sizeof(*out));
  // Each was bounded by the table to fit a uint32 (0: not asked).
  req->num_devices = (uint32_t)cw_settings_int(settings, CW_SET_SESSION_DEVICES);
  req->min_island = (uint32_t)cw_settings_int(settings, CW_SET_MIN_ISLAND);
  req->weight = (uint32_t)cw_settings_int(settings, CW_SET_WEIGHT);
  req->share = cw_settings_int(settings, CW_SET_SHARE) != 0;
  req->queue_timeout_ms = (uint32_t)cw_settings_int(settings, CW_SET_QUEUE_TIMEOUT);
  const char* p = cw_settings_string(settings, CW_SET_PLATFORM);
  if (*p) {
    if (!cw__alloc_printable(p, 64)) {
      return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_PLATFORM: '%s' is not a "
                            "platform name such as cpu (at most 64 printable characters)", p);
    }
    req->platform = (char*)p;
  }
  const char* w = cw_settings_string(settings, CW_SET_WORKERS);
  if (*w) {
    out->buf = strdup(w);
    size_t n = 1;
    for (const char* c = w; *c; ++c) n += *c == ',';
    out->names = calloc(n, sizeof(char*));
    if (!out->buf || !out->names) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    char* save = NULL;
    for (char* tok = strtok_r(out->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      if (!cw__alloc_printable(tok, 127)) {
        return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_WORKERS: '%s' is not "
                              "worker names separated by commas", w);
      }
      out->names[out->count++] = tok;
    }
    if (out->count != n) {
      return cw_make_status(CW_INVALID_ARGUMENT, "causeway: CAUSEWAY_WORKERS: '%s' has an "
                            "empty worker name", w);
    }
    req->workers = out->names;
    req->n_workers = out->count;
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

void cw_plugin_alloc_deinitialize(cw_plugin_alloc_t* alloc) {
  free(alloc->buf);
  free(alloc->names);
  memset(alloc, 0, sizeof(*alloc));
}
