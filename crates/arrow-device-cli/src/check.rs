//! `arrow-device check`: the conformance checker
//! ([`arrow_device::conformance`]) run on a producer in a shared library.
//!
//! The library is loaded at run time and the symbol called like any C
//! producer's export function:
//!
//! * `int NAME(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out)`
//!   (the default): checked with `check_device_array`, which calls it once,
//!   and a second time to move a child out when the array has children;
//! * `int NAME(struct ArrowDeviceArrayStream* out)` (`--stream`): checked
//!   with `check_device_stream`.
//!
//! Each call gets fresh released structs; a non-zero return is the
//! `export` check failing. The report is printed, and the exit code is 0
//! when it passed, 1 when a check failed, 2 for a usage error or a library
//! or symbol that cannot be loaded.
//!
//! `check` is told apart from the round-trip command's `FILE` by being the
//! first argument, exactly ([`is_check`]); a data file named `check` is
//! still read as `./check`.
//!
//! ```
//! use arrow_device_cli::check::{is_check, CheckArgs};
//! use clap::Parser;
//!
//! let argv = ["arrow-device", "check", "--lib", "./libproducer.so", "--symbol", "export_batch"];
//! assert!(is_check(&argv));
//! let args = CheckArgs::try_parse_from(&argv[1..]).unwrap();
//! assert_eq!((args.symbol.as_str(), args.stream), ("export_batch", false));
//! assert!(!is_check(&["arrow-device", "./check"]));
//! ```

use std::ffi::{c_int, OsStr};
use std::path::{Path, PathBuf};

use arrow_device::abi::{ArrowDeviceArray, ArrowDeviceArrayStream, FFI_ArrowSchema};
use arrow_device::conformance::{
    check_device_array, check_device_stream, Report, Scope, MAX_BATCHES,
};
use clap::Parser;
use libloading::Library;

use crate::error::{CliError, Result};

/// The first argument that selects this command.
pub const SUBCOMMAND: &str = "check";

const AFTER_HELP: &str = "\
Examples:
  arrow-device check --lib ./libproducer.so --symbol export_batch
  arrow-device check --lib ./libproducer.so --symbol export_stream --stream

Exit codes: 0 every check passed (advisory failures aside); 1 a check failed;
2 usage error, or the library or symbol cannot be loaded.";

/// Checks a producer of the Arrow C Device Data Interface, rule by rule.
///
/// Loads the shared library PATH, calls its function NAME as a producer's
/// export function, and checks what it exports as a strict consumer does:
/// device fields, reserved bytes, full validation, buffer alignment,
/// release callbacks (each struct released once and marked released),
/// moved children, and for streams get_schema, the end, get_last_error and
/// release. Prints one row per check.
#[derive(Debug, Parser)]
#[command(
    name = "arrow-device check",
    bin_name = "arrow-device check",
    version,
    after_help = AFTER_HELP
)]
pub struct CheckArgs {
    /// The shared library, as dlopen takes it: a path with a slash
    /// (./libproducer.so), or a bare name searched on the library path.
    #[arg(long, value_name = "PATH")]
    pub lib: PathBuf,

    /// The producer function. Without --stream:
    /// `int NAME(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out)`;
    /// with --stream: `int NAME(struct ArrowDeviceArrayStream* out)`. Both
    /// return 0 on success. The program trusts the signature: a function of
    /// another signature is undefined behaviour.
    #[arg(long, value_name = "NAME")]
    pub symbol: String,

    /// NAME exports an ArrowDeviceArrayStream (read to its end, at most
    /// 10,000 batches).
    #[arg(long)]
    pub stream: bool,
}

// --stream's help names the checker's limit.
const _: () = assert!(MAX_BATCHES == 10_000, "update the help of --stream");

/// Whether `argv` (program name first) runs `arrow-device check`: its
/// first argument is exactly `check`.
pub fn is_check<S: AsRef<OsStr>>(argv: &[S]) -> bool {
    argv.get(1)
        .is_some_and(|arg| arg.as_ref() == OsStr::new(SUBCOMMAND))
}

/// An array producer's export function.
type ArrayProducer = unsafe extern "C" fn(*mut ArrowDeviceArray, *mut FFI_ArrowSchema) -> c_int;

/// A stream producer's export function.
type StreamProducer = unsafe extern "C" fn(*mut ArrowDeviceArrayStream) -> c_int;

/// Loads the library, runs the checks on its producer and returns the
/// report; a library or symbol that cannot be loaded is a usage error.
pub fn run(args: &CheckArgs) -> Result<Report> {
    let library = open(&args.lib)?;
    let name = args.symbol.as_str();
    let checks = if args.stream {
        let produce = symbol::<StreamProducer>(&library, &args.lib, name)?;
        check_device_stream(&mut || {
            let mut out = ArrowDeviceArrayStream::empty();
            // SAFETY: the user vouches (--symbol's documented contract) that
            // NAME has this signature; `out` is a live, released struct it
            // may overwrite, and the checker owns what it writes.
            let rc = unsafe { produce(&mut out) };
            if rc != 0 {
                return Err(format!("{name} returned {rc}"));
            }
            Ok(out)
        })
    } else {
        let produce = symbol::<ArrayProducer>(&library, &args.lib, name)?;
        check_device_array(Scope::DeviceArray, None, &mut || {
            let mut array = ArrowDeviceArray::empty();
            let mut schema = FFI_ArrowSchema::empty();
            // SAFETY: as above, for the array producer's signature; both
            // structs are live and released.
            let rc = unsafe { produce(&mut array, &mut schema) };
            if rc != 0 {
                return Err(format!("{name} returned {rc}"));
            }
            Ok((array, schema))
        })
    };
    // Never unloaded: a producer may leave thread-local destructors, atexit
    // handlers or threads that point into the library, and the process
    // ends right after the report anyway.
    std::mem::forget(library);
    Ok(Report::new(
        format!("{name} in {}", args.lib.display()),
        checks,
    ))
}

/// The library at `path`, with every symbol it needs resolved.
fn open(path: &Path) -> Result<Library> {
    // SAFETY (both): loading runs the library's initializers; the user
    // vouches for the library they name, as for any plugin.
    // RTLD_NOW: a library with an unresolved symbol is refused here (exit 2)
    // rather than crashing the checker at the first call that needs it.
    #[cfg(unix)]
    let library = unsafe {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
        UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL).map(Library::from)
    };
    #[cfg(not(unix))]
    let library = unsafe { Library::new(path) };
    library.map_err(|e| {
        CliError::Usage(format!(
            "cannot load the library {}: {}",
            path.display(),
            reason(&e)
        ))
    })
}

/// The function `name` of `library`, as a `T` (a function pointer type).
fn symbol<T: Copy>(library: &Library, path: &Path, name: &str) -> Result<T> {
    let not_found = |reason: String| {
        CliError::Usage(format!(
            "cannot find the symbol {name} in {}: {reason}",
            path.display()
        ))
    };
    // SAFETY: `Option<T>` of a function pointer type is pointer-sized with
    // NULL as `None`, so a symbol whose address is NULL reads as `None`;
    // that the function has type `T` is the user's promise (--symbol).
    let found = unsafe { library.get::<Option<T>>(name.as_bytes()) };
    match found {
        // The library stays loaded for the rest of the process (see `run`),
        // so the copied pointer outlives the `Symbol` borrow safely.
        Ok(symbol) => (*symbol).ok_or_else(|| not_found("its address is NULL".to_string())),
        Err(e) => Err(not_found(reason(&e))),
    }
}

/// The loader's own message (dlerror's), which libloading keeps as the
/// error's source under a generic "dlopen failed".
fn reason(error: &libloading::Error) -> String {
    match std::error::Error::source(error) {
        Some(source) => source.to_string(),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_first_argument_of_exactly_check_selects_the_checker() {
        assert!(is_check(&["arrow-device", "check"]));
        assert!(is_check(&["arrow-device", "check", "--lib", "x.so"]));
        assert!(!is_check(&["arrow-device"]));
        assert!(!is_check(&["arrow-device", "./check"]));
        assert!(!is_check(&["arrow-device", "checks"]));
        assert!(!is_check(&["arrow-device", "--stream", "check"]));
    }

    #[test]
    fn lib_and_symbol_are_required_and_stream_is_a_flag() {
        let args = CheckArgs::try_parse_from([
            "check", "--lib", "/x/p.so", "--symbol", "make", "--stream",
        ])
        .unwrap();
        assert_eq!(args.lib, PathBuf::from("/x/p.so"));
        assert_eq!(args.symbol, "make");
        assert!(args.stream);
        let err = CheckArgs::try_parse_from(["check", "--lib", "/x/p.so"]).unwrap_err();
        assert!(err.to_string().contains("--symbol <NAME>"), "{err}");
        assert_eq!(err.exit_code(), 2);
    }
}
