// An XLA HLO module decoded and indexed: computations and instructions by
// id, the schedule's order where it is whole, the entry computation.
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cw_hlo_module_internal.h"
#include "cw_pb_nesting.h"

static int cw__cmp_cref(const void* a, const void* b) {
  int64_t x = ((const cw_hlo_cref_t*)a)->id, y = ((const cw_hlo_cref_t*)b)->id;
  return (x > y) - (x < y);
}

static int cw__cmp_iref(const void* a, const void* b) {
  int64_t x = ((const cw_hlo_iref_t*)a)->id, y = ((const cw_hlo_iref_t*)b)->id;
  return (x > y) - (x < y);
}

size_t cw_hlo_instr_index(const cw_hlo_comp_t* c, int64_t id) {
  cw_hlo_iref_t key = {.id = id};
  const cw_hlo_iref_t* r = bsearch(&key, c->by_id, c->n, sizeof(key), cw__cmp_iref);
  return r ? (size_t)(r - c->by_id) : SIZE_MAX;
}

const cw_hlo_instr_t* cw_hlo_find_instr(const cw_hlo_comp_t* c, int64_t id) {
  size_t i = cw_hlo_instr_index(c, id);
  return i == SIZE_MAX ? NULL : c->by_id[i].in;
}

bool cw_hlo_opcode_in(const char* op, const char* const* set) {
  for (; *set; set++) {
    if (!strcmp(op, *set)) return true;
  }
  return false;
}

const cw_hlo_comp_t* cw_hlo_find_comp(const cw_hlo_module_t* m, int64_t id) {
  cw_hlo_cref_t key = {.id = id};
  const cw_hlo_cref_t* r = bsearch(&key, m->comp_by_id, m->n_comps, sizeof(key), cw__cmp_cref);
  return r ? &m->comps[r->index] : NULL;
}

void cw_hlo_module_free(cw_hlo_module_t* m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_comps; i++) free(m->comps[i].by_id);
  free(m->comps);
  free(m->comp_by_id);
  if (m->wc) causeway__hlo__module_with_config__free_unpacked(m->wc, NULL);
  if (m->own) causeway__hlo__module__free_unpacked(m->own, NULL);
  free(m);
}

static cw_status_t cw__index(cw_hlo_module_t* m) {
  const Causeway__Hlo__Module* mod = m->mod;
  size_t n = mod->n_computations;
  m->comps = calloc(n ? n : 1, sizeof(*m->comps));
  m->comp_by_id = calloc(n ? n : 1, sizeof(*m->comp_by_id));
  if (!m->comps || !m->comp_by_id) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  m->n_comps = n;
  for (size_t i = 0; i < m->n_comps; i++) {
    cw_hlo_comp_t* c = &m->comps[i];
    c->pb = mod->computations[i];
    c->n = c->pb->n_instructions;
    c->by_id = calloc(c->n ? c->n : 1, sizeof(*c->by_id));
    if (!c->by_id) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t j = 0; j < c->n; j++) {
      c->by_id[j] = (cw_hlo_iref_t){.id = c->pb->instructions[j]->id, .in = c->pb->instructions[j]};
    }
    qsort(c->by_id, c->n, sizeof(*c->by_id), cw__cmp_iref);
    for (size_t j = 1; j < c->n; j++) {
      if (c->by_id[j].id == c->by_id[j - 1].id) {
        return cw_make_status(CW_INVALID_ARGUMENT,
                              "HLO module: computation '%s' has two instructions with id %" PRId64,
                              c->pb->name, c->by_id[j].id);
      }
    }
    m->comp_by_id[i] = (cw_hlo_cref_t){.id = c->pb->id, .index = i};
  }
  qsort(m->comp_by_id, m->n_comps, sizeof(*m->comp_by_id), cw__cmp_cref);
  for (size_t i = 1; i < m->n_comps; i++) {
    if (m->comp_by_id[i].id == m->comp_by_id[i - 1].id) {
      return cw_make_status(CW_INVALID_ARGUMENT, "HLO module: two computations with id %" PRId64,
                            m->comp_by_id[i].id);
    }
  }
  // A schedule sequence is printed in place of the computation's own order
  // only when it is a permutation of its instructions.
  const Causeway__Hlo__Schedule* sch = mod->schedule;
  for (size_t i = 0; sch && i < sch->n_sequences; i++) {
    const Causeway__Hlo__ScheduleEntry* e = sch->sequences[i];
    cw_hlo_comp_t* c = (cw_hlo_comp_t*)cw_hlo_find_comp(m, e->key);
    if (!c || c->order || !e->value || e->value->n_instruction_ids != c->n) continue;
    bool* seen = calloc(c->n ? c->n : 1, sizeof(bool));
    if (!seen) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
    bool permutation = true;
    for (size_t j = 0; permutation && j < c->n; j++) {
      cw_hlo_iref_t key = {.id = e->value->instruction_ids[j]};
      const cw_hlo_iref_t* r = bsearch(&key, c->by_id, c->n, sizeof(key), cw__cmp_iref);
      permutation = r && !seen[r - c->by_id];
      if (r) seen[r - c->by_id] = true;
    }
    free(seen);
    if (permutation) {
      c->order = e->value->instruction_ids;
      c->n_order = c->n;
    }
  }
  m->entry = cw_hlo_find_comp(m, mod->entry_computation_id);
  if (!m->entry) {
    for (size_t i = 0; i < m->n_comps && !m->entry; i++) {
      if (!strcmp(m->comps[i].pb->name, mod->entry_computation_name)) m->entry = &m->comps[i];
    }
  }
  if (!m->entry) {
    return cw_make_status(CW_INVALID_ARGUMENT,
                          "HLO module '%s': no entry computation (id %" PRId64 ", name '%s')",
                          mod->name, mod->entry_computation_id, mod->entry_computation_name);
  }
  return cw_ok_status();
}

cw_status_t cw_hlo_module_parse(const uint8_t* data, size_t size, bool with_config,
                                cw_hlo_module_t** out) {
  *out = NULL;
  cw_hlo_module_t* m = calloc(1, sizeof(*m));
  if (!m) return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory");
  const ProtobufCMessageDescriptor* desc = with_config
                                                ? &causeway__hlo__module_with_config__descriptor
                                                : &causeway__hlo__module__descriptor;
  if (!cw_pb_nesting_ok(desc, data, size, CW_PB_MAX_NESTING)) {
    free(m);
    return cw_make_status(CW_INVALID_ARGUMENT, "HLO module nests messages deeper than %d levels",
                          CW_PB_MAX_NESTING);
  }
  if (with_config) {
    m->wc = causeway__hlo__module_with_config__unpack(NULL, size, data);
    if (m->wc) {
      m->mod = m->wc->hlo_module;
      m->config = m->wc->config;
    }
  } else {
    m->own = causeway__hlo__module__unpack(NULL, size, data);
    m->mod = m->own;
  }
  if (!m->mod) {
    cw_hlo_module_free(m);
    return cw_make_status(CW_INVALID_ARGUMENT, "not a serialized XLA HLO module%s (%zu bytes)",
                          with_config ? " with config" : "", size);
  }
  cw_status_t st = cw__index(m);
  if (st) {
    cw_hlo_module_free(m);
    return st;
  }
  *out = m;
  return cw_ok_status();
}

int64_t cw_hlo_elements(const cw_hlo_shape_t* s) {
  if (!s || s->element_type == CW_HLO_TUPLE) return -1;
  int64_t n = 1;
  for (size_t i = 0; i < s->n_dimensions; i++) {
    if (s->dimensions[i] < 0 || (s->dimensions[i] && n > INT64_MAX / s->dimensions[i])) return -1;
    n *= s->dimensions[i];
  }
  return n;
}
