// PJRT_Error objects and the checks every PJRT slot starts with. Internally
// status travels as cw_status_t; it becomes a PJRT_Error* only when a slot
// returns (cw_plugin_error_from_status).
#ifndef CW_PLUGIN_ERROR_H_
#define CW_PLUGIN_ERROR_H_

#include "cw_pjrt_c_api.h"
#include "cw_status.h"

// Takes `status` (must not be OK) and returns an owned PJRT_Error.
PJRT_Error* cw_plugin_error_from_status(cw_status_t status);
// NULL for OK, else cw_plugin_error_from_status.
PJRT_Error* cw_plugin_error_or_null(cw_status_t status);

// Checks the caller's args pointer and struct_size against the fields we read.
#define CW_PLUGIN_CHECK_ARGS(args, type, last_field)                                           \
  do {                                                                                         \
    if (!(args) || (args)->struct_size < CW_PJRT_STRUCT_SIZE(type, last_field)) {              \
      return cw_plugin_error_from_status(                                                      \
          cw_make_status(CW_INVALID_ARGUMENT, "%s: args missing or struct_size %zu too small", \
                         #type, (args) ? (args)->struct_size : (size_t)0));                    \
    }                                                                                          \
  } while (0)

// Fails the slot with INVALID_ARGUMENT "<slot>: <what> is NULL" when the
// handle `ptr` is NULL.
#define CW_PLUGIN_NEED(ptr, slot, what)                                       \
  do {                                                                        \
    if (!(ptr)) {                                                             \
      return cw_plugin_error_from_status(                                     \
          cw_make_status(CW_INVALID_ARGUMENT, "%s: %s is NULL", slot, what)); \
    }                                                                         \
  } while (0)

// The PJRT_Error_* slots.
void cw_plugin_error_destroy(PJRT_Error_Destroy_Args* args);
void cw_plugin_error_message(PJRT_Error_Message_Args* args);
PJRT_Error* cw_plugin_error_get_code(PJRT_Error_GetCode_Args* args);
PJRT_Error* cw_plugin_error_for_each_payload(PJRT_Error_ForEachPayload_Args* args);

#endif  // CW_PLUGIN_ERROR_H_
