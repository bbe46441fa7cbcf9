// Unit tests for futures and the PJRT_Event slots: the first completion
// wins, waits and OnReady callbacks see it whichever comes first, every
// event is one reference (a callback may drop the last one), and the slots
// refuse NULL events, too-small args and reading an error before it exists;
// a launch's callbacks handed back run on the next caller or the runner.
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cw_plugin_error.h"
#include "cw_plugin_event.h"

// The code and message of `e`, which is destroyed.
typedef struct error_s {
  PJRT_Error_Code code;
  char message[256];
} pjrt_error_t;

static pjrt_error_t take_error(PJRT_Error* e) {
  pjrt_error_t out = {PJRT_Error_Code_OK, ""};
  assert_non_null(e);
  PJRT_Error_GetCode_Args g = {.struct_size = sizeof(g), .error = e};
  assert_null(cw_plugin_error_get_code(&g));
  out.code = g.code;
  PJRT_Error_Message_Args m = {.struct_size = sizeof(m), .error = e};
  cw_plugin_error_message(&m);
  snprintf(out.message, sizeof(out.message), "%.*s", (int)m.message_size, m.message);
  PJRT_Error_Destroy_Args d = {.struct_size = sizeof(d), .error = e};
  cw_plugin_error_destroy(&d);
  return out;
}

static void destroy_event(PJRT_Event* ev) {
  PJRT_Event_Destroy_Args a = {.struct_size = sizeof(a), .event = ev};
  assert_null(cw_plugin_event_destroy(&a));
}

static bool is_ready(PJRT_Event* ev) {
  PJRT_Event_IsReady_Args a = {.struct_size = sizeof(a), .event = ev};
  assert_null(cw_plugin_event_is_ready(&a));
  return a.is_ready;
}

// What an OnReady callback saw.
typedef struct seen_s {
  int calls;
  pjrt_error_t error;
  PJRT_Event* drop;  // destroyed by the callback when set
} seen_t;

static void on_ready(PJRT_Error* error, void* user) {
  seen_t* seen = user;
  seen->calls++;
  if (error) seen->error = take_error(error);  // the callback owns it
  if (seen->drop) destroy_event(seen->drop);
}

static void on_ready_add(PJRT_Event* ev, seen_t* seen) {
  PJRT_Event_OnReady_Args a = {
      .struct_size = sizeof(a), .event = ev, .callback = on_ready, .user_arg = seen};
  assert_null(cw_plugin_event_on_ready(&a));
}

static void test_first_completion_wins(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  assert_non_null(f);
  assert_false(cw_plugin_future_is_done(f));
  cw_plugin_future_complete(f, cw_make_status(CW_NOT_FOUND, "first"));
  cw_plugin_future_complete(f, cw_ok_status());
  cw_plugin_future_complete(f, cw_make_status(CW_INTERNAL, "third"));  // freed, not kept
  assert_true(cw_plugin_future_is_done(f));
  cw_status_t s = cw_plugin_future_wait(f);
  assert_int_equal(cw_status_code(s), CW_NOT_FOUND);
  assert_string_equal(cw_status_message(s), "first");
  cw_status_free(s);
  // Each wait hands out its own copy.
  s = cw_plugin_future_wait(f);
  assert_string_equal(cw_status_message(s), "first");
  cw_status_free(s);
  cw_plugin_future_release(f);
  cw_plugin_future_release(NULL);  // ignored
}

static void test_create_done(void** state) {
  (void)state;
  cw_plugin_future_t* ok = cw_plugin_future_create_done(cw_ok_status());
  assert_true(cw_plugin_future_is_done(ok));
  assert_null(cw_plugin_future_wait(ok));
  cw_plugin_future_t* bad = cw_plugin_future_create_done(cw_make_status(CW_ABORTED, "no"));
  cw_status_t s = cw_plugin_future_wait(bad);
  assert_int_equal(cw_status_code(s), CW_ABORTED);
  cw_status_free(s);
  cw_plugin_future_release(ok);
  cw_plugin_future_release(bad);
}

static void* complete_later(void* arg) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  cw_plugin_future_complete(arg, cw_make_status(CW_UNAVAILABLE, "worker w (a) is unavailable"));
  return NULL;
}

static void test_wait_blocks_until_another_thread_completes(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  PJRT_Event* ev = cw_plugin_event_from_future(f);  // the event's own reference
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_later, f), 0);
  PJRT_Event_Await_Args a = {.struct_size = sizeof(a), .event = ev};
  pjrt_error_t e = take_error(cw_plugin_event_await(&a));
  assert_int_equal(e.code, PJRT_Error_Code_UNAVAILABLE);
  assert_string_equal(e.message, "worker w (a) is unavailable");
  assert_true(is_ready(ev));
  pthread_join(t, NULL);
  cw_plugin_future_release(f);
  destroy_event(ev);  // the last reference
}

// The poll before a sleep (CAUSEWAY_WAIT_SPIN_US): it sees a completion from
// another thread within its budget, gives up after the budget, and with none
// does not poll at all.
typedef struct {
  cw_plugin_future_t* f;
  int calls;
} taker_t;

// Completes the future on its third call, as a reply taken off the socket.
static void take_third(void* arg) {
  taker_t* t = arg;
  if (++t->calls == 3) cw_plugin_future_complete(t->f, NULL);
}

// `take` runs before each poll and may complete the future itself: the spin
// sees it at once, and calls it no more.
static void test_spin_takes_before_each_poll(void** state) {
  (void)state;
  taker_t t = {.f = cw_plugin_future_create()};
  assert_true(cw_plugin_future_spin(t.f, 60 * 1000 * 1000, take_third, &t));
  assert_int_equal(t.calls, 3);
  assert_true(cw_plugin_future_spin(t.f, 1000, take_third, &t));  // done: not called
  assert_int_equal(t.calls, 3);
  cw_plugin_future_release(t.f);
}

static void test_spin_polls_within_its_budget(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  assert_false(cw_plugin_future_spin(f, 0, NULL, NULL));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_false(cw_plugin_future_spin(f, 2000, NULL, NULL));  // nobody completes it
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int64_t waited_us = (t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
  assert_true(waited_us >= 2000);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_later, f), 0);  // in 20 ms
  assert_true(cw_plugin_future_spin(f, 60 * 1000 * 1000, NULL, NULL));
  assert_true(cw_plugin_future_spin(f, 0, NULL, NULL));  // done: true at once
  pthread_join(t, NULL);
  cw_plugin_future_release(f);
}

static void test_on_ready_before_and_after_completion(void** state) {
  (void)state;
  PJRT_Event_Create_Args c = {.struct_size = sizeof(c)};
  assert_null(cw_plugin_event_create(&c));
  PJRT_Event* ev = c.event;
  assert_false(is_ready(ev));
  seen_t before = {0}, after = {0};
  on_ready_add(ev, &before);
  assert_int_equal(before.calls, 0);

  PJRT_Event_Set_Args s = {.struct_size = sizeof(s),
                           .event = ev,
                           .error_code = PJRT_Error_Code_DATA_LOSS,
                           .error_message = "lost it and more",
                           .error_message_size = 7};
  assert_null(cw_plugin_event_set(&s));
  assert_int_equal(before.calls, 1);  // ran on the completing thread
  assert_int_equal(before.error.code, PJRT_Error_Code_DATA_LOSS);
  assert_string_equal(before.error.message, "lost it");

  on_ready_add(ev, &after);  // already complete: runs at once
  assert_int_equal(after.calls, 1);
  assert_string_equal(after.error.message, "lost it");

  PJRT_Event_Error_Args er = {.struct_size = sizeof(er), .event = ev};
  pjrt_error_t e = take_error(cw_plugin_event_error(&er));
  assert_int_equal(e.code, PJRT_Error_Code_DATA_LOSS);
  destroy_event(ev);
}

static void test_event_set_ok_and_error_of_ok(void** state) {
  (void)state;
  PJRT_Event_Create_Args c = {.struct_size = sizeof(c)};
  assert_null(cw_plugin_event_create(&c));
  seen_t seen = {0};
  on_ready_add(c.event, &seen);
  PJRT_Event_Set_Args s = {
      .struct_size = sizeof(s), .event = c.event, .error_code = PJRT_Error_Code_OK};
  assert_null(cw_plugin_event_set(&s));
  assert_int_equal(seen.calls, 1);
  assert_int_equal(seen.error.code, PJRT_Error_Code_OK);  // no error given
  PJRT_Event_Error_Args er = {.struct_size = sizeof(er), .event = c.event};
  assert_null(cw_plugin_event_error(&er));
  PJRT_Event_Await_Args a = {.struct_size = sizeof(a), .event = c.event};
  assert_null(cw_plugin_event_await(&a));
  destroy_event(c.event);
}

// A callback may destroy the event it waits on, even when that drops the
// future's last reference (AddressSanitizer checks nothing is used after).
static void test_callback_drops_last_reference(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  PJRT_Event* ev = cw_plugin_event_from_future(f);
  seen_t keeps = {0}, drops = {.drop = ev};
  on_ready_add(ev, &drops);     // the first runs first: `keeps` runs after the drop
  on_ready_add(ev, &keeps);     // the second and later ones are allocated
  cw_plugin_future_release(f);  // the event's reference is the last one
  cw_plugin_future_complete(f, cw_ok_status());
  assert_int_equal(keeps.calls, 1);
  assert_int_equal(drops.calls, 1);
}

// The first callback lives in the future, later ones in a list: each runs
// once at completion; a future dropped uncompleted frees them unrun.
static void test_many_callbacks(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  PJRT_Event* ev = cw_plugin_event_from_future(f);
  seen_t seen[4] = {0};
  for (int i = 0; i < 4; ++i) on_ready_add(ev, &seen[i]);
  for (int i = 0; i < 4; ++i) assert_int_equal(seen[i].calls, 0);
  cw_plugin_future_complete(f, cw_make_status(CW_ABORTED, "stopped"));
  for (int i = 0; i < 4; ++i) {
    assert_int_equal(seen[i].calls, 1);
    assert_int_equal(seen[i].error.code, PJRT_Error_Code_ABORTED);
    assert_string_equal(seen[i].error.message, "stopped");
  }
  cw_plugin_future_complete(f, cw_ok_status());  // ignored: nothing runs again
  for (int i = 0; i < 4; ++i) assert_int_equal(seen[i].calls, 1);
  destroy_event(ev);
  cw_plugin_future_release(f);

  cw_plugin_future_t* g = cw_plugin_future_create();
  PJRT_Event* gev = cw_plugin_event_from_future(g);
  seen_t never[3] = {0};
  for (int i = 0; i < 3; ++i) on_ready_add(gev, &never[i]);
  destroy_event(gev);
  cw_plugin_future_release(g);  // the last reference (AddressSanitizer checks the list)
  for (int i = 0; i < 3; ++i) assert_int_equal(never[i].calls, 0);
}

// A launch's worker rides on its future.
static void test_ctx(void** state) {
  (void)state;
  cw_plugin_future_t* f = cw_plugin_future_create();
  assert_null(cw_plugin_future_ctx(f));
  int worker;
  cw_plugin_future_set_ctx(f, &worker);
  assert_ptr_equal(cw_plugin_future_ctx(f), &worker);
  cw_plugin_future_release(f);
}

static void test_slots_refuse_bad_calls(void** state) {
  (void)state;
  PJRT_Event_IsReady_Args r = {.struct_size = sizeof(r), .event = NULL};
  pjrt_error_t e = take_error(cw_plugin_event_is_ready(&r));
  assert_int_equal(e.code, PJRT_Error_Code_INVALID_ARGUMENT);
  assert_string_equal(e.message, "PJRT_Event_IsReady: event is NULL");

  PJRT_Event_Await_Args small = {.struct_size = 8};
  e = take_error(cw_plugin_event_await(&small));
  assert_int_equal(e.code, PJRT_Error_Code_INVALID_ARGUMENT);
  assert_non_null(strstr(e.message, "struct_size 8 too small"));
  e = take_error(cw_plugin_event_await(NULL));
  assert_non_null(strstr(e.message, "args missing"));

  PJRT_Event_Create_Args c = {.struct_size = sizeof(c)};
  assert_null(cw_plugin_event_create(&c));
  PJRT_Event_OnReady_Args o = {.struct_size = sizeof(o), .event = c.event, .callback = NULL};
  e = take_error(cw_plugin_event_on_ready(&o));
  assert_string_equal(e.message, "PJRT_Event_OnReady: callback is NULL");
  // Its error cannot be read before it exists.
  PJRT_Event_Error_Args er = {.struct_size = sizeof(er), .event = c.event};
  e = take_error(cw_plugin_event_error(&er));
  assert_int_equal(e.code, PJRT_Error_Code_FAILED_PRECONDITION);
  destroy_event(c.event);
}

// ---- Handing callbacks back (cw_plugin_future_complete_handback) --------------

typedef struct hb_seen_s {
  _Atomic int calls;
  int order;
  pthread_t thread;
  PJRT_Error_Code code;
} hb_seen_t;

static int g_hb_order;  // callbacks run one at a time in these tests

static void hb_on_ready(PJRT_Error* error, void* user) {
  hb_seen_t* seen = user;
  seen->thread = pthread_self();
  seen->code = error ? take_error(error).code : PJRT_Error_Code_OK;
  seen->order = ++g_hb_order;
  atomic_fetch_add(&seen->calls, 1);  // last: another thread may be watching
}

static void hb_add(cw_plugin_future_t* f, hb_seen_t* seen) {
  PJRT_Event_OnReady_Args a = {.struct_size = sizeof(a),
                               .event = (PJRT_Event*)f,
                               .callback = hb_on_ready,
                               .user_arg = seen};
  assert_null(cw_plugin_event_on_ready(&a));
}

typedef struct completer_s {
  cw_plugin_future_t* f;
  cw_status_t status;
  pthread_t self;
} completer_t;

static void* complete_handback_main(void* arg) {
  completer_t* c = arg;
  c->self = pthread_self();
  cw_plugin_future_complete_handback(c->f, c->status);
  return NULL;
}

// Completes c->f with c->status on a thread of its own, as the reader does.
static void complete_elsewhere(completer_t* c) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_handback_main, c), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

// A launch's callbacks wait for the next caller and run there, in completion
// order; the future itself is done at once. (The runner's limit is set far
// out, so that only the caller can run them here.)
static void test_handback_runs_on_the_next_caller(void** state) {
  (void)state;
  cw_plugin_future_set_handback_us(60 * 1000000LL);
  g_hb_order = 0;
  // Static: a failed assertion must not leave the list pointing into a dead frame.
  static hb_seen_t a, b, late;
  completer_t ca = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  completer_t cb = {.f = cw_plugin_future_create(),
                    .status = cw_make_status(CW_ABORTED, "launch failed")};
  hb_add(ca.f, &a);
  hb_add(cb.f, &b);
  complete_elsewhere(&ca);
  complete_elsewhere(&cb);
  assert_true(cw_plugin_future_is_done(ca.f));
  assert_true(cw_plugin_future_is_done(cb.f));
  assert_int_equal(atomic_load(&a.calls), 0);
  assert_int_equal(atomic_load(&b.calls), 0);
  // Registered after completion: runs at once, whatever is still handed back.
  hb_add(ca.f, &late);
  assert_int_equal(atomic_load(&late.calls), 1);

  cw_plugin_future_run_handed_back();
  assert_int_equal(atomic_load(&a.calls), 1);
  assert_int_equal(atomic_load(&b.calls), 1);
  assert_true(pthread_equal(a.thread, pthread_self()));
  assert_true(pthread_equal(b.thread, pthread_self()));
  assert_true(a.order < b.order);
  assert_int_equal(a.code, PJRT_Error_Code_OK);
  assert_int_equal(b.code, PJRT_Error_Code_ABORTED);
  cw_plugin_future_run_handed_back();  // nothing left: nothing runs twice
  assert_int_equal(atomic_load(&a.calls), 1);
  cw_plugin_future_release(ca.f);
  cw_plugin_future_release(cb.f);
  cw_plugin_future_set_handback_us(1000);
}

// Nothing is held for a future someone waits on or with hand-back off;
// PJRT_Event_Await runs what was handed back.
static void test_handback_not_when_waited_for_or_off(void** state) {
  (void)state;
  cw_plugin_future_set_handback_us(60 * 1000000LL);
  static hb_seen_t waited, off, held;
  completer_t cw = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  hb_add(cw.f, &waited);
  cw_plugin_future_expect_wait(cw.f);
  complete_elsewhere(&cw);
  assert_int_equal(atomic_load(&waited.calls), 1);
  assert_true(pthread_equal(waited.thread, cw.self));

  completer_t ch = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  hb_add(ch.f, &held);
  complete_elsewhere(&ch);
  assert_int_equal(atomic_load(&held.calls), 0);
  PJRT_Event_Await_Args aw = {.struct_size = sizeof(aw), .event = (PJRT_Event*)cw.f};
  assert_null(cw_plugin_event_await(&aw));  // a caller about to wait runs it first
  assert_int_equal(atomic_load(&held.calls), 1);
  assert_true(pthread_equal(held.thread, pthread_self()));

  cw_plugin_future_set_handback_us(0);
  completer_t co = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  hb_add(co.f, &off);
  complete_elsewhere(&co);
  assert_int_equal(atomic_load(&off.calls), 1);
  assert_true(pthread_equal(off.thread, co.self));

  cw_plugin_future_release(cw.f);
  cw_plugin_future_release(ch.f);
  cw_plugin_future_release(co.f);
  cw_plugin_future_set_handback_us(1000);
}

// Callbacks no caller takes are run by the runner thread, neither the
// completer nor this one; twice, so that it also wakes from idle again.
static void test_handback_runner_runs_what_nobody_takes(void** state) {
  (void)state;
  cw_plugin_future_set_handback_us(1000);
  static hb_seen_t seen[2];
  for (int round = 0; round < 2; ++round) {
    completer_t c = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
    hb_add(c.f, &seen[round]);
    complete_elsewhere(&c);
    // A generous bound, not a timing claim: the runner is due after 1 ms.
    for (int i = 0; i < 10000 && !atomic_load(&seen[round].calls); ++i) {
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    assert_int_equal(atomic_load(&seen[round].calls), 1);
    assert_false(pthread_equal(seen[round].thread, pthread_self()));
    assert_false(pthread_equal(seen[round].thread, c.self));
    cw_plugin_future_release(c.f);
  }
}

typedef struct spinner_s {
  _Atomic bool stop;
  _Atomic bool called;
} spinner_t;

// Calls into the plugin (becoming its last caller), then keeps a core busy:
// a thread that is runnable, as a JAX thread waiting for a core is.
static void* spin_main(void* arg) {
  spinner_t* sp = arg;
  cw_plugin_future_run_handed_back();
  atomic_store(&sp->called, true);
  while (!atomic_load(&sp->stop)) {
  }
  return NULL;
}

static void wait_called(hb_seen_t* seen) {
  for (int i = 0; i < 10000 && !atomic_load(&seen->calls); ++i) {
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

// While the plugin's last caller is runnable, the runner leaves its
// callbacks to it, up to 16 times the limit; once it is gone, the runner
// takes them. The limit is 100 ms (without the rule they would run after
// 100), the cap 1.6 s, far past the 300 ms this thread sleeps. Then, with
// a limit of 10 ms, the cap (160 ms) passes while the caller still spins.
static void test_handback_runner_leaves_a_runnable_caller_its_callbacks(void** state) {
  (void)state;
  static hb_seen_t seen, capped;
  cw_plugin_future_set_handback_us(100 * 1000);
  completer_t c = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  hb_add(c.f, &seen);
  spinner_t sp = {0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, spin_main, &sp), 0);
  while (!atomic_load(&sp.called)) sched_yield();
  complete_elsewhere(&c);
  nanosleep(&(struct timespec){0, 300 * 1000000}, NULL);  // 3 limits
  assert_int_equal(atomic_load(&seen.calls), 0);
  atomic_store(&sp.stop, true);
  assert_int_equal(pthread_join(t, NULL), 0);  // gone: not runnable
  wait_called(&seen);
  assert_int_equal(atomic_load(&seen.calls), 1);
  assert_false(pthread_equal(seen.thread, pthread_self()));
  cw_plugin_future_release(c.f);

  cw_plugin_future_set_handback_us(10 * 1000);
  spinner_t sp2 = {0};
  assert_int_equal(pthread_create(&t, NULL, spin_main, &sp2), 0);
  while (!atomic_load(&sp2.called)) sched_yield();
  completer_t c2 = {.f = cw_plugin_future_create(), .status = cw_ok_status()};
  hb_add(c2.f, &capped);
  complete_elsewhere(&c2);
  wait_called(&capped);
  int calls = atomic_load(&capped.calls);  // read while the caller still spins
  atomic_store(&sp2.stop, true);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(calls, 1);
  assert_false(pthread_equal(capped.thread, pthread_self()));
  cw_plugin_future_release(c2.f);
  cw_plugin_future_set_handback_us(1000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_completion_wins),
      cmocka_unit_test(test_create_done),
      cmocka_unit_test(test_wait_blocks_until_another_thread_completes),
      cmocka_unit_test(test_spin_polls_within_its_budget),
      cmocka_unit_test(test_spin_takes_before_each_poll),
      cmocka_unit_test(test_on_ready_before_and_after_completion),
      cmocka_unit_test(test_event_set_ok_and_error_of_ok),
      cmocka_unit_test(test_callback_drops_last_reference),
      cmocka_unit_test(test_many_callbacks),
      cmocka_unit_test(test_ctx),
      cmocka_unit_test(test_slots_refuse_bad_calls),
      cmocka_unit_test(test_handback_runs_on_the_next_caller),
      cmocka_unit_test(test_handback_not_when_waited_for_or_off),
      cmocka_unit_test(test_handback_runner_runs_what_nobody_takes),
      cmocka_unit_test(test_handback_runner_leaves_a_runnable_caller_its_callbacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
