//! The named inputs of the `cai` target.

use arrow_device::cai::Value;

use super::decode::{
    encode, CaseSpec, DescrSpec, Entry, InterfaceSpec, PointerSpec, TypestrSpec, VersionSpec,
    KINDS, ORDERS, UNITS,
};

/// `typestr` as a composed spec.
fn composed(typestr: &str) -> TypestrSpec {
    let mut chars = typestr.chars();
    let order = chars.next().expect("a byte order");
    let kind = chars.next().expect("a kind");
    let rest = chars.as_str();
    let (size, unit) = rest.split_at(rest.find('[').unwrap_or(rest.len()));
    TypestrSpec::Composed {
        order: ORDERS.iter().position(|o| *o == order).expect("an order") as u8,
        kind: KINDS.iter().position(|k| *k == kind).expect("a kind") as u8,
        size: size.parse().expect("a size"),
        unit: UNITS.iter().position(|u| *u == unit).expect("a unit") as u8,
    }
}

/// What CuPy hands out for a contiguous 1-d array: version 3, strides
/// None, stream 1.
fn typical(shape: &[i64], typestr: &str) -> InterfaceSpec {
    InterfaceSpec {
        shape: Entry::Typical(shape.to_vec()),
        typestr: Entry::Typical(composed(typestr)),
        data: Entry::Typical((PointerSpec::Real, false)),
        version: Entry::Typical(VersionSpec::Three),
        strides: Entry::None,
        descr: Entry::Absent,
        mask: Entry::Absent,
        stream: Entry::Typical(1),
        extras: Vec::new(),
    }
}

fn case(interface: InterfaceSpec) -> CaseSpec {
    CaseSpec {
        managed: false,
        interface,
        values: (0u8..64)
            .map(|i| i.wrapping_mul(29).wrapping_add(3))
            .collect(),
        mask_values: vec![1, 0, 1, 1],
    }
}

/// Named inputs: typical dicts of every type string the import takes, on
/// the CPU and on managed memory, and the spec's edges.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, CaseSpec)> = Vec::new();
    for typestr in [
        "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8",
        "<M8[s]", "<M8[ms]", "<M8[us]", "<M8[ns]", "<m8[s]", "<m8[ns]",
    ] {
        // File names that differ in more than case (`M8`, `m8`).
        let name = typestr
            .replace("M8", "datetime64")
            .replace("m8", "timedelta64")
            .replace('|', "na-")
            .replace('<', "le-")
            .replace(['[', ']'], "-");
        let name = name.trim_end_matches('-');
        out.push((format!("cpu-{name}"), case(typical(&[4], typestr))));
        out.push((
            format!("managed-{name}"),
            CaseSpec {
                managed: true,
                ..case(typical(&[4], typestr))
            },
        ));
    }
    let mut with =
        |name: &str, interface: InterfaceSpec| out.push((name.to_string(), case(interface)));
    with(
        "version-2-no-stream",
        InterfaceSpec {
            version: Entry::Typical(VersionSpec::Two),
            stream: Entry::Absent,
            ..typical(&[3], "<f8")
        },
    );
    with("zero-d", typical(&[], "<i4"));
    with(
        "empty-zero-pointer",
        InterfaceSpec {
            data: Entry::Typical((PointerSpec::Zero, true)),
            ..typical(&[0], "<f4")
        },
    );
    with(
        "zero-pointer-with-values",
        InterfaceSpec {
            data: Entry::Typical((PointerSpec::Zero, false)),
            ..typical(&[2], "<f4")
        },
    );
    with(
        "strides-itemsize",
        InterfaceSpec {
            strides: Entry::Typical(vec![8]),
            ..typical(&[5], "<i8")
        },
    );
    with(
        "strides-not-contiguous",
        InterfaceSpec {
            strides: Entry::Typical(vec![16]),
            ..typical(&[5], "<i8")
        },
    );
    with(
        "strides-negative-one-value",
        InterfaceSpec {
            strides: Entry::Typical(vec![-8]),
            ..typical(&[1], "<i8")
        },
    );
    with("two-dimensions", typical(&[2, 3], "<f4"));
    with("negative-shape", typical(&[-1], "<f4"));
    with("big-endian", typical(&[2], ">f4"));
    with("complex", typical(&[2], "<c8"));
    with(
        "descr-plain",
        InterfaceSpec {
            descr: Entry::Typical(DescrSpec::Plain),
            ..typical(&[3], "<u2")
        },
    );
    with(
        "descr-structured",
        InterfaceSpec {
            descr: Entry::Typical(DescrSpec::Fields(vec![
                (b"x".to_vec(), b"<f4".to_vec()),
                (b"y".to_vec(), b"<f4".to_vec()),
            ])),
            ..typical(&[3], "|V8")
        },
    );
    with(
        "mask-bool",
        InterfaceSpec {
            mask: Entry::Typical(Box::new(typical(&[4], "|b1"))),
            ..typical(&[4], "<f4")
        },
    );
    with(
        "mask-wrong-length",
        InterfaceSpec {
            mask: Entry::Typical(Box::new(typical(&[3], "|u1"))),
            ..typical(&[4], "<f4")
        },
    );
    with(
        "stream-zero",
        InterfaceSpec {
            stream: Entry::Typical(0),
            ..typical(&[4], "<f4")
        },
    );
    with(
        "stream-handle",
        InterfaceSpec {
            stream: Entry::Typical(0x5555_0000),
            ..typical(&[4], "<f4")
        },
    );
    with(
        "pointer-near-the-end-of-memory",
        InterfaceSpec {
            data: Entry::Typical((PointerSpec::Address(u64::MAX - 8), true)),
            ..typical(&[4], "<f4")
        },
    );
    with(
        "shape-overflows",
        InterfaceSpec {
            data: Entry::Typical((PointerSpec::Address(0x1000), true)),
            ..typical(&[i64::MAX], "<f8")
        },
    );
    with(
        "wrong-value-types",
        InterfaceSpec {
            shape: Entry::Value(Value::Str("4".into())),
            extras: vec![(Err(b"unknown".to_vec()), Value::Other("object".into()))],
            ..typical(&[4], "<f4")
        },
    );
    with(
        "duplicate-key-last-wins",
        InterfaceSpec {
            extras: vec![(Ok(3), Value::Int(2))],
            ..typical(&[4], "<f4")
        },
    );
    out.into_iter()
        .map(|(name, case)| (name, encode(&case)))
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow_device::cai::CudaArrayInterface;

    use super::*;
    use crate::cai::decode::decode;

    #[test]
    fn seeds_decode_to_the_cases_they_were_encoded_from() {
        let mut spec = case(InterfaceSpec {
            mask: Entry::Typical(Box::new(typical(&[4], "|b1"))),
            descr: Entry::Typical(DescrSpec::Named(b"n".to_vec())),
            extras: vec![(Ok(2), Value::Tuple(vec![Value::Int(-5), Value::None]))],
            ..typical(&[4], "<M8[ms]")
        });
        spec.managed = true;
        assert_eq!(decode(&encode(&spec)), spec);
    }

    #[test]
    fn typical_seeds_plan_and_import() {
        for (name, data) in seeds() {
            if !(name.starts_with("cpu-") || name.starts_with("managed-")) {
                continue;
            }
            let case = decode(&data);
            let memory = case.interface.memory(&case.values);
            assert!(memory.readable.is_some(), "{name}");
            let interface =
                CudaArrayInterface::from_entries(case.interface.entries(memory.address, 0))
                    .unwrap();
            let plan = interface.validate().unwrap();
            assert_eq!(plan.len, 4, "{name}");
        }
    }
}
