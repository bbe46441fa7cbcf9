// A serialized executable (proto SerializedExecutable): what the plugin's
// PJRT_Executable_Serialize returns and PJRT_Executable_DeserializeAndLoad
// reads back, e.g. from JAX's persistent compilation cache on disk. Read as
// untrusted bytes (serialized_exe_fuzz).
#ifndef CW_PROTOCOL_SERIALIZED_EXE_H_
#define CW_PROTOCOL_SERIALIZED_EXE_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

#define CW_SERIALIZED_EXE_MAGIC "causeway.executable"
#define CW_SERIALIZED_EXE_VERSION 1
// Longest program format name (the plugin's compile keeps it in 32 bytes).
#define CW_SERIALIZED_EXE_MAX_FORMAT 31

// The parts of one serialized executable. Unpacked, they point into the
// message that cw_serialized_exe_unpack hands back with them.
typedef struct cw_serialized_exe_s {
  const char* format;
  const uint8_t* code;
  size_t code_size;
  const uint8_t* compile_options;
  size_t compile_options_size;
  const char* fingerprint;  // "" when none
} cw_serialized_exe_t;

// Packs `exe` into *out (malloc'd; the caller frees it).
CW_MUST_USE cw_status_t cw_serialized_exe_pack(const cw_serialized_exe_t* exe, uint8_t** out,
                                               size_t* out_size);

// Reads `data`: a SerializedExecutable with the magic, version 1, a format of
// 1 to CW_SERIALIZED_EXE_MAX_FORMAT printable characters and a program. On
// success *out_exe points into *out_msg, which the caller frees with
// cw_serialized_exe_free; on failure the error names what was wrong.
CW_MUST_USE cw_status_t cw_serialized_exe_unpack(const uint8_t* data, size_t size,
                                                 cw_serialized_exe_t* out_exe, void** out_msg);
void cw_serialized_exe_free(void* msg);

#endif  // CW_PROTOCOL_SERIALIZED_EXE_H_
