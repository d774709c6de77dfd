//! Building a case: the dict's entries, and real memory behind a "real
//! memory" pointer that holds every byte the interface claims.

use arrow_device::cai::{CudaArrayInterface, Value};

use super::decode::{
    text, DescrSpec, Entry, InterfaceSpec, PointerSpec, TypestrSpec, VersionSpec, KEYS, KINDS,
    ORDERS, UNITS,
};
use crate::memory::{self, MAX_BACKED, OPAQUE_ADDRESS};

impl TypestrSpec {
    fn text(&self) -> String {
        match self {
            TypestrSpec::Composed {
                order,
                kind,
                size,
                unit,
            } => format!(
                "{}{}{size}{}",
                ORDERS[usize::from(*order % 4)],
                KINDS[usize::from(*kind % 10)],
                UNITS[usize::from(*unit % 8)]
            ),
            TypestrSpec::Raw(bytes) => text(bytes),
        }
    }
}

fn ints(values: &[i64]) -> Value {
    Value::Tuple(values.iter().map(|v| Value::Int(i128::from(*v))).collect())
}

/// Real memory behind an interface, and the pointer the dict states.
pub(super) struct Memory {
    _storage: Option<Vec<u64>>,
    /// The bytes from the pointer on, when the memory is real.
    pub readable: Option<Vec<u8>>,
    pub address: usize,
    /// The real bytes `[-before, after)` around `address`.
    before: usize,
    after: usize,
}

impl Memory {
    /// Whether the memory holds everything `interface` (as read, after
    /// any repeated key) claims.
    pub(super) fn covers(&self, interface: &CudaArrayInterface) -> bool {
        let claim = typestr_itemsize(&interface.typestr).and_then(|itemsize| {
            byte_extent(&interface.shape, interface.strides.as_deref(), itemsize)
        });
        self.readable.is_some()
            && interface.data.0 == self.address
            && claim.is_some_and(|(before, after)| {
                before <= self.before as i128 && after <= self.after as i128
            })
    }
}

impl InterfaceSpec {
    /// The item size the type string states, if it is a type string.
    fn itemsize(&self) -> Option<usize> {
        let Entry::Typical(typestr) = &self.typestr else {
            return None;
        };
        typestr_itemsize(&typestr.text())
    }

    /// The bytes `[-before, after)` around the pointer that the interface
    /// claims, when it can be backed.
    fn extent(&self) -> Option<(usize, usize)> {
        let Entry::Typical(shape) = &self.shape else {
            return None;
        };
        let strides = match &self.strides {
            Entry::Typical(strides) => Some(strides.as_slice()),
            Entry::Absent | Entry::None => None,
            Entry::Value(_) => return None,
        };
        let (before, after) = byte_extent(shape, strides, self.itemsize()?)?;
        let total = before.checked_add(after)?;
        (total <= MAX_BACKED as i128).then_some((before as usize, after as usize))
    }

    /// Allocates what a real pointer claims and fills it from `values`.
    pub(super) fn memory(&self, values: &[u8]) -> Memory {
        let address = |pointer: u64| Memory {
            _storage: None,
            readable: None,
            address: pointer as usize,
            before: 0,
            after: 0,
        };
        match &self.data {
            Entry::Typical((PointerSpec::Real, _)) => {}
            Entry::Typical((PointerSpec::Address(pointer), _)) => return address(*pointer),
            _ => return address(0),
        }
        let Some((before, after)) = self.extent() else {
            return address(OPAQUE_ADDRESS as u64);
        };
        let len = before + after;
        let (words, fill) = memory::filled(len, values);
        let address = words.as_ptr() as usize + before;
        Memory {
            _storage: Some(words),
            readable: Some(fill[before..].to_vec()),
            address,
            before,
            after,
        }
    }

    /// The dict, with `address` as the data pointer of a real or an
    /// address pointer, and `mask_address` as its mask's.
    pub(super) fn entries(&self, address: usize, mask_address: usize) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let mut push = |key: &str, entry: Option<Value>| {
            if let Some(value) = entry {
                out.push((key.to_string(), value));
            }
        };
        fn value<T>(entry: &Entry<T>, typical: impl FnOnce(&T) -> Value) -> Option<Value> {
            match entry {
                Entry::Typical(t) => Some(typical(t)),
                Entry::Absent => None,
                Entry::None => Some(Value::None),
                Entry::Value(v) => Some(v.clone()),
            }
        }
        let typestr = match &self.typestr {
            Entry::Typical(t) => t.text(),
            _ => "<f4".to_string(),
        };
        push("shape", value(&self.shape, |s| ints(s)));
        push("typestr", value(&self.typestr, |t| Value::Str(t.text())));
        push(
            "data",
            value(&self.data, |(pointer, read_only)| {
                let pointer = match pointer {
                    PointerSpec::Real | PointerSpec::Address(_) => address as i128,
                    PointerSpec::Zero => 0,
                    PointerSpec::Negative(v) => i128::from(*v),
                };
                Value::Tuple(vec![Value::Int(pointer), Value::Bool(*read_only)])
            }),
        );
        push(
            "version",
            value(&self.version, |v| {
                Value::Int(match v {
                    VersionSpec::Three => 3,
                    VersionSpec::Two => 2,
                    VersionSpec::One => 1,
                    VersionSpec::Int(v) => i128::from(*v),
                })
            }),
        );
        push("strides", value(&self.strides, |s| ints(s)));
        let field = |name: String, typestr: String| {
            Value::Tuple(vec![Value::Str(name), Value::Str(typestr)])
        };
        push(
            "descr",
            value(&self.descr, |d| {
                Value::Tuple(match d {
                    DescrSpec::Plain => vec![field(String::new(), typestr.clone())],
                    DescrSpec::Named(name) => vec![field(text(name), typestr.clone())],
                    DescrSpec::Fields(fields) => fields
                        .iter()
                        .map(|(name, t)| field(text(name), text(t)))
                        .collect(),
                })
            }),
        );
        push(
            "mask",
            value(&self.mask, |m| Value::Dict(m.entries(mask_address, 0))),
        );
        push(
            "stream",
            value(&self.stream, |s| Value::Int(i128::from(*s))),
        );
        for (key, v) in &self.extras {
            let key = match key {
                Ok(index) => KEYS[usize::from(*index % 8)].to_string(),
                Err(bytes) => text(bytes),
            };
            out.push((key, v.clone()));
        }
        out
    }
}

/// The item size a type string states: the digits after the byte order
/// and the kind, before any unit.
pub(super) fn typestr_itemsize(typestr: &str) -> Option<usize> {
    let mut chars = typestr.chars();
    chars.next()?;
    chars.next()?;
    let rest = chars.as_str();
    let digits = rest.split('[').next().unwrap_or_default();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The bytes `[-before, after)` around the pointer that an array of
/// `shape` with byte `strides` (C-contiguous when `None`) of `itemsize`
/// spans; `None` for a negative extent or where integers overflow.
pub(super) fn byte_extent(
    shape: &[i64],
    strides: Option<&[i64]>,
    itemsize: usize,
) -> Option<(i128, i128)> {
    if shape.iter().any(|s| *s < 0) {
        return None;
    }
    if shape.contains(&0) {
        return Some((0, 0));
    }
    let itemsize = i128::try_from(itemsize).ok()?;
    let strides: Vec<i128> = match strides {
        Some(strides) if strides.len() == shape.len() => {
            strides.iter().map(|s| i128::from(*s)).collect()
        }
        Some(_) => return None,
        None => {
            let mut strides = vec![itemsize; shape.len()];
            for i in (0..shape.len().saturating_sub(1)).rev() {
                strides[i] = strides[i + 1].checked_mul(i128::from(shape[i + 1]))?;
            }
            strides
        }
    };
    let (low, high) = memory::reach(shape, strides)?;
    Some((low.checked_neg()?, high.checked_add(itemsize)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_extents_follow_shape_and_strides() {
        assert_eq!(byte_extent(&[4], None, 8), Some((0, 32)));
        assert_eq!(byte_extent(&[2, 3], None, 4), Some((0, 24)));
        assert_eq!(byte_extent(&[], None, 2), Some((0, 2)));
        assert_eq!(byte_extent(&[4], Some(&[-8]), 8), Some((24, 8)));
        assert_eq!(byte_extent(&[3, 0], None, 8), Some((0, 0)));
        assert_eq!(byte_extent(&[-1], None, 8), None);
        assert_eq!(byte_extent(&[4], Some(&[8, 8]), 8), None);
    }
}
