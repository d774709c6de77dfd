//! `CUresult`: the codes the stand-in returns, their names and descriptions.
//!
//! cudarc reads a `CUresult` as a Rust enum, so the stand-in never returns a
//! value outside this table (an injected fault's code is checked against it).

/// A driver result code (`CUresult`, a C enum: 32 bits).
pub type CUresult = u32;

macro_rules! codes {
    ($($name:ident = $value:literal, $text:literal;)*) => {
        // Every code is in the table (cuGetErrorName, injected faults);
        // the stand-in itself returns only some of them.
        $(#[allow(dead_code)] pub const $name: CUresult = $value;)*
        /// Every code: value, name, description.
        pub const CODES: &[(CUresult, &str, &str)] = &[
            $(($value, concat!(stringify!($name), "\0"), concat!($text, "\0")),)*
        ];
    };
}

codes! {
    CUDA_SUCCESS = 0, "no error";
    CUDA_ERROR_INVALID_VALUE = 1, "invalid argument";
    CUDA_ERROR_OUT_OF_MEMORY = 2, "out of memory";
    CUDA_ERROR_NOT_INITIALIZED = 3, "initialization error";
    CUDA_ERROR_DEINITIALIZED = 4, "driver shutting down";
    CUDA_ERROR_NO_DEVICE = 100, "no CUDA-capable device is detected";
    CUDA_ERROR_INVALID_DEVICE = 101, "invalid device ordinal";
    CUDA_ERROR_INVALID_IMAGE = 200, "device kernel image is invalid";
    CUDA_ERROR_INVALID_CONTEXT = 201, "invalid device context";
    CUDA_ERROR_MAP_FAILED = 205, "mapping of buffer object failed";
    CUDA_ERROR_INVALID_PTX = 218, "a PTX JIT compilation failed";
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222, "the provided PTX was compiled with an unsupported toolchain.";
    CUDA_ERROR_INVALID_HANDLE = 400, "invalid resource handle";
    CUDA_ERROR_ILLEGAL_STATE = 401, "the operation cannot be performed in the present state";
    CUDA_ERROR_NOT_FOUND = 500, "named symbol not found";
    CUDA_ERROR_NOT_READY = 600, "device not ready";
    CUDA_ERROR_ILLEGAL_ADDRESS = 700, "an illegal memory access was encountered";
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, "too many resources requested for launch";
    CUDA_ERROR_LAUNCH_FAILED = 719, "unspecified launch failure";
    CUDA_ERROR_NOT_PERMITTED = 800, "operation not permitted";
    CUDA_ERROR_NOT_SUPPORTED = 801, "operation not supported";
    CUDA_ERROR_UNKNOWN = 999, "unknown error";
}

/// The code called `name` (`CUDA_ERROR_OUT_OF_MEMORY`), or a number that
/// is one of the codes.
pub fn parse(name: &str) -> Option<CUresult> {
    let name = name.trim();
    CODES
        .iter()
        .find(|(value, n, _)| n.trim_end_matches('\0') == name || value.to_string() == name)
        .map(|(value, _, _)| *value)
}

/// Whether `code` is in the table.
pub fn is_known(code: CUresult) -> bool {
    CODES.iter().any(|(value, _, _)| *value == code)
}

/// The NUL-terminated name and description of `code`.
pub fn describe(code: CUresult) -> Option<(&'static str, &'static str)> {
    CODES
        .iter()
        .find(|(value, _, _)| *value == code)
        .map(|(_, name, text)| (*name, *text))
}

/// A failure inside the stand-in: the code to return and, for the stderr
/// trace of strict failures, why.
pub type Result<T> = std::result::Result<T, CUresult>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_values_and_back() {
        assert_eq!(parse("CUDA_ERROR_OUT_OF_MEMORY"), Some(2));
        assert_eq!(parse("719"), Some(CUDA_ERROR_LAUNCH_FAILED));
        assert_eq!(parse("CUDA_ERROR_NOPE"), None);
        assert_eq!(parse("3"), Some(3));
        assert_eq!(parse("5"), None);
        let (name, text) = describe(CUDA_ERROR_NOT_PERMITTED).unwrap();
        assert_eq!(name, "CUDA_ERROR_NOT_PERMITTED\0");
        assert_eq!(text, "operation not permitted\0");
        assert!(is_known(0) && !is_known(12345));
    }
}
