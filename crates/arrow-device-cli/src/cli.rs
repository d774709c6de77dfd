//! Command-line arguments (clap derive) and the device they select.

// The field docs are the program's --help text, written for a terminal:
// `emulated[:N]` there is a usage pattern, not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use arrow_device::abi::DeviceType;
use arrow_device::device::emulated::{EmulatedConfig, EmulatedDevice, MAX_GLOBAL_ID};
use arrow_device::device::{self, DeviceRef};
use arrow_device::ValidationLevel;
use clap::{Parser, ValueEnum};

use crate::error::{CliError, Result};

const AFTER_HELP: &str = "\
Examples:
  arrow-device                                embedded dataset, 1,000,000 rows, best device
  arrow-device --device emulated:0 --rows 100000
  arrow-device data.parquet --validate full
  arrow-device --stream --device emulated:0   the input as one ArrowDeviceArrayStream
  arrow-device big.arrow --stream --batch-rows 16384
  cat data.arrows | arrow-device -            an IPC stream from standard input

Other commands (each has its own --help):
  arrow-device check --lib ./libproducer.so --symbol NAME [--stream]
                                              check a producer in a shared library
  arrow-device serve [FILE ...] --listen ADDR serve files over Arrow Flight
  arrow-device fetch LOCATION TICKET          fetch a Flight dataset onto a device
A first argument of exactly `check`, `serve` or `fetch` runs that command;
read a data file of one of those names as ./check, ./serve or ./fetch.

Exit codes: 0 verified equal; 1 input, stage or comparison failure; 2 usage error.";

/// Round-trips Arrow data through the Arrow C Device Data Interface.
///
/// Each record batch is exported onto a device, handed to C code as an
/// ArrowDeviceArray and ArrowSchema and moved back, imported, copied to the
/// host and compared with the input. With --stream, the whole input goes
/// through one ArrowDeviceArrayStream instead. Prints the time and bandwidth
/// of each stage.
#[derive(Debug, Parser)]
#[command(name = "arrow-device", version, after_help = AFTER_HELP)]
pub struct Args {
    /// Arrow IPC file or stream, or Parquet file (detected from the first
    /// bytes); `-` reads standard input. A pipe or FIFO (a piped standard
    /// input too) can carry an IPC stream only: the other two formats are
    /// read by seeking, which needs a regular file. Without it, an embedded
    /// dataset of mixed types is generated. A file named `check`, `serve`
    /// or `fetch` is given as `./check` (a first argument of exactly one of
    /// them runs that command).
    pub file: Option<PathBuf>,

    /// Device to export onto: cpu, emulated[:N] or cuda[:N] (N defaults to
    /// 0). Default: the best device present (a GPU when there is one, else cpu).
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<DeviceSpec>,

    /// How much the importer validates the structs it is handed.
    #[arg(long, value_enum, default_value_t = Validate::Default, value_name = "LEVEL")]
    pub validate: Validate,

    /// Do not draw the progress bar (it is never drawn when stderr is not a
    /// terminal).
    #[arg(long)]
    pub no_progress: bool,

    /// Rows of the embedded dataset (default 1000000), or at most this many
    /// rows of FILE.
    #[arg(long, value_name = "N")]
    pub rows: Option<u64>,

    /// Seed of the embedded dataset.
    #[arg(long, default_value_t = crate::dataset::DEFAULT_SEED, value_name = "SEED")]
    pub seed: u64,

    /// Stream the input: export it as one ArrowDeviceArrayStream (batches
    /// copied onto the device as get_next pulls them), move the stream into
    /// C code that relays and checks every batch, import it back and verify
    /// batch by batch. Memory stays bounded by a few batches.
    #[arg(long)]
    pub stream: bool,

    /// Rows per batch, at least 1: the embedded dataset and Parquet files are
    /// read in batches of this size, and longer batches of IPC inputs are cut
    /// to it (each piece a compact copy of its rows).
    #[arg(
        long,
        default_value_t = crate::dataset::DEFAULT_CHUNK_ROWS,
        value_name = "N",
        value_parser = parse_batch_rows
    )]
    pub batch_rows: usize,
}

/// `--batch-rows`: a positive number of rows.
pub(crate) fn parse_batch_rows(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("a batch needs at least 1 row".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a number of rows: {e}")),
    }
}

/// `--validate` values, named as in nanoarrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Validate {
    /// Only what keeps the importer memory-safe.
    None,
    /// Metadata only; never reads a data buffer.
    Minimal,
    /// Minimal plus O(1) reads of data (first/last offsets).
    Default,
    /// Every value, on host-accessible memory.
    Full,
}

impl From<Validate> for ValidationLevel {
    fn from(value: Validate) -> Self {
        match value {
            Validate::None => ValidationLevel::None,
            Validate::Minimal => ValidationLevel::Minimal,
            Validate::Default => ValidationLevel::Default,
            Validate::Full => ValidationLevel::Full,
        }
    }
}

/// A `--device` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Host memory.
    Cpu,
    /// The emulated asynchronous test device (`EXT_DEV`) with this id.
    Emulated(i64),
    /// A CUDA GPU with this ordinal.
    Cuda(i64),
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let (kind, id) = match s.split_once(':') {
            Some((kind, id)) => {
                let id: i64 = id
                    .parse()
                    .ok()
                    .filter(|id| *id >= 0)
                    .ok_or_else(|| format!("device id {id:?} is not a non-negative integer"))?;
                (kind, Some(id))
            }
            None => (s, None),
        };
        match kind.to_ascii_lowercase().as_str() {
            "cpu" if id.is_none() => Ok(DeviceSpec::Cpu),
            "cpu" => Err("the cpu device takes no id".to_string()),
            "emulated" => Ok(DeviceSpec::Emulated(id.unwrap_or(0))),
            "cuda" => Ok(DeviceSpec::Cuda(id.unwrap_or(0))),
            _ => Err(format!(
                "unknown device {kind:?}: expected cpu, emulated[:N] or cuda[:N]"
            )),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Emulated(id) => write!(f, "emulated:{id}"),
            DeviceSpec::Cuda(id) => write!(f, "cuda:{id}"),
        }
    }
}

impl DeviceSpec {
    /// The best device present: a GPU when the library has one registered,
    /// otherwise the CPU. The emulated device is a test device and never
    /// chosen by default.
    pub fn best_present() -> DeviceSpec {
        match device::lookup(DeviceType::CUDA, 0) {
            Some(_) => DeviceSpec::Cuda(0),
            None => DeviceSpec::Cpu,
        }
    }

    /// The device handle, or a usage error saying why it is not available.
    pub fn open(self) -> Result<DeviceRef> {
        match self {
            DeviceSpec::Cpu => Ok(device::cpu()),
            DeviceSpec::Emulated(id) => {
                // The library falls back to the default configuration (and
                // says so on stderr) when ARROW_DEVICE_EMULATED is rejected;
                // a command can refuse to run instead.
                EmulatedConfig::from_env().map_err(|e| CliError::Usage(e.to_string()))?;
                match EmulatedDevice::global(id) {
                    Some(device) => Ok(device as DeviceRef),
                    // The library serves a fixed range of ids; say which, so
                    // that nobody goes looking for a build feature.
                    None => Err(CliError::Usage(format!(
                        "device emulated:{id}: emulated device ids are 0 to {MAX_GLOBAL_ID}"
                    ))),
                }
            }
            DeviceSpec::Cuda(id) => open_cuda(id),
        }
    }
}

/// GPU `id`'s device memory, or a usage error with the driver's reason (no
/// `libcuda`, no such GPU).
#[cfg(feature = "cuda")]
fn open_cuda(id: i64) -> Result<DeviceRef> {
    device::cuda::device(DeviceType::CUDA, id)
        .map_err(|e| CliError::Usage(format!("device cuda:{id} is not available: {e}")))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(id: i64) -> Result<DeviceRef> {
    Err(CliError::Usage(format!(
        "device cuda:{id}: this build has no CUDA support; rebuild with the `cuda` feature \
         (on by default) or use --device cpu or --device emulated[:N]"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs_parse_with_and_without_ids() {
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("CPU".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("emulated".parse(), Ok(DeviceSpec::Emulated(0)));
        assert_eq!("emulated:3".parse(), Ok(DeviceSpec::Emulated(3)));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:1".parse(), Ok(DeviceSpec::Cuda(1)));
    }

    #[test]
    fn bad_device_specs_are_rejected_with_the_reason() {
        let err = "gpu".parse::<DeviceSpec>().unwrap_err();
        assert!(err.contains("unknown device \"gpu\""), "{err}");
        let err = "emulated:-1".parse::<DeviceSpec>().unwrap_err();
        assert!(
            err.contains("\"-1\" is not a non-negative integer"),
            "{err}"
        );
        let err = "cuda:x".parse::<DeviceSpec>().unwrap_err();
        assert!(err.contains("\"x\""), "{err}");
        assert!("cpu:0".parse::<DeviceSpec>().is_err());
    }

    #[test]
    fn batch_rows_must_be_positive() {
        assert_eq!(parse_batch_rows("65536"), Ok(65_536));
        assert_eq!(
            parse_batch_rows("0"),
            Err("a batch needs at least 1 row".to_string())
        );
        assert!(parse_batch_rows("-3")
            .unwrap_err()
            .starts_with("not a number of rows"));
        let args = Args::try_parse_from(["arrow-device", "--stream"]).unwrap();
        assert!(args.stream);
        assert_eq!(args.batch_rows, crate::dataset::DEFAULT_CHUNK_ROWS);
    }

    #[test]
    fn device_specs_display_as_parsed() {
        for s in ["cpu", "emulated:2", "cuda:0"] {
            assert_eq!(s.parse::<DeviceSpec>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn an_emulated_id_out_of_range_is_a_usage_error_naming_the_valid_ids() {
        let err = DeviceSpec::Emulated(99_999).open().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "device emulated:99999: emulated device ids are 0 to 1023"
        );
        let device = DeviceSpec::Emulated(1023).open().unwrap();
        assert_eq!(device.device_id(), 1023);
    }

    #[test]
    fn an_unavailable_gpu_is_a_usage_error_with_the_reason() {
        if device::lookup(DeviceType::CUDA, 0).is_some() {
            return; // a machine with a GPU
        }
        let err = DeviceSpec::Cuda(0).open().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let message = err.to_string();
        assert!(message.contains("device cuda:0"), "{message}");
        if cfg!(feature = "cuda") {
            // No libcuda here (CI), or no GPU: the driver's reason.
            assert!(message.contains("not available"), "{message}");
            assert!(
                message.contains("libcuda") || message.contains("GPU"),
                "{message}"
            );
        } else {
            assert!(message.contains("no CUDA support"), "{message}");
        }
    }
}
