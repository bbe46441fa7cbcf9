// The plugin's attributes (cw_plugin_attributes.c): PJRT_Plugin_Attributes
// answers with the workers' plugin attributes once a session reported them,
// and with the pinned CPU plugin's values before.
#ifndef CW_PLUGIN_ATTRIBUTES_H_
#define CW_PLUGIN_ATTRIBUTES_H_

#include <stddef.h>

#include "cw_pjrt_c_api.h"
#include "proto/causeway.pb-c.h"

// Copies the session's plugin attributes; they answer from now on. Set by
// client creation; never freed (the API says process lifetime).
void cw_plugin_attributes_set(Causeway__V1__NamedValue* const* values, size_t count);

// The PJRT_Plugin_Attributes slot.
PJRT_Error* cw_plugin_attributes_get(PJRT_Plugin_Attributes_Args* args);

#endif  // CW_PLUGIN_ATTRIBUTES_H_
