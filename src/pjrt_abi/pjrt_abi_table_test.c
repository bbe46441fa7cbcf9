// Checks our PJRT ABI declarations (cw_pjrt_c_api.h) against a real plugin,
// part 1: the function table and its version, the plugin's attributes, the
// client, devices and memories, and the memory object's function table.
// pjrt_abi_calls_test.c does buffers, compile, execute and errors. Skips
// (exit 77) without $CAUSEWAY_PJRT_PLUGIN; written for XLA's CPU plugin.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cw_pjrt_c_api.h"
#include "cw_pjrt_test_util.h"

// Short names: these files make a call or two per line.
#define api cw_pjrt_test_api
#define INIT_ARGS CW_PJRT_INIT_ARGS
#define OK CW_PJRT_ASSERT_OK

static void test_table_and_version(void** state) {
  print_message("PJRT_Api struct_size %zu, version %d.%d\n", api->struct_size,
                api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version);
  assert_int_equal(api->struct_size, sizeof(PJRT_Api));
  assert_int_equal(api->pjrt_api_version.major_version, CW_PJRT_API_MAJOR);
  assert_int_equal(api->pjrt_api_version.minor_version, CW_PJRT_API_MINOR);
  assert_int_equal(api->pjrt_api_version.struct_size,
                   CW_PJRT_STRUCT_SIZE(PJRT_Api_Version, minor_version));
  // Which slots XLA's plugin leaves empty, and its extensions: for the log.
  int nulls = 0;
  size_t n = (api->struct_size - CW_PJRT_API_SLOT_OFFSET(0)) / sizeof(void*);
  for (size_t i = 0; i < n && i < CW_PJRT_API_NUM_SLOTS; i++) {
    void* slot;
    memcpy(&slot, (const char*)api + CW_PJRT_API_SLOT_OFFSET(i), sizeof slot);
    if (slot == NULL) {
      print_message("  note: slot %zu is NULL\n", i);
      nulls++;
    }
  }
  print_message("  %zu slots, %d NULL\n", n, nulls);
  int ext = 0;
  for (const PJRT_Extension_Base* e = api->extension_start; e && ext < 64; e = e->next, ext++) {
    print_message("  extension type %d (struct_size %zu)\n", (int)e->type, e->struct_size);
  }
}

static void test_plugin_attributes(void** state) {
  PJRT_Plugin_Attributes_Args a;
  INIT_ARGS(a);
  OK(api->PJRT_Plugin_Attributes(&a));
  int found = 0;
  for (size_t i = 0; i < a.num_attributes; i++) {
    const PJRT_NamedValue* v = &a.attributes[i];
    print_message("  plugin attribute %.*s type %d", (int)v->name_size, v->name, (int)v->type);
    if (v->type == PJRT_NamedValue_kInt64List) {
      print_message(" = [");
      for (size_t k = 0; k < v->value_size; k++) {
        print_message("%s%lld", k ? ", " : "", (long long)v->int64_array_value[k]);
      }
      print_message("]");
    } else if (v->type == PJRT_NamedValue_kString) {
      print_message(" = \"%.*s\"", (int)v->value_size, v->string_value);
    } else if (v->type == PJRT_NamedValue_kInt64) {
      print_message(" = %lld", (long long)v->int64_value);
    }
    print_message("\n");
    if (v->name_size == strlen("stablehlo_current_version") &&
        memcmp(v->name, "stablehlo_current_version", v->name_size) == 0) {
      found = 1;
      assert_int_equal(v->type, PJRT_NamedValue_kInt64List);
      assert_int_equal(v->value_size, 3);
    }
  }
  assert_true(found);  // stablehlo_current_version
}

static void test_client(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Client_PlatformName_Args a;
  INIT_ARGS(a);
  a.client = f->client;
  OK(api->PJRT_Client_PlatformName(&a));
  print_message("  platform name \"%.*s\"\n", (int)a.platform_name_size, a.platform_name);
  assert_int_equal(a.platform_name_size, 3);
  assert_memory_equal(a.platform_name, "cpu", 3);
  PJRT_Client_PlatformVersion_Args v;
  INIT_ARGS(v);
  v.client = f->client;
  OK(api->PJRT_Client_PlatformVersion(&v));
  print_message("  platform version \"%.*s\"\n", (int)v.platform_version_size,
                v.platform_version);
  PJRT_Client_ProcessIndex_Args p;
  INIT_ARGS(p);
  p.client = f->client;
  OK(api->PJRT_Client_ProcessIndex(&p));
  assert_int_equal(p.process_index, 0);
}

static void test_devices(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  assert_int_equal(f->num_devices, 4);  // the setup asked for 4
  PJRT_Client_AddressableDevices_Args b;
  INIT_ARGS(b);
  b.client = f->client;
  OK(api->PJRT_Client_AddressableDevices(&b));
  assert_int_equal(b.num_addressable_devices, 4);
}

// The memories a device can address: kind, id and kind id of each.
static void check_device_memories(PJRT_Device* dev, size_t i) {
  PJRT_Device_AddressableMemories_Args am;
  INIT_ARGS(am);
  am.device = dev;
  OK(api->PJRT_Device_AddressableMemories(&am));
  assert_true(am.num_memories >= 1);
  for (size_t n = 0; n < am.num_memories; n++) {
    PJRT_Memory_Kind_Args mk;
    INIT_ARGS(mk);
    mk.memory = am.memories[n];
    OK(api->PJRT_Memory_Kind(&mk));
    PJRT_Memory_Id_Args mi;
    INIT_ARGS(mi);
    mi.memory = am.memories[n];
    OK(api->PJRT_Memory_Id(&mi));
    PJRT_Memory_Kind_Id_Args mki;
    INIT_ARGS(mki);
    mki.memory = am.memories[n];
    OK(api->PJRT_Memory_Kind_Id(&mki));
    if (i < 2) {
      print_message("    memory id %d kind \"%.*s\" kind_id %d\n", mi.id, (int)mk.kind_size,
                    mk.kind, mki.kind_id);
    }
  }
  // The default memory is addressable by its device.
  PJRT_Memory* dm = cw_pjrt_test_default_memory(dev);
  assert_non_null(dm);
  PJRT_Memory_Kind_Args mk;
  INIT_ARGS(mk);
  mk.memory = dm;
  OK(api->PJRT_Memory_Kind(&mk));
  PJRT_Memory_AddressableByDevices_Args by;
  INIT_ARGS(by);
  by.memory = dm;
  OK(api->PJRT_Memory_AddressableByDevices(&by));
  assert_true(by.num_devices >= 1);
  assert_ptr_equal(by.devices[0], dev);
  if (i == 0) print_message("    default memory kind \"%.*s\"\n", (int)mk.kind_size, mk.kind);
}

static void test_device_descriptions_and_memories(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  for (size_t i = 0; i < f->num_devices && i < 8; i++) {
    PJRT_Device_GetDescription_Args g;
    INIT_ARGS(g);
    g.device = f->devices[i];
    OK(api->PJRT_Device_GetDescription(&g));
    PJRT_DeviceDescription_Id_Args id;
    INIT_ARGS(id);
    id.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_Id(&id));
    assert_int_equal(id.id, (int)i);
    PJRT_DeviceDescription_Kind_Args k;
    INIT_ARGS(k);
    k.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_Kind(&k));
    PJRT_DeviceDescription_ProcessIndex_Args pi;
    INIT_ARGS(pi);
    pi.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_ProcessIndex(&pi));
    PJRT_Device_LocalHardwareId_Args hw;
    INIT_ARGS(hw);
    hw.device = f->devices[i];
    OK(api->PJRT_Device_LocalHardwareId(&hw));
    PJRT_Device_IsAddressable_Args ad;
    INIT_ARGS(ad);
    ad.device = f->devices[i];
    OK(api->PJRT_Device_IsAddressable(&ad));
    assert_true(ad.is_addressable);
    PJRT_DeviceDescription_ToString_Args ts;
    INIT_ARGS(ts);
    ts.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_ToString(&ts));
    print_message("  device %zu: id %d kind \"%.*s\" process %d hw %d \"%.*s\"\n", i, id.id,
                  (int)k.device_kind_size, k.device_kind, pi.process_index,
                  hw.local_hardware_id, (int)ts.to_string_size, ts.to_string);
    PJRT_DeviceDescription_Attributes_Args at;
    INIT_ARGS(at);
    at.device_description = g.device_description;
    OK(api->PJRT_DeviceDescription_Attributes(&at));
    for (size_t n = 0; i == 0 && n < at.num_attributes; n++) {
      const PJRT_NamedValue* v = &at.attributes[n];
      print_message("    device attribute %.*s type %d\n", (int)v->name_size, v->name,
                    (int)v->type);
    }
    check_device_memories(f->devices[i], i);
  }
  PJRT_Client_AddressableMemories_Args a;
  INIT_ARGS(a);
  a.client = f->client;
  OK(api->PJRT_Client_AddressableMemories(&a));
  print_message("  client has %zu addressable memories\n", a.num_addressable_memories);
}

// The memory object's function table (user data hooks).
static void test_memory_vtable(void** state) {
  cw_pjrt_test_fixture_t* f = *state;
  PJRT_Memory* mem0 = f->memory0;
  const PJRT_Memory_FunctionTable* vt = mem0->vtable;
  if (!cw_pjrt_test_in_plugin_image(vt)) {
    print_message("  note: PJRT_Memory does not start with a vtable in the plugin image (%p)\n",
                  (const void*)vt);
    return;
  }
  print_message("  PJRT_Memory vtable: struct_size %zu instance_struct_size %zu\n",
                vt->struct_size, vt->instance_struct_size);
  assert_int_equal(vt->struct_size,
                   CW_PJRT_STRUCT_SIZE(PJRT_Memory_FunctionTable, set_user_data));
  static const int key = 0;
  int value = 5;
  if (vt->get_user_data != NULL && vt->set_user_data != NULL) {
    assert_null(vt->get_user_data(mem0, &key));  // fresh
    vt->set_user_data(mem0, &key, &value, NULL);
    assert_ptr_equal(vt->get_user_data(mem0, &key), &value);
  }
}

int main(void) {
  if (cw_pjrt_test_plugin_path() == NULL) return CW_PJRT_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_and_version),
      cmocka_unit_test(test_plugin_attributes),
      cmocka_unit_test(test_client),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_device_descriptions_and_memories),
      cmocka_unit_test(test_memory_vtable),
  };
  return cmocka_run_group_tests(tests, cw_pjrt_test_setup, cw_pjrt_test_teardown);
}
