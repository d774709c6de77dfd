//! One valid case per layout family; each test breaks one thing in a copy.
//!
//! `valid_cases_import_at_every_level` (in the root file) proves each of these
//! imports at every level and matches arrow-rs' own full validation, so a
//! defect test fails only because of its one defect.

use crate::common::producer::*;

/// `int32`, 3 slots, slot 1 null: validity `0b101`, values `[1, 0, 3]`.
pub fn int32() -> Case {
    Case::new(
        ArrayNode::new(3, 1, vec![bitmap(&[true, false, true]), i32s(&[1, 0, 3])]),
        SchemaNode::new("i", "x"),
    )
}

/// A non-null int32 node of `values`.
pub fn int32_node(values: &[i32]) -> ArrayNode {
    ArrayNode::new(values.len() as i64, 0, vec![None, i32s(values)])
}

/// A non-null utf8 node of `strings`.
pub fn utf8_node(strings: &[&str]) -> ArrayNode {
    let mut offsets = vec![0i32];
    let mut data = Vec::new();
    for s in strings {
        data.extend_from_slice(s.as_bytes());
        offsets.push(data.len() as i32);
    }
    ArrayNode::new(
        strings.len() as i64,
        0,
        vec![None, i32s(&offsets), bytes(&data)],
    )
}

/// `utf8`: `["a", "", "bcd"]`: offsets `[0, 1, 1, 4]`, data `"abcd"`.
pub fn utf8() -> Case {
    Case::new(utf8_node(&["a", "", "bcd"]), SchemaNode::new("u", "s"))
}

/// `list<int32>`: `[[1, 2], [], [3]]`: offsets `[0, 2, 2, 3]`.
pub fn list() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None, i32s(&[0, 2, 2, 3])])
            .with_children(vec![int32_node(&[1, 2, 3])]),
        SchemaNode::new("+l", "l").with_children(vec![SchemaNode::new("i", "item")]),
    )
}

/// `struct<a: int32, b: utf8>` of 3 rows.
pub fn struct_ab() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None])
            .with_children(vec![int32_node(&[1, 2, 3]), utf8_node(&["a", "", "bcd"])]),
        SchemaNode::new("+s", "st")
            .with_children(vec![SchemaNode::new("i", "a"), SchemaNode::new("u", "b")]),
    )
}

/// `dictionary<int8, utf8>`: keys `[0, 1, 0]` into `["x", "yz"]`.
pub fn dictionary() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None, i8s(&[0, 1, 0])]).with_dictionary(utf8_node(&["x", "yz"])),
        SchemaNode::new("c", "d").with_dictionary(SchemaNode::new("u", "")),
    )
}

fn union_fields() -> Vec<SchemaNode> {
    vec![SchemaNode::new("i", "int"), SchemaNode::new("u", "str")]
}

/// `dense_union<0: int32, 1: utf8>`: `[1, "a", 2]`: type ids `[0, 1, 0]`,
/// offsets `[0, 0, 1]`.
pub fn dense_union() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![i8s(&[0, 1, 0]), i32s(&[0, 0, 1])])
            .with_children(vec![int32_node(&[1, 2]), utf8_node(&["a"])]),
        SchemaNode::new("+ud:0,1", "du").with_children(union_fields()),
    )
}

/// `sparse_union<0: int32, 1: utf8>`: `[1, "b", 3]`.
pub fn sparse_union() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![i8s(&[0, 1, 0])])
            .with_children(vec![int32_node(&[1, 2, 3]), utf8_node(&["a", "b", "c"])]),
        SchemaNode::new("+us:0,1", "su").with_children(union_fields()),
    )
}

/// `run_end_encoded<int32, int32>` of 5 slots: run ends `[2, 5]`, values
/// `[10, 20]`.
pub fn run_end_encoded() -> Case {
    Case::new(
        ArrayNode::new(5, 0, vec![])
            .with_children(vec![int32_node(&[2, 5]), int32_node(&[10, 20])]),
        SchemaNode::new("+r", "ree").with_children(vec![
            SchemaNode::new("i", "run_ends").non_nullable(),
            SchemaNode::new("i", "values"),
        ]),
    )
}

/// The long string of [`utf8_view`], stored in variadic buffer 0.
pub const LONG: &[u8] = b"this string is longer";

/// `utf8_view`: `["hi", "", LONG]`: views, one variadic buffer, sizes `[21]`.
pub fn utf8_view() -> Case {
    let views: Vec<u8> = [view(b"hi", 0, 0), view(b"", 0, 0), view(LONG, 0, 0)].concat();
    Case::new(
        ArrayNode::new(
            3,
            0,
            vec![None, Some(views), bytes(LONG), i64s(&[LONG.len() as i64])],
        ),
        SchemaNode::new("vu", "v"),
    )
}

/// `fixed_size_list<int32, 2>`: `[[1, 2], [3, 4], [5, 6]]`.
pub fn fixed_size_list() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None]).with_children(vec![int32_node(&[1, 2, 3, 4, 5, 6])]),
        SchemaNode::new("+w:2", "fl").with_children(vec![SchemaNode::new("i", "item")]),
    )
}

/// `map<utf8, int32>`: `[{a: 1}, {}, {b: 2}]`: offsets `[0, 1, 1, 2]`.
pub fn map() -> Case {
    Case::new(
        ArrayNode::new(3, 0, vec![None, i32s(&[0, 1, 1, 2])]).with_children(vec![ArrayNode::new(
            2,
            0,
            vec![None],
        )
        .with_children(vec![utf8_node(&["a", "b"]), int32_node(&[1, 2])])]),
        SchemaNode::new("+m", "m").with_children(vec![SchemaNode::new("+s", "entries")
            .non_nullable()
            .with_children(vec![
                SchemaNode::new("u", "key").non_nullable(),
                SchemaNode::new("i", "value"),
            ])]),
    )
}

/// Every valid case, named.
pub fn all() -> Vec<(&'static str, Case)> {
    vec![
        ("int32", int32()),
        ("utf8", utf8()),
        ("list<int32>", list()),
        ("struct<a, b>", struct_ab()),
        ("dictionary<int8, utf8>", dictionary()),
        ("dense union", dense_union()),
        ("sparse union", sparse_union()),
        ("run-end encoded", run_end_encoded()),
        ("utf8_view", utf8_view()),
        ("fixed_size_list", fixed_size_list()),
        ("map", map()),
    ]
}

/// `depth` nested lists around an int32, `list<list<...<int32>>>`, each of
/// length 1 holding the next, down to `[7]`: `depth + 1` levels of structs.
pub fn nested_lists(depth: usize) -> Case {
    let mut array = int32_node(&[7]);
    let mut schema = SchemaNode::new("i", "item");
    for _ in 0..depth {
        array = ArrayNode::new(1, 0, vec![None, i32s(&[0, 1])]).with_children(vec![array]);
        schema = SchemaNode::new("+l", "item").with_children(vec![schema]);
    }
    Case::new(array, schema)
}
