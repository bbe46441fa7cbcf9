// Typed helpers of the client library (cw_client.h): each builds one request
// message and sends it through cw_client_call or, pipelined, through
// cw_client_send_flags.
#include <stdlib.h>

#include "cw_array.h"
#include "cw_client_internal.h"

// Pipelined helpers: with no callback, the request is detached (success
// dropped, error parked for cw_client_flush).
static cw_status_t cw__send_pipelined(cw_client_t* c, uint16_t type,
                                      const ProtobufCMessage* request, const struct iovec* bulk,
                                      int bulk_count, cw_client_done_fn done, void* user) {
  return cw_client_send_flags(c, type, request, bulk, bulk_count, NULL,
                              done ? 0 : CW_CLIENT_PEND_DETACHED, done, user, NULL);
}

cw_status_t cw_client_ping(cw_client_t* client) {
  Causeway__V1__Ping req = CAUSEWAY__V1__PING__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_PING, &req.base, NULL, 0, NULL, &reply, NULL),
                     "ping");
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_inventory(cw_client_t* client, Causeway__V1__Inventory** out_inventory) {
  if (out_inventory) *out_inventory = NULL;
  if (!out_inventory) return cw_make_status(CW_INVALID_ARGUMENT, "out_inventory is required");
  Causeway__V1__InventoryRequest req = CAUSEWAY__V1__INVENTORY_REQUEST__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_INVENTORY, &req.base, NULL, 0, NULL, &reply, NULL),
      "inventory");
  *out_inventory = (Causeway__V1__Inventory*)reply;
  return cw_ok_status();
}

cw_status_t cw_client_stats(cw_client_t* client, Causeway__V1__Stats** out_stats) {
  if (out_stats) *out_stats = NULL;
  if (!out_stats) return cw_make_status(CW_INVALID_ARGUMENT, "out_stats is required");
  Causeway__V1__StatsRequest req = CAUSEWAY__V1__STATS_REQUEST__INIT;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_STATS, &req.base, NULL, 0, NULL, &reply, NULL),
                     "stats");
  *out_stats = (Causeway__V1__Stats*)reply;
  return cw_ok_status();
}

static cw_status_t cw__compile_reply(ProtobufCMessage* reply, uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = ((Causeway__V1__CompileReply*)reply)->num_outputs;
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_compile(cw_client_t* client, uint64_t exe_id, const char* format,
                              const void* code, size_t code_size, const void* compile_options,
                              size_t options_size, uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = 0;
  Causeway__V1__CompileRequest req = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  req.exe_id = exe_id;
  req.format = (char*)(format ? format : "mlir");
  req.code.data = (uint8_t*)code;
  req.code.len = code ? code_size : 0;
  req.compile_options.data = (uint8_t*)compile_options;
  req.compile_options.len = compile_options ? options_size : 0;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_COMPILE, &req.base, NULL, 0, NULL, &reply, NULL),
      "compile exe %llu", (unsigned long long)exe_id);
  return cw__compile_reply(reply, out_num_outputs);
}

cw_status_t cw_client_serialize(cw_client_t* client, uint64_t exe_id, void** out_data,
                                size_t* out_size) {
  if (out_data) *out_data = NULL;
  if (out_size) *out_size = 0;
  if (!out_data || !out_size) {
    return cw_make_status(CW_INVALID_ARGUMENT, "out_data and out_size are required");
  }
  Causeway__V1__SerializeRequest req = CAUSEWAY__V1__SERIALIZE_REQUEST__INIT;
  req.exe_id = exe_id;
  ProtobufCMessage* reply = NULL;
  uint64_t len = 0;
  void* data = NULL;
  CW_RETURN_IF_ERROR(cw_client_call_flags(client, CW_MSG_SERIALIZE, &req.base, NULL, 0, NULL,
                                          CW_CLIENT_PEND_ALLOC_SINK, &reply, &len, &data),
                     "serialize exe %llu", (unsigned long long)exe_id);
  uint64_t declared = ((Causeway__V1__SerializeReply*)reply)->size;
  protobuf_c_message_free_unpacked(reply, NULL);
  if (declared && declared != len) {
    free(data);
    return cw_make_status(CW_DATA_LOSS,
                          "serialize exe %llu: reply declares %llu bytes but carried %llu",
                          (unsigned long long)exe_id, (unsigned long long)declared,
                          (unsigned long long)len);
  }
  *out_data = data;
  *out_size = (size_t)len;
  return cw_ok_status();
}

cw_status_t cw_client_load(cw_client_t* client, uint64_t exe_id, const void* serialized,
                           size_t size, const void* compile_options, size_t options_size,
                           uint32_t* out_num_outputs) {
  if (out_num_outputs) *out_num_outputs = 0;
  if (!serialized && size) return cw_make_status(CW_INVALID_ARGUMENT, "serialized is NULL");
  Causeway__V1__LoadRequest req = CAUSEWAY__V1__LOAD_REQUEST__INIT;
  req.exe_id = exe_id;
  req.compile_options.data = (uint8_t*)compile_options;
  req.compile_options.len = compile_options ? options_size : 0;
  struct iovec iov = {.iov_base = (void*)serialized, .iov_len = size};
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_LOAD, &req.base, &iov, 1, NULL, &reply, NULL),
      "load exe %llu", (unsigned long long)exe_id);
  return cw__compile_reply(reply, out_num_outputs);
}

cw_status_t cw_client_upload(cw_client_t* client, uint64_t buffer_id, int dtype,
                             const int64_t* dims, size_t rank, const int64_t* byte_strides,
                             int device, const void* data, size_t size, cw_client_done_fn done,
                             void* user) {
  if (rank && !dims) return cw_make_status(CW_INVALID_ARGUMENT, "upload: dims is NULL");
  if (size && !data) return cw_make_status(CW_INVALID_ARGUMENT, "upload: data is NULL");
  uint64_t extent = 0;
  CW_RETURN_IF_ERROR(
      cw_array_extent(dtype, dims, rank, byte_strides, byte_strides ? rank : 0, &extent),
      "upload buffer %llu", (unsigned long long)buffer_id);
  // The worker would close the connection over this; refuse it here instead.
  if (extent != size) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "upload buffer %llu: %s array of rank %zu spans %llu bytes, got %zu",
                          (unsigned long long)buffer_id, cw_dtype_name(dtype), rank,
                          (unsigned long long)extent, size);
  }
  Causeway__V1__UploadRequest req = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  req.buffer_id = buffer_id;
  req.dtype = (Causeway__V1__DType)dtype;
  req.n_dims = rank;
  req.dims = (int64_t*)dims;
  req.n_byte_strides = byte_strides ? rank : 0;
  req.byte_strides = (int64_t*)byte_strides;
  req.device = device;
  struct iovec iov = {.iov_base = (void*)data, .iov_len = size};
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_UPLOAD, &req.base, &iov, size ? 1 : 0,
                                        done, user),
                     "upload buffer %llu", (unsigned long long)buffer_id);
  return cw_ok_status();
}

cw_status_t cw_client_launch(cw_client_t* client, uint64_t exe_id, size_t num_devices,
                             size_t num_args, const uint64_t* const* args, size_t num_outputs,
                             const uint64_t* const* outputs, cw_client_done_fn done,
                             void* user) {
  if ((num_args && !args) || (num_outputs && !outputs)) {
    return cw_make_status(CW_INVALID_ARGUMENT, "launch exe %llu: args/outputs missing",
                          (unsigned long long)exe_id);
  }
  Causeway__V1__IdList* lists = calloc(2 * num_devices + 1, sizeof(*lists));
  Causeway__V1__IdList** ptrs = calloc(2 * num_devices + 1, sizeof(*ptrs));
  if (!lists || !ptrs) {
    free(lists);
    free(ptrs);
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t d = 0; d < num_devices; ++d) {
    Causeway__V1__IdList* a = &lists[d];
    Causeway__V1__IdList* o = &lists[num_devices + d];
    causeway__v1__id_list__init(a);
    causeway__v1__id_list__init(o);
    a->n_ids = num_args;
    a->ids = num_args ? (uint64_t*)args[d] : NULL;
    o->n_ids = num_outputs;
    o->ids = num_outputs ? (uint64_t*)outputs[d] : NULL;
    ptrs[d] = a;
    ptrs[num_devices + d] = o;
  }
  Causeway__V1__LaunchRequest req = CAUSEWAY__V1__LAUNCH_REQUEST__INIT;
  req.exe_id = exe_id;
  req.n_args = num_devices;
  req.args = ptrs;
  req.n_outputs = num_devices;
  req.outputs = ptrs + num_devices;
  cw_status_t s = cw__send_pipelined(client, CW_MSG_LAUNCH, &req.base, NULL, 0, done, user);
  free(lists);
  free(ptrs);
  CW_RETURN_IF_ERROR(s, "launch exe %llu", (unsigned long long)exe_id);
  return cw_ok_status();
}

cw_status_t cw_client_download(cw_client_t* client, uint64_t buffer_id, void* data,
                               size_t capacity, size_t* out_size,
                               Causeway__V1__ArrayInfo** out_info) {
  return cw_client_download_range(client, buffer_id, 0, 0, data, capacity, out_size, out_info);
}

cw_status_t cw_client_download_range(cw_client_t* client, uint64_t buffer_id, uint64_t offset,
                                     uint64_t length, void* data, size_t capacity,
                                     size_t* out_size, Causeway__V1__ArrayInfo** out_info) {
  if (out_size) *out_size = 0;
  if (out_info) *out_info = NULL;
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = buffer_id;
  req.offset = offset;
  req.length = length;
  cw_client_sink_t sink = {.data = data, .capacity = data ? capacity : 0};
  ProtobufCMessage* reply = NULL;
  uint64_t len = 0;
  CW_RETURN_IF_ERROR(
      cw_client_call(client, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, &reply, &len),
      "download buffer %llu", (unsigned long long)buffer_id);
  if (out_size) *out_size = (size_t)len;
  if (out_info) {
    *out_info = (Causeway__V1__ArrayInfo*)reply;
  } else {
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  return cw_ok_status();
}

cw_status_t cw_client_await(cw_client_t* client, uint64_t buffer_id) {
  Causeway__V1__AwaitRequest req = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  req.buffer_id = buffer_id;
  ProtobufCMessage* reply = NULL;
  CW_RETURN_IF_ERROR(cw_client_call(client, CW_MSG_AWAIT, &req.base, NULL, 0, NULL, &reply, NULL),
                     "await buffer %llu", (unsigned long long)buffer_id);
  protobuf_c_message_free_unpacked(reply, NULL);
  return cw_ok_status();
}

cw_status_t cw_client_copy(cw_client_t* client, uint64_t src_id, uint64_t dst_id,
                           int dst_device, cw_client_done_fn done, void* user) {
  Causeway__V1__CopyRequest req = CAUSEWAY__V1__COPY_REQUEST__INIT;
  req.src_id = src_id;
  req.dst_id = dst_id;
  req.dst_device = dst_device;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_COPY, &req.base, NULL, 0, done, user),
                     "copy %llu to %llu", (unsigned long long)src_id,
                     (unsigned long long)dst_id);
  return cw_ok_status();
}

cw_status_t cw_client_expect(cw_client_t* client, uint64_t buffer_id, cw_client_done_fn done,
                             void* user) {
  Causeway__V1__ExpectRequest req = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  req.buffer_id = buffer_id;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_EXPECT, &req.base, NULL, 0, done, user),
                     "expect buffer %llu", (unsigned long long)buffer_id);
  return cw_ok_status();
}

cw_status_t cw_client_send_to_peer(cw_client_t* client, uint64_t src_id,
                                   const char* peer_address, uint64_t dst_id, int dst_device,
                                   uint64_t dst_session, cw_client_done_fn done, void* user) {
  if (!peer_address || !peer_address[0]) {
    return cw_make_status(CW_INVALID_ARGUMENT, "send: peer_address is required");
  }
  Causeway__V1__SendRequest req = CAUSEWAY__V1__SEND_REQUEST__INIT;
  req.src_id = src_id;
  req.peer_address = (char*)peer_address;
  req.dst_id = dst_id;
  req.dst_device = dst_device;
  req.dst_session = dst_session;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_SEND, &req.base, NULL, 0, done, user),
                     "send %llu to %s", (unsigned long long)src_id, peer_address);
  return cw_ok_status();
}

cw_status_t cw_client_delete(cw_client_t* client, const uint64_t* ids, size_t count,
                             cw_client_done_fn done, void* user) {
  if (count && !ids) return cw_make_status(CW_INVALID_ARGUMENT, "delete: ids is NULL");
  Causeway__V1__DeleteRequest req = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  req.n_ids = count;
  req.ids = (uint64_t*)ids;
  CW_RETURN_IF_ERROR(cw__send_pipelined(client, CW_MSG_DELETE, &req.base, NULL, 0, done, user),
                     "delete %zu ids", count);
  return cw_ok_status();
}
