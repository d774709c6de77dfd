//! The dict's values as a binding hands them over ([`Value`]), and their
//! conversion to and from [`CudaArrayInterface`]. Every check of which keys
//! are present and what type their values have lives here, so that a
//! binding only converts objects and the rules are tested without Python.

use super::{invalid, key, CudaArrayInterface, ROOT};
use crate::error::{Error, Result};

/// A value of the dict, as a binding converts it from its language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `None`.
    None,
    /// A `bool` (checked before `Int`: Python's bools are ints).
    Bool(bool),
    /// An `int`; wide enough for any pointer and for negative values.
    Int(i128),
    /// A `str`.
    Str(String),
    /// A `tuple` or `list`.
    Tuple(Vec<Value>),
    /// A `dict`, or the `__cuda_array_interface__` of an object (a mask).
    Dict(Vec<(String, Value)>),
    /// Anything else, by its type's name (for messages).
    Other(String),
}

impl Value {
    /// What the value is, for messages: `int 5`, `str 'x'`, `tuple of 2`.
    fn describe(&self) -> String {
        match self {
            Value::None => "None".to_string(),
            Value::Bool(b) => format!("bool {}", if *b { "True" } else { "False" }),
            Value::Int(i) => format!("int {i}"),
            Value::Str(s) => format!("str {s:?}"),
            Value::Tuple(items) => format!("tuple of {}", items.len()),
            Value::Dict(_) => "dict".to_string(),
            Value::Other(name) => name.clone(),
        }
    }

    fn is_none(&self) -> bool {
        matches!(self, Value::None)
    }
}

fn wrong_type(key: &str, expected: &str, found: &Value) -> Error {
    invalid(
        key,
        format!("expected {expected}, found {}", found.describe()),
    )
}

fn ints(key: &str, value: &Value) -> Result<Vec<i64>> {
    let expected = "a tuple of ints";
    let Value::Tuple(items) = value else {
        return Err(wrong_type(key, expected, value));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Int(i) => i64::try_from(*i)
                .map_err(|_| invalid(key, format!("{i} does not fit a 64-bit integer"))),
            other => Err(wrong_type(key, expected, other)),
        })
        .collect()
}

impl CudaArrayInterface {
    /// Reads the dict's entries. Required keys (`shape`, `typestr`, `data`,
    /// `version`) must be present; optional ones (`strides`, `descr`,
    /// `mask`, `stream`) may be absent or `None`; unknown keys are ignored.
    /// A missing key or a value of the wrong type is [`Error::Invalid`]
    /// naming the key (`__cuda_array_interface__['shape']`). The values'
    /// meaning is checked by [`CudaArrayInterface::validate`].
    pub fn from_entries(entries: impl IntoIterator<Item = (String, Value)>) -> Result<Self> {
        Self::from_entries_at(entries.into_iter().collect(), ROOT)
    }

    fn from_entries_at(entries: Vec<(String, Value)>, prefix: &str) -> Result<Self> {
        // A dict has each key once; the last one wins for a list of pairs.
        let get = |name: &str| {
            entries
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
        };
        let required = |name: &str| {
            get(name).ok_or_else(|| {
                invalid(
                    &key(prefix, name),
                    "missing (a required entry of the CUDA Array Interface)",
                )
            })
        };
        let optional = |name: &str| get(name).filter(|v| !v.is_none());

        let shape = ints(&key(prefix, "shape"), required("shape")?)?;
        let typestr = match required("typestr")? {
            Value::Str(s) => s.clone(),
            other => return Err(wrong_type(&key(prefix, "typestr"), "a str", other)),
        };
        let data_key = key(prefix, "data");
        let data = match required("data")? {
            Value::Tuple(items) => match items.as_slice() {
                [Value::Int(ptr), Value::Bool(read_only)] => {
                    let ptr = usize::try_from(*ptr).map_err(|_| {
                        invalid(
                            &data_key,
                            format!(
                                "pointer {ptr} is not a valid address (expected 0 to {})",
                                usize::MAX
                            ),
                        )
                    })?;
                    (ptr, *read_only)
                }
                _ => {
                    return Err(invalid(
                        &data_key,
                        "expected (pointer: int, read_only: bool)",
                    ))
                }
            },
            other => {
                return Err(wrong_type(
                    &data_key,
                    "a tuple (pointer: int, read_only: bool)",
                    other,
                ))
            }
        };
        let version_key = key(prefix, "version");
        let version = match required("version")? {
            Value::Int(v) => u32::try_from(*v).map_err(|_| unsupported_version(&version_key, v))?,
            other => return Err(wrong_type(&version_key, "an int", other)),
        };
        let strides = optional("strides")
            .map(|v| ints(&key(prefix, "strides"), v))
            .transpose()?;
        let descr = optional("descr")
            .map(|v| descr(&key(prefix, "descr"), v))
            .transpose()?;
        let mask_key = key(prefix, "mask");
        let mask = match optional("mask") {
            None => None,
            // Refused before reading it: a binding may stop converting
            // nested masks (one whose mask is itself never ends).
            Some(_) if prefix != ROOT => {
                return Err(Error::NotSupported(format!(
                    "{mask_key}: a mask cannot have a mask of its own"
                )))
            }
            Some(Value::Dict(entries)) => {
                Some(Box::new(Self::from_entries_at(entries.clone(), &mask_key)?))
            }
            Some(other) => {
                return Err(wrong_type(
                    &mask_key,
                    "None or an object exposing __cuda_array_interface__",
                    other,
                ))
            }
        };
        let stream_key = key(prefix, "stream");
        let stream = match optional("stream") {
            None => None,
            Some(Value::Int(handle)) => Some(u64::try_from(*handle).map_err(|_| {
                invalid(
                    &stream_key,
                    format!(
                        "{handle} is not a stream (expected None, 1 for the legacy default \
                         stream, 2 for the per-thread default stream, or a cudaStream_t; -1 is \
                         DLPack's 'no synchronization', which the CUDA Array Interface spells None)"
                    ),
                )
            })?),
            Some(other) => return Err(wrong_type(&stream_key, "None or an int", other)),
        };
        Ok(CudaArrayInterface {
            shape,
            typestr,
            data,
            version,
            strides,
            descr,
            mask,
            stream,
        })
    }

    /// The dict's entries, in the spec's order: `shape`, `typestr`, `data`,
    /// `version`, `strides` (`None` when C-contiguous), then `descr` and
    /// `mask` when present, and `stream` (always present from version 3:
    /// `None` means no synchronization is needed).
    pub fn to_entries(&self) -> Vec<(String, Value)> {
        let ints =
            |values: &[i64]| Value::Tuple(values.iter().map(|&v| Value::Int(v.into())).collect());
        let mut entries = vec![
            ("shape".to_string(), ints(&self.shape)),
            ("typestr".to_string(), Value::Str(self.typestr.clone())),
            (
                "data".to_string(),
                Value::Tuple(vec![
                    Value::Int(self.data.0 as i128),
                    Value::Bool(self.data.1),
                ]),
            ),
            ("version".to_string(), Value::Int(self.version.into())),
            (
                "strides".to_string(),
                self.strides.as_deref().map_or(Value::None, ints),
            ),
        ];
        if let Some(descr) = &self.descr {
            let fields = descr
                .iter()
                .map(|(name, typestr)| {
                    Value::Tuple(vec![Value::Str(name.clone()), Value::Str(typestr.clone())])
                })
                .collect();
            entries.push(("descr".to_string(), Value::Tuple(fields)));
        }
        if let Some(mask) = &self.mask {
            entries.push(("mask".to_string(), Value::Dict(mask.to_entries())));
        }
        if self.version >= 3 || self.stream.is_some() {
            let stream = self.stream.map_or(Value::None, |s| Value::Int(s.into()));
            entries.push(("stream".to_string(), stream));
        }
        entries
    }
}

/// `descr`: a list of `(name, typestr)` fields. Fields with a shape or a
/// nested type describe structured data, which no Arrow array here holds.
fn descr(key: &str, value: &Value) -> Result<Vec<(String, String)>> {
    let Value::Tuple(fields) = value else {
        return Err(wrong_type(key, "a list of (name, typestr) tuples", value));
    };
    fields
        .iter()
        .map(|field| match field {
            Value::Tuple(items) => match items.as_slice() {
                [Value::Str(name), Value::Str(typestr)] => Ok((name.clone(), typestr.clone())),
                _ => Err(structured(key)),
            },
            other => Err(wrong_type(key, "a list of (name, typestr) tuples", other)),
        })
        .collect()
}

pub(super) fn structured(key: &str) -> Error {
    Error::NotSupported(format!(
        "{key}: describes a structured (record) type; an Arrow array from the CUDA Array \
         Interface holds one plain value per element (descr absent, None or [('', typestr)])"
    ))
}

/// A version this consumer does not read.
pub(super) fn unsupported_version(version_key: &str, version: impl std::fmt::Display) -> Error {
    Error::NotSupported(format!(
        "{version_key}: version {version} is not supported: this consumer reads versions 2 and 3 \
         (versions 0 and 1 left strides None and zero-size arrays undefined; a later version may \
         add entries this consumer would not honour)"
    ))
}
