// Transfers (cw_plugin_transfer.c): arrays into buffers, buffers back to
// host memory, and buffers to other devices (worker to worker when they
// live on two). Each sends its request(s) in the worker's seq order and
// returns at once; completions resolve the buffer's or the event's future.
#ifndef CW_PLUGIN_TRANSFER_H_
#define CW_PLUGIN_TRANSFER_H_

#include <sys/uio.h>

#include "cw_pjrt_c_api.h"
#include "cw_plugin_buffer.h"
#include "cw_plugin_event.h"
#include "cw_plugin_internal.h"

// Arrays this big or bigger move by same-host copies where a worker allows
// them (UPLOAD/DOWNLOAD peer_address); smaller ones through the socket, where
// one frame costs less than the copy's threadpool hop.
#define CW_PLUGIN_DIRECT_MIN_BYTES (512 * 1024)
#define CW_PLUGIN_DIRECT_PROBE_FLOATS 8

PJRT_Error* cw_plugin_buffer_from_host(PJRT_Client_BufferFromHostBuffer_Args* args);
PJRT_Error* cw_plugin_buffer_to_host(PJRT_Buffer_ToHostBuffer_Args* args);

// Shared with the async host-to-device transfer manager (cw_plugin_h2d.c).
// Sends a seq'd request whose completion feeds `f` (only its failure when
// errors_only); `epoch` as cw_plugin_worker_send's.
CW_MUST_USE cw_status_t cw_plugin_transfer_send(cw_plugin_worker_t* w, uint32_t epoch,
                                                uint16_t type, ProtobufCMessage* req, uint64_t* seq,
                                                const struct iovec* bulk, int bulk_count,
                                                const cw_client_sink_t* sink, cw_plugin_future_t* f,
                                                bool errors_only);
// Accepts NULL or the default layout (dense, major-to-minor, untiled).
CW_MUST_USE cw_status_t cw_plugin_transfer_check_layout(const PJRT_Buffer_MemoryLayout* l,
                                                        const int64_t* dims, size_t rank,
                                                        size_t esize, const char* what);
// A new PJRT_Event that is already complete (NULL only when out of memory).
PJRT_Event* cw_plugin_transfer_done_event(void);
// A range of the dense bytes (the raw form here, but for packed sub-byte types).
PJRT_Error* cw_plugin_buffer_copy_raw_to_host(PJRT_Buffer_CopyRawToHost_Args* args);
PJRT_Error* cw_plugin_buffer_copy_to_device(PJRT_Buffer_CopyToDevice_Args* args);
PJRT_Error* cw_plugin_buffer_copy_to_memory(PJRT_Buffer_CopyToMemory_Args* args);
// Reads all of `b`'s dense bytes into `dst` (cw_plugin_buffer_bytes of
// them) and waits for them: ToHostBuffer's read, blocking.
CW_MUST_USE cw_status_t cw_plugin_transfer_read(cw_plugin_buffer_t* b, void* dst,
                                                const char* what);
// The buffer's address on its worker (x.unsafe_buffer_pointer()): one AWAIT
// in seq order, blocking until the buffer is ready; remembered after.
PJRT_Error* cw_plugin_buffer_unsafe_pointer(PJRT_Buffer_UnsafePointer_Args* args);
// At connection: asks worker `w` (a Unix socket) to copy a small array from
// this process's memory; sets w->direct_bulk when it could. Blocks for one
// round trip; any failure just leaves bytes going through the socket.
void cw_plugin_transfer_probe_direct(cw_plugin_worker_t* w);

#endif  // CW_PLUGIN_TRANSFER_H_
