//! The byte layout of a `cai` case (see the module documentation of
//! [`crate::cai`]): what a case is made of, [`decode`] that reads it and
//! [`encode`] that writes it for seeds.

use arrow_device::cai::Value;

use crate::input::{Encoder, Input};

const MAX_VALUE_DEPTH: usize = 3;
pub(super) const KEYS: [&str; 8] = [
    "shape", "typestr", "data", "version", "strides", "descr", "mask", "stream",
];
pub(super) const ORDERS: [char; 4] = ['<', '>', '=', '|'];
pub(super) const KINDS: [char; 10] = ['b', 'i', 'u', 'f', 'c', 'M', 'm', 'V', 'O', 'x'];
pub(super) const UNITS: [&str; 8] = ["", "[s]", "[ms]", "[us]", "[ns]", "[D]", "[10ms]", "["];

/// One entry of the dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<T> {
    Typical(T),
    Absent,
    None,
    Value(Value),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypestrSpec {
    Composed {
        order: u8,
        kind: u8,
        size: u8,
        unit: u8,
    },
    Raw(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointerSpec {
    Real,
    Zero,
    Address(u64),
    Negative(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSpec {
    Three,
    Two,
    One,
    Int(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescrSpec {
    Plain,
    Named(Vec<u8>),
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
}

/// A decoded interface dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceSpec {
    pub shape: Entry<Vec<i64>>,
    pub typestr: Entry<TypestrSpec>,
    pub data: Entry<(PointerSpec, bool)>,
    pub version: Entry<VersionSpec>,
    pub strides: Entry<Vec<i64>>,
    pub descr: Entry<DescrSpec>,
    pub mask: Entry<Box<InterfaceSpec>>,
    pub stream: Entry<i64>,
    /// `(key, value)`: a key of `KEYS` by index, or any other bytes.
    pub extras: Vec<(Result<u8, Vec<u8>>, Value)>,
}

/// A decoded case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseSpec {
    pub managed: bool,
    pub interface: InterfaceSpec,
    pub values: Vec<u8>,
    pub mask_values: Vec<u8>,
}

// ------------------------------------------------------------------ decoding

pub(super) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn read_entry<T>(input: &mut Input<'_>, typical: impl FnOnce(&mut Input<'_>) -> T) -> Entry<T> {
    match input.u8() % 4 {
        0 => Entry::Typical(typical(input)),
        1 => Entry::Absent,
        2 => Entry::None,
        _ => Entry::Value(read_value(input, 0)),
    }
}

fn read_ints(input: &mut Input<'_>) -> Vec<i64> {
    let n = input.u8() % 4;
    (0..n).map(|_| input.i64()).collect()
}

fn read_value(input: &mut Input<'_>, depth: usize) -> Value {
    match input.u8() % 7 {
        0 => Value::None,
        1 => Value::Bool(input.bool()),
        2 => {
            let value = i128::from(input.i64());
            Value::Int(value << (input.u8() % 72))
        }
        3 => Value::Str(text(input.bytes())),
        4 if depth < MAX_VALUE_DEPTH => {
            let n = input.u8() % 4;
            Value::Tuple((0..n).map(|_| read_value(input, depth + 1)).collect())
        }
        5 if depth < MAX_VALUE_DEPTH => {
            let n = input.u8() % 4;
            Value::Dict(
                (0..n)
                    .map(|_| (text(input.bytes()), read_value(input, depth + 1)))
                    .collect(),
            )
        }
        6 => Value::Other(text(input.bytes())),
        _ => Value::None,
    }
}

fn read_interface(input: &mut Input<'_>, level: usize) -> InterfaceSpec {
    let shape = read_entry(input, read_ints);
    let typestr = read_entry(input, |input| match input.u8() % 2 {
        0 => TypestrSpec::Composed {
            order: input.u8() % 4,
            kind: input.u8() % 10,
            size: input.u8(),
            unit: input.u8() % 8,
        },
        _ => TypestrSpec::Raw(input.bytes().to_vec()),
    });
    let data = read_entry(input, |input| {
        let pointer = match input.u8() % 4 {
            0 => PointerSpec::Real,
            1 => PointerSpec::Zero,
            2 => PointerSpec::Address(input.u64()),
            _ => PointerSpec::Negative(input.i64()),
        };
        (pointer, input.bool())
    });
    let version = read_entry(input, |input| match input.u8() % 4 {
        0 => VersionSpec::Three,
        1 => VersionSpec::Two,
        2 => VersionSpec::One,
        _ => VersionSpec::Int(input.i64()),
    });
    let strides = read_entry(input, read_ints);
    let descr = read_entry(input, |input| match input.u8() % 3 {
        0 => DescrSpec::Plain,
        1 => DescrSpec::Named(input.bytes().to_vec()),
        _ => {
            let n = input.u8() % 3;
            DescrSpec::Fields(
                (0..n)
                    .map(|_| (input.bytes().to_vec(), input.bytes().to_vec()))
                    .collect(),
            )
        }
    });
    let mask = match read_entry(input, |_| ()) {
        Entry::Typical(()) if level == 0 => Entry::Typical(Box::new(read_interface(input, 1))),
        Entry::Typical(()) => Entry::None,
        Entry::Absent => Entry::Absent,
        Entry::None => Entry::None,
        Entry::Value(v) => Entry::Value(v),
    };
    let stream = read_entry(input, |input| input.i64());
    let n = input.u8() % 4;
    let extras = (0..n)
        .map(|_| {
            let key = match input.u8() % 9 {
                8 => Err(input.bytes().to_vec()),
                index => Ok(index),
            };
            (key, read_value(input, 0))
        })
        .collect();
    InterfaceSpec {
        shape,
        typestr,
        data,
        version,
        strides,
        descr,
        mask,
        stream,
        extras,
    }
}

pub fn decode(data: &[u8]) -> CaseSpec {
    let mut input = Input::new(data);
    let managed = input.bool();
    let interface = read_interface(&mut input, 0);
    CaseSpec {
        managed,
        interface,
        values: input.bytes().to_vec(),
        mask_values: input.bytes().to_vec(),
    }
}

// ------------------------------------------------------------------ encoding

fn encode_entry<T>(e: &mut Encoder, entry: &Entry<T>, typical: impl FnOnce(&mut Encoder, &T)) {
    match entry {
        Entry::Typical(t) => {
            e.u8(0);
            typical(e, t);
        }
        Entry::Absent => {
            e.u8(1);
        }
        Entry::None => {
            e.u8(2);
        }
        Entry::Value(v) => {
            e.u8(3);
            encode_value(e, v);
        }
    }
}

fn encode_ints(e: &mut Encoder, values: &[i64]) {
    e.u8(values.len() as u8);
    for v in values {
        e.i64(*v);
    }
}

/// Values whose ints are i64 (no shift) and whose strings are UTF-8.
fn encode_value(e: &mut Encoder, value: &Value) {
    match value {
        Value::None => {
            e.u8(0);
        }
        Value::Bool(b) => {
            e.u8(1).bool(*b);
        }
        Value::Int(i) => {
            let i = i64::try_from(*i).expect("seed ints fit an i64");
            e.u8(2).i64(i).u8(0);
        }
        Value::Str(s) => {
            e.u8(3).bytes(s.as_bytes());
        }
        Value::Tuple(items) => {
            e.u8(4).u8(items.len() as u8);
            for item in items {
                encode_value(e, item);
            }
        }
        Value::Dict(pairs) => {
            e.u8(5).u8(pairs.len() as u8);
            for (key, v) in pairs {
                e.bytes(key.as_bytes());
                encode_value(e, v);
            }
        }
        Value::Other(name) => {
            e.u8(6).bytes(name.as_bytes());
        }
    }
}

fn encode_interface(e: &mut Encoder, spec: &InterfaceSpec) {
    encode_entry(e, &spec.shape, |e, s| encode_ints(e, s));
    encode_entry(e, &spec.typestr, |e, t| match t {
        TypestrSpec::Composed {
            order,
            kind,
            size,
            unit,
        } => {
            e.u8(0).u8(*order).u8(*kind).u8(*size).u8(*unit);
        }
        TypestrSpec::Raw(bytes) => {
            e.u8(1).bytes(bytes);
        }
    });
    encode_entry(e, &spec.data, |e, (pointer, read_only)| {
        match pointer {
            PointerSpec::Real => e.u8(0),
            PointerSpec::Zero => e.u8(1),
            PointerSpec::Address(a) => e.u8(2).u64(*a),
            PointerSpec::Negative(v) => e.u8(3).i64(*v),
        };
        e.bool(*read_only);
    });
    encode_entry(e, &spec.version, |e, v| {
        match v {
            VersionSpec::Three => e.u8(0),
            VersionSpec::Two => e.u8(1),
            VersionSpec::One => e.u8(2),
            VersionSpec::Int(v) => e.u8(3).i64(*v),
        };
    });
    encode_entry(e, &spec.strides, |e, s| encode_ints(e, s));
    encode_entry(e, &spec.descr, |e, d| match d {
        DescrSpec::Plain => {
            e.u8(0);
        }
        DescrSpec::Named(name) => {
            e.u8(1).bytes(name);
        }
        DescrSpec::Fields(fields) => {
            e.u8(2).u8(fields.len() as u8);
            for (name, t) in fields {
                e.bytes(name).bytes(t);
            }
        }
    });
    encode_entry(e, &spec.mask, |e, m| encode_interface(e, m));
    encode_entry(e, &spec.stream, |e, s| {
        e.i64(*s);
    });
    e.u8(spec.extras.len() as u8);
    for (key, v) in &spec.extras {
        match key {
            Ok(index) => e.u8(*index),
            Err(bytes) => e.u8(8).bytes(bytes),
        };
        encode_value(e, v);
    }
}

/// The input that decodes to `case`.
pub fn encode(case: &CaseSpec) -> Vec<u8> {
    let mut e = Encoder::new();
    e.bool(case.managed);
    encode_interface(&mut e, &case.interface);
    e.bytes(&case.values).bytes(&case.mask_values);
    e.finish()
}
