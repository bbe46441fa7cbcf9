// Unit tests of `causeway up`'s pieces that need no daemons: the state file
// (what `down` trusts to find the processes it signals) and the default
// state directory. tests/cluster/test_up.py runs up and down for real.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_up.h"

static void test_state_round_trip(void** state) {
  cw_up_state_t st;
  memset(&st, 0, sizeof(st));
  snprintf(st.controller, sizeof(st.controller), "/run/user/1000/causeway/controller.sock");
  for (int i = 0; i < 3; ++i) {
    snprintf(st.procs[i].name, sizeof(st.procs[i].name), i ? "worker-%d" : "controller", i - 1);
    st.procs[i].pid = 1000 + i;
    st.procs[i].start_time = 123456789012ull + (uint64_t)i;
  }
  st.num_procs = 3;
  char* text = cw_up_state_format(&st);
  assert_non_null(text);
  assert_string_equal(text,
                      "causeway-cluster 1\n"
                      "controller /run/user/1000/causeway/controller.sock\n"
                      "process controller 1000 123456789012\n"
                      "process worker-0 1001 123456789013\n"
                      "process worker-1 1002 123456789014\n");
  cw_up_state_t back;
  char err[256];
  assert_true(cw_up_state_parse(text, &back, err, sizeof(err)));
  assert_memory_equal(&back, &st, sizeof(st));
  free(text);
  // The most processes up starts, and a TCP address.
  st.num_procs = CW_UP_MAX_PROCS;
  for (size_t i = 3; i < CW_UP_MAX_PROCS; ++i) st.procs[i] = st.procs[1];
  snprintf(st.controller, sizeof(st.controller), "127.0.0.1:7000");
  text = cw_up_state_format(&st);
  assert_true(cw_up_state_parse(text, &back, err, sizeof(err)));
  assert_int_equal(back.num_procs, CW_UP_MAX_PROCS);
  assert_string_equal(back.controller, "127.0.0.1:7000");
  free(text);
}

static void test_state_refused(void** state) {
  static const struct {
    const char* text;
    const char* err;
  } cases[] = {
      {"", "not a causeway cluster state file"},
      {"causeway-cluster 2\ncontroller x\n", "not a causeway cluster state file"},
      {"causeway-cluster 1\n", "the state file names no controller"},
      {"causeway-cluster 1\ncontroller x", "the state file ends without a newline"},
      {"causeway-cluster 1\ncontroller x\nprocess w 1 5\n",
       "bad line in the state file: 'process w 1 5'"},  // pid 1 is never ours
      {"causeway-cluster 1\ncontroller x\nprocess w -5 5\n",
       "bad line in the state file: 'process w -5 5'"},
      {"causeway-cluster 1\ncontroller x\nprocess w 12 5 extra\n",
       "bad line in the state file: 'process w 12 5 extra'"},
      {"causeway-cluster 1\ncontroller x\nprocess w 12\n",
       "bad line in the state file: 'process w 12'"},
      {"causeway-cluster 1\ncontroller x\nsomething else\n",
       "bad line in the state file: 'something else'"},
      {"causeway-cluster 1\ncontroller \n", "bad line in the state file: 'controller '"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    cw_up_state_t st;
    char err[256];
    assert_false(cw_up_state_parse(cases[i].text, &st, err, sizeof(err)));
    assert_string_equal(err, cases[i].err);
  }
  // More processes than up ever starts.
  char* big = malloc(64 + 32 * (CW_UP_MAX_PROCS + 1));
  size_t n = (size_t)sprintf(big, "causeway-cluster 1\ncontroller x\n");
  for (int i = 0; i <= CW_UP_MAX_PROCS; ++i) n += (size_t)sprintf(big + n, "process w %d 1\n", 2 + i);
  cw_up_state_t st;
  char err[256];
  assert_false(cw_up_state_parse(big, &st, err, sizeof(err)));
  assert_string_equal(err, "bad line in the state file: 'process w 67 1'");
  free(big);
}

static void test_default_dir(void** state) {
  char dir[512], want[512];
  char* saved = getenv("XDG_RUNTIME_DIR") ? strdup(getenv("XDG_RUNTIME_DIR")) : NULL;
  char xdg[] = "/tmp/cw-up-test-XXXXXX";
  assert_non_null(mkdtemp(xdg));
  setenv("XDG_RUNTIME_DIR", xdg, 1);
  cw_up_default_dir(NULL, dir, sizeof(dir));
  snprintf(want, sizeof(want), "%s/causeway", xdg);
  assert_string_equal(dir, want);
  cw_up_default_dir("/my/dir", dir, sizeof(dir));
  assert_string_equal(dir, "/my/dir");
  char cwd[400];
  assert_non_null(getcwd(cwd, sizeof(cwd)));
  cw_up_default_dir("rel/dir", dir, sizeof(dir));  // the exports name it from anywhere
  snprintf(want, sizeof(want), "%s/rel/dir", cwd);
  assert_string_equal(dir, want);
  snprintf(want, sizeof(want), "/tmp/causeway-%u", (unsigned)geteuid());
  setenv("XDG_RUNTIME_DIR", "relative", 1);  // not absolute: ignored
  cw_up_default_dir(NULL, dir, sizeof(dir));
  assert_string_equal(dir, want);
  rmdir(xdg);
  setenv("XDG_RUNTIME_DIR", xdg, 1);  // gone (no session): ignored
  cw_up_default_dir(NULL, dir, sizeof(dir));
  assert_string_equal(dir, want);
  unsetenv("XDG_RUNTIME_DIR");
  cw_up_default_dir(NULL, dir, sizeof(dir));
  assert_string_equal(dir, want);
  if (saved) setenv("XDG_RUNTIME_DIR", saved, 1);
  free(saved);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_state_round_trip),
      cmocka_unit_test(test_state_refused),
      cmocka_unit_test(test_default_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
