//! The report printed at the end of a run.

use std::fmt;
use std::time::Duration;

use crate::pipeline::Totals;
use crate::streaming::StreamSummary;

/// Everything the report shows.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was read (file and format, or the embedded dataset).
    pub input: String,
    /// The device, e.g. `emulated:0 (EXT_DEV, device_id 0)`.
    pub device: String,
    /// The validation level used on import.
    pub validation: String,
    /// Columns of the input schema.
    pub columns: usize,
    /// What moved and how long it took.
    pub totals: Totals,
    /// Lines printed under the stage table, if any.
    pub note: Option<String>,
    /// `Some` for a `--stream` run: its throughput and batch latencies.
    pub stream: Option<StreamSummary>,
}

/// Gigabytes (10^9 bytes) per second, or `None` when no time was measured.
pub fn gb_per_s(bytes: u64, time: Duration) -> Option<f64> {
    let secs = time.as_secs_f64();
    (secs > 0.0).then(|| bytes as f64 / secs / 1e9)
}

/// Milliseconds, for the tables.
pub(crate) fn millis(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

/// `bytes` in the largest binary unit that keeps the value at least 1.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        let c = &t.counts;
        writeln!(f, "input       {}", self.input)?;
        writeln!(f, "device      {}", self.device)?;
        writeln!(f, "validation  {}", self.validation)?;
        if let Some(stream) = &self.stream {
            writeln!(
                f,
                "mode        stream: one ArrowDeviceArrayStream relayed by C, \
                 batches of at most {} rows",
                stream.batch_rows
            )?;
        }
        writeln!(f, "batches     {}", t.batches)?;
        writeln!(f, "rows        {}", t.rows)?;
        writeln!(f, "columns     {}", self.columns)?;
        writeln!(f, "bytes       {} ({})", t.bytes, human_bytes(t.bytes))?;
        writeln!(
            f,
            "C walk      {} nodes, {} buffers ({} NULL), {} dictionaries, depth {}, \
             {} offset buffers read on the host",
            c.nodes, c.buffers, c.null_buffers, c.dictionaries, c.max_depth, c.host_checked
        )?;
        writeln!(f)?;
        writeln!(f, "{:<12} {:>12} {:>10}", "stage", "time (ms)", "GB/s")?;
        let handoff = if self.stream.is_some() {
            "C relay"
        } else {
            "C hand-off"
        };
        let mut rows: Vec<(&str, Duration)> = t.times.rows_named(handoff).to_vec();
        rows.push(("total", t.times.total()));
        for (name, time) in rows {
            let rate = gb_per_s(t.bytes, time).map_or("-".to_string(), |r| format!("{r:.2}"));
            writeln!(f, "{:<12} {:>12.3} {:>10}", name, millis(time), rate)?;
        }
        if let Some(note) = &self.note {
            for line in note.lines() {
                writeln!(f, "({line})")?;
            }
        }
        if let Some(stream) = &self.stream {
            let secs = stream.wall.as_secs_f64();
            let rows_per_s = if secs > 0.0 {
                t.rows as f64 / secs
            } else {
                0.0
            };
            writeln!(f)?;
            writeln!(
                f,
                "throughput  {:.0} rows/s, {} GB/s ({:.3} ms wall, stream open to last batch verified)",
                rows_per_s,
                gb_per_s(t.bytes, stream.wall).map_or("-".to_string(), |r| format!("{r:.2}")),
                millis(stream.wall)
            )?;
            writeln!(
                f,
                "per batch   median {:.3} ms, max {:.3} ms (get_next to verified)",
                millis(stream.median_batch),
                millis(stream.max_batch)
            )?;
        }
        writeln!(f)?;
        writeln!(f, "verified: equal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Totals of `batches` batches holding `rows` rows in `bytes` bytes, with
    /// no time spent yet.
    fn totals(batches: usize, rows: u64, bytes: u64) -> Totals {
        Totals {
            batches,
            rows,
            bytes,
            ..Totals::default()
        }
    }

    /// The report of a run of the embedded dataset's nine columns onto
    /// `device`, validated at the default level.
    fn report_text(device: &str, totals: Totals, stream: Option<StreamSummary>) -> String {
        Report {
            input: "embedded".into(),
            device: device.into(),
            validation: "default".into(),
            columns: 9,
            totals,
            note: None,
            stream,
        }
        .to_string()
    }

    #[test]
    fn bandwidth_is_bytes_per_nanosecond() {
        assert_eq!(gb_per_s(2_000_000_000, Duration::from_secs(1)), Some(2.0));
        assert_eq!(gb_per_s(1, Duration::ZERO), None);
    }

    #[test]
    fn report_lists_counts_and_an_aligned_stage_table() {
        let mut totals = totals(2, 20_000, 1_048_576);
        totals.times.export = Duration::from_millis(2);
        let text = report_text("cpu (CPU, device_id -1)", totals, None);
        assert!(text.contains("rows        20000\n"), "{text}");
        assert!(text.contains("bytes       1048576 (1.0 MiB)\n"), "{text}");
        assert!(
            text.contains("export              2.000       0.52\n"),
            "{text}"
        );
        assert!(
            text.contains("read input          0.000          -\n"),
            "{text}"
        );
        assert!(text.ends_with("verified: equal\n"));
        let widths: Vec<usize> = text
            .lines()
            .skip_while(|l| !l.starts_with("stage"))
            .take(8)
            .map(str::len)
            .collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "{widths:?}");
    }

    #[test]
    fn a_stream_report_names_the_relay_and_gives_throughput_and_latency() {
        let mut totals = totals(4, 1_000_000, 500_000_000);
        totals.times.handoff = Duration::from_micros(250);
        let stream = StreamSummary {
            batch_rows: 250_000,
            wall: Duration::from_millis(500),
            median_batch: Duration::from_micros(120_500),
            max_batch: Duration::from_millis(130),
        };
        let text = report_text("emulated:0 (EXT_DEV, device_id 0)", totals, Some(stream));
        assert!(
            text.contains("mode        stream: one ArrowDeviceArrayStream relayed by C, batches of at most 250000 rows\n"),
            "{text}"
        );
        assert!(text.contains("\nC relay             0.250"), "{text}");
        assert!(!text.contains("C hand-off"), "{text}");
        assert!(
            text.contains("throughput  2000000 rows/s, 1.00 GB/s (500.000 ms wall"),
            "{text}"
        );
        assert!(
            text.contains("per batch   median 120.500 ms, max 130.000 ms"),
            "{text}"
        );
        assert!(text.ends_with("verified: equal\n"));
    }
}
