// The fixture of the worker integration tests (worker_*_test.c): real
// causeway-worker daemons with XLA's real CPU PJRT plugin, driven through the
// C client library. Programs, inputs and stock JAX's outputs come from
// tests/gen_programs.py (the gen_programs CTest fixture writes them to
// $CW_PROGRAMS_DIR, read here as "the manifest"). Each suite gets two
// workers: A reached over TCP (127.0.0.1:0) and B over a Unix socket, with a
// client on each, and ends with a clean SIGTERM shutdown (exit 0: under ASan
// that means no leaks).
//
// Comparisons are exact. Worker and stock JAX run the same XLA build on the
// same machine, and the SPMD case uses integer-valued floats so its
// all-reduce is exact in any order; a tolerance would only hide bugs.
#ifndef CW_TESTS_TEST_INTEGRATION_H_
#define CW_TESTS_TEST_INTEGRATION_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cw_client.h"
#include "cw_test_util.h"

#define MAX_CASES 32
#define MAX_DEVICES 8
#define MAX_ARGS 8
#define MAX_OUTS 4
#define MAX_RANK 8
#define WORKER_DEVICES 4

// ---- The manifest written by gen_programs.py --------------------------------

typedef struct array_s {
  int dtype;  // proto DType wire number
  size_t rank;
  int64_t dims[MAX_RANK];
  void* data;
  size_t size;
} array_t;

typedef struct test_case_s {
  char name[64];
  char format[16];  // text, bytecode or portable: all sent as "mlir"
  int devices;
  void* program;
  size_t program_size;
  void* options;
  size_t options_size;
  size_t num_args;     // per device
  size_t num_outputs;  // per device
  array_t in[MAX_DEVICES][MAX_ARGS];
  array_t out[MAX_DEVICES][MAX_OUTS];
} test_case_t;

typedef struct reject_case_s {
  void* program;
  size_t program_size;
  void* options;
  size_t options_size;
  char expect[256];  // a substring of XLA's error text
} reject_case_t;

// The manifest, the workers and their clients (set up by itest_group_setup).
typedef struct itest_s {
  char programs_dir[1024];
  char tmpdir[256];
  test_case_t cases[MAX_CASES];
  size_t num_cases;
  reject_case_t reject;
  cw_test_worker_t a;  // TCP
  cw_test_worker_t b;  // Unix socket
  cw_client_t* ca;
  cw_client_t* cb;
  uint64_t next_id;
} itest_t;
extern itest_t g;

// A fresh object id.
uint64_t new_id(void);

// Bytes per element of a proto DType (0: unknown).
size_t dtype_size(int dtype);

// The manifest's case `name`; fails the test if there is none.
test_case_t* find_case(const char* name);

// ---- Status helpers ----------------------------------------------------------

// Fails the test with the status's code and message unless it is OK.
#define ASSERT_OK CW_TEST_ASSERT_OK

// Asserts `status` is an error whose message contains `needle` (if non-NULL),
// prints it, and frees it.
void expect_error(cw_status_t status, const char* needle, const char* what);

// Completion recorder for pipelined requests whose status we want to see.
typedef struct completion_s {
  cw_status_t status;
  bool done;
} completion_t;

// A cw_client_done_fn recording into a completion_t.
void on_done(void* user, cw_status_t status, const ProtobufCMessage* reply);

// Flushes `client` and returns the completion's status (taken).
cw_status_t finish(cw_client_t* client, completion_t* c);

// STATS of the client's worker (free_msg it).
Causeway__V1__Stats* get_stats(cw_client_t* client);

// Frees a decoded message (NULL is fine).
void free_msg(void* msg);

// ---- Array helpers -----------------------------------------------------------

// Uploads `arr` as `id` on `device`, detached (errors surface at flush).
void upload(cw_client_t* client, uint64_t id, const array_t* arr, int device);

// Prints the first element where `got` differs from `want`.
void print_mismatch(const char* what, const array_t* want, const uint8_t* got);

// Downloads `id` and asserts dtype, dims, device and bytes equal `want`.
void expect_array(cw_client_t* client, uint64_t id, const array_t* want, int device,
                  const char* what);

// Ids of one run of a case: inputs and outputs per device.
typedef struct run_ids_s {
  uint64_t args[MAX_DEVICES][MAX_ARGS];
  uint64_t outs[MAX_DEVICES][MAX_OUTS];
  const uint64_t* arg_rows[MAX_DEVICES];
  const uint64_t* out_rows[MAX_DEVICES];
} run_ids_t;

// Fresh ids for one run of `c`.
void make_ids(const test_case_t* c, run_ids_t* ids);

// Deletes a run's inputs and outputs and flushes.
void delete_ids(cw_client_t* client, const test_case_t* c, const run_ids_t* ids);

// Compiles `c` under a fresh id; fails the test on error.
uint64_t compile_case(cw_client_t* client, const test_case_t* c);

// Uploads the inputs, launches `exe`, compares every output with stock JAX's.
void run_compiled(cw_client_t* client, uint64_t exe, const test_case_t* c,
                  const char* where);

// Compiles and runs `c` on `client`, compares, and deletes everything.
void run_case(cw_client_t* client, const test_case_t* c, const char* where);

// ---- Setup and teardown ------------------------------------------------------

// Group setup: loads the manifest, starts workers A and B and connects a
// client to each. The teardown kills what is left.
int itest_group_setup(void** state);
int itest_group_teardown(void** state);
// The last case of every suite: releases the clients, SIGTERMs both workers
// and requires exit 0.
void itest_test_clean_shutdown(void** state);

#endif  // CW_TESTS_TEST_INTEGRATION_H_
