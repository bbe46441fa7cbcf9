// Unit tests for the device table: a device made from the session's
// GlobalDevice has our attributes first and then the worker's (strings,
// integers and lists only; a name given twice keeps the first), its memory
// takes the worker's "device" kind id, lookups by global id, and the
// memory's user data (replaced values and the rest at the end are handed to
// their destructors).
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_plugin_attributes.h"
#include "cw_plugin_device.h"
#include "cw_plugin_internal.h"
#include "cw_plugin_worker.h"

// A client with one worker ("worker-7", controller index 3, island 1) and
// room for two devices; nothing is connected.
typedef struct fixture_s {
  cw_plugin_client_t client;
  cw_plugin_worker_t worker;
  cw_plugin_device_t devices[2];
} fixture_t;

static int setup(void** state) {
  fixture_t* fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  Causeway__V1__WorkerInfo wi = CAUSEWAY__V1__WORKER_INFO__INIT;
  wi.index = 3;
  wi.island = 1;
  wi.name = "worker-7";
  wi.address = "/tmp/w7.sock";
  assert_null(cw_plugin_worker_initialize(&fx->worker, &fx->client, &wi));
  fx->client.workers = &fx->worker;
  fx->client.num_workers = 1;
  fx->client.devices = fx->devices;
  *state = fx;
  return 0;
}

static int teardown(void** state) {
  fixture_t* fx = *state;
  for (size_t i = 0; i < fx->client.num_devices; ++i) {
    cw_plugin_device_deinitialize(&fx->devices[i]);
  }
  cw_plugin_worker_deinitialize(&fx->worker);
  free(fx);
  return 0;
}

// Makes device `index` of the fixture from `g`.
static cw_status_t add_device(fixture_t* fx, size_t index, const Causeway__V1__GlobalDevice* g) {
  fx->client.num_devices = index + 1;
  return cw_plugin_device_initialize(&fx->devices[index], &fx->client, index, g);
}

static const PJRT_NamedValue* attribute(const cw_plugin_device_t* d, size_t k, const char* name,
                                        PJRT_NamedValue_Type type) {
  assert_true(k < d->num_attributes);
  const PJRT_NamedValue* v = &d->attributes[k];
  assert_int_equal(v->name_size, strlen(name));
  assert_memory_equal(v->name, name, v->name_size);
  assert_int_equal(v->type, type);
  return v;
}

static void test_device_from_the_session(void** state) {
  fixture_t* fx = *state;
  Causeway__V1__NamedValue spoof = CAUSEWAY__V1__NAMED_VALUE__INIT;
  spoof.name = "worker";  // ours comes first and wins
  spoof.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_S;
  spoof.s = "not-the-worker";
  Causeway__V1__NamedValue cores = CAUSEWAY__V1__NAMED_VALUE__INIT;
  cores.name = "cores";
  cores.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_I;
  cores.i = 8;
  int64_t coords_values[] = {1, 2, 3};
  Causeway__V1__Int64List coords_list = CAUSEWAY__V1__INT64_LIST__INIT;
  coords_list.n_values = 3;
  coords_list.values = coords_values;
  Causeway__V1__NamedValue coords = CAUSEWAY__V1__NAMED_VALUE__INIT;
  coords.name = "coords";
  coords.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST;
  coords.list = &coords_list;
  Causeway__V1__NamedValue speed = CAUSEWAY__V1__NAMED_VALUE__INIT;
  speed.name = "speed";  // a float: other types abort PJRT callers, so it is left out
  speed.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_F;
  speed.f = 1.5f;
  Causeway__V1__NamedValue* attrs[] = {&spoof, &cores, &coords, &speed};
  Causeway__V1__Memory pinned = CAUSEWAY__V1__MEMORY__INIT;
  pinned.id = 7;
  pinned.kind = "pinned_host";
  pinned.kind_id = 1;
  Causeway__V1__Memory devmem = CAUSEWAY__V1__MEMORY__INIT;
  devmem.id = 6;
  devmem.kind = "device";
  devmem.kind_id = 5;
  Causeway__V1__Memory* memories[] = {&pinned, &devmem};
  Causeway__V1__Device wd = CAUSEWAY__V1__DEVICE__INIT;
  wd.local_id = 1;
  wd.kind = "cpu";
  wd.n_attributes = 4;
  wd.attributes = attrs;
  wd.n_memories = 2;
  wd.memories = memories;
  wd.default_memory = 6;  // the worker's id of its default memory
  Causeway__V1__GlobalDevice g = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  g.global_id = 0;
  g.worker_index = 3;
  g.island = 1;
  g.device = &wd;
  assert_null(add_device(fx, 0, &g));

  cw_plugin_device_t* d = &fx->devices[0];
  assert_ptr_equal(d->worker, &fx->worker);
  assert_int_equal(d->local_id, 1);
  assert_string_equal(d->kind, "cpu");
  assert_string_equal(d->debug_string, "cpu:0 (worker worker-7, island 1)");
  assert_string_equal(d->to_string,
                      "CausewayDevice(id=0, kind=cpu, worker=worker-7, local=1, island=1)");
  assert_int_equal(d->num_attributes, 5);
  assert_string_equal(attribute(d, 0, "worker", PJRT_NamedValue_kString)->string_value, "worker-7");
  assert_int_equal(attribute(d, 1, "island", PJRT_NamedValue_kInt64)->int64_value, 1);
  assert_int_equal(attribute(d, 2, "worker_local_id", PJRT_NamedValue_kInt64)->int64_value, 1);
  assert_int_equal(attribute(d, 3, "cores", PJRT_NamedValue_kInt64)->int64_value, 8);
  const PJRT_NamedValue* c = attribute(d, 4, "coords", PJRT_NamedValue_kInt64List);
  assert_int_equal(c->value_size, 3);
  assert_int_equal(c->int64_array_value[2], 3);
  assert_ptr_not_equal(c->int64_array_value, coords_values);  // a copy

  // Through the slots, as JAX asks.
  PJRT_DeviceDescription_Attributes_Args da = {.struct_size = sizeof(da),
                                               .device_description = (PJRT_DeviceDescription*)d};
  assert_null(cw_plugin_device_description_attributes(&da));
  assert_int_equal(da.num_attributes, 5);
  PJRT_Device_DefaultMemory_Args dm = {.struct_size = sizeof(dm), .device = (PJRT_Device*)d};
  assert_null(cw_plugin_device_default_memory(&dm));
  PJRT_Memory_Kind_Id_Args ki = {.struct_size = sizeof(ki), .memory = dm.memory};
  assert_null(cw_plugin_memory_kind_id(&ki));
  assert_int_equal(ki.kind_id, 5);
  PJRT_Memory_ToString_Args ts = {.struct_size = sizeof(ts), .memory = dm.memory};
  assert_null(cw_plugin_memory_to_string(&ts));
  // Ids are the client's (unique across devices), in the worker's order.
  assert_string_equal(ts.to_string,
                      "MEMORY_SPACE_1(device, "
                      "CausewayDevice(id=0, kind=cpu, worker=worker-7, local=1, island=1))");
  PJRT_Device_AddressableMemories_Args am = {.struct_size = sizeof(am), .device = (PJRT_Device*)d};
  assert_null(cw_plugin_device_addressable_memories(&am));
  assert_int_equal(am.num_memories, 2);
  assert_ptr_equal(am.memories[1], dm.memory);
  PJRT_Memory_Kind_Args mk = {.struct_size = sizeof(mk), .memory = am.memories[0]};
  assert_null(cw_plugin_memory_kind(&mk));
  assert_int_equal(mk.kind_size, strlen("pinned_host"));
  assert_memory_equal(mk.kind, "pinned_host", mk.kind_size);
  PJRT_Memory_Id_Args mi = {.struct_size = sizeof(mi), .memory = am.memories[0]};
  assert_null(cw_plugin_memory_id(&mi));
  assert_int_equal(mi.id, 0);
  assert_ptr_equal(cw_plugin_device_memory_of_kind(d, "pinned_host"), am.memories[0]);
  assert_null(cw_plugin_device_memory_of_kind(d, "unpinned_host"));
  PJRT_Memory_AddressableByDevices_Args ab = {.struct_size = sizeof(ab), .memory = dm.memory};
  assert_null(cw_plugin_memory_addressable_by_devices(&ab));
  assert_int_equal(ab.num_devices, 1);
  assert_ptr_equal(ab.devices[0], (PJRT_Device*)d);
}

static void test_find_by_global_id(void** state) {
  fixture_t* fx = *state;
  Causeway__V1__GlobalDevice g = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  g.worker_index = 3;
  g.global_id = 0;
  assert_null(add_device(fx, 0, &g));  // no worker description: a "cpu"
  g.global_id = 4;                     // not dense: found by a scan
  assert_null(add_device(fx, 1, &g));
  assert_string_equal(fx->devices[0].kind, "cpu");
  assert_ptr_equal(cw_plugin_device_find(&fx->client, 0), &fx->devices[0]);
  assert_ptr_equal(cw_plugin_device_find(&fx->client, 4), &fx->devices[1]);
  assert_null(cw_plugin_device_find(&fx->client, 1));
  assert_null(cw_plugin_device_find(&fx->client, -1));
}

static void test_unknown_worker_fails(void** state) {
  fixture_t* fx = *state;
  Causeway__V1__GlobalDevice g = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  g.global_id = 2;
  g.worker_index = 9;
  cw_status_t s = add_device(fx, 0, &g);
  assert_int_equal(cw_status_code(s), CW_INTERNAL);
  assert_string_equal(cw_status_message(s), "device 2 names unknown worker 9");
  cw_status_free(s);
}

static int g_dtor_calls;
static void count_dtor(void* data) {
  g_dtor_calls++;
  free(data);
}

static void test_memory_user_data(void** state) {
  fixture_t* fx = *state;
  Causeway__V1__GlobalDevice g = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  g.worker_index = 3;
  assert_null(add_device(fx, 0, &g));
  // No memories named: one "device" memory, the default.
  assert_int_equal(fx->devices[0].num_memories, 1);
  assert_string_equal(fx->devices[0].default_memory->kind, "device");
  PJRT_Memory* m = fx->devices[0].memory_ptrs[0];
  static const char key_a = 'a', key_b = 'b';
  g_dtor_calls = 0;
  assert_null(m->vtable->get_user_data(m, &key_a));
  void* first = malloc(1);
  m->vtable->set_user_data(m, &key_a, first, count_dtor);
  m->vtable->set_user_data(m, &key_b, malloc(1), count_dtor);
  assert_ptr_equal(m->vtable->get_user_data(m, &key_a), first);
  void* second = malloc(1);
  m->vtable->set_user_data(m, &key_a, second, count_dtor);  // the first goes to its dtor
  assert_int_equal(g_dtor_calls, 1);
  assert_ptr_equal(m->vtable->get_user_data(m, &key_a), second);
  cw_plugin_device_deinitialize(&fx->devices[0]);  // the rest with the device
  fx->client.num_devices = 0;
  assert_int_equal(g_dtor_calls, 3);
}

// get_user_data takes no lock: a reader beside a setter that adds keys and
// replaces values sees each key absent or with a value set for it (a smoke
// test; the ThreadSanitizer build checks the orderings).
#define UD_KEYS 16
#define UD_ROUNDS 2000
static const char ud_keys[UD_KEYS] = {0};
static atomic_int ud_bad;
static atomic_bool ud_stop;
static int ud_values[UD_ROUNDS];

static void* ud_reader(void* arg) {
  PJRT_Memory* m = arg;
  while (!atomic_load(&ud_stop)) {
    for (int k = 0; k < UD_KEYS; ++k) {
      const int* v = m->vtable->get_user_data(m, &ud_keys[k]);
      if (v && *v != k) atomic_fetch_add(&ud_bad, 1);
    }
  }
  return NULL;
}

static void test_memory_user_data_read_beside_set(void** state) {
  fixture_t* fx = *state;
  Causeway__V1__GlobalDevice g = CAUSEWAY__V1__GLOBAL_DEVICE__INIT;
  g.worker_index = 3;
  assert_null(add_device(fx, 0, &g));
  PJRT_Memory* m = fx->devices[0].memory_ptrs[0];
  atomic_store(&ud_bad, 0);
  atomic_store(&ud_stop, false);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, ud_reader, m), 0);
  for (int r = 0; r < UD_ROUNDS; ++r) {
    int k = r % UD_KEYS;
    ud_values[r] = k;  // written before it is published
    // A value a reader may still hold is not freed under it: no dtor.
    m->vtable->set_user_data(m, &ud_keys[k], &ud_values[r], NULL);
  }
  atomic_store(&ud_stop, true);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&ud_bad), 0);
  for (int k = 0; k < UD_KEYS; ++k) {
    const int* v = m->vtable->get_user_data(m, &ud_keys[k]);
    assert_non_null(v);
    assert_int_equal(*v, k);
  }
  cw_plugin_device_deinitialize(&fx->devices[0]);
  fx->client.num_devices = 0;
}

// The plugin's attributes as the sessions report them: the same list again
// keeps the array JAX may hold (causeway-proxy makes a client per session
// and kept one more list each time); a different one replaces it, the old
// one staying readable.
static void test_attributes_kept_when_unchanged(void** state) {
  (void)state;
  int64_t shlo[3] = {1, 20, 0};
  Causeway__V1__Int64List list = CAUSEWAY__V1__INT64_LIST__INIT;
  list.values = shlo;
  list.n_values = 3;
  Causeway__V1__NamedValue a = CAUSEWAY__V1__NAMED_VALUE__INIT, b = a;
  a.name = "xla_version";
  a.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_I;
  a.i = 2;
  b.name = "stablehlo_current_version";
  b.value_case = CAUSEWAY__V1__NAMED_VALUE__VALUE_LIST;
  b.list = &list;
  Causeway__V1__NamedValue* values[2] = {&a, &b};
  PJRT_Plugin_Attributes_Args get = {.struct_size = sizeof(get)};
  cw_plugin_attributes_set(values, 2);
  assert_null(cw_plugin_attributes_get(&get));
  const PJRT_NamedValue* first = get.attributes;
  assert_int_equal(get.num_attributes, 2);
  cw_plugin_attributes_set(values, 2);
  assert_null(cw_plugin_attributes_get(&get));
  assert_ptr_equal(get.attributes, first);
  shlo[1] = 21;
  cw_plugin_attributes_set(values, 2);
  assert_null(cw_plugin_attributes_get(&get));
  assert_ptr_not_equal(get.attributes, first);
  assert_int_equal(get.attributes[1].int64_array_value[1], 21);
  assert_int_equal(first[1].int64_array_value[1], 20);  // the old array, still readable
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attributes_kept_when_unchanged),
      cmocka_unit_test_setup_teardown(test_device_from_the_session, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_by_global_id, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_worker_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_user_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_user_data_read_beside_set, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
