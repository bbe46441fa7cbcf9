// The PJRT_Api table (cw_plugin_api.c) and what it answers for the plugin
// as a whole.
#ifndef CW_PLUGIN_API_H_
#define CW_PLUGIN_API_H_

#include <stddef.h>

#include "proto/causeway.pb-c.h"

// PJRT_Plugin_Attributes answers with the workers' plugin attributes once a
// session reported them (copied here), and with defaults before. Set by
// client creation; never freed (the API says process lifetime).
void cw_plugin_api_attributes_set(Causeway__V1__NamedValue* const* values, size_t count);

#endif  // CW_PLUGIN_API_H_
