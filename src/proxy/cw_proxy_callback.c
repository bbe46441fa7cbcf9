// Host callbacks: LoadedHostCallbackPoll and LoadedHostCallbackReturn.
// jaxlib's client hands the server a callback only for send/recv host
// callbacks, which JAX emits for TPUs; on CPU devices it refuses the program
// itself ("Unsupported host callback type"), and Compile refuses any program
// that comes with callbacks. So no session here has a callback: both
// requests name the handle they asked for, as XLA's server does for an
// unknown one.
#include "cw_proxy_internal.h"

cw_status_t cw_proxy_callback_handle(cw_proxy_session_t* s, const CwIfrt__IfrtRequest* req,
                                     CwIfrt__IfrtResponse* resp) {
  (void)s;
  (void)resp;
  if (req->request_case == CW_IFRT__IFRT_REQUEST__REQUEST_LOADED_HOST_CALLBACK_POLL_REQUEST) {
    return cw_make_status(
        CW_NOT_FOUND, "LoadedHostCallbackPoll: no host callback with handle %llu in this "
        "session (programs with host callbacks are not compiled by causeway-proxy)",
        (unsigned long long)req->loaded_host_callback_poll_request->loaded_host_callback_handle);
  }
  return cw_make_status(
      CW_NOT_FOUND, "LoadedHostCallbackReturn: no host callback execution %llu in this session",
      (unsigned long long)
          req->loaded_host_callback_return_request->host_callback_execution_handle);
}
