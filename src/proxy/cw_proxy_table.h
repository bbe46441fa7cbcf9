// Handles to objects: a map from the 64-bit handles an IFRT client names
// (arrays, executables, futures, host buffers) to the proxy's objects. Open
// addressing, at most half full; handle 0 is never stored.
#ifndef CW_PROXY_TABLE_H_
#define CW_PROXY_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include "cw_status.h"

typedef struct cw_proxy_table_slot_s {
  uint64_t key;  // 0: empty; UINT64_MAX with value NULL: a removed entry
  void* value;
} cw_proxy_table_slot_t;

typedef struct cw_proxy_table_s {
  cw_proxy_table_slot_t* slots;
  size_t cap;   // a power of two (0 before the first put)
  size_t used;  // entries and removed slots
  size_t count;
} cw_proxy_table_t;

// NULL when absent.
void* cw_proxy_table_get(const cw_proxy_table_t* t, uint64_t key);
// ALREADY_EXISTS when `key` is there; INVALID_ARGUMENT for key 0 or
// UINT64_MAX.
CW_MUST_USE cw_status_t cw_proxy_table_put(cw_proxy_table_t* t, uint64_t key, void* value);
// The value removed (NULL when absent).
void* cw_proxy_table_remove(cw_proxy_table_t* t, uint64_t key);
// Calls fn for every entry (the table must not change meanwhile).
void cw_proxy_table_each(const cw_proxy_table_t* t, void (*fn)(void* user, uint64_t key,
                                                                 void* value),
                         void* user);
void cw_proxy_table_deinitialize(cw_proxy_table_t* t);

#endif  // CW_PROXY_TABLE_H_
