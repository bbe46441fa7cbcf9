// External references (cw_plugin_external.h). A mirror is read once per
// run of references and is never written after: JAX arrays are immutable,
// so a copy taken when the first reference asks is the array's value for
// as long as anyone holds the pointer. A donation or delete of the buffer
// leaves the mirror alone (it is not the worker's memory).
#include <pthread.h>
#include <stdlib.h>

#include "cw_plugin_error.h"
#include "cw_plugin_external.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_transfer.h"

// Guards every buffer's `mirror` (exports are rare; reads happen outside it).
static pthread_mutex_t cw__mirror_mu = PTHREAD_MUTEX_INITIALIZER;

#define CW__BUF(p) ((cw_plugin_buffer_t*)(p))

// The mirror of `b`, read if there is none; with `ref`, an external
// reference is counted under the same lock as the mirror is found or put
// in (a release in between cannot free it), and only once there is one:
// jaxlib takes a reference, then asks for the pointer, and gives nothing
// back when that fails, so a failure must leave the count as it was.
static cw_status_t cw__mirror(cw_plugin_buffer_t* b, bool ref, void** out) {
  pthread_mutex_lock(&cw__mirror_mu);
  void* have = b->mirror;
  if (have && ref) atomic_fetch_add_explicit(&b->external_refs, 1, memory_order_acq_rel);
  pthread_mutex_unlock(&cw__mirror_mu);
  if (have) {
    *out = have;
    return cw_ok_status();
  }
  uint64_t bytes = cw_plugin_buffer_bytes(b);
  if (!cw_plugin_buffer_dtype_size(b->type) || bytes != cw_plugin_buffer_device_bytes(b)) {
    // Sub-byte types are packed on the device, and their DLPack form is
    // the packed one: a read gives them unpacked.
    return cw_make_status(
        CW_UNIMPLEMENTED,
        "an external reference to the bytes of buffer %llu (element type %d) is not "
        "implemented by the causeway plugin: its bytes live in a worker and are packed there; "
        "np.asarray(x) copies them", (unsigned long long)b->id, (int)b->type);
  }
  if (bytes > SIZE_MAX - 1) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "buffer %llu of %llu bytes is too large to "
                          "mirror", (unsigned long long)b->id, (unsigned long long)bytes);
  }
  void* copy = malloc(bytes ? (size_t)bytes : 1);
  if (!copy) {
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte host copy of "
                          "buffer %llu", (unsigned long long)bytes, (unsigned long long)b->id);
  }
  // Read without the lock: another thread's export of another buffer (or of
  // this one, which then keeps the first copy in) need not wait for it.
  cw_status_t s = cw_plugin_transfer_read(b, copy, "an external reference to a buffer's bytes");
  if (s) {
    free(copy);
    return s;
  }
  pthread_mutex_lock(&cw__mirror_mu);
  if (!b->mirror) {
    b->mirror = copy;
    copy = NULL;
  }
  if (ref) atomic_fetch_add_explicit(&b->external_refs, 1, memory_order_acq_rel);
  *out = b->mirror;
  pthread_mutex_unlock(&cw__mirror_mu);
  free(copy);
  return cw_ok_status();
}

PJRT_Error* cw_plugin_buffer_increase_external_refs(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_IncreaseExternalReferenceCount_Args, buffer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_IncreaseExternalReferenceCount", "buffer");
  void* mirror = NULL;
  return cw_plugin_error_or_null(cw__mirror(CW__BUF(args->buffer), true, &mirror));
}

PJRT_Error* cw_plugin_buffer_decrease_external_refs(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_DecreaseExternalReferenceCount_Args, buffer);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_DecreaseExternalReferenceCount", "buffer");
  cw_plugin_buffer_t* b = CW__BUF(args->buffer);
  uint32_t refs = atomic_load_explicit(&b->external_refs, memory_order_acquire);
  do {
    if (refs == 0) {
      return cw_plugin_error_from_status(cw_make_status(
          CW_INVALID_ARGUMENT,
          "PJRT_Buffer_DecreaseExternalReferenceCount: buffer %llu holds no external reference",
          (unsigned long long)b->id));
    }
  } while (!atomic_compare_exchange_weak_explicit(&b->external_refs, &refs, refs - 1,
                                                  memory_order_acq_rel, memory_order_acquire));
  if (refs == 1) {
    // The last one: the mirror goes, unless a new reference came meanwhile
    // (its holder may have the pointer already).
    pthread_mutex_lock(&cw__mirror_mu);
    if (atomic_load_explicit(&b->external_refs, memory_order_acquire) == 0) {
      free(b->mirror);
      b->mirror = NULL;
    }
    pthread_mutex_unlock(&cw__mirror_mu);
  }
  return NULL;
}

PJRT_Error* cw_plugin_buffer_opaque_pointer(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args, device_memory_ptr);
  CW_PLUGIN_NEED(args->buffer, "PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "buffer");
  return cw_plugin_error_or_null(cw__mirror(CW__BUF(args->buffer), false,
                                            &args->device_memory_ptr));
}

PJRT_Error* cw_plugin_client_create_view(PJRT_Client_CreateViewOfDeviceBuffer_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Client_CreateViewOfDeviceBuffer_Args, buffer);
  // INVALID_ARGUMENT, not UNIMPLEMENTED: jaxlib's DLPack import takes it as
  // "this memory cannot be viewed" and copies (unless asked not to copy).
  return cw_plugin_error_from_status(cw_make_status(
      CW_INVALID_ARGUMENT,
      "PJRT_Client_CreateViewOfDeviceBuffer: a causeway buffer lives in a worker's memory and "
      "cannot be a view of this process's memory; copy the array in instead "
      "(jax.dlpack.from_dlpack copies unless copy=False)"));
}

void cw_plugin_external_release(cw_plugin_buffer_t* b) {
  // A buffer being freed has no other user (PJRT_Buffer_Destroy's contract),
  // and a mirror put in under the lock was put in before the buffer reached
  // this thread: most have none, and take no process-wide lock here.
  if (!b->mirror) return;
  pthread_mutex_lock(&cw__mirror_mu);
  free(b->mirror);
  b->mirror = NULL;
  pthread_mutex_unlock(&cw__mirror_mu);
}
