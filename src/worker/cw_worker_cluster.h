// Worker pieces for running under a controller (docs/protocol.md, "Cluster
// messages"): the executable metadata EXE_INFO answers with, read from PJRT,
// and the REGISTER request a worker sends its controller.
#ifndef CW_WORKER_CLUSTER_H_
#define CW_WORKER_CLUSTER_H_

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

// The address clients and peers should use for a worker listening on
// `listen_address`: a wildcard host (0.0.0.0, ::, empty) becomes this host's
// name. Writes a NUL-terminated string into out[out_size].
void cw_worker_advertised_address(const char* listen_address, char* out, size_t out_size);

#endif  // CW_WORKER_CLUSTER_H_
