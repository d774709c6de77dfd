//! The report `arrow-device fetch` prints: the main command's layout
//! (a header of `key value` lines, a table, a throughput line), with
//! the milestones of a fetch in place of the round trip's stages.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::report::{gb_per_s, human_bytes, millis};

/// Everything the fetch report shows. Times are measured from the start of
/// the command's fetch (before connecting), on one clock.
#[derive(Debug, Clone)]
pub struct FetchReport {
    /// The location as given.
    pub location: String,
    /// The ticket as given.
    pub ticket: String,
    /// The device, e.g. `emulated:0 (EXT_DEV, device_id 0)`.
    pub device: String,
    /// The `prefetch` bound the client ran with.
    pub prefetch: usize,
    /// Columns of the fetched schema.
    pub columns: usize,
    /// Batches landed.
    pub batches: usize,
    /// Rows landed.
    pub rows: u64,
    /// Bytes received: Arrow IPC headers and bodies.
    pub wire_bytes: u64,
    /// Until the connection was made and `do_get` answered with the schema.
    pub connected: Duration,
    /// Until the first batch's copy onto the device was queued
    /// (`FetchStats::first_batch_landed`); `None` without batches.
    pub first_queued: Option<Duration>,
    /// Until the first batch's `synchronize()` returned: its data is on the
    /// device.
    pub first_synchronized: Option<Duration>,
    /// Until the last batch was synchronized (and verified): the whole fetch.
    pub total: Duration,
    /// With `--verify`: the file, and the time copying batches back to the
    /// host and comparing them took (part of the times above).
    pub verified: Option<(PathBuf, Duration)>,
}

impl FetchReport {
    /// From `do_get` answering to the last batch: the time the data
    /// itself took, which throughput is measured over.
    pub fn transfer(&self) -> Duration {
        self.total.saturating_sub(self.connected)
    }
}

impl fmt::Display for FetchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "location    {}", self.location)?;
        writeln!(f, "ticket      {}", self.ticket)?;
        writeln!(f, "device      {}", self.device)?;
        writeln!(f, "prefetch    {} batches", self.prefetch)?;
        writeln!(f, "batches     {}", self.batches)?;
        writeln!(f, "rows        {}", self.rows)?;
        writeln!(f, "columns     {}", self.columns)?;
        writeln!(
            f,
            "bytes       {} ({}) received, Arrow IPC headers and bodies",
            self.wire_bytes,
            human_bytes(self.wire_bytes)
        )?;
        writeln!(f)?;
        writeln!(f, "{:<26} {:>12}", "milestone", "time (ms)")?;
        let milestones = [
            ("connected, schema read", Some(self.connected)),
            ("first batch queued", self.first_queued),
            ("first batch synchronized", self.first_synchronized),
            ("total", Some(self.total)),
        ];
        for (name, time) in milestones {
            match time {
                Some(time) => writeln!(f, "{:<26} {:>12.3}", name, millis(time))?,
                None => writeln!(f, "{:<26} {:>12}", name, "-")?,
            }
        }
        writeln!(
            f,
            "(times since the start; queued: the batch's copy onto the device was queued, \
             synchronized: its synchronize() returned)"
        )?;
        writeln!(f)?;
        let transfer = self.transfer();
        let secs = transfer.as_secs_f64();
        let rows_per_s = if secs > 0.0 {
            self.rows as f64 / secs
        } else {
            0.0
        };
        writeln!(
            f,
            "throughput  {:.0} rows/s, {} GB/s received ({:.3} ms from the schema to the \
             last batch synchronized)",
            rows_per_s,
            gb_per_s(self.wire_bytes, transfer).map_or("-".to_string(), |r| format!("{r:.2}")),
            millis(transfer)
        )?;
        writeln!(f)?;
        match &self.verified {
            Some((file, time)) => writeln!(
                f,
                "verified: equal to {} ({:.3} ms copying back to the host and comparing)",
                file.display(),
                millis(*time)
            ),
            None => writeln!(f, "verified: not checked (--verify FILE compares)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> FetchReport {
        FetchReport {
            location: "grpc://127.0.0.1:8815".into(),
            ticket: "trips".into(),
            device: "emulated:0 (EXT_DEV, device_id 0)".into(),
            prefetch: 2,
            columns: 9,
            batches: 4,
            rows: 1_000_000,
            wire_bytes: 500_000_000,
            connected: Duration::from_millis(5),
            first_queued: Some(Duration::from_millis(20)),
            first_synchronized: Some(Duration::from_micros(21_500)),
            total: Duration::from_millis(505),
            verified: None,
        }
    }

    #[test]
    fn the_report_gives_counts_milestones_and_throughput_over_the_transfer() {
        let text = report().to_string();
        assert!(text.contains("rows        1000000\n"), "{text}");
        assert!(
            text.contains("bytes       500000000 (476.8 MiB) received"),
            "{text}"
        );
        assert!(
            text.contains("\nfirst batch synchronized         21.500\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntotal                           505.000\n"),
            "{text}"
        );
        // 500 ms from the schema to the end: 2 M rows/s, 1 GB/s.
        assert!(
            text.contains("throughput  2000000 rows/s, 1.00 GB/s received (500.000 ms"),
            "{text}"
        );
        assert!(text.ends_with("verified: not checked (--verify FILE compares)\n"));
    }

    #[test]
    fn an_empty_fetch_has_no_first_batch_and_a_verified_one_names_the_file() {
        let mut report = report();
        report.batches = 0;
        report.first_queued = None;
        report.first_synchronized = None;
        report.verified = Some((PathBuf::from("trips.arrows"), Duration::from_millis(3)));
        let text = report.to_string();
        assert!(
            text.contains("\nfirst batch queued                    -\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "verified: equal to trips.arrows (3.000 ms copying back to the host and comparing)\n"
            ),
            "{text}"
        );
    }
}
