// The in-process PJRT client that cw_pjrt's own tests share: XLA's CPU plugin
// ($CAUSEWAY_PJRT_PLUGIN) behind cw_pjrt, for a cmocka group's setup and
// teardown.
#ifndef CW_WORKER_PJRT_TEST_FIXTURE_H_
#define CW_WORKER_PJRT_TEST_FIXTURE_H_

#include "cw_pjrt.h"

// Creates *out with `devices` CPU devices: 0, or -1 after printing why.
int cw_pjrt_fixture_create(int devices, cw_pjrt_t** out);
// Releases *p (NULL: nothing) and clears it. Returns 0, as cmocka's teardown.
int cw_pjrt_fixture_release(cw_pjrt_t** p);

#endif  // CW_WORKER_PJRT_TEST_FIXTURE_H_
