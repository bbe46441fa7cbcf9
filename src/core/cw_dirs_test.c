// cw_dirs_make: nested directories made 0700, an existing one accepted, a
// component that is a file or cannot be made named in the error.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_dirs.h"
#include "cw_test_util.h"

static void test_make(void** state) {
  (void)state;
  char base[] = "/tmp/cw-dirs-test-XXXXXX";
  assert_non_null(mkdtemp(base));
  char deep[128], file[128], under_file[160];
  snprintf(deep, sizeof(deep), "%s/a/b/c", base);
  CW_TEST_ASSERT_OK(cw_dirs_make(deep));
  struct stat sb;
  assert_int_equal(stat(deep, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0700);
  CW_TEST_ASSERT_OK(cw_dirs_make(deep));  // already there
  snprintf(file, sizeof(file), "%s/f", base);
  FILE* f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  cw_status_t s = cw_dirs_make(file);
  assert_int_equal(cw_status_code(s), CW_UNAVAILABLE);
  assert_non_null(strstr(cw_status_message(s), "is not a directory"));
  cw_status_free(s);
  snprintf(under_file, sizeof(under_file), "%s/f/g", base);
  s = cw_dirs_make(under_file);
  assert_int_equal(cw_status_code(s), CW_UNAVAILABLE);
  assert_non_null(strstr(cw_status_message(s), "mkdir"));
  cw_status_free(s);
  s = cw_dirs_make("/proc/cw-dirs-test/x");  // a place nobody may make directories
  assert_int_equal(cw_status_code(s), CW_UNAVAILABLE);
  assert_non_null(strstr(cw_status_message(s), "mkdir /proc/cw-dirs-test"));
  cw_status_free(s);
  s = cw_dirs_make("");
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  cw_status_free(s);
  unlink(file);
  for (int i = 0; i < 3; ++i) {
    rmdir(deep);
    *strrchr(deep, '/') = 0;
  }
  rmdir(base);
}

// A socket someone listens on is live; a path without one, or a socket file
// whose listener closed, is not.
static void test_socket_live(void** state) {
  (void)state;
  char dir[] = "/tmp/cw_dirs_sock.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof(path), "%s/s.sock", dir);
  assert_false(cw_dirs_socket_live(path));
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
  assert_int_equal(bind(l, (struct sockaddr*)&sun, sizeof(sun)), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_true(cw_dirs_socket_live(path));
  close(l);  // the file stays, nobody listens
  assert_false(cw_dirs_socket_live(path));
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_make),
                                     cmocka_unit_test(test_socket_live)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
