//! The crate's error type and the path of a node inside an array tree.
//!
//! Every rejection names where in the tree it happened and what was expected:
//!
//! ```
//! use arrow_device::error::{Error, Path};
//!
//! let root = Path::root();
//! let a = root.field(0, Some("a"));
//! let list_child = a.child(1, None);
//! let err = Error::invalid(&list_child.buffer(2), "offsets decrease at index 17");
//! assert_eq!(err.to_string(), r#"field "a" > child 1 > buffer 2: offsets decrease at index 17"#);
//! ```

use std::fmt;

use arrow_schema::ArrowError;

use crate::abi::DeviceType;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A struct handed in breaks the C (Device) Data Interface: the message
    /// starts with the path of the offending node.
    #[error("{path}: {message}")]
    Invalid {
        /// Where in the array tree, e.g. `field "a" > child 1 > buffer 2`.
        path: String,
        /// The defect, with the expected and the found value.
        message: String,
    },
    /// The request is valid but this crate or device cannot carry it out.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// An index or range outside what it indexes (a slice past the end of
    /// an array): the message names both.
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// A device call failed.
    #[error("device {device_type} (id {device_id}): {message}")]
    Device {
        /// The device's type.
        device_type: DeviceType,
        /// The device's id.
        device_id: i64,
        /// What failed.
        message: String,
    },
    /// An error from arrow-rs.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// A foreign producer reported an error through a C callback (a stream's
    /// `get_next`/`get_schema` return code and `get_last_error`, or an async
    /// handler's `on_error`).
    #[error("producer error {code} ({}): {message}", errno_name(*code))]
    Producer {
        /// The errno-compatible code the producer returned.
        code: i32,
        /// The producer's message (empty when it gave none).
        message: String,
    },
    /// A foreign consumer refused what this crate produced: an async
    /// handler's `on_schema` or `on_next_task` returned non-zero.
    #[error("consumer error {code} ({}): {message}", errno_name(*code))]
    Consumer {
        /// The errno-compatible code the consumer returned.
        code: i32,
        /// What was refused.
        message: String,
    },
    /// Sharing with another process failed: the exporting process refused
    /// the handle or has ended, or a system call of the exchange failed
    /// (`crate::share`).
    #[error("sharing between processes: {0}")]
    Share(String),
    /// A remote peer or the network between us failed: a connection that
    /// could not be made or broke, a status the peer returned, or a message
    /// it sent that does not decode (`arrow-device-flight`). The message
    /// names the peer and what was expected.
    #[error("remote: {0}")]
    Remote(String),
    /// A panic was caught at an `extern "C"` boundary.
    #[error("internal error (panic caught at the FFI boundary): {0}")]
    Panic(String),
}

impl Error {
    /// A malformed-input error at `path`.
    pub fn invalid(path: &Path<'_>, message: impl Into<String>) -> Self {
        Error::Invalid {
            path: path.to_string(),
            message: message.into(),
        }
    }

    /// A failed device call.
    pub fn device(device_type: DeviceType, device_id: i64, message: impl Into<String>) -> Self {
        Error::Device {
            device_type,
            device_id,
            message: message.into(),
        }
    }

    /// The errno-compatible code the C interfaces use for this error
    /// (`EINVAL` for malformed input, `ENOSYS` for unsupported requests,
    /// `ERANGE` for an index out of range, `EIO` otherwise: a device call,
    /// a share between processes).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Invalid { .. } => libc::EINVAL,
            Error::NotSupported(_) => libc::ENOSYS,
            Error::OutOfRange(_) => libc::ERANGE,
            Error::Arrow(ArrowError::NotYetImplemented(_)) => libc::ENOSYS,
            Error::Arrow(ArrowError::MemoryError(_)) => libc::ENOMEM,
            Error::Arrow(ArrowError::IoError(..)) => libc::EIO,
            Error::Arrow(_) => libc::EINVAL,
            Error::Producer { code, .. } | Error::Consumer { code, .. } => *code,
            Error::Device { .. } | Error::Share(_) | Error::Remote(_) | Error::Panic(_) => {
                libc::EIO
            }
        }
    }

    /// Turns a caught panic payload into an error.
    pub fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic payload".to_string());
        Error::Panic(message)
    }
}

impl From<Error> for ArrowError {
    /// arrow-rs errors come back as themselves; the others are wrapped, so
    /// that their message and source survive in `ArrowError::ExternalError`.
    fn from(err: Error) -> Self {
        match err {
            Error::Arrow(err) => err,
            other => ArrowError::ExternalError(Box::new(other)),
        }
    }
}

/// The symbolic name of the errno values the C interfaces use, for messages.
fn errno_name(code: i32) -> &'static str {
    match code {
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::EIO => "EIO",
        libc::ENOSYS => "ENOSYS",
        libc::ECANCELED => "ECANCELED",
        libc::EAGAIN => "EAGAIN",
        libc::EPERM => "EPERM",
        _ => "errno",
    }
}

/// The place of a node in an array tree, built on the stack while walking it
/// and rendered only when an error is reported.
#[derive(Clone, Copy)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    segment: Segment<'a>,
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Root,
    Field(usize, Option<&'a str>),
    Child(usize, Option<&'a str>),
    Dictionary,
    Buffer(usize),
}

impl<'a> Path<'a> {
    /// The root of the tree.
    pub const fn root() -> Path<'static> {
        Path {
            parent: None,
            segment: Segment::Root,
        }
    }

    /// Child `index` of a struct-like parent, named when it has a name.
    pub fn field(&'a self, index: usize, name: Option<&'a str>) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Field(index, name),
        }
    }

    /// Child `index` of a nested parent (list item, map entries, union member).
    pub fn child(&'a self, index: usize, name: Option<&'a str>) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Child(index, name),
        }
    }

    /// The dictionary of a dictionary-encoded node.
    pub fn dictionary(&'a self) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Dictionary,
        }
    }

    /// Buffer `index` (in C Data Interface order) of this node.
    pub fn buffer(&'a self, index: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            segment: Segment::Buffer(index),
        }
    }

    fn is_root(&self) -> bool {
        matches!(self.segment, Segment::Root)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut segments = Vec::new();
        let mut node = Some(self);
        while let Some(p) = node {
            if !p.is_root() {
                segments.push(p.segment);
            }
            node = p.parent;
        }
        if segments.is_empty() {
            return f.write_str("array");
        }
        for (i, segment) in segments.iter().rev().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            match segment {
                Segment::Root => {}
                Segment::Field(_, Some(name)) if !name.is_empty() => write!(f, "field {name:?}")?,
                Segment::Field(index, _) => write!(f, "field {index}")?,
                Segment::Child(index, Some(name)) if !name.is_empty() => {
                    write!(f, "child {index} {name:?}")?
                }
                Segment::Child(index, _) => write!(f, "child {index}")?,
                Segment::Dictionary => f.write_str("dictionary")?,
                Segment::Buffer(index) => write!(f, "buffer {index}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Path({self})")
    }
}

/// `call failed: <errno's message>`, for a failed system call (read right
/// after it, before anything else can change errno).
pub(crate) fn os_error(call: &str) -> String {
    format!("{call} failed: {}", std::io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_path_reads_array() {
        assert_eq!(Path::root().to_string(), "array");
        let err = Error::invalid(&Path::root(), "length is -1, expected >= 0");
        assert_eq!(err.to_string(), "array: length is -1, expected >= 0");
        assert_eq!(err.errno(), libc::EINVAL);
    }

    #[test]
    fn nested_paths_name_fields_children_dictionaries_and_buffers() {
        let root = Path::root();
        let f = root.field(2, Some("tags"));
        let item = f.child(0, Some("item"));
        let dict = item.dictionary();
        assert_eq!(
            dict.buffer(1).to_string(),
            r#"field "tags" > child 0 "item" > dictionary > buffer 1"#
        );
        let unnamed = root.field(4, None);
        assert_eq!(unnamed.to_string(), "field 4");
    }

    #[test]
    fn panics_become_errors_with_their_message() {
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let err = Error::from_panic(payload);
        assert_eq!(
            err.to_string(),
            "internal error (panic caught at the FFI boundary): boom 7"
        );
        assert_eq!(err.errno(), libc::EIO);
    }
}
