//! The crate's error: what failed, at which peer, in which call.

use arrow_flight::error::FlightError;

/// An error of a Flight call, a location or a device step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A location that is not `grpc://HOST:PORT`, `grpc+tcp://HOST:PORT`
    /// or `grpc+tls://HOST:PORT`, or TLS options that do not fit it.
    #[error("location {location:?}: {message}")]
    Location {
        /// The location as given.
        location: String,
        /// What is wrong with it, and what was expected.
        message: String,
    },
    /// The connection could not be made (refused, unreachable, TLS
    /// handshake failed, timed out).
    #[error("cannot connect to {location}: {message}")]
    Connect {
        /// The peer.
        location: String,
        /// The transport's reason, with its causes.
        message: String,
    },
    /// The peer answered a call with a gRPC status other than OK, or the
    /// call broke off with one (a connection lost mid-stream).
    #[error("{call} at {location}: {} ({}): {message}", code_name(*code), *code as i32)]
    Status {
        /// The peer.
        location: String,
        /// The Flight call (`do_get`, `do_put`, ...).
        call: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The peer broke the Flight protocol or sent Arrow IPC that does not
    /// decode (a truncated or corrupted message, a schema that changes
    /// mid-stream).
    #[error("{call} at {location}: {message}")]
    Protocol {
        /// The peer.
        location: String,
        /// The Flight call.
        call: &'static str,
        /// What was received, and what was expected.
        message: String,
    },
    /// A device or array step on this side failed (a copy to or from the
    /// device, an import, a source's own error).
    #[error(transparent)]
    Device(#[from] arrow_device::Error),
    /// Options that cannot be used: a TLS identity that does not parse, a
    /// token that an HTTP header cannot carry.
    #[error("{what}: {message}")]
    Config {
        /// Which option.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// An embedder's own error (a source's factory, a sink), kept whole.
    #[error(transparent)]
    External(Box<dyn std::error::Error + Send + Sync>),
    /// A system call of this side failed (binding a listener, reading a
    /// file).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The gRPC status code of a [`Error::Status`]; `None` for other errors.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// An arrow-flight error of `call` at `location`, with the status or the
    /// decoder's message kept whole.
    pub(crate) fn flight(location: &str, call: &'static str, error: FlightError) -> Error {
        match error {
            FlightError::Tonic(status) => Error::status(location, call, &status),
            FlightError::ExternalError(e) => match e.downcast::<arrow_device::Error>() {
                Ok(e) => Error::Device(*e),
                Err(e) => Error::Protocol {
                    location: location.to_string(),
                    call,
                    message: e.to_string(),
                },
            },
            FlightError::Arrow(e) => Error::Protocol {
                location: location.to_string(),
                call,
                message: format!("the Arrow IPC data does not decode: {e}"),
            },
            other => Error::Protocol {
                location: location.to_string(),
                call,
                message: other.to_string(),
            },
        }
    }

    pub(crate) fn status(location: &str, call: &'static str, status: &tonic::Status) -> Error {
        Error::Status {
            location: location.to_string(),
            call,
            code: status.code(),
            message: status_message(status),
        }
    }

    pub(crate) fn protocol(location: &str, call: &'static str, message: String) -> Error {
        Error::Protocol {
            location: location.to_string(),
            call,
            message,
        }
    }
}

/// A status's message, with the transport error under it when tonic made
/// the status from one (a broken connection says why).
fn status_message(status: &tonic::Status) -> String {
    with_causes(
        status.message().to_string(),
        std::error::Error::source(status),
    )
}

/// An error with its chain of causes, `a: b: c` (tonic's transport errors
/// keep the useful part, "connection refused", two levels down).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    with_causes(error.to_string(), error.source())
}

/// `text`, then each cause that it does not already say.
fn with_causes(mut text: String, mut source: Option<&dyn std::error::Error>) -> String {
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl From<Error> for arrow_device::Error {
    /// Device errors pass through unchanged; the others become
    /// [`arrow_device::Error::Remote`] with the whole message.
    fn from(error: Error) -> Self {
        match error {
            Error::Device(e) => e,
            other => arrow_device::Error::Remote(other.to_string()),
        }
    }
}

/// The canonical upper-case name of a gRPC status code, as the gRPC
/// documentation and other Flight implementations print it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_display_names_the_call_the_peer_and_the_code() {
        let e = Error::status(
            "grpc://127.0.0.1:1",
            "do_get",
            &tonic::Status::not_found("no source \"x\""),
        );
        assert_eq!(
            e.to_string(),
            "do_get at grpc://127.0.0.1:1: NOT_FOUND (5): no source \"x\""
        );
        assert_eq!(e.code(), Some(tonic::Code::NotFound));
        let device: arrow_device::Error = e.into();
        assert!(matches!(device, arrow_device::Error::Remote(ref m) if m.contains("NOT_FOUND")));
        assert_eq!(device.errno(), libc_eio());
    }

    #[test]
    fn device_errors_pass_through_unchanged() {
        let inner = arrow_device::Error::NotSupported("x".into());
        let e: arrow_device::Error = Error::Device(inner).into();
        assert!(matches!(e, arrow_device::Error::NotSupported(ref m) if m == "x"));
    }

    #[test]
    fn a_flight_decode_error_is_a_protocol_error() {
        let e = Error::flight(
            "grpc://h:1",
            "do_get",
            FlightError::Arrow(arrow_schema::ArrowError::ParseError("bad".into())),
        );
        assert_eq!(
            e.to_string(),
            "do_get at grpc://h:1: the Arrow IPC data does not decode: Parser error: bad"
        );
    }

    fn libc_eio() -> i32 {
        5
    }
}
