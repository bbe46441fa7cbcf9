// PJRT_LoadedExecutable_Execute (cw_plugin_execute.c): the launch returns at
// once; its outputs are proxies that share one future, completed by the
// worker's reply (or its error, which every output and event then carries).
#ifndef CW_PLUGIN_EXECUTE_H_
#define CW_PLUGIN_EXECUTE_H_

#include "cw_pjrt_c_api.h"

PJRT_Error* cw_plugin_loaded_execute(PJRT_LoadedExecutable_Execute_Args* args);

#endif  // CW_PLUGIN_EXECUTE_H_
