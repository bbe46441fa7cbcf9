// Unit tests for pricing a compiled program: every key stock JAX 0.11.2's
// compiled.cost_analysis() gives, with its value, for 56 programs its CPU
// client compiled (testdata/hlo_cost, written by
// tools/gen_hlo_cost_testdata.py), and clear errors for modules that name
// what they do not have or call in circles.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "cw_hlo_cost.h"
#include "proto/xla_hlo_module.pb-c.h"

static uint8_t* slurp(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  uint8_t* buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static cw_status_t cost_of(const uint8_t* data, size_t len, cw_hlo_cost_t* out) {
  cw_hlo_module_t* m = NULL;
  cw_status_t st = cw_hlo_module_parse(data, len, false, &m);
  if (st) fail_msg("parse: %s", cw_status_message(st));
  st = cw_hlo_module_cost(m, out);
  cw_hlo_module_free(m);
  return st;
}

// Every key XLA gave, with its value (compared as XLA's float), and no other.
static void check_entries(const char* name, json_t* want, const cw_hlo_cost_t* got) {
  for (size_t i = 0; i < got->n_entries; i++) {
    json_t* v = json_object_get(want, got->entries[i].key);
    if (!v) fail_msg("%s: '%s' is %g where XLA gives none", name, got->entries[i].key,
                     got->entries[i].value);
    if ((float)json_number_value(v) != (float)got->entries[i].value) {
      fail_msg("%s: '%s' is %.17g where XLA gives %.17g", name, got->entries[i].key,
               got->entries[i].value, json_number_value(v));
    }
  }
  const char* key;
  json_t* v;
  json_object_foreach(want, key, v) {
    bool found = false;
    for (size_t i = 0; i < got->n_entries && !found; i++) found = !strcmp(got->entries[i].key, key);
    if (!found) fail_msg("%s: no '%s' where XLA gives %g", name, key, json_number_value(v));
  }
}

static double entry(const cw_hlo_cost_t* c, const char* key) {
  for (size_t i = 0; i < c->n_entries; i++) {
    if (!strcmp(c->entries[i].key, key)) return c->entries[i].value;
  }
  return 0;
}

static void test_cost_matches_xla(void** state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof(path), "%s/expected.json", CW_HLO_COST_TESTDATA);
  json_error_t err;
  json_t* all = json_load_file(path, 0, &err);
  if (!all) fail_msg("cannot read %s: %s", path, err.text);
  const char* name;
  json_t* want;
  int cases = 0;
  json_object_foreach(all, name, want) {
    snprintf(path, sizeof(path), "%s/%s.pb", CW_HLO_COST_TESTDATA, name);
    size_t len;
    uint8_t* pb = slurp(path, &len);
    cw_hlo_cost_t c;
    cw_status_t st = cost_of(pb, len, &c);
    if (st) fail_msg("%s: %s", name, cw_status_message(st));
    check_entries(name, want, &c);
    // The totals as fields too.
    assert_true(c.flops == entry(&c, "flops") && c.bytes_accessed == entry(&c, "bytes accessed"));
    cw_hlo_cost_free(&c);
    free(pb);
    cases++;
  }
  json_decref(all);
  assert_true(cases >= 40);  // every rule the programs exercise, not a truncated file
}

// A module of computations 0..n-1 ("c0" the entry), each of one
// instruction per entry in `ops` (ids from 1), for the cases below to dress.
typedef struct mod_s {
  Causeway__Hlo__Module mod;
  Causeway__Hlo__Computation comps[80];
  Causeway__Hlo__Computation* cps[80];
  Causeway__Hlo__Instruction ins[80][2];
  Causeway__Hlo__Instruction* ips[80][2];
  int64_t calls[80][1];
  char names[80][8];
  Causeway__Hlo__Shape f32x4;
  int64_t dims[2];
  Causeway__Hlo__Layout layout;
  uint8_t buf[65536];
} mod_t;

// n computations; each is a parameter (id 1) and a `call` of the next
// (id 2, the root); the last one's second instruction is a negate.
static size_t build_chain(mod_t* t, size_t n) {
  memset(t, 0, sizeof(*t));
  causeway__hlo__layout__init(&t->layout);
  causeway__hlo__shape__init(&t->f32x4);
  t->f32x4.element_type = 11;
  t->dims[0] = 4;
  t->f32x4.dimensions = t->dims;
  t->f32x4.n_dimensions = 1;
  t->f32x4.layout = &t->layout;
  causeway__hlo__module__init(&t->mod);
  t->mod.name = "m";
  t->mod.entry_computation_name = "c0";
  for (size_t i = 0; i < n; i++) {
    Causeway__Hlo__Computation* c = &t->comps[i];
    causeway__hlo__computation__init(c);
    snprintf(t->names[i], sizeof(t->names[i]), "c%zu", i);
    c->name = t->names[i];
    c->id = (int64_t)i;
    c->root_id = 2;
    Causeway__Hlo__Instruction* p = &t->ins[i][0];
    Causeway__Hlo__Instruction* b = &t->ins[i][1];
    causeway__hlo__instruction__init(p);
    causeway__hlo__instruction__init(b);
    p->name = "p";
    p->opcode = "parameter";
    p->id = 1;
    p->shape = &t->f32x4;
    b->name = "b";
    b->id = 2;
    b->shape = &t->f32x4;
    b->operand_ids = &p->id;
    b->n_operand_ids = 1;
    if (i + 1 < n) {
      b->opcode = "call";
      t->calls[i][0] = (int64_t)i + 1;
      b->called_computation_ids = t->calls[i];
      b->n_called_computation_ids = 1;
    } else {
      b->opcode = "negate";
    }
    t->ips[i][0] = p;
    t->ips[i][1] = b;
    c->instructions = t->ips[i];
    c->n_instructions = 2;
    t->cps[i] = c;
  }
  t->mod.computations = t->cps;
  t->mod.n_computations = n;
  return causeway__hlo__module__pack(&t->mod, t->buf);
}

static void expect_cost_error(mod_t* t, size_t len, const char* want) {
  cw_hlo_cost_t c;
  cw_status_t st = cost_of(t->buf, len, &c);
  if (!st) fail_msg("no error; wanted one with '%s'", want);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  if (!strstr(cw_status_message(st), want)) {
    fail_msg("error '%s' does not say '%s'", cw_status_message(st), want);
  }
  cw_status_free(st);
}

static void test_cost_follows_calls(void** state) {
  (void)state;
  mod_t* t = malloc(sizeof(*t));
  assert_non_null(t);
  // A call is priced as what it calls: one negate of 4 elements at the end.
  size_t len = build_chain(t, 3);
  cw_hlo_cost_t c;
  assert_null(cost_of(t->buf, len, &c));
  assert_true(c.flops == 4);
  assert_true(c.transcendentals == 0);
  assert_true(c.bytes_accessed == 32);  // the negate reads 16 bytes and writes 16
  assert_true(entry(&c, "bytes accessed0{}") == 16 && entry(&c, "bytes accessedout{}") == 16);
  cw_hlo_cost_free(&c);
  free(t);
}

// A parameter that is a tuple of 20,000 elements and a tuple instruction
// that names it 20,000 times: the parameter's size is computed once, not
// once per use (a review's probe; walking it per use took 40x as long).
static void test_cost_large_tuples(void** state) {
  (void)state;
  enum { N = 20000 };
  Causeway__Hlo__Layout layout = CAUSEWAY__HLO__LAYOUT__INIT;
  Causeway__Hlo__Shape leaf = CAUSEWAY__HLO__SHAPE__INIT, wide = leaf, one = leaf;
  leaf.element_type = 11;
  leaf.layout = &layout;
  Causeway__Hlo__Shape** leaves = malloc(N * sizeof(*leaves));
  int64_t* ids = malloc(N * sizeof(*ids));
  assert_true(leaves && ids);
  for (size_t i = 0; i < N; i++) {
    leaves[i] = &leaf;
    ids[i] = 1;
  }
  wide.element_type = one.element_type = 13;
  wide.tuple_shapes = leaves;
  wide.n_tuple_shapes = N;
  one.tuple_shapes = leaves;
  one.n_tuple_shapes = 1;
  Causeway__Hlo__Instruction p = CAUSEWAY__HLO__INSTRUCTION__INIT, t = p;
  p.name = "p";
  p.opcode = "parameter";
  p.id = 1;
  p.shape = &wide;
  t.name = "t";
  t.opcode = "tuple";
  t.id = 2;
  t.shape = &one;
  t.operand_ids = ids;
  t.n_operand_ids = N;
  Causeway__Hlo__Instruction* ins[2] = {&p, &t};
  Causeway__Hlo__Computation c = CAUSEWAY__HLO__COMPUTATION__INIT;
  c.name = "main";
  c.root_id = 2;
  c.instructions = ins;
  c.n_instructions = 2;
  Causeway__Hlo__Computation* cs[1] = {&c};
  Causeway__Hlo__Module mod = CAUSEWAY__HLO__MODULE__INIT;
  mod.name = "m";
  mod.entry_computation_name = "main";
  mod.computations = cs;
  mod.n_computations = 1;
  size_t len = causeway__hlo__module__get_packed_size(&mod);
  uint8_t* buf = malloc(len);
  assert_non_null(buf);
  assert_int_equal(causeway__hlo__module__pack(&mod, buf), len);
  cw_hlo_cost_t cost;
  assert_null(cost_of(buf, len, &cost));
  // A tuple moves its table (4 bytes an element) and reads none of its
  // operands; each operand position has its utilization.
  assert_true(cost.bytes_accessed == 4);
  assert_true(entry(&cost, "utilization19999{}") == 1);
  cw_hlo_cost_free(&cost);
  free(buf);
  free(ids);
  free(leaves);
}

static void test_cost_malformed_modules(void** state) {
  (void)state;
  mod_t* t = malloc(sizeof(*t));
  assert_non_null(t);
  // Calls nested past the limit.
  size_t len = build_chain(t, CW_HLO_COST_MAX_DEPTH + 5);
  expect_cost_error(t, len, "calls nest deeper than 64 levels");
  // A computation that calls itself.
  len = build_chain(t, 2);
  t->calls[0][0] = 0;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "computation 'c0' calls itself");
  // A call of a computation the module does not have.
  t->calls[0][0] = 42;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "instruction 'b' (call) in 'c0' calls computation 42, which the module does not have");
  // A call that names no computation at all.
  t->ins[0][1].n_called_computation_ids = 0;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "instruction 'b' (call) in 'c0' names no computation 0");
  // An operand the computation does not have.
  len = build_chain(t, 1);
  int64_t missing = 99;
  t->ins[0][1].operand_ids = &missing;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "instruction 'b' (negate) in 'c0' has no operand 0 in its computation");
  // A fusion whose fused parameter is numbered past its computation.
  len = build_chain(t, 2);
  t->ins[0][1].opcode = "fusion";
  t->ins[1][0].parameter_number = 1000;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "parameter 'p' of 'c1' has number 1000");
  // Sizes past a float's range.
  len = build_chain(t, 1);
  t->dims[0] = t->dims[1] = INT64_MAX;
  t->f32x4.n_dimensions = 2;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "'bytes accessed' is not finite: the program's shapes are too large");
  // A convolution with more kernel positions than causeway counts.
  len = build_chain(t, 1);
  Causeway__Hlo__Instruction* b = &t->ins[0][1];
  b->opcode = "convolution";
  int64_t operands[2] = {1, 1};
  b->operand_ids = operands;
  b->n_operand_ids = 2;
  Causeway__Hlo__ConvolutionDimensionNumbers d = CAUSEWAY__HLO__CONVOLUTION_DIMENSION_NUMBERS__INIT;
  int64_t spatial[1] = {0};
  d.kernel_spatial_dimensions = d.input_spatial_dimensions = d.output_spatial_dimensions = spatial;
  d.n_kernel_spatial_dimensions = d.n_input_spatial_dimensions = d.n_output_spatial_dimensions = 1;
  b->convolution_dimension_numbers = &d;
  Causeway__Hlo__WindowDimension wd = CAUSEWAY__HLO__WINDOW_DIMENSION__INIT;
  wd.size = 3;
  wd.stride = 1;
  Causeway__Hlo__WindowDimension* wds[1] = {&wd};
  Causeway__Hlo__Window w = CAUSEWAY__HLO__WINDOW__INIT;
  w.dimensions = wds;
  w.n_dimensions = 1;
  b->window = &w;
  t->dims[0] = 1 << 23;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "convolution 'b': more than 4194304 kernel positions in the module");
  // A stride past 2^31.
  t->dims[0] = 16;
  wd.stride = INT64_C(1) << 40;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  expect_cost_error(t, len, "convolution 'b': window dimension 0 has a size, stride, dilation or "
                            "padding out of range");
  // A million output positions, counted without visiting each: priced.
  wd.stride = 1;
  t->dims[0] = 1 << 20;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  cw_hlo_cost_t big;
  assert_null(cost_of(t->buf, len, &big));
  assert_true(big.flops > 0);
  cw_hlo_cost_free(&big);
  // The same convolution at a size XLA's programs have is priced.
  t->dims[0] = 16;
  len = causeway__hlo__module__pack(&t->mod, t->buf);
  cw_hlo_cost_t c;
  assert_null(cost_of(t->buf, len, &c));
  assert_true(c.flops > 0);
  cw_hlo_cost_free(&c);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cost_matches_xla),
      cmocka_unit_test(test_cost_follows_calls),
      cmocka_unit_test(test_cost_large_tuples),
      cmocka_unit_test(test_cost_malformed_modules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
