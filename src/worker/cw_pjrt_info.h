// What EXE_INFO answers with (docs/protocol.md, "Cluster messages"): an
// executable's metadata, read from PJRT.
#ifndef CW_WORKER_PJRT_INFO_H_
#define CW_WORKER_PJRT_INFO_H_

#include <stddef.h>

#include "cw_pjrt.h"
#include "cw_status.h"

// Fills `info` (caller storage; initialized here) from the loaded executable:
// name, replicas, partitions, outputs with their element types and dims,
// fingerprint, optimized program and its format, output memory kinds, and the
// addressable devices as this worker's local indices. Optional PJRT answers
// (fingerprint, optimized program, memory kinds) that fail leave their fields
// empty. `exe` is borrowed. Free with cw_pjrt_exe_info_deinitialize, also
// after an error.
CW_MUST_USE cw_status_t cw_pjrt_exe_info_initialize(const cw_pjrt_t* pjrt,
                                                    PJRT_LoadedExecutable* exe,
                                                    Causeway__V1__ExecutableInfo* info);
void cw_pjrt_exe_info_deinitialize(Causeway__V1__ExecutableInfo* info);

#endif  // CW_WORKER_PJRT_INFO_H_
