// A one-device LAUNCH request for tests, built in place: its lists point
// into the struct, so build it where it is used and do not copy it.
#ifndef CW_TESTS_TEST_LAUNCH_H_
#define CW_TESTS_TEST_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#include "proto/causeway.pb-c.h"

typedef struct cw_test_launch_s {
  Causeway__V1__LaunchRequest req;
  Causeway__V1__IdList args, outputs;
  Causeway__V1__IdList* args_ptr;
  Causeway__V1__IdList* outputs_ptr;
  uint64_t arg_ids[4];
  uint64_t out;
  uint32_t donated;  // argument 0: what req.donate points at when set
} cw_test_launch_t;

// LAUNCH of `exe` on `n_args` (at most 4) arguments into `out`, carrying `seq`
// (0: unordered).
static inline void cw_test_launch_build(cw_test_launch_t* t, uint64_t exe, const uint64_t* args,
                                        size_t n_args, uint64_t out, uint64_t seq) {
  causeway__v1__launch_request__init(&t->req);
  causeway__v1__id_list__init(&t->args);
  causeway__v1__id_list__init(&t->outputs);
  for (size_t i = 0; i < n_args && i < 4; ++i) t->arg_ids[i] = args[i];
  t->args.ids = t->arg_ids;
  t->args.n_ids = n_args < 4 ? n_args : 4;
  t->out = out;
  t->donated = 0;
  t->outputs.ids = &t->out;
  t->outputs.n_ids = 1;
  t->args_ptr = &t->args;
  t->outputs_ptr = &t->outputs;
  t->req.exe_id = exe;
  t->req.args = &t->args_ptr;
  t->req.n_args = 1;
  t->req.outputs = &t->outputs_ptr;
  t->req.n_outputs = 1;
  t->req.seq = seq;
}

#endif  // CW_TESTS_TEST_LAUNCH_H_
