#include "cw_pjrt_test_fixture.h"

#include <stdio.h>
#include <stdlib.h>

int cw_pjrt_fixture_create(int devices, cw_pjrt_t** out) {
  cw_status_t st = cw_pjrt_create(getenv("CAUSEWAY_PJRT_PLUGIN"), devices, out);
  if (!st) return 0;
  fprintf(stderr, "cw_pjrt_create: %s\n", cw_status_message(st));
  cw_status_free(st);
  return -1;
}

int cw_pjrt_fixture_release(cw_pjrt_t** p) {
  cw_pjrt_release(*p);
  *p = NULL;
  return 0;
}
