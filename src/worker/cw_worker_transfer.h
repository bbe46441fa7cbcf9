// Moving array bytes at the worker (cw_worker_transfer.c): UPLOAD and PUT
// (bytes in, straight into staging memory handed to PJRT), DOWNLOAD (bytes
// out, from device memory in place when it is host memory), AWAIT, COPY
// (device to device), EXPECT (an id a peer will fill) and DELETE.
#ifndef CW_WORKER_TRANSFER_H_
#define CW_WORKER_TRANSFER_H_

#include "cw_worker_internal.h"

void cw_worker_handle_upload(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg);
void cw_worker_handle_put(cw_net_conn_t* conn, const cw_frame_header_t* h,
                          ProtobufCMessage** msg);
void cw_worker_handle_download(cw_net_conn_t* conn, const cw_frame_header_t* h,
                               ProtobufCMessage** msg);
void cw_worker_handle_await(cw_net_conn_t* conn, const cw_frame_header_t* h,
                            ProtobufCMessage** msg);
void cw_worker_handle_copy(cw_net_conn_t* conn, const cw_frame_header_t* h,
                           ProtobufCMessage** msg);
void cw_worker_handle_expect(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg);
void cw_worker_handle_delete(cw_net_conn_t* conn, const cw_frame_header_t* h,
                             ProtobufCMessage** msg);
// An UPLOAD's or PUT's bytes are in op->staging: make the device buffer
// (takes op). For an UPLOAD in parts, add them to the array put together.
void cw_worker_transfer_received(cw_op_t* op);
// The entry lets go of the UPLOAD in parts it puts together
// (cw_store_entry_t.parts; NULL: none), freed with its last reference.
void cw_worker_upload_parts_free(cw_worker_t* w, void* parts);
// Connection `c` is closing: the uploads in parts it began and did not
// finish fail, so that what waits for them (on other connections of the
// session) hears why instead of waiting until the session ends.
void cw_worker_upload_parts_conn_closed(cw_conn_t* c);
// The same for the part being read into it, whose bytes never came.
void cw_worker_upload_part_abandon(cw_worker_t* w, void* parts);
// A later part of buffer `id` was refused before it was checked (a drain):
// nothing can complete that upload now, so the buffer fails with `why`
// (taken) for whoever waits for it. No upload in parts under way: nothing.
void cw_worker_upload_part_refused(cw_conn_t* c, uint64_t id, cw_status_t why);

// Reading a buffer's bytes out (DOWNLOAD, SEND). Starts waiting for e's
// bytes without blocking: on host-memory plugins with e kept (op->keep; read
// in place once ready), else copied into op->staging. op->size is set by the
// caller.
CW_MUST_USE cw_status_t cw_worker_fetch_start(cw_op_t* op, cw_store_entry_t* e,
                                              PJRT_Event** out_event);
// op->keep's buffer is ready: pinned and its bytes read in place when its
// memory allows (the pin in *out_pin, for the write to release), else a copy
// into op->staging is started (*out_pin NULL; the copy's event in
// *out_event). Either way op->keep is dropped.
CW_MUST_USE cw_status_t cw_worker_fetch_pinned(cw_op_t* op, const void** out_bulk,
                                               cw_pin_t** out_pin, PJRT_Event** out_event);

#endif  // CW_WORKER_TRANSFER_H_
