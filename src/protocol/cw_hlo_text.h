// A compiled XLA program (the bytes PJRT_Executable_OptimizedProgram gives,
// format "hlo" or "hlo_with_config") read back for what a client asks of a
// compiled executable without holding XLA itself: the HLO text XLA's own
// printer writes (compiled.as_text() through causeway-proxy) and the entry
// computation's parameter and output layouts.
//
// The text follows XLA's HLO text format for the instructions and attributes
// XLA's CPU compiler emits; attributes causeway does not know are left out
// rather than guessed. Nesting is bounded before protobuf-c decodes, every
// id a module names is checked before it is followed, and the text has a
// size limit, so any bytes give text or an error.
#ifndef CW_PROTOCOL_HLO_TEXT_H_
#define CW_PROTOCOL_HLO_TEXT_H_

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

typedef struct cw_hlo_module_s cw_hlo_module_t;

// Decodes `data` (with_config: an HloModuleProtoWithConfig, else an
// HloModuleProto) and checks that the entry computation exists
// (cw_hlo_module.c; cw_hlo_cost.h prices the module too).
CW_MUST_USE cw_status_t cw_hlo_module_parse(const uint8_t* data, size_t size, bool with_config,
                                            cw_hlo_module_t** out);
void cw_hlo_module_free(cw_hlo_module_t* m);

// The module as HLO text, at most max_len bytes (RESOURCE_EXHAUSTED past
// it: a module's names are printed once per reference, so its text can grow
// with the square of its size); *out_text is malloc'd and NUL-terminated.
CW_MUST_USE cw_status_t cw_hlo_module_text(const cw_hlo_module_t* m, size_t max_len,
                                           char** out_text, size_t* out_len);

// The entry computation's parameter layouts (outputs false) or output layouts
// (outputs true: the result tuple's elements, or the one result), each a
// serialized xla.LayoutProto without its memory space (a memory kind travels
// apart from the layout). Taken from the module config's entry layout when
// there is one, else from the entry computation. *out is malloc'd, as is each
// item's data; free both with cw_hlo_layouts_free.
CW_MUST_USE cw_status_t cw_hlo_module_layouts(const cw_hlo_module_t* m, bool outputs,
                                              ProtobufCBinaryData** out, size_t* out_n);
void cw_hlo_layouts_free(ProtobufCBinaryData* items, size_t n);

// The entry parameters an output aliases (the ones a run may donate), in
// ascending order without repeats; *out is malloc'd (NULL when none).
CW_MUST_USE cw_status_t cw_hlo_module_aliased_params(const cw_hlo_module_t* m, uint32_t** out,
                                                     size_t* out_n);

#endif  // CW_PROTOCOL_HLO_TEXT_H_
