#include "cw_proxy_table.h"

#include <stdlib.h>

#define CW__GONE UINT64_MAX

static size_t cw__hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

// The slot of `key`, else the empty slot where a search for it stops.
static cw_proxy_table_slot_t* cw__find(const cw_proxy_table_t* t, uint64_t key) {
  size_t mask = t->cap - 1;
  for (size_t i = cw__hash(key) & mask;; i = (i + 1) & mask) {
    cw_proxy_table_slot_t* s = &t->slots[i];
    if (s->key == key || s->key == 0) return s;
  }
}

void* cw_proxy_table_get(const cw_proxy_table_t* t, uint64_t key) {
  if (!t->cap || key == 0 || key == CW__GONE) return NULL;
  cw_proxy_table_slot_t* s = cw__find(t, key);
  return s->key == key ? s->value : NULL;
}

static cw_status_t cw__grow(cw_proxy_table_t* t) {
  size_t cap = t->cap ? t->cap : 16;
  while ((t->count + 1) * 2 > cap) cap *= 2;
  cw_proxy_table_slot_t* old = t->slots;
  size_t old_cap = t->cap;
  t->slots = calloc(cap, sizeof(*t->slots));
  if (!t->slots) {
    t->slots = old;
    return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory for a handle table");
  }
  t->cap = cap;
  t->used = t->count;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].key && old[i].key != CW__GONE) *cw__find(t, old[i].key) = old[i];
  }
  free(old);
  return cw_ok_status();
}

cw_status_t cw_proxy_table_put(cw_proxy_table_t* t, uint64_t key, void* value) {
  if (key == 0 || key == CW__GONE) {
    return cw_make_status(CW_INVALID_ARGUMENT, "handle %llu is reserved", (unsigned long long)key);
  }
  if (cw_proxy_table_get(t, key)) {
    return cw_make_status(CW_ALREADY_EXISTS, "handle %llu is in use", (unsigned long long)key);
  }
  if ((t->used + 1) * 2 > t->cap) CW_RETURN_IF_ERROR(cw__grow(t), "put");
  cw_proxy_table_slot_t* s = cw__find(t, key);
  s->key = key;
  s->value = value;
  t->used++;
  t->count++;
  return cw_ok_status();
}

void* cw_proxy_table_remove(cw_proxy_table_t* t, uint64_t key) {
  if (!t->cap || key == 0 || key == CW__GONE) return NULL;
  cw_proxy_table_slot_t* s = cw__find(t, key);
  if (s->key != key) return NULL;
  void* v = s->value;
  s->key = CW__GONE;  // searches go on past it
  s->value = NULL;
  t->count--;
  return v;
}

void cw_proxy_table_each(const cw_proxy_table_t* t, void (*fn)(void*, uint64_t, void*),
                         void* user) {
  for (size_t i = 0; i < t->cap; i++) {
    if (t->slots[i].key && t->slots[i].key != CW__GONE) fn(user, t->slots[i].key, t->slots[i].value);
  }
}

void cw_proxy_table_deinitialize(cw_proxy_table_t* t) {
  free(t->slots);
  *t = (cw_proxy_table_t){0};
}
