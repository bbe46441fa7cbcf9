// What the session asks the controller for (cw_plugin_alloc.c;
// docs/operations.md, "Asking for devices"): CAUSEWAY_DEVICES,
// CAUSEWAY_PLATFORM, CAUSEWAY_MIN_ISLAND, CAUSEWAY_WORKERS, CAUSEWAY_SHARE,
// CAUSEWAY_WEIGHT and CAUSEWAY_QUEUE_TIMEOUT, checked for meaning.
#ifndef CW_PLUGIN_ALLOC_H_
#define CW_PLUGIN_ALLOC_H_

#include <stddef.h>

#include "cw_settings.h"
#include "cw_status.h"
#include "proto/causeway.pb-c.h"

// The strings an OpenSessionRequest points at, besides the settings'.
typedef struct cw_plugin_alloc_s {
  char* buf;  // CAUSEWAY_WORKERS, split in place
  char** names;
  size_t count;
} cw_plugin_alloc_t;

// Fills req's allocation fields from `settings` (borrowed, and pointed at by
// req until it is freed); `out` (caller storage) owns the other strings req
// points at until deinitialized, also after a failure. A value that makes no
// sense fails with an error naming the variable.
CW_MUST_USE cw_status_t cw_plugin_alloc_initialize(cw_plugin_alloc_t* out,
                                                   const cw_settings_t* settings,
                                                   Causeway__V1__OpenSessionRequest* req);
void cw_plugin_alloc_deinitialize(cw_plugin_alloc_t* alloc);

#endif  // CW_PLUGIN_ALLOC_H_
