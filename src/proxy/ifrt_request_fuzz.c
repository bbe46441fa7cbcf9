// libFuzzer: what a peer of the IFRT proxy front sends, through the decoders
// the proxy runs on it: an IfrtRequest, GetVersion's request and the
// session metadata (protobuf-c over our schema, proto/ifrt_proxy.proto).
#include <stddef.h>
#include <stdint.h>

#include "proto/ifrt_proxy.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CwIfrt__IfrtRequest* r = cw_ifrt__ifrt_request__unpack(NULL, size, data);
  if (r) {
    // What the proxy reads of every request: its kind and op id.
    volatile uint64_t op = r->request_metadata ? r->request_metadata->op_id : 0;
    volatile int kind = (int)r->request_case;
    (void)op, (void)kind;
    cw_ifrt__ifrt_request__free_unpacked(r, NULL);
  }
  CwIfrt__GetVersionRequest* v = cw_ifrt__get_version_request__unpack(NULL, size, data);
  if (v) cw_ifrt__get_version_request__free_unpacked(v, NULL);
  CwIfrt__SessionMetadata* m = cw_ifrt__session_metadata__unpack(NULL, size, data);
  if (m) cw_ifrt__session_metadata__free_unpacked(m, NULL);
  return 0;
}
