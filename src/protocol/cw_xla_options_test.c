// Unit tests for XLA compile options: normalizing a client's options, the
// checks that keep the CPU plugin from aborting, rewriting device ids, and
// one worker's part of a program on an island of several workers.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_xla_options.h"
#include "proto/xla_compile_options.pb-c.h"


static cw_status_code_t normalize(const uint8_t* in, size_t len, size_t* out_len) {
  uint8_t* out = NULL;
  size_t n = 0;
  cw_status_t st = cw_xla_options_normalize(in, len, 4, &out, &n);
  cw_status_code_t code = cw_status_code(st);
  if (!st) {
    static cw_xla_options_info_t info;
    assert_null(cw_xla_options_check(out, n, 4, &info));  // what we hand on passes the check
  }
  cw_status_free(st);
  free(out);
  if (out_len) *out_len = n;
  return code;
}

static void test_xla_options_normalize(void** state) {
  size_t n;
  assert_int_equal(normalize(NULL, 0, &n), CW_OK);  // empty: one replica, one partition
  assert_true(n > 0);
  const uint8_t two_parts[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x02};
  assert_int_equal(normalize(two_parts, sizeof(two_parts), &n), CW_OK);
  assert_int_equal(n, sizeof(two_parts));
  const uint8_t only_partitions[] = {0x1a, 0x02, 0x28, 0x01};
  assert_int_equal(normalize(only_partitions, sizeof(only_partitions), NULL), CW_OK);
  const uint8_t too_many[] = {0x1a, 0x04, 0x20, 0x03, 0x28, 0x02};  // 6 > 4 devices
  assert_int_equal(normalize(too_many, sizeof(too_many), NULL), CW_INVALID_ARGUMENT);
  const uint8_t truncated[] = {0x1a, 0x09, 0x20};
  assert_int_equal(normalize(truncated, sizeof(truncated), NULL), CW_INVALID_ARGUMENT);
  // 1 replica x 2 computations: {0}, {1}.
  const uint8_t da_ok[] = {0x1a, 0x12, 0x20, 0x01, 0x28, 0x02, 0x4a, 0x0c, 0x08, 0x01, 0x10,
                           0x02, 0x1a, 0x02, 0x08, 0x00, 0x1a, 0x02, 0x08, 0x01};
  assert_int_equal(normalize(da_ok, sizeof(da_ok), NULL), CW_OK);
  // replica_count 0 in the assignment: refused (the plugin would abort).
  const uint8_t da_zero[] = {0x1a, 0x08, 0x20, 0x01, 0x4a, 0x04, 0x08, 0x00, 0x10, 0x01};
  assert_int_equal(normalize(da_zero, sizeof(da_zero), NULL), CW_INVALID_ARGUMENT);
  // Device id 9 does not exist.
  const uint8_t da_bad_id[] = {0x1a, 0x0c, 0x20, 0x01, 0x28, 0x01, 0x4a, 0x06, 0x08, 0x01, 0x10,
                               0x01, 0x1a, 0x02, 0x08, 0x09};
  assert_int_equal(normalize(da_bad_id, sizeof(da_bad_id), NULL), CW_INVALID_ARGUMENT);
}

static void test_xla_options(void** state) {
  static cw_xla_options_info_t info;
  uint8_t* data = NULL;
  size_t size = 0;
  assert_null(cw_xla_options_single_device(3, &data, &size));
  assert_null(cw_xla_options_check(data, size, 4, &info));
  assert_int_equal(info.num_replicas, 1);
  assert_int_equal(info.num_partitions, 1);
  assert_int_equal(info.num_assigned, 1);
  assert_int_equal(info.assigned[0], 3);
  cw_status_t s = cw_xla_options_check(data, size, 3, &info);  // id 3 of 3 devices
  assert_non_null(strstr(cw_status_message(s), "device id 3 is not one of the 3 devices"));
  cw_status_free(s);

  // Rewrite global id 3 -> local id 1; an unknown trailing field survives.
  uint8_t* extended = malloc(size + 3);
  memcpy(extended, data, size);
  extended[size] = 0x48;  // field 9 (allow_in_place_mlir_modification), varint
  extended[size + 1] = 0x01;
  extended[size + 2] = 0x00;
  int64_t map[] = {0, 0, 0, 1};
  uint8_t* out = NULL;
  size_t out_size = 0;
  assert_null(cw_xla_options_rewrite_devices(extended, size + 2, map, 4, &out, &out_size));
  assert_int_equal(out_size, size + 2);
  assert_memory_equal(out + out_size - 2, "\x48\x01", 2);
  assert_null(cw_xla_options_check(out, out_size, 2, &info));
  assert_int_equal(info.assigned[0], 1);
  free(out);
  free(extended);
  free(data);

  // Options the CPU plugin would abort on are refused here.
  s = cw_xla_options_check(NULL, 0, 4, &info);
  assert_non_null(strstr(cw_status_message(s), "executable_build_options is missing"));
  cw_status_free(s);
  const uint8_t zero_replicas[] = {0x1a, 0x02, 0x28, 0x01};  // only num_partitions=1
  s = cw_xla_options_check(zero_replicas, sizeof(zero_replicas), 4, &info);
  assert_non_null(strstr(cw_status_message(s), "must be at least 1"));
  cw_status_free(s);
  const uint8_t garbage[] = {0x1a, 0x7f};
  s = cw_xla_options_check(garbage, sizeof(garbage), 4, &info);
  assert_non_null(strstr(cw_status_message(s), "not a valid CompileOptionsProto"));
  cw_status_free(s);
  // 1 replica x 2 partitions but the assignment lists one computation.
  const uint8_t mismatch[] = {0x1a, 0x0e, 0x20, 0x01, 0x28, 0x02, 0x4a, 0x08,
                              0x08, 0x01, 0x10, 0x02, 0x1a, 0x02, 0x08, 0x00};
  s = cw_xla_options_check(mismatch, sizeof(mismatch), 4, &info);
  assert_non_null(strstr(cw_status_message(s), "device assignment is 1 replicas x 2"));
  cw_status_free(s);
}

// Options naming `ids` as `n` partitions (replicas: as n replicas of one computation).
static uint8_t* options_with(const int64_t* ids, size_t n, bool replicas, size_t* out_size) {
  Causeway__Xla__ComputationDevice cds[8], *cdp[8];
  for (size_t i = 0; i < n; ++i) {
    causeway__xla__computation_device__init(&cds[i]);
    cds[i].replica_device_ids = (int64_t*)(replicas ? ids : &ids[i]);
    cds[i].n_replica_device_ids = replicas ? n : 1;
    cdp[i] = &cds[i];
  }
  Causeway__Xla__DeviceAssignment da = CAUSEWAY__XLA__DEVICE_ASSIGNMENT__INIT;
  da.replica_count = replicas ? (int32_t)n : 1;
  da.computation_count = replicas ? 1 : (int32_t)n;
  da.computation_devices = cdp;
  da.n_computation_devices = replicas ? 1 : n;
  Causeway__Xla__ExecutableBuildOptions bo = CAUSEWAY__XLA__EXECUTABLE_BUILD_OPTIONS__INIT;
  bo.num_replicas = da.replica_count;
  bo.num_partitions = da.computation_count;
  bo.device_assignment = &da;
  Causeway__Xla__CompileOptions co = CAUSEWAY__XLA__COMPILE_OPTIONS__INIT;
  co.executable_build_options = &bo;
  *out_size = causeway__xla__compile_options__get_packed_size(&co);
  uint8_t* buf = malloc(*out_size);
  causeway__xla__compile_options__pack(&co, buf);
  return buf;
}

// One worker's part of a program on an island of several workers.
static void test_xla_options_part(void** state) {
  (void)state;
  static cw_xla_options_info_t info;
  const int64_t ids[4] = {0, 1, 0, 1};  // worker-local ids of two workers' devices
  for (int replicas = 0; replicas < 2; ++replicas) {
    size_t size = 0, out_size = 0;
    uint8_t* data = options_with(ids, 4, replicas, &size);
    uint8_t* out = NULL;
    assert_null(cw_xla_options_part(data, size, 2, 2, &out, &out_size));
    assert_null(cw_xla_options_check(out, out_size, 2, &info));
    assert_int_equal(info.num_assigned, 2);
    assert_int_equal(replicas ? info.num_replicas : info.num_partitions, 2);
    assert_int_equal(replicas ? info.num_partitions : info.num_replicas, 1);
    assert_int_equal(info.assigned[0], 0);
    assert_int_equal(info.assigned[1], 1);
    free(out);
    cw_status_t s = cw_xla_options_part(data, size, 3, 2, &out, &out_size);  // past the end
    assert_int_equal(cw_status_code(s), CW_OUT_OF_RANGE);
    cw_status_free(s);
    s = cw_xla_options_part(data, size, 0, 0, &out, &out_size);  // found by xla_options_fuzz
    assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
    cw_status_free(s);
    free(data);
  }
  // Two replicas of two partitions: no split by position.
  Causeway__Xla__ComputationDevice cds[2], *cdp[2];
  int64_t r0[2] = {0, 1}, r1[2] = {2, 3};
  for (int i = 0; i < 2; ++i) {
    causeway__xla__computation_device__init(&cds[i]);
    cds[i].replica_device_ids = i ? r1 : r0;
    cds[i].n_replica_device_ids = 2;
    cdp[i] = &cds[i];
  }
  Causeway__Xla__DeviceAssignment da = CAUSEWAY__XLA__DEVICE_ASSIGNMENT__INIT;
  da.replica_count = 2;
  da.computation_count = 2;
  da.computation_devices = cdp;
  da.n_computation_devices = 2;
  Causeway__Xla__ExecutableBuildOptions bo = CAUSEWAY__XLA__EXECUTABLE_BUILD_OPTIONS__INIT;
  bo.num_replicas = 2;
  bo.num_partitions = 2;
  bo.device_assignment = &da;
  Causeway__Xla__CompileOptions co = CAUSEWAY__XLA__COMPILE_OPTIONS__INIT;
  co.executable_build_options = &bo;
  uint8_t buf[256];
  size_t len = causeway__xla__compile_options__pack(&co, buf);
  uint8_t* out = NULL;
  size_t out_size = 0;
  cw_status_t s = cw_xla_options_part(buf, len, 0, 2, &out, &out_size);
  assert_int_equal(cw_status_code(s), CW_UNIMPLEMENTED);
  cw_status_free(s);
  s = cw_xla_options_part(NULL, 0, 0, 1, &out, &out_size);  // no assignment
  assert_int_equal(cw_status_code(s), CW_INVALID_ARGUMENT);
  cw_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_xla_options),
      cmocka_unit_test(test_xla_options_normalize),
      cmocka_unit_test(test_xla_options_part),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
