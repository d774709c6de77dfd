//! `arrow-device serve` and `arrow-device fetch`: the round trip's data over
//! Arrow Flight, through `arrow-device-flight`.
//!
//! * [`serve`] serves files (read as the main command reads them, opened
//!   anew for every `do_get`) or the embedded dataset, each under a name.
//! * [`fetch`] lands a served dataset on a device batch by batch, with the
//!   progress bar, and prints a report of rows, wire bytes, throughput and
//!   the time to the first batch on the device; `--verify FILE` compares
//!   every batch, copied back to the host, with a file.
//!
//! Both are told apart from the main command's `FILE` as `check` is: by
//! being the first argument, exactly ([`crate::subcommand`]).
//!
//! ```
//! use arrow_device_cli::flight::{fetch::FetchArgs, serve::ServeArgs};
//! use clap::Parser;
//!
//! let serve = ServeArgs::try_parse_from(["serve", "a.arrows", "--listen", "127.0.0.1:0"]).unwrap();
//! assert_eq!(serve.files.len(), 1);
//! let fetch = FetchArgs::try_parse_from(["fetch", "grpc://127.0.0.1:8815", "a"]).unwrap();
//! assert_eq!(fetch.ticket, "a");
//! ```

pub mod fetch;
mod report;
pub mod serve;
mod verify;

use std::path::Path;

use crate::error::{CliError, Result};

/// `--depth` and `--prefetch`: a count of batches, at least 1.
fn parse_batches(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least 1 batch is needed".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a number of batches: {e}")),
    }
}

/// The bearer token of `--token` or `--token-file` (clap lets at most one
/// through). The file's trailing newline is not part of the token: files
/// written by `echo` or an editor end with one, and an HTTP header value
/// cannot carry it anyway.
fn read_token(token: Option<&str>, token_file: Option<&Path>) -> Result<Option<String>> {
    let token = match (token, token_file) {
        (Some(token), _) => token.to_string(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| CliError::input(path, format!("cannot read the token file: {e}")))?
            .trim_end_matches(['\n', '\r'])
            .to_string(),
        (None, None) => return Ok(None),
    };
    if token.is_empty() {
        // An empty token would be sent (or required) as `Bearer `, which
        // is almost certainly an empty file or variable, not a choice.
        return Err(CliError::Usage(match token_file {
            Some(path) => format!("--token-file {}: the token is empty", path.display()),
            None => "--token: the token is empty".to_string(),
        }));
    }
    Ok(Some(token))
}

/// The bytes of a PEM file named by `flag`.
fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| CliError::input(path, format!("cannot read {flag}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_counts_must_be_positive() {
        assert_eq!(parse_batches("4"), Ok(4));
        assert_eq!(
            parse_batches("0"),
            Err("at least 1 batch is needed".to_string())
        );
        assert!(parse_batches("x")
            .unwrap_err()
            .starts_with("not a number of batches"));
    }

    #[test]
    fn a_token_file_loses_its_trailing_newline_and_may_not_be_empty() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("arrow-device-cli-token-{}", std::process::id()));
        std::fs::write(&path, "s3cret\r\n").unwrap();
        assert_eq!(
            read_token(None, Some(&path)).unwrap().as_deref(),
            Some("s3cret")
        );
        std::fs::write(&path, "\n").unwrap();
        let err = read_token(None, Some(&path)).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().ends_with("the token is empty"), "{err}");
        assert_eq!(read_token(Some("t"), None).unwrap().as_deref(), Some("t"));
        assert_eq!(read_token(None, None).unwrap(), None);
    }
}
