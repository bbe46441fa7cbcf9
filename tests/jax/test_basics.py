"""Devices, jnp, jit, autodiff, control flow, random, dtypes, scalars, zero-size
arrays, a 512 MiB round trip, device_put and DLPack: causeway against stock JAX."""
import harness
from conftest import plugin_front_only


def test_devices(ref, cw):
    want, got = harness.run_both(ref, cw, "inventory")
    assert got["num_devices"] == harness.NUM_DEVICES == want["num_devices"], got["repr"]
    assert got["local_device_count"] == harness.NUM_DEVICES
    assert got["process_count"] == 1 and got["process_index"] == 0
    assert got["ids_unique"]
    assert all(got["addressable"]), "every device must be addressable by the one client"
    # Every worker's devices, one island per worker, 4 devices each.
    assert len(got["workers"]) == harness.NUM_WORKERS, got["workers"]
    assert all(len(p) == harness.DEVICES_PER_WORKER for p in got["workers"].values())
    assert len(got["islands"]) == harness.NUM_WORKERS, got["islands"]
    assert all(len(w) == 1 for w in got["island_worker"]), got["island_worker"]
    assert sorted(sum(got["islands"], [])) == list(range(harness.NUM_DEVICES))
    if harness.on_causeway():
        assert all(i and w for i, w in got["has_attributes"]), \
            f"devices lack 'island'/'worker' attributes: {got['repr']}"
    assert got["islands"] == want["islands"], "island layout differs from the emulated one"


def test_jnp_ops(check):
    check("jnp_ops")  # eagerly: one small executable per op


def test_jnp_ops_jitted(check):
    check("jnp_ops", jit=True)


def test_jit_pytrees_static_donate(check):
    want, got = check("jit_pytrees")
    assert got["traces"] == [2, 3], "static_argnums must retrace once per static value"
    assert got["donated_deleted_0"], "donated input not marked deleted"


def test_grad_vmap(check):
    check("grad_vmap")


def test_control_flow(check):
    check("control_flow")


def test_random_threefry(check):
    want, got = check("random_draws")
    assert "threefry" in got["impl"], got["impl"]


DTYPES_32 = ["float32", "bfloat16", "float16", "int8", "int16", "int32", "uint8", "uint32",
             "bool", "complex64"]


def test_dtypes(check):
    want, got = check("dtypes", names=DTYPES_32)
    for name in DTYPES_32:
        assert got[name]["dtype"] == name


def test_scalars(check):
    check("scalars")


def test_zero_size(check):
    check("zero_size")


def test_512mib_roundtrip(cw):
    # The host array is the oracle (bytes up, same bytes back); no stock run needed.
    got = cw.call("big_roundtrip", mib=512, timeout=300)
    assert got["nbytes"] == 512 << 20
    assert got["equal"], "512 MiB array came back different"
    print(f"512 MiB up {got['up_s']:.2f} s, down {got['down_s']:.2f} s")


def test_repeated_transfers(check):
    want, got = check("repeated_transfers")
    assert all(got["equal"]), got["equal"]


def test_device_put_chosen_device(check):
    want, got = check("device_put_chosen")
    for p in range(harness.NUM_DEVICES):
        assert got[p]["x_dev"] == [p] and got[p]["y_dev"] == [p]


@plugin_front_only("jaxlib's proxy client refuses DLPack itself (\"implemented for a "
                   "PjRt-compatible backend only\") before any request")
def test_dlpack(check):
    want, got = check("dlpack")
    assert got["export_writeable"] is False
    assert got["exported_not_donated"] and got["import_no_copy_refused"] and got["int4_refused"]
    assert got["donated_after_release"][1], "once its export is gone the array is donated"
    assert got["int4_donated_after_refusal"], "a refused export must not keep the array"
