// Pins (cw_worker_pin.c): device memory read in place. In process, over the
// real CPU plugin with its buffer calls counted: pins of one buffer share a
// record and each holds PJRT's external reference; a buffer whose entry goes
// while pinned is destroyed with its last pin, an unpinned one at once; a
// plugin that cannot hold gives no pin. Against a real worker over raw
// frames: a DELETE (and a new array under the same id) while a 64 MiB
// DOWNLOAD is written from the buffer leaves the bytes written intact.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_worker_internal.h"
#include "cw_worker_pin.h"
#include "cw_worker_test_util.h"

// ---- In process -----------------------------------------------------------------

static const PJRT_Api* g_real;
static PJRT_Api g_shim;  // the plugin's table with the buffer calls counted
static int g_destroys, g_holds, g_unholds;

static PJRT_Error* counting_destroy(PJRT_Buffer_Destroy_Args* a) {
  g_destroys++;
  return g_real->PJRT_Buffer_Destroy(a);
}
static PJRT_Error* counting_hold(PJRT_Buffer_IncreaseExternalReferenceCount_Args* a) {
  g_holds++;
  return g_real->PJRT_Buffer_IncreaseExternalReferenceCount(a);
}
static PJRT_Error* counting_unhold(PJRT_Buffer_DecreaseExternalReferenceCount_Args* a) {
  g_unholds++;
  return g_real->PJRT_Buffer_DecreaseExternalReferenceCount(a);
}

// An f32[2] buffer on device 0.
static PJRT_Buffer* buffer(cw_pjrt_t* p) {
  static const float data[2] = {1, 2};
  static const int64_t dims[1] = {2};
  PJRT_Buffer* b = NULL;
  PJRT_Event* done = NULL;
  cw_status_t st =
      cw_pjrt_upload(p, data, PJRT_Buffer_Type_F32, dims, 1, NULL, 0, 0, NULL, false, &b, &done);
  if (st) fail_msg("upload: %s", cw_status_message(st));
  cw_pjrt_event_destroy(p, done);  // `data` is static: nothing to wait for
  return b;
}

static void test_pins_in_process(void** state) {
  (void)state;
  cw_pjrt_t* p = NULL;
  cw_status_t st = cw_pjrt_create(getenv("CAUSEWAY_PJRT_PLUGIN"), 1, &p);
  if (st) fail_msg("cw_pjrt_create: %s", cw_status_message(st));
  g_real = p->api;
  g_shim = *g_real;
  g_shim.PJRT_Buffer_Destroy = counting_destroy;
  g_shim.PJRT_Buffer_IncreaseExternalReferenceCount = counting_hold;
  g_shim.PJRT_Buffer_DecreaseExternalReferenceCount = counting_unhold;
  p->api = &g_shim;
  cw_worker_t* w = calloc(1, sizeof(*w));  // only its pjrt and pins are used
  w->pjrt = p;

  // Two pins of one buffer: one record, two holds.
  PJRT_Buffer* a = buffer(p);
  cw_pin_t* pa = cw_worker_pin(w, a);
  assert_non_null(pa);
  assert_ptr_equal(cw_worker_pin_buffer(pa), a);
  assert_ptr_equal(cw_worker_pin(w, a), pa);
  assert_int_equal(g_holds, 2);
  assert_true(cw_worker_pin_held(w, a));
  // Its entry goes while pinned: destroyed with the last pin, not before.
  cw_worker_pin_destroy_buffer(w, a);
  assert_int_equal(g_destroys, 0);
  cw_worker_pin_release(pa);
  assert_int_equal(g_unholds, 1);
  assert_true(cw_worker_pin_held(w, a));
  assert_int_equal(g_destroys, 0);
  cw_worker_pin_release(pa);
  assert_int_equal(g_unholds, 2);
  assert_false(cw_worker_pin_held(w, a));
  assert_int_equal(g_destroys, 1);
  assert_null(w->pins);

  // Pinned and released with its entry alive: the buffer stays; unpinned,
  // its entry going destroys it at once.
  PJRT_Buffer* b = buffer(p);
  PJRT_Buffer* c = buffer(p);
  cw_pin_t* pb = cw_worker_pin(w, b);
  cw_pin_t* pc = cw_worker_pin(w, c);
  assert_ptr_not_equal(pb, pc);
  cw_worker_pin_release(pb);
  assert_false(cw_worker_pin_held(w, b));
  assert_true(cw_worker_pin_held(w, c));
  assert_int_equal(g_destroys, 1);
  cw_worker_pin_destroy_buffer(w, b);
  assert_int_equal(g_destroys, 2);
  cw_worker_pin_release(pc);
  assert_int_equal(g_destroys, 2);
  cw_worker_pin_destroy_buffer(w, c);
  assert_int_equal(g_destroys, 3);
  cw_worker_pin_release(NULL);

  // A plugin that cannot hold a buffer gives no pin (the caller copies).
  g_shim.PJRT_Buffer_IncreaseExternalReferenceCount = NULL;
  PJRT_Buffer* d = buffer(p);
  assert_null(cw_worker_pin(w, d));
  assert_false(cw_worker_pin_held(w, d));
  assert_null(w->pins);
  cw_worker_pin_destroy_buffer(w, d);
  assert_int_equal(g_destroys, 4);

  free(w);
  p->api = g_real;
  cw_pjrt_release(p);
}

// ---- Against a real worker ------------------------------------------------------

static void test_delete_during_in_place_download(void** state) {
  (void)state;
  worker_t w;
  uint64_t sid = 0;
  int fd = start_client(&w, &sid);
  int64_t n = 16 << 20;  // 64 MiB of f32: far more than the socket buffers hold
  float* x = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  assert_int_equal(upload_vector(fd, 1, x, n), 0);

  // DOWNLOAD and DELETE back to back, nothing read yet: the worker writes
  // the bytes from the buffer while the DELETE is applied.
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 1;
  send_frame(fd, CW_MSG_DOWNLOAD, 9001, &d.base, NULL, 0);
  uint64_t id = 1;
  Causeway__V1__DeleteRequest del = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  del.ids = &id;
  del.n_ids = 1;
  send_frame(fd, CW_MSG_DELETE, 9002, &del.base, NULL, 0);

  // On a second connection of the session the id is gone, then made anew.
  int fd2 = dial(w.port);
  assert_int_equal(hello(fd2, sid, CAUSEWAY__V1__ROLE__ROLE_CLIENT, NULL), sid);
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 1;
  uint32_t code = 0;
  for (int tries = 0; tries < 500 && code != CW_NOT_FOUND; ++tries) {
    code = call(fd2, CW_MSG_AWAIT, &aw.base, NULL, 0, NULL);
    if (code != CW_NOT_FOUND) usleep(10000);
  }
  assert_int_equal(code, CW_NOT_FOUND);
  float small[6] = {9, 8, 7, 6, 5, 4};
  assert_int_equal(upload(fd2, 1, small, NULL, 24, 0), 0);

  // The download written meanwhile is the old array, whole; the DELETE is
  // acknowledged (in either order: the download may wait for its buffer).
  for (int i = 0; i < 2; ++i) {
    reply_t r;
    assert_true(recv_frame(fd, &r));
    assert_false(r.h.flags & CW_FRAME_ERROR);
    if (r.h.request_id == 9001) {
      assert_int_equal(r.h.bulk_len, (uint64_t)n * 4);
      assert_memory_equal(r.bulk, x, (size_t)n * 4);
    } else {
      assert_int_equal(r.h.request_id, 9002);
      assert_int_equal(r.h.type, CW_MSG_DELETE);
    }
    reply_free(&r);
  }
  expect_download(fd, 1, small);
  free(x);
  close(fd2);
  close(fd);
  stop_worker(&w);  // exit 0: the buffer went with its last pin (ASan: no leak)
}

int main(void) {
  if (!getenv("CAUSEWAY_PJRT_PLUGIN") || !*getenv("CAUSEWAY_PJRT_PLUGIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pins_in_process),
      cmocka_unit_test(test_delete_during_in_place_download),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
