// Unit tests for reading a compiled program back: HLO text equal to what
// XLA's own printer wrote for the same modules (testdata/hlo_text, from
// stock JAX 0.11.2's CPU client; the modules are the fuzzer's seeds), the
// header a module's config adds, entry layouts, and malformed modules.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_hlo_text.h"
#include "proto/xla_hlo_module.pb-c.h"

static char* slurp(const char* dir, const char* name, const char* ext, size_t* len) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s%s", dir, name, ext);
  FILE* f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  char* buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 65536;
      buf = realloc(buf, cap + 1);
      assert_non_null(buf);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got) break;
    n += got;
  }
  fclose(f);
  buf[n] = 0;
  *len = n;
  return buf;
}

static char* text_of(const uint8_t* data, size_t len, bool with_config) {
  cw_hlo_module_t* m = NULL;
  cw_status_t st = cw_hlo_module_parse(data, len, with_config, &m);
  if (st) fail_msg("parse: %s", cw_status_message(st));
  char* text = NULL;
  size_t n = 0;
  assert_null(cw_hlo_module_text(m, SIZE_MAX, &text, &n));
  assert_int_equal(strlen(text), n);
  cw_hlo_module_free(m);
  return text;
}

// Everything after the header line, which holds the config's part (these
// modules were saved without their config).
static const char* body(const char* text) {
  const char* nl = strchr(text, '\n');
  assert_non_null(nl);
  return nl;
}

static void test_hlo_text_matches_xla(void** state) {
  static const char* const names[] = {"add",    "while",  "allreduce", "psumscatter", "cond",
                                      "linalg", "constbf", "const2",   "alltoall",    "printcb",
                                      "memhost", "rng",   "switch"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    size_t plen, tlen;
    char* pb = slurp(CW_HLO_CORPUS, names[i], ".pb", &plen);
    char* want = slurp(CW_HLO_TESTDATA, names[i], ".txt", &tlen);
    char* got = text_of((const uint8_t*)pb, plen, false);
    if (strcmp(body(want), body(got))) {
      // The first line that differs, to read in the failure.
      const char *a = body(want), *b = body(got);
      while (*a && *a == *b) a++, b++;
      while (a > want && a[-1] != '\n') a--, b--;
      fail_msg("%s: XLA wrote\n%.200s\nwe wrote\n%.200s", names[i], a, b);
    }
    // The header's own part: the module's name, its schedule, its layout.
    assert_non_null(strstr(got, "HloModule jit__lambda, is_scheduled=true, "
                                "entry_computation_layout={"));
    free(pb);
    free(want);
    free(got);
  }
}

// A module with a config, built around a saved module: the header gains the
// config's entry layout (with its memory space), partitions and propagation.
static void test_hlo_text_config_header_and_layouts(void** state) {
  size_t plen;
  char* pb = slurp(CW_HLO_CORPUS, "memhost", ".pb", &plen);
  Causeway__Hlo__Module* mod = causeway__hlo__module__unpack(NULL, plen, (uint8_t*)pb);
  assert_non_null(mod);
  int64_t m2m[2] = {1, 0};
  int64_t dims[2] = {1, 8};
  Causeway__Hlo__Layout lay = CAUSEWAY__HLO__LAYOUT__INIT;
  lay.minor_to_major = m2m;
  lay.n_minor_to_major = 2;
  lay.memory_space = 5;
  Causeway__Hlo__Shape shp = CAUSEWAY__HLO__SHAPE__INIT;
  shp.element_type = 11;
  shp.dimensions = dims;
  shp.n_dimensions = 2;
  shp.layout = &lay;
  Causeway__Hlo__Shape* params[1] = {&shp};
  Causeway__Hlo__ProgramShape ps = CAUSEWAY__HLO__PROGRAM_SHAPE__INIT;
  ps.parameters = params;
  ps.n_parameters = 1;
  ps.result = &shp;
  protobuf_c_boolean allow[2] = {false, true};
  Causeway__Hlo__ModuleConfig cfg = CAUSEWAY__HLO__MODULE_CONFIG__INIT;
  cfg.entry_computation_layout = &ps;
  cfg.num_partitions = 8;
  cfg.allow_spmd_sharding_propagation_to_output = allow;
  cfg.n_allow_spmd_sharding_propagation_to_output = 2;
  cfg.allow_spmd_sharding_propagation_to_parameters = allow;
  cfg.n_allow_spmd_sharding_propagation_to_parameters = 1;  // all false: not printed
  Causeway__Hlo__ModuleWithConfig wc = CAUSEWAY__HLO__MODULE_WITH_CONFIG__INIT;
  wc.hlo_module = mod;
  wc.config = &cfg;
  size_t n = causeway__hlo__module_with_config__get_packed_size(&wc);
  uint8_t* bytes = malloc(n);
  assert_non_null(bytes);
  causeway__hlo__module_with_config__pack(&wc, bytes);

  char* got = text_of(bytes, n, true);
  const char* want_header =
      "HloModule jit__lambda, is_scheduled=true, "
      "entry_computation_layout={(f32[1,8]{1,0:S(5)})->f32[1,8]{1,0:S(5)}}, "
      "allow_spmd_sharding_propagation_to_output={false,true}, num_partitions=8\n";
  assert_memory_equal(got, want_header, strlen(want_header));
  free(got);

  // Layouts: minor-to-major as given, the memory space left out.
  cw_hlo_module_t* m;
  assert_null(cw_hlo_module_parse(bytes, n, true, &m));
  for (int outputs = 0; outputs < 2; outputs++) {
    ProtobufCBinaryData* l;
    size_t nl;
    assert_null(cw_hlo_module_layouts(m, outputs, &l, &nl));
    assert_int_equal(nl, 1);
    Causeway__Hlo__Layout* back = causeway__hlo__layout__unpack(NULL, l[0].len, l[0].data);
    assert_non_null(back);
    assert_int_equal(back->n_minor_to_major, 2);
    assert_int_equal(back->minor_to_major[0], 1);
    assert_int_equal(back->minor_to_major[1], 0);
    assert_int_equal(back->memory_space, 0);
    causeway__hlo__layout__free_unpacked(back, NULL);
    cw_hlo_layouts_free(l, nl);
  }
  cw_hlo_module_free(m);
  free(bytes);
  causeway__hlo__module__free_unpacked(mod, NULL);
  free(pb);
}

// Output layouts of a tuple result: one per element; from the module's own
// program shape when there is no config.
static void test_hlo_layouts_of_each_output(void** state) {
  size_t plen;
  char* pb = slurp(CW_HLO_CORPUS, "rng", ".pb", &plen);
  cw_hlo_module_t* m;
  assert_null(cw_hlo_module_parse((uint8_t*)pb, plen, false, &m));
  ProtobufCBinaryData* l;
  size_t nl;
  assert_null(cw_hlo_module_layouts(m, false, &l, &nl));
  assert_int_equal(nl, 1);  // the key
  cw_hlo_layouts_free(l, nl);
  assert_null(cw_hlo_module_layouts(m, true, &l, &nl));
  assert_int_equal(nl, 1);
  Causeway__Hlo__Layout* back = causeway__hlo__layout__unpack(NULL, l[0].len, l[0].data);
  assert_non_null(back);
  assert_int_equal(back->n_minor_to_major, 1);  // f32[4]{0}
  causeway__hlo__layout__free_unpacked(back, NULL);
  cw_hlo_layouts_free(l, nl);
  cw_hlo_module_free(m);
  free(pb);
}

static void expect_error(const uint8_t* data, size_t len, bool with_config, const char* words) {
  cw_hlo_module_t* m = NULL;
  cw_status_t st = cw_hlo_module_parse(data, len, with_config, &m);
  assert_non_null(st);
  assert_null(m);
  if (!strstr(cw_status_message(st), words)) {
    fail_msg("'%s' does not say '%s'", cw_status_message(st), words);
  }
  cw_status_free(st);
}

static void test_hlo_malformed_modules(void** state) {
  const uint8_t junk[] = {0xff, 0xff, 0xff};
  expect_error(junk, sizeof(junk), false, "not a serialized XLA HLO module (3 bytes)");
  expect_error(junk, sizeof(junk), true, "not a serialized XLA HLO module with config");

  // No computation named as the entry.
  Causeway__Hlo__Module mod = CAUSEWAY__HLO__MODULE__INIT;
  mod.name = "m";
  mod.entry_computation_name = "main";
  mod.entry_computation_id = 7;
  uint8_t buf[4096];
  size_t n = causeway__hlo__module__pack(&mod, buf);
  expect_error(buf, n, false, "no entry computation (id 7, name 'main')");

  // Two instructions with one id.
  Causeway__Hlo__Instruction a = CAUSEWAY__HLO__INSTRUCTION__INIT, b = a;
  a.name = "a";
  a.opcode = "parameter";
  a.id = 1;
  b.name = "b";
  b.opcode = "negate";
  b.id = 1;
  Causeway__Hlo__Instruction* ins[2] = {&a, &b};
  Causeway__Hlo__Computation c = CAUSEWAY__HLO__COMPUTATION__INIT;
  c.name = "main";
  c.id = 7;
  c.root_id = 1;
  c.instructions = ins;
  c.n_instructions = 2;
  Causeway__Hlo__Computation* cs[1] = {&c};
  mod.computations = cs;
  mod.n_computations = 1;
  n = causeway__hlo__module__pack(&mod, buf);
  expect_error(buf, n, false, "computation 'main' has two instructions with id 1");

  // Dangling references print as such; a computation that calls itself
  // prints once.
  b.id = 2;
  int64_t missing[1] = {99};
  b.operand_ids = missing;
  b.n_operand_ids = 1;
  int64_t self[1] = {7};
  b.called_computation_ids = self;
  b.n_called_computation_ids = 1;
  c.root_id = 2;
  n = causeway__hlo__module__pack(&mod, buf);
  char* text = text_of(buf, n, false);
  assert_non_null(strstr(text, "ROOT %b = () negate(%<instruction 99>), calls=%main\n"));
  const char* entry = strstr(text, "ENTRY %main (");
  assert_non_null(entry);
  assert_null(strstr(entry + strlen("ENTRY %main ("), "%main ("));
  assert_ptr_equal(strstr(text, "%main ("), entry + strlen("ENTRY "));
  free(text);
  // Layouts need a program shape.
  cw_hlo_module_t* m;
  assert_null(cw_hlo_module_parse(buf, n, false, &m));
  ProtobufCBinaryData* l;
  size_t nl;
  cw_status_t st = cw_hlo_module_layouts(m, true, &l, &nl);
  assert_int_equal(cw_status_code(st), CW_NOT_FOUND);
  cw_status_free(st);
  cw_hlo_module_free(m);
}

// One computation 'main' of instructions a (parameter) and b (negate of a,
// the root), for the cases below to dress.
typedef struct tiny_s {
  Causeway__Hlo__Instruction a, b;
  Causeway__Hlo__Instruction* ins[2];
  Causeway__Hlo__Computation c;
  Causeway__Hlo__Computation* cs[1];
  Causeway__Hlo__Module mod;
  int64_t ops[1];
} tiny_t;

static void tiny_init(tiny_t* t) {
  Causeway__Hlo__Instruction i0 = CAUSEWAY__HLO__INSTRUCTION__INIT;
  t->a = i0;
  t->b = i0;
  t->a.name = "a";
  t->a.opcode = "parameter";
  t->a.id = 1;
  t->b.name = "b";
  t->b.opcode = "negate";
  t->b.id = 2;
  t->ops[0] = 1;
  t->b.operand_ids = t->ops;
  t->b.n_operand_ids = 1;
  t->ins[0] = &t->a;
  t->ins[1] = &t->b;
  Causeway__Hlo__Computation c0 = CAUSEWAY__HLO__COMPUTATION__INIT;
  t->c = c0;
  t->c.name = "main";
  t->c.id = 7;
  t->c.root_id = 2;
  t->c.instructions = t->ins;
  t->c.n_instructions = 2;
  t->cs[0] = &t->c;
  Causeway__Hlo__Module m0 = CAUSEWAY__HLO__MODULE__INIT;
  t->mod = m0;
  t->mod.name = "m";
  t->mod.entry_computation_id = 7;
  t->mod.computations = t->cs;
  t->mod.n_computations = 1;
}

static uint8_t* tiny_pack(const tiny_t* t, size_t* n) {
  *n = causeway__hlo__module__get_packed_size(&t->mod);
  uint8_t* buf = malloc(*n);
  assert_non_null(buf);
  causeway__hlo__module__pack(&t->mod, buf);
  return buf;
}

// The module's text holds `want`.
static void tiny_expect(const tiny_t* t, const char* want) {
  size_t n;
  uint8_t* buf = tiny_pack(t, &n);
  char* text = text_of(buf, n, false);
  if (!strstr(text, want)) fail_msg("no\n%s\nin\n%s", want, text);
  free(text);
  free(buf);
}

static size_t put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

// protobuf-c recurses into nested messages without a bound: a program shape
// of tuples 100000 deep overflowed the stack before the walk refused it.
static void test_hlo_deep_nesting_refused(void** state) {
  // Written back to front: each level's header goes before what it holds.
  const int levels = 100000;
  size_t cap = 16 * (size_t)levels + 64, at = cap;
  uint8_t* buf = malloc(cap);
  assert_non_null(buf);
  uint8_t head[16];
  buf[--at] = 11;  // element_type F32, innermost
  buf[--at] = 0x10;
  for (int i = 0; i < levels + 2; i++) {
    size_t k = 0, len = cap - at;
    bool shape = i < levels;  // then ProgramShape{result}, Module{host_program_shape}
    if (shape) {
      head[k++] = 0x10;  // element_type TUPLE
      head[k++] = 13;
    }
    head[k++] = shape ? 0x22 : i == levels ? 0x12 : 0x22;  // tuple_shapes / result / shape
    k += put_varint(head + k, len);
    at -= k;
    memcpy(buf + at, head, k);
  }
  expect_error(buf + at, cap - at, false, "HLO module nests messages deeper than 64 levels");
  free(buf);
}

// Each reference prints the name it refers to: 5000 references to a name of
// 1000 bytes would be 5 MB of text from 20 kB of module. The limit holds.
static void test_hlo_text_size_limit(void** state) {
  tiny_t t;
  tiny_init(&t);
  char name[1001];
  memset(name, 'x', 1000);
  name[1000] = 0;
  t.a.name = name;
  int64_t* refs = malloc(5000 * sizeof(*refs));
  assert_non_null(refs);
  for (int i = 0; i < 5000; i++) refs[i] = 1;
  t.b.operand_ids = refs;
  t.b.n_operand_ids = 5000;
  size_t n;
  uint8_t* buf = tiny_pack(&t, &n);
  assert_true(n < 30000);
  cw_hlo_module_t* m;
  assert_null(cw_hlo_module_parse(buf, n, false, &m));
  char* text = NULL;
  size_t len = 0;
  cw_status_t st = cw_hlo_module_text(m, 65536, &text, &len);
  assert_int_equal(cw_status_code(st), CW_RESOURCE_EXHAUSTED);
  assert_string_equal(cw_status_message(st),
                      "the HLO text of module 'm' is longer than 65536 bytes");
  assert_null(text);
  cw_status_free(st);
  assert_null(cw_hlo_module_text(m, SIZE_MAX, &text, &len));  // without a limit: all of it
  assert_true(len > 5000 * 1000);
  free(text);
  cw_hlo_module_free(m);
  free(buf);
  free(refs);
}

// Constants: an empty array with a huge leading dimension (a brace group per
// index) prints as a large one does; half floats with their own digits.
static void test_hlo_constants(void** state) {
  tiny_t t;
  tiny_init(&t);
  int64_t dims[2] = {INT64_MAX, 0};
  Causeway__Hlo__Shape shape = CAUSEWAY__HLO__SHAPE__INIT;
  shape.element_type = 4;
  shape.dimensions = dims;
  shape.n_dimensions = 2;
  Causeway__Hlo__Literal lit = CAUSEWAY__HLO__LITERAL__INIT;
  t.b.opcode = "constant";
  t.b.n_operand_ids = 0;
  t.b.shape = &shape;
  t.b.literal = &lit;
  tiny_expect(&t, "ROOT %b = s32[9223372036854775807,0] constant({...})\n");

  int64_t two[1] = {2};
  shape.element_type = 10;  // F16: 0.1 and 1000, as XLA prints them
  shape.dimensions = two;
  shape.n_dimensions = 1;
  uint8_t halves[4] = {0x66, 0x2e, 0xd0, 0x63};
  lit.f16s.data = halves;
  lit.f16s.len = 4;
  tiny_expect(&t, "ROOT %b = f16[2] constant({0.099976, 1000})\n");
  lit.f16s.len = 3;  // short of data
  tiny_expect(&t, "ROOT %b = f16[2] constant({...})\n");
}

// A schedule that names one instruction twice is not the computation's
// order: the module's own order prints, each instruction once.
static void test_hlo_schedule_must_be_a_permutation(void** state) {
  tiny_t t;
  tiny_init(&t);
  int64_t seq[2] = {2, 2};
  Causeway__Hlo__InstructionSequence is = CAUSEWAY__HLO__INSTRUCTION_SEQUENCE__INIT;
  is.instruction_ids = seq;
  is.n_instruction_ids = 2;
  Causeway__Hlo__ScheduleEntry e = CAUSEWAY__HLO__SCHEDULE_ENTRY__INIT;
  e.key = 7;
  e.value = &is;
  Causeway__Hlo__ScheduleEntry* es[1] = {&e};
  Causeway__Hlo__Schedule sch = CAUSEWAY__HLO__SCHEDULE__INIT;
  sch.sequences = es;
  sch.n_sequences = 1;
  t.mod.schedule = &sch;
  const char* want = "ENTRY %main (a: ()) -> () {\n  %a = () parameter(0)\n"
                     "  ROOT %b = () negate(%a)\n}\n";
  tiny_expect(&t, want);
  seq[0] = 1;  // a permutation: printed in its order (here the same)
  tiny_expect(&t, want);
}

// The parameters a run may donate: those an output aliases.
static void test_hlo_aliased_params(void** state) {
  size_t plen;
  char* pb = slurp(CW_HLO_CORPUS, "donate", ".pb", &plen);  // jit(donate_argnums=0)
  cw_hlo_module_t* m;
  assert_null(cw_hlo_module_parse((uint8_t*)pb, plen, false, &m));
  uint32_t* v;
  size_t n;
  assert_null(cw_hlo_module_aliased_params(m, &v, &n));
  assert_int_equal(n, 1);
  assert_int_equal(v[0], 0);
  free(v);
  cw_hlo_module_free(m);
  free(pb);
  pb = slurp(CW_HLO_CORPUS, "add", ".pb", &plen);  // nothing donated
  assert_null(cw_hlo_module_parse((uint8_t*)pb, plen, false, &m));
  assert_null(cw_hlo_module_aliased_params(m, &v, &n));
  assert_int_equal(n, 0);
  assert_null(v);
  cw_hlo_module_free(m);
  free(pb);

  // Four parameters; two outputs alias parameter 3, one parameter 1.
  Causeway__Hlo__Instruction ps[4];
  Causeway__Hlo__Instruction* pp[4];
  char names[4][8];
  for (int i = 0; i < 4; i++) {
    Causeway__Hlo__Instruction p0 = CAUSEWAY__HLO__INSTRUCTION__INIT;
    ps[i] = p0;
    snprintf(names[i], sizeof(names[i]), "p%d", i);
    ps[i].name = names[i];
    ps[i].opcode = "parameter";
    ps[i].parameter_number = i;
    ps[i].id = i + 1;
    pp[i] = &ps[i];
  }
  tiny_t t;
  tiny_init(&t);
  t.c.instructions = pp;
  t.c.n_instructions = 4;
  t.c.root_id = 4;
  Causeway__Hlo__AliasEntry e1 = CAUSEWAY__HLO__ALIAS_ENTRY__INIT, e2 = e1, e3 = e1;
  e1.parameter_number = 3;
  e2.parameter_number = 3;
  e3.parameter_number = 1;
  Causeway__Hlo__AliasEntry* es[3] = {&e1, &e2, &e3};
  Causeway__Hlo__InputOutputAlias io = CAUSEWAY__HLO__INPUT_OUTPUT_ALIAS__INIT;
  io.entries = es;
  io.n_entries = 3;
  t.mod.input_output_alias = &io;
  uint8_t* buf = tiny_pack(&t, &n);
  assert_null(cw_hlo_module_parse(buf, n, false, &m));
  size_t k;
  assert_null(cw_hlo_module_aliased_params(m, &v, &k));
  assert_int_equal(k, 2);
  assert_int_equal(v[0], 1);
  assert_int_equal(v[1], 3);
  free(v);
  cw_hlo_module_free(m);
  free(buf);
  // Refused: a parameter out of range (either way), a part of a tuple.
  static const struct {
    int64_t param;
    bool tupled;
    const char* says;
  } bad[] = {{-1, false, "HLO module 'm' aliases an output to parameter -1 of 4"},
             {4, false, "HLO module 'm' aliases an output to parameter 4 of 4"},
             {0, true, "HLO module 'm' aliases an output to a part of tupled parameter 0 of 4"}};
  int64_t index[1] = {1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e3.parameter_number = bad[i].param;
    e3.parameter_shape_index = bad[i].tupled ? index : NULL;
    e3.n_parameter_shape_index = bad[i].tupled ? 1 : 0;
    buf = tiny_pack(&t, &n);
    assert_null(cw_hlo_module_parse(buf, n, false, &m));
    cw_status_t st = cw_hlo_module_aliased_params(m, &v, &k);
    assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
    assert_string_equal(cw_status_message(st), bad[i].says);
    cw_status_free(st);
    cw_hlo_module_free(m);
    free(buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hlo_text_matches_xla),
      cmocka_unit_test(test_hlo_text_config_header_and_layouts),
      cmocka_unit_test(test_hlo_layouts_of_each_output),
      cmocka_unit_test(test_hlo_malformed_modules),
      cmocka_unit_test(test_hlo_deep_nesting_refused),
      cmocka_unit_test(test_hlo_text_size_limit),
      cmocka_unit_test(test_hlo_constants),
      cmocka_unit_test(test_hlo_schedule_must_be_a_permutation),
      cmocka_unit_test(test_hlo_aliased_params),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
