// The decoded, indexed HLO module that cw_hlo_text.c prints and
// cw_hlo_cost.c prices: shared by the cw_hlo_* files only (cw_hlo_module.c
// builds it).
#ifndef CW_PROTOCOL_HLO_MODULE_INTERNAL_H_
#define CW_PROTOCOL_HLO_MODULE_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cw_hlo_text.h"
#include "proto/xla_hlo_module.pb-c.h"

typedef Causeway__Hlo__Instruction cw_hlo_instr_t;
typedef Causeway__Hlo__Shape cw_hlo_shape_t;

// XLA's PrimitiveType numbers that are not arrays of numbers.
enum { CW_HLO_TUPLE = 13, CW_HLO_OPAQUE = 14, CW_HLO_TOKEN = 17 };

typedef struct cw_hlo_iref_s {
  int64_t id;
  const cw_hlo_instr_t* in;
} cw_hlo_iref_t;

typedef struct cw_hlo_cref_s {
  int64_t id;
  size_t index;  // into comps
} cw_hlo_cref_t;

typedef struct cw_hlo_comp_s {
  const Causeway__Hlo__Computation* pb;
  cw_hlo_iref_t* by_id;  // sorted by id
  size_t n;
  const int64_t* order;  // the schedule's sequence, when it names every instruction
  size_t n_order;
} cw_hlo_comp_t;

struct cw_hlo_module_s {
  Causeway__Hlo__ModuleWithConfig* wc;  // owns the module when decoded with its config
  Causeway__Hlo__Module* own;           // ... else this
  const Causeway__Hlo__Module* mod;
  const Causeway__Hlo__ModuleConfig* config;  // NULL without one
  cw_hlo_comp_t* comps;                       // in the module's order
  size_t n_comps;
  cw_hlo_cref_t* comp_by_id;  // sorted by computation id
  const cw_hlo_comp_t* entry;
};

// NULL when the computation has no instruction with that id.
const cw_hlo_instr_t* cw_hlo_find_instr(const cw_hlo_comp_t* c, int64_t id);
// Its position in c->by_id; SIZE_MAX when there is none.
size_t cw_hlo_instr_index(const cw_hlo_comp_t* c, int64_t id);
// NULL when the module has no computation with that id.
const cw_hlo_comp_t* cw_hlo_find_comp(const cw_hlo_module_t* m, int64_t id);
// Whether opcode `op` is one of the NULL-terminated `set`.
bool cw_hlo_opcode_in(const char* op, const char* const* set);
// Elements of an array shape; -1 for a tuple, a negative dimension or an
// overflow.
int64_t cw_hlo_elements(const cw_hlo_shape_t* s);

#endif  // CW_PROTOCOL_HLO_MODULE_INTERNAL_H_
