// PJRT devices and memories (cw_plugin_device.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cw_plugin_device.h"
#include "cw_plugin_error.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"

// PJRT_Memory user data: the caller's values by key, freed with the client.
typedef struct cw_plugin_memory_user_data_s {
  struct cw_plugin_memory_user_data_s* next;
  const void* key;
  _Atomic(void*) data;  // replaced under the memory's mu, read without it
  void (*dtor)(void*);
} cw__user_data_t;

cw_plugin_device_t* cw_plugin_device_find(cw_plugin_client_t* c, int global_id) {
  // Global ids are dense from 0 in practice; fall back to a scan otherwise.
  if (global_id >= 0 && (size_t)global_id < c->num_devices &&
      c->devices[global_id].global_id == global_id) {
    return &c->devices[global_id];
  }
  for (size_t i = 0; i < c->num_devices; ++i) {
    if (c->devices[i].global_id == global_id) return &c->devices[i];
  }
  return NULL;
}

static void* cw__memory_get_user_data(PJRT_Memory* memory, const void* key) {
  cw_plugin_memory_t* m = (cw_plugin_memory_t*)memory;
  for (cw__user_data_t* u = atomic_load_explicit(&m->user_data, memory_order_acquire); u;
       u = u->next) {
    if (u->key == key) return atomic_load_explicit(&u->data, memory_order_acquire);
  }
  return NULL;
}

static void cw__memory_set_user_data(PJRT_Memory* memory, const void* key, void* data,
                                     void (*dtor)(void*)) {
  cw_plugin_memory_t* m = (cw_plugin_memory_t*)memory;
  pthread_mutex_lock(&m->mu);
  cw__user_data_t* u = atomic_load_explicit(&m->user_data, memory_order_relaxed);
  while (u && u->key != key) u = u->next;
  if (!u) {
    u = calloc(1, sizeof(*u));
    if (!u) {
      pthread_mutex_unlock(&m->mu);
      return;
    }
    u->key = key;
    u->data = data;
    u->dtor = dtor;
    u->next = atomic_load_explicit(&m->user_data, memory_order_relaxed);
    atomic_store_explicit(&m->user_data, u, memory_order_release);  // filled in first
    pthread_mutex_unlock(&m->mu);
    return;
  }
  void* old = atomic_exchange_explicit(&u->data, data, memory_order_acq_rel);
  if (u->dtor && old) u->dtor(old);
  u->dtor = dtor;
  pthread_mutex_unlock(&m->mu);
}

static const PJRT_Memory_FunctionTable cw__memory_vtable = {
    .struct_size = CW_PJRT_STRUCT_SIZE(PJRT_Memory_FunctionTable, set_user_data),
    .extension_start = NULL,
    .instance_struct_size = sizeof(cw_plugin_memory_t),
    .get_user_data = cw__memory_get_user_data,
    .set_user_data = cw__memory_set_user_data,
};

static cw_status_t cw__oom(void) { return cw_make_status(CW_RESOURCE_EXHAUSTED, "out of memory"); }

// Adds one attribute to the device; strings and lists are copied.
static cw_status_t cw__device_add_attr(cw_plugin_device_t* d, const char* name,
                                       PJRT_NamedValue_Type t, const char* s, int64_t i,
                                       const int64_t* list, size_t list_len) {
  for (size_t k = 0; k < d->num_attributes; ++k) {
    if (strcmp(d->attributes[k].name, name) == 0) return cw_ok_status();  // first wins
  }
  PJRT_NamedValue* a = realloc(d->attributes, (d->num_attributes + 1) * sizeof(*a));
  if (!a) return cw__oom();
  d->attributes = a;
  char** strs = realloc(d->attr_strings, (d->num_attr_strings + 2) * sizeof(*strs));
  if (!strs) return cw__oom();
  d->attr_strings = strs;
  char* name_copy = strdup(name);
  if (!name_copy) return cw__oom();
  d->attr_strings[d->num_attr_strings++] = name_copy;
  PJRT_NamedValue* v = &d->attributes[d->num_attributes];
  memset(v, 0, sizeof(*v));
  v->struct_size = sizeof(*v);
  v->name = name_copy;
  v->name_size = strlen(name_copy);
  v->type = t;
  if (t == PJRT_NamedValue_kString) {
    char* sc = strdup(s ? s : "");
    if (!sc) return cw__oom();
    d->attr_strings[d->num_attr_strings++] = sc;
    v->string_value = sc;
    v->value_size = strlen(sc);
  } else if (t == PJRT_NamedValue_kInt64) {
    v->int64_value = i;
    v->value_size = 1;
  } else {
    int64_t** lists = realloc(d->attr_lists, (d->num_attr_lists + 1) * sizeof(*lists));
    if (!lists) return cw__oom();
    d->attr_lists = lists;
    int64_t* lc = calloc(list_len ? list_len : 1, sizeof(*lc));
    if (!lc) return cw__oom();
    if (list_len) memcpy(lc, list, list_len * sizeof(*lc));
    d->attr_lists[d->num_attr_lists++] = lc;
    v->int64_array_value = lc;
    v->value_size = list_len;
  }
  d->num_attributes++;
  return cw_ok_status();
}

// One memory of `d`: `id` unique in the client.
static cw_status_t cw__memory_initialize(cw_plugin_memory_t* m, cw_plugin_device_t* d, int id,
                                         const char* kind, int kind_id) {
  m->vtable = &cw__memory_vtable;
  m->device = d;
  m->id = id;
  m->kind_id = kind_id;
  pthread_mutex_init(&m->mu, NULL);
  m->kind = strdup(kind);
  char buf[600];
  snprintf(buf, sizeof(buf), "%s memory of %s", kind, d->debug_string);
  m->debug_string = strdup(buf);
  snprintf(buf, sizeof(buf), "MEMORY_SPACE_%d(%s, %s)", m->id, kind, d->to_string);
  m->to_string = strdup(buf);
  if (!m->kind || !m->debug_string || !m->to_string) return cw__oom();
  return cw_ok_status();
}

// The memories the worker's plugin gives the device (stock CPU: device,
// pinned_host, unpinned_host), under ids unique in the client; one "device"
// memory when it names none.
static cw_status_t cw__device_memories(cw_plugin_device_t* d, cw_plugin_client_t* c,
                                       const Causeway__V1__Device* wd) {
  size_t n = 0;
  for (size_t k = 0; wd && k < wd->n_memories; ++k) {
    n += wd->memories[k] && wd->memories[k]->kind && wd->memories[k]->kind[0];
  }
  d->memories = calloc(n ? n : 1, sizeof(*d->memories));
  d->memory_ptrs = calloc(n ? n : 1, sizeof(*d->memory_ptrs));
  if (!d->memories || !d->memory_ptrs) return cw__oom();
  for (size_t k = 0; wd && k < wd->n_memories; ++k) {
    const Causeway__V1__Memory* wm = wd->memories[k];
    if (!wm || !wm->kind || !wm->kind[0]) continue;
    cw_plugin_memory_t* m = &d->memories[d->num_memories];
    d->memory_ptrs[d->num_memories++] = (PJRT_Memory*)m;
    CW_RETURN_IF_ERROR(cw__memory_initialize(m, d, (int)c->num_memories++, wm->kind, wm->kind_id),
                       "memory %s", wm->kind);
    if (wm->id == wd->default_memory && !d->default_memory) d->default_memory = m;
  }
  if (!d->num_memories) {
    d->memory_ptrs[d->num_memories++] = (PJRT_Memory*)d->memories;
    CW_RETURN_IF_ERROR(cw__memory_initialize(d->memories, d, (int)c->num_memories++, "device", 0),
                       "memory device");
  }
  if (!d->default_memory) {  // none named: the "device" one, else the first
    d->default_memory = cw_plugin_device_memory_of_kind(d, "device");
    if (!d->default_memory) d->default_memory = d->memories;
  }
  d->default_memory->is_default = true;
  return cw_ok_status();
}

cw_plugin_memory_t* cw_plugin_device_memory_of_kind(cw_plugin_device_t* d, const char* kind) {
  for (size_t k = 0; k < d->num_memories; ++k) {
    if (!strcmp(d->memories[k].kind, kind)) return &d->memories[k];
  }
  return NULL;
}

cw_status_t cw_plugin_device_initialize(cw_plugin_device_t* d, cw_plugin_client_t* c, size_t index,
                                        const Causeway__V1__GlobalDevice* g) {
  d->client = c;
  d->global_id = g->global_id;
  d->island = g->island;
  d->worker = cw_plugin_worker_find(c, g->worker_index);
  if (!d->worker) {
    return cw_make_status(CW_INTERNAL, "device %d names unknown worker %u", g->global_id,
                          g->worker_index);
  }
  const Causeway__V1__Device* wd = g->device;
  d->local_id = wd ? wd->local_id : 0;
  d->kind = strdup(wd && wd->kind && wd->kind[0] ? wd->kind : "cpu");
  char buf[512];
  snprintf(buf, sizeof(buf), "%s:%d (worker %s, island %u)", d->kind, d->global_id, d->worker->name,
           d->island);
  d->debug_string = strdup(buf);
  snprintf(buf, sizeof(buf), "CausewayDevice(id=%d, kind=%s, worker=%s, local=%d, island=%u)",
           d->global_id, d->kind, d->worker->name, d->local_id, d->island);
  d->to_string = strdup(buf);
  if (!d->kind || !d->debug_string || !d->to_string) return cw__oom();
  // Ours first, then the worker's own (string, int64 and int64 lists only:
  // other attribute types abort the caller).
  CW_RETURN_IF_ERROR(
      cw__device_add_attr(d, "worker", PJRT_NamedValue_kString, d->worker->name, 0, NULL, 0),
      "attributes");
  CW_RETURN_IF_ERROR(
      cw__device_add_attr(d, "island", PJRT_NamedValue_kInt64, NULL, d->island, NULL, 0),
      "attributes");
  CW_RETURN_IF_ERROR(
      cw__device_add_attr(d, "worker_local_id", PJRT_NamedValue_kInt64, NULL, d->local_id, NULL, 0),
      "attributes");
  for (size_t k = 0; wd && k < wd->n_attributes; ++k) {
    const Causeway__V1__NamedValue* v = wd->attributes[k];
    if (!v || !v->name) continue;
    if (v->value_case == CAUSEWAY__V1__NAMED_VALUE__VALUE_S) {
      CW_RETURN_IF_ERROR(cw__device_add_attr(d, v->name, PJRT_NamedValue_kString, v->s, 0, NULL, 0),
                         "attributes");
    } else if (v->value_case == CAUSEWAY__V1__NAMED_VALUE__VALUE_I) {
      CW_RETURN_IF_ERROR(
          cw__device_add_attr(d, v->name, PJRT_NamedValue_kInt64, NULL, v->i, NULL, 0),
          "attributes");
    } else if (v->value_case == CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST && v->list) {
      CW_RETURN_IF_ERROR(cw__device_add_attr(d, v->name, PJRT_NamedValue_kInt64List, NULL, 0,
                                             v->list->values, v->list->n_values),
                         "attributes");
    }
  }
  CW_RETURN_IF_ERROR(cw__device_memories(d, c, wd), "memories");
  d->self_ptr = (PJRT_Device*)d;
  return cw_ok_status();
}

void cw_plugin_device_deinitialize(cw_plugin_device_t* d) {
  free(d->kind);
  free(d->debug_string);
  free(d->to_string);
  for (size_t k = 0; k < d->num_attr_strings; ++k) free(d->attr_strings[k]);
  for (size_t k = 0; k < d->num_attr_lists; ++k) free(d->attr_lists[k]);
  free(d->attr_strings);
  free(d->attr_lists);
  free(d->attributes);
  for (size_t k = 0; d->memories && k < d->num_memories; ++k) {
    cw_plugin_memory_t* m = &d->memories[k];
    free(m->kind);
    free(m->debug_string);
    free(m->to_string);
    cw__user_data_t* u = atomic_load_explicit(&m->user_data, memory_order_relaxed);
    while (u) {
      cw__user_data_t* next = u->next;
      void* data = atomic_load_explicit(&u->data, memory_order_relaxed);
      if (u->dtor && data) u->dtor(data);
      free(u);
      u = next;
    }
    if (m->vtable) pthread_mutex_destroy(&m->mu);
  }
  free(d->memories);
  free(d->memory_ptrs);
}

// ---- Devices -------------------------------------------------------------------------

#define CW__DEV(p) ((cw_plugin_device_t*)(p))

PJRT_Error* cw_plugin_device_description_id(PJRT_DeviceDescription_Id_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_Id_Args, id);
  CW_PLUGIN_NEED(args->device_description, "PJRT_DeviceDescription_Id", "handle");
  args->id = CW__DEV(args->device_description)->global_id;
  return NULL;
}

PJRT_Error* cw_plugin_device_description_process_index(
    PJRT_DeviceDescription_ProcessIndex_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_ProcessIndex_Args, process_index);
  args->process_index = 0;
  return NULL;
}

PJRT_Error* cw_plugin_device_description_attributes(PJRT_DeviceDescription_Attributes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_Attributes_Args, attributes);
  CW_PLUGIN_NEED(args->device_description, "PJRT_DeviceDescription_Attributes", "handle");
  args->attributes = CW__DEV(args->device_description)->attributes;
  args->num_attributes = CW__DEV(args->device_description)->num_attributes;
  return NULL;
}

PJRT_Error* cw_plugin_device_description_kind(PJRT_DeviceDescription_Kind_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_Kind_Args, device_kind_size);
  CW_PLUGIN_NEED(args->device_description, "PJRT_DeviceDescription_Kind", "handle");
  args->device_kind = CW__DEV(args->device_description)->kind;
  args->device_kind_size = strlen(args->device_kind);
  return NULL;
}

PJRT_Error* cw_plugin_device_description_debug_string(
    PJRT_DeviceDescription_DebugString_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_DebugString_Args, debug_string_size);
  CW_PLUGIN_NEED(args->device_description, "PJRT_DeviceDescription_DebugString", "handle");
  args->debug_string = CW__DEV(args->device_description)->debug_string;
  args->debug_string_size = strlen(args->debug_string);
  return NULL;
}

PJRT_Error* cw_plugin_device_description_to_string(PJRT_DeviceDescription_ToString_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_DeviceDescription_ToString_Args, to_string_size);
  CW_PLUGIN_NEED(args->device_description, "PJRT_DeviceDescription_ToString", "handle");
  args->to_string = CW__DEV(args->device_description)->to_string;
  args->to_string_size = strlen(args->to_string);
  return NULL;
}

PJRT_Error* cw_plugin_device_get_description(PJRT_Device_GetDescription_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_GetDescription_Args, device_description);
  CW_PLUGIN_NEED(args->device, "PJRT_Device_GetDescription", "handle");
  args->device_description = (PJRT_DeviceDescription*)args->device;
  return NULL;
}

PJRT_Error* cw_plugin_device_is_addressable(PJRT_Device_IsAddressable_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_IsAddressable_Args, is_addressable);
  args->is_addressable = true;
  return NULL;
}

PJRT_Error* cw_plugin_device_local_hardware_id(PJRT_Device_LocalHardwareId_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_LocalHardwareId_Args, local_hardware_id);
  CW_PLUGIN_NEED(args->device, "PJRT_Device_LocalHardwareId", "handle");
  args->local_hardware_id = CW__DEV(args->device)->global_id;
  return NULL;
}

PJRT_Error* cw_plugin_device_addressable_memories(PJRT_Device_AddressableMemories_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_AddressableMemories_Args, num_memories);
  CW_PLUGIN_NEED(args->device, "PJRT_Device_AddressableMemories", "handle");
  args->memories = CW__DEV(args->device)->memory_ptrs;
  args->num_memories = CW__DEV(args->device)->num_memories;
  return NULL;
}

PJRT_Error* cw_plugin_device_default_memory(PJRT_Device_DefaultMemory_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_DefaultMemory_Args, memory);
  CW_PLUGIN_NEED(args->device, "PJRT_Device_DefaultMemory", "handle");
  args->memory = (PJRT_Memory*)CW__DEV(args->device)->default_memory;
  return NULL;
}

static void cw__no_attributes_deleter(PJRT_Device_Attributes* attributes) {
  (void)attributes;  // the device owns them
}

PJRT_Error* cw_plugin_device_get_attributes(PJRT_Device_GetAttributes_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_GetAttributes_Args, attributes_deleter);
  CW_PLUGIN_NEED(args->device, "PJRT_Device_GetAttributes", "handle");
  args->attributes = CW__DEV(args->device)->attributes;
  args->num_attributes = CW__DEV(args->device)->num_attributes;
  args->device_attributes = NULL;
  args->attributes_deleter = cw__no_attributes_deleter;  // the caller CHECKs non-NULL
  return NULL;
}

PJRT_Error* cw_plugin_device_create_async_tracking_event(
    PJRT_Device_CreateAsyncTrackingEvent_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Device_CreateAsyncTrackingEvent_Args, event);
  args->event = NULL;  // "no tracking" is allowed; failing is fatal to the caller
  return NULL;
}

// ---- Memories ------------------------------------------------------------------------

#define CW__MEM(args) ((cw_plugin_memory_t*)(args)->memory)

PJRT_Error* cw_plugin_memory_id(PJRT_Memory_Id_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_Id_Args, id);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_Id", "handle");
  args->id = CW__MEM(args)->id;
  return NULL;
}

PJRT_Error* cw_plugin_memory_kind(PJRT_Memory_Kind_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_Kind_Args, kind_size);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_Kind", "handle");
  args->kind = CW__MEM(args)->kind;
  args->kind_size = strlen(args->kind);
  return NULL;
}

PJRT_Error* cw_plugin_memory_kind_id(PJRT_Memory_Kind_Id_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_Kind_Id_Args, kind_id);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_Kind_Id", "handle");
  args->kind_id = CW__MEM(args)->kind_id;
  return NULL;
}

PJRT_Error* cw_plugin_memory_debug_string(PJRT_Memory_DebugString_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_DebugString_Args, debug_string_size);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_DebugString", "handle");
  args->debug_string = CW__MEM(args)->debug_string;
  args->debug_string_size = strlen(args->debug_string);
  return NULL;
}

PJRT_Error* cw_plugin_memory_to_string(PJRT_Memory_ToString_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_ToString_Args, to_string_size);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_ToString", "handle");
  args->to_string = CW__MEM(args)->to_string;
  args->to_string_size = strlen(args->to_string);
  return NULL;
}

PJRT_Error* cw_plugin_memory_addressable_by_devices(PJRT_Memory_AddressableByDevices_Args* args) {
  CW_PLUGIN_CHECK_ARGS(args, PJRT_Memory_AddressableByDevices_Args, num_devices);
  CW_PLUGIN_NEED(args->memory, "PJRT_Memory_AddressableByDevices", "handle");
  args->devices = &CW__MEM(args)->device->self_ptr;
  args->num_devices = 1;
  return NULL;
}
