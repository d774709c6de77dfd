"""Data that the default validation level accepts (it reads O(1) values, as
nanoarrow's does) must never crash a conversion, reach the user as a panic,
or come back changed from a copy.

* A requested representation (`requested_schema` of `__arrow_c_array__`,
  `__arrow_c_device_array__` and streams, hence `pa.array(x, type=...)` and
  `pa.RecordBatchReader.from_stream(..., schema=...)`) converts only data
  whose every value was checked: a defect is a `ValueError` naming it.
* Data becomes arrow-rs data only with the structure arrow-rs builds on,
  whatever level the import ran at.
* Large string slices survive a copy to a device and back, whatever the
  offsets before the slice hold.
* An opaque array (device type without an implementation) is handed on by
  no interface, with one message.

The crash-prone cases run in a child interpreter (`run_isolated`), which
must exit cleanly with nothing on stderr: no backtrace, no panic message.
"""

import pytest

import arrow_device as ad
import hostile_structs as h
from hostile_structs import ArrayNode, Case, i8s, i32s, i64s, schema, view
from test_hostile import (
    LONG,
    check_released_after_drop,
    expect_exc,
    expect_ok,
    int32_node,
    run_isolated,
    struct_ab,
    utf8_node,
)

pa = pytest.importorskip("pyarrow")


def isolated(body):
    run_isolated(body, module="test_hostile_conversions", quiet=True)


# ---------------------------------------------------------------- cases


def string_view_naming(index, offset):
    """A string view whose long value names variadic buffer `index` at `offset`."""
    views = view(b"hi") + view(b"") + view(LONG, index, offset)
    return ArrayNode(3, 0, [None, views, LONG, i64s([len(LONG)])])


def view_case(index, offset):
    return Case(string_view_naming(index, offset), schema("vu", "v"))


def view_in_struct(index, offset):
    return Case(
        ArrayNode(3, 0, [None]).with_children(string_view_naming(index, offset)),
        schema("+s", "").with_children(schema("vu", "v")),
    )


def utf8_with_middle_offset(middle):
    return Case(ArrayNode(3, 0, [None, i32s([0, middle, 1, 4]), b"abcd"]), schema("u", "s"))


def dictionary_with_key(key):
    return Case(
        ArrayNode(3, 0, [None, i8s([0, key, 1])]).with_dictionary(utf8_node([b"x", b"yz"])),
        schema("c", "d").with_dictionary(schema("u", "")),
    )


def list_view_with_offset(offset):
    return Case(
        ArrayNode(3, 0, [None, i32s([0, offset, 2]), i32s([2, 0, 1])]).with_children(
            int32_node([1, 2, 3])
        ),
        schema("+vl", "lv").with_children(schema("i", "item")),
    )


def requested(data_type):
    return pa.field("x", data_type).__arrow_c_schema__()


def assert_refused(array, data_type, keyword):
    """Every way of asking for `data_type` is a ValueError mentioning
    `keyword`; the array stays usable."""
    capsule = requested(data_type)
    for method in (array.__arrow_c_array__, array.__arrow_c_device_array__):
        err = expect_exc(ValueError, method, capsule)
        assert keyword in str(err), f"{method.__name__}: {err}"
    err = expect_exc(Exception, pa.array, array, type=data_type)
    assert keyword in str(err), f"pa.array: {err}"
    assert len(array) == 3


# ---------------------------------------------------------------- conversions


def refused_in_a_child(case, types, keyword):
    """In a child interpreter: `case` (Python source of a Case) imported at
    the default level is refused as each of `types` (source of pyarrow
    types), with `keyword` in the message, and released once."""
    isolated(f"""
        built = {case}.build()
        array = expect_ok(built, "default")
        for t in ({types},):
            assert_refused(array, t, {keyword!r})
        del array
        check_released_after_drop(built)
    """)


@pytest.mark.parametrize(
    "index, offset, keyword",
    [(5, 0, "buffer"), (0, 1 << 30, "buffer 0 has length 21")],
    ids=["missing variadic buffer", "offset past the buffer"],
)
def test_a_defective_string_view_is_refused_in_every_requested_representation(index, offset, keyword):
    refused_in_a_child(f"view_case({index}, {offset})", "pa.string(), pa.large_string()", keyword)


def test_a_stream_of_defective_string_views_fails_the_consumers_read_cleanly():
    isolated("""
        built = view_in_struct(5, 0).build()
        array = expect_ok(built, "default")
        reader = pa.RecordBatchReader.from_stream(
            ad.stream([array]), schema=pa.schema([("v", pa.string())])
        )
        err = expect_exc(Exception, reader.read_next_batch)
        assert "buffer" in str(err) and "field \\"v\\"" in str(err), err
        del reader, array
        check_released_after_drop(built)
    """)


def test_a_utf8_middle_offset_past_the_data_is_refused_as_string_view():
    refused_in_a_child("utf8_with_middle_offset(1 << 30)", "pa.string_view(), pa.large_string()", "offset")


def test_a_dictionary_key_past_the_dictionary_is_a_value_error_not_a_panic():
    refused_in_a_child("dictionary_with_key(100)", "pa.string()", "100")


def test_a_list_view_offset_past_its_child_is_a_value_error_not_a_panic():
    refused_in_a_child(
        "list_view_with_offset(1000)",
        "pa.list_(pa.int32()), pa.large_list_view(pa.int32())",
        "list view 1 has offset 1000 and size 0",
    )


def test_a_struct_child_shorter_than_the_struct_imported_unvalidated_is_a_value_error_on_export():
    isolated("""
        case = struct_ab()
        case.array.children[1] = utf8_node([b"a", b""])
        built = case.build()
        array = expect_ok(built, "none")
        err = expect_exc(ValueError, array.__arrow_c_array__)
        assert "field b" in str(err) and "length smaller" in str(err), err
        del array
        check_released_after_drop(built)
    """)


def test_valid_data_converts_to_every_representation_with_its_values():
    array = expect_ok(dictionary_with_key(1).build(), "default")
    assert pa.array(array, type=pa.string()).to_pylist() == ["x", "yz", "yz"]
    array = expect_ok(list_view_with_offset(1).build(), "default")
    assert pa.array(array, type=pa.list_(pa.int32())).to_pylist() == [[1, 2], [], [3]]
    array = expect_ok(view_case(0, 0).build(), "default")
    assert pa.array(array, type=pa.string()).to_pylist() == ["hi", "", LONG.decode()]


# ---------------------------------------------------------------- copies


LARGE = (1 << 21)


@pytest.mark.parametrize("garbage", [1000, 0, -5, 3 * LARGE])
@pytest.mark.parametrize("offset", [1, 3, 7, 8, 9])
def test_a_large_string_slice_survives_a_device_round_trip_whatever_precedes_it(offset, garbage):
    data = (b"abcdefghijklmnopqrstuvwxyz" * (LARGE // 26 + 1))[:LARGE]
    offsets = [garbage] * offset + [0, 3, LARGE]
    node = ArrayNode(2, 0, [None, i32s(offsets), data])
    node.offset = offset
    built = Case(node, schema("u", "s")).build()
    array = expect_ok(built, "full")
    back = array.to(ad.emulated(0)).to(ad.cpu())
    result = pa.array(back)
    result.validate(full=True)
    assert result.to_pylist() == [data[:3].decode(), data[3:].decode()]
    del array, back, result
    check_released_after_drop(built)


# ---------------------------------------------------------------- opaque devices and extents


@pytest.mark.parametrize("device_type", [-1, 0, 17])
def test_an_opaque_array_of_an_unnamed_device_type_is_handed_on_by_no_interface(device_type):
    built = h.Case(int32_node([1, 2, 3]), schema("i", "x")).build(device_type=device_type, device_id=0)
    array = expect_ok(built, "default")
    errors = [
        expect_exc(TypeError, array.__arrow_c_device_array__),
        expect_exc(BufferError, array.__dlpack__),
        expect_exc(BufferError, array.__dlpack_device__),
    ]
    messages = {str(e) for e in errors}
    assert messages == {
        f"device type DeviceType({device_type}) id 0 has no implementation here, and the spec names no such "
        "device type: no consumer could find the memory"
    }, messages
    del array, errors
    check_released_after_drop(built)


def test_an_opaque_array_of_a_named_device_type_is_passed_on_by_both_interfaces():
    built = h.Case(int32_node([1, 2, 3]), schema("i", "x")).build(device_type=4, device_id=2)
    array = expect_ok(built, "default")
    assert array.__dlpack_device__() == (4, 2)
    assert type(array.__dlpack__()).__name__ == "PyCapsule"
    again = ad.array(array, validate="default")
    assert (again.device.type, again.device.id) == (4, 2)
    del array, again
    check_released_after_drop(built)


@pytest.mark.parametrize("offset, length", [(2**63 - 1, 3), (3, 2**63 - 1)])
def test_a_struct_whose_offset_plus_length_passes_int64_is_refused(offset, length):
    node = ArrayNode(length, 0, [None])
    node.offset = offset
    built = Case(node, schema("+s", "empty")).build()
    err = expect_exc(ValueError, ad.array, h.DeviceArrayProducer(built), validate="none")
    assert "overflows int64" in str(err), err
    assert built.releases() == (1, 1)
