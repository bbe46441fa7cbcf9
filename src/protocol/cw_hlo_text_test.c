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
  assert_null(cw_hlo_module_text(m, &text, &n));
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hlo_text_matches_xla),
      cmocka_unit_test(test_hlo_text_config_header_and_layouts),
      cmocka_unit_test(test_hlo_layouts_of_each_output),
      cmocka_unit_test(test_hlo_malformed_modules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
