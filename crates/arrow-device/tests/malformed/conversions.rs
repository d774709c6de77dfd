//! Defects the default level does not read (it reads O(1) values) must not
//! reach an arrow-rs kernel: a conversion to another representation
//! (`to_representation`, what a PyCapsule `requested_schema` asks for) checks
//! every value it hands to `arrow_cast` first and names the defect. Turning
//! a tree into arrow-rs data (`to_host`) checks the structure arrow-rs
//! builds on, whatever level the import ran at.
//!
//! Each test runs in a child process (`isolated_test!`): before the fix
//! these crashed the process.

use arrow_device::{DeviceArray, Error};
use arrow_schema::{DataType, Field};

use super::cases;
use super::{expect_ok, DEFAULT, MINIMAL, NONE};
use crate::common::producer::*;

/// Every type `to_representation` may be asked for, for `data_type`'s data.
fn representations(data_type: &DataType) -> Vec<DataType> {
    let item = || std::sync::Arc::new(Field::new("item", DataType::Int32, true));
    let candidates = [
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Utf8View,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
        DataType::List(item()),
        DataType::LargeList(item()),
        DataType::ListView(item()),
        DataType::LargeListView(item()),
    ];
    candidates
        .into_iter()
        .filter(|to| to != data_type && arrow_device::same_data(data_type, to))
        .chain(match data_type {
            DataType::Dictionary(_, values) => vec![values.as_ref().clone()],
            _ => vec![],
        })
        .collect()
}

/// Asserts that converting `array` to each of `targets` is refused with
/// `Error::Invalid` whose text contains `keyword`, without a panic.
#[track_caller]
fn assert_conversions_refused(array: &DeviceArray, targets: &[DataType], keyword: &str) {
    assert!(!targets.is_empty(), "no representation to try");
    for to in targets {
        let field = Field::new("x", to.clone(), true);
        match array.to_representation(&field) {
            Err(err @ Error::Invalid { .. }) => assert!(
                err.to_string().to_lowercase().contains(keyword),
                "{} to {to}: expected an error mentioning {keyword:?}, got: {err}",
                array.data_type()
            ),
            Err(other) => panic!(
                "{} to {to}: expected Error::Invalid, got {other:?}",
                array.data_type()
            ),
            Ok(converted) => panic!(
                "{} to {to}: converted data with a defect: {converted:?}",
                array.data_type()
            ),
        }
    }
}

/// A string view whose long value names variadic buffer `index` at `offset`.
fn string_view_naming(index: i32, offset: i32) -> Case {
    let mut case = cases::utf8_view();
    let views: Vec<u8> = [
        view(b"hi", 0, 0),
        view(b"", 0, 0),
        view(cases::LONG, index, offset),
    ]
    .concat();
    case.array.buffers[1] = Some(views);
    case
}

isolated_test! {
    fn a_string_view_naming_a_missing_variadic_buffer_is_refused_before_a_cast() {
        let imported = expect_ok(string_view_naming(5, 0).build(), DEFAULT);
        assert_conversions_refused(
            &imported,
            &representations(&DataType::Utf8View),
            "buffer",
        );
    }
}

isolated_test! {
    fn a_string_view_past_its_variadic_buffer_is_refused_before_a_cast() {
        let imported = expect_ok(string_view_naming(0, 1 << 30).build(), DEFAULT);
        assert_conversions_refused(
            &imported,
            &representations(&DataType::Utf8View),
            "buffer 0 has length 21",
        );
    }
}

isolated_test! {
    fn a_utf8_middle_offset_past_the_data_is_refused_before_a_cast() {
        let mut case = cases::utf8();
        case.array.buffers[1] = i32s(&[0, 1 << 30, 1, 4]);
        let imported = expect_ok(case.build(), DEFAULT);
        assert_conversions_refused(&imported, &representations(&DataType::Utf8), "offset");
    }
}

isolated_test! {
    fn a_dictionary_key_past_the_dictionary_is_refused_before_decoding() {
        let mut case = cases::dictionary();
        case.array.buffers[1] = i8s(&[0, 100, 1]);
        let imported = expect_ok(case.build(), DEFAULT);
        assert_conversions_refused(&imported, &representations(imported.data_type()), "100");
    }
}

/// `list_view<int32>` `[[1, 2], [], [3]]` over the child `[1, 2, 3]`.
fn list_view() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None, i32s(&[0, 2, 2]), i32s(&[2, 0, 1])])
            .with_children(vec![cases::int32_node(&[1, 2, 3])]),
        SchemaNode::new("+vl", "lv").with_children(vec![SchemaNode::new("i", "item")]),
    )
}

isolated_test! {
    fn a_list_view_offset_past_its_child_is_refused_in_every_conversion() {
        let valid = expect_ok(list_view().build(), DEFAULT);
        let as_list = valid
            .to_representation(&Field::new("x", DataType::List(std::sync::Arc::new(Field::new("item", DataType::Int32, true))), true))
            .expect("the valid list view converts");
        assert_eq!(as_list.to_host().unwrap().len(), 3);
        drop((valid, as_list));

        let mut case = list_view();
        case.array.buffers[1] = i32s(&[0, 1000, 2]);
        let imported = expect_ok(case.build(), DEFAULT);
        assert_conversions_refused(
            &imported,
            &representations(imported.data_type()),
            "list view 1 has offset 1000 and size 0",
        );
        // Becoming arrow-rs data at all needs offsets inside the child.
        let err = imported.to_host().unwrap_err();
        assert!(err.to_string().contains("1000"), "{err}");
    }
}

isolated_test! {
    fn a_struct_child_shorter_than_the_struct_imported_at_none_is_an_error_on_the_host() {
        let mut case = cases::struct_ab();
        case.array.children[1] = cases::utf8_node(&["a", ""]);
        let imported = expect_ok(case.build(), NONE);
        let err = imported.to_host().unwrap_err();
        match &err {
            Error::Invalid { path, message } => {
                assert_eq!(path, "array", "{err}");
                assert!(message.contains("length smaller than expected"), "{err}");
                assert!(message.contains("field b"), "names the child: {err}");
            }
            other => panic!("expected Error::Invalid, got {other:?}"),
        }
        assert!(imported.to_record_batch().is_err());
        let same = Field::new("st", imported.data_type().clone(), true);
        // The same type needs no conversion: zero-copy, no read.
        assert!(imported.to_representation(&same).is_ok());
    }
}

#[test]
fn a_checked_conversion_keeps_the_values() {
    use arrow_array::cast::AsArray;
    let imported = expect_ok(cases::dictionary().build(), DEFAULT);
    let decoded = imported
        .to_representation(&Field::new("d", DataType::Utf8, true))
        .unwrap()
        .to_host()
        .unwrap();
    assert_eq!(
        decoded.as_string::<i32>().iter().collect::<Vec<_>>(),
        [Some("x"), Some("yz"), Some("x")]
    );
    // Checked once: a second conversion of the same import reads the
    // values again but does not validate them again (nothing to observe
    // but the result, which must be the same).
    let again = imported
        .to_representation(&Field::new("d", DataType::LargeUtf8, true))
        .unwrap()
        .to_host()
        .unwrap();
    assert_eq!(
        again.as_string::<i64>().iter().collect::<Vec<_>>(),
        [Some("x"), Some("yz"), Some("x")]
    );
}

isolated_test! {
    fn a_list_past_its_child_imported_below_default_is_an_error_on_the_host() {
        for level in [NONE, MINIMAL] {
            let mut case = cases::list();
            case.array.children[0] = cases::int32_node(&[1, 2]);
            let imported = expect_ok(case.build(), level);
            let err = imported.to_host().unwrap_err();
            assert!(
                matches!(err, Error::Invalid { .. }) && err.to_string().contains("offset"),
                "{level:?}: {err}"
            );
        }
    }
}

isolated_test! {
    fn a_short_last_run_end_imported_below_default_is_an_error_on_the_host() {
        for level in [NONE, MINIMAL] {
            let mut case = cases::run_end_encoded();
            case.array.children[0] = cases::int32_node(&[2, 4]);
            let imported = expect_ok(case.build(), level);
            let err = imported.to_host().unwrap_err();
            assert_eq!(
                err.to_string(),
                "child 0 \"run_ends\": the last run end is 4, expected at least 5 (offset + length)",
                "{level:?}"
            );
        }
    }
}
