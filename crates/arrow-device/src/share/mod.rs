//! Sharing arrays between processes (work in progress, issue 16; the
//! design is docs/design/sharing.md). Done so far: CPU arrays, copied once
//! into a sealed memory file that any number of openers map, each open a
//! lease that keeps the exporter's copy until the opener lets go or ends.

pub mod codec;
pub mod layout;
#[cfg(target_os = "linux")]
pub mod lease;
#[cfg(target_os = "linux")]
pub mod memfd;

#[cfg(target_os = "linux")]
pub use linux::{open_shared, share, SharedArray};

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::codec::{Reader, Writer};
    use super::layout::{self, Place};
    use super::lease::{borrow, Lender, Ticket};
    use super::memfd::Sealed;
    use crate::abi::DeviceType;
    use crate::error::{Error, Result};
    use crate::{DeviceArray, ValidationLevel};

    const MAGIC: &[u8; 4] = b"ADSH";
    const VERSION: u32 = 1;
    /// Buffers start at multiples of this in a shared memory file.
    const ALIGN: usize = 64;

    /// An array this process shares: alive, it can be opened with its
    /// handle; dropped, no new opens (the leases granted keep the memory
    /// until each ends).
    #[derive(Debug)]
    pub struct SharedArray {
        handle: Vec<u8>,
        id: u64,
    }

    impl SharedArray {
        /// The bytes another process passes to [`open_shared`].
        pub fn handle(&self) -> &[u8] {
            &self.handle
        }
    }

    impl Drop for SharedArray {
        fn drop(&mut self) {
            if let Ok(lender) = Lender::get() {
                lender.withdraw(self.id);
            }
        }
    }

    fn invalid(message: String) -> Error {
        Error::invalid(&crate::error::Path::root(), message)
    }

    /// Shares `array` with other processes on this machine. A CPU array is
    /// copied once into a sealed memory file; other devices are not done
    /// yet (an error says so).
    pub fn share(array: &DeviceArray) -> Result<SharedArray> {
        if array.device_type() != DeviceType::CPU {
            return Err(Error::NotSupported(format!(
                "sharing arrays on {} between processes is not implemented yet (CPU arrays are)",
                array.device_type()
            )));
        }
        // Where each distinct buffer goes in the memory file.
        let mut places: HashMap<(usize, usize), u64> = HashMap::new();
        let mut pieces: Vec<(*const u8, usize, usize)> = Vec::new();
        let mut size = 0usize;
        let mut layout_bytes = Writer::default();
        layout::write(&mut layout_bytes, array, &mut |ptr, len| {
            let offset = *places.entry((ptr as usize, len)).or_insert_with(|| {
                let at = size.next_multiple_of(ALIGN);
                size = at + len;
                pieces.push((ptr, len, at));
                at as u64
            });
            Ok(Place {
                allocation: 0,
                offset,
            })
        })
        .map_err(invalid)?;
        let sealed = Sealed::create("arrow-device-share", size, |bytes| {
            for &(ptr, len, at) in &pieces {
                // SAFETY: a CPU buffer of `len` bytes of `array`, alive here.
                bytes[at..at + len]
                    .copy_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
            }
        })
        .map_err(Error::NotSupported)?;
        let lender = Lender::get().map_err(Error::NotSupported)?;
        let fd = sealed
            .fd()
            .try_clone()
            .map_err(|e| Error::NotSupported(format!("dup: {e}")))?;
        let ticket = lender
            .lend(vec![fd], Arc::new(sealed))
            .map_err(Error::NotSupported)?;
        let mut handle = Writer::default();
        for &byte in MAGIC {
            handle.u8(byte);
        }
        handle.u32(VERSION);
        handle.bytes(&ticket.name);
        handle.u64(ticket.id);
        handle.bytes(&ticket.token);
        handle.u32(array.device_type().0 as u32);
        handle.i64(array.device_id());
        handle.field(array.field()).map_err(invalid)?;
        handle.u32(1);
        handle.u64(size as u64);
        let mut bytes = handle.into_bytes();
        bytes.extend_from_slice(&layout_bytes.into_bytes());
        Ok(SharedArray {
            handle: bytes,
            id: ticket.id,
        })
    }

    /// Opens an array another process (or this one) shared, over the same
    /// memory (no copy), validated at `level` like any import. The array
    /// holds a lease on the exporter's copy until its last reference goes.
    pub fn open_shared(handle: &[u8], level: ValidationLevel) -> Result<DeviceArray> {
        let mut reader = Reader::new(handle);
        let mut magic = [0u8; 4];
        for byte in &mut magic {
            *byte = reader.u8("the handle's magic").map_err(invalid)?;
        }
        if &magic != MAGIC {
            return Err(invalid(format!(
                "not an arrow-device share handle (starts with {magic:?}, expected {MAGIC:?})"
            )));
        }
        let version = reader.u32("the handle's version").map_err(invalid)?;
        if version != VERSION {
            return Err(invalid(format!(
                "a share handle of version {version} (this build reads version {VERSION})"
            )));
        }
        let name = reader.bytes("the lender's name").map_err(invalid)?.to_vec();
        let id = reader.u64("the object id").map_err(invalid)?;
        let token: [u8; 16] = reader
            .bytes("the token")
            .map_err(invalid)?
            .try_into()
            .map_err(|_| invalid("the token is not 16 bytes".to_string()))?;
        let device_type = DeviceType(reader.u32("the device type").map_err(invalid)? as i32);
        let device_id = reader.i64("the device id").map_err(invalid)?;
        if device_type != DeviceType::CPU {
            return Err(Error::NotSupported(format!(
                "opening arrays on {device_type} is not implemented yet"
            )));
        }
        let field = reader.field().map_err(invalid)?;
        let n_allocations = reader.u32("the allocation count").map_err(invalid)?;
        if n_allocations != 1 {
            return Err(invalid(format!(
                "a CPU share has one memory file, the handle says {n_allocations}"
            )));
        }
        let size = reader.u64("the memory file's size").map_err(invalid)?;
        let size =
            usize::try_from(size).map_err(|_| invalid(format!("a memory file of {size} bytes")))?;
        let (lease, fds) = borrow(&Ticket { name, id, token }).map_err(Error::NotSupported)?;
        let [fd] = <[_; 1]>::try_from(fds).map_err(|fds: Vec<_>| {
            invalid(format!(
                "the exporter sent {} memory files, expected 1",
                fds.len()
            ))
        })?;
        let sealed = Sealed::open(fd, size).map_err(invalid)?;
        let allocations = [(sealed.as_ptr(), sealed.len())];
        // SAFETY: the memory file is sealed (nobody writes it) and mapped
        // for `size` bytes, kept alive by the owner with the lease.
        let array = unsafe {
            layout::open(
                &mut reader,
                field,
                &allocations,
                Box::new((sealed, lease)),
                device_type,
                device_id,
                level,
            )
        }
        .map_err(invalid)?;
        if !reader.finished() {
            return Err(invalid("the handle has bytes after its layout".to_string()));
        }
        Ok(array)
    }

    #[cfg(test)]
    mod tests {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

        use super::*;

        fn batch() -> RecordBatch {
            RecordBatch::try_from_iter([
                (
                    "i",
                    Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
                ),
                (
                    "s",
                    Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])) as ArrayRef,
                ),
            ])
            .unwrap()
        }

        #[test]
        fn a_cpu_array_opens_equal_and_its_lease_ends_with_it() {
            let batch = batch();
            let shared = share(&DeviceArray::from_record_batch(&batch)).unwrap();
            let lender = Lender::get().unwrap();
            let id = shared.id;
            let opened = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
            let again = open_shared(shared.handle(), ValidationLevel::Full).unwrap();
            assert_eq!(opened.to_record_batch().unwrap(), batch);
            assert_eq!(again.to_record_batch().unwrap(), batch);
            drop(shared);
            assert_eq!(
                opened.to_record_batch().unwrap(),
                batch,
                "a lease outlives the share"
            );
            assert_eq!(lender.leases_of(id), 2);
            drop((opened, again));
            wait_for_leases(lender, id, 0);
        }

        const HANDLE_VAR: &str = "ARROW_DEVICE_TEST_SHARE_HANDLE";

        /// This test binary run again as an opener: the test named `role`
        /// with the handle in the environment.
        fn opener(role: &str, handle: &[u8]) -> std::process::Child {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", role, "--nocapture", "--test-threads=1"])
                .env(HANDLE_VAR, crate::share::lease::hex(handle))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        }

        fn handle_from_env() -> Option<Vec<u8>> {
            let text = std::env::var(HANDLE_VAR).ok()?;
            Some(
                (0..text.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
                    .collect(),
            )
        }

        /// The opener's side (does nothing unless run as an opener).
        #[test]
        fn opener_reads_the_batch() {
            let Some(handle) = handle_from_env() else {
                return;
            };
            let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
            assert_eq!(opened.to_record_batch().unwrap(), batch());
            println!("OPENED {}", opened.len());
        }

        /// The opener's side (does nothing unless run as an opener): opens,
        /// says so, then waits to be killed.
        #[test]
        fn opener_holds_until_killed() {
            let Some(handle) = handle_from_env() else {
                return;
            };
            let opened = open_shared(&handle, ValidationLevel::Full).unwrap();
            println!("HOLDING {}", opened.len());
            std::thread::sleep(std::time::Duration::from_secs(60));
        }

        fn wait_for_leases(lender: &Lender, id: u64, count: usize) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while lender.leases_of(id) != count {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} leases, expected {count}",
                    lender.leases_of(id)
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }

        #[test]
        fn other_processes_open_it_and_a_killed_opener_ends_its_lease() {
            use std::io::{BufRead, BufReader};

            let shared = share(&DeviceArray::from_record_batch(&batch())).unwrap();
            let lender = Lender::get().unwrap();
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    opener(
                        "share::linux::tests::opener_reads_the_batch",
                        shared.handle(),
                    )
                })
                .collect();
            for reader in readers {
                let output = reader.wait_with_output().unwrap();
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success() && stdout.contains("OPENED 3"),
                    "{stdout}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            wait_for_leases(lender, shared.id, 0);
            let mut holder = opener(
                "share::linux::tests::opener_holds_until_killed",
                shared.handle(),
            );
            let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
            assert!(lines.any(|line| line.unwrap().contains("HOLDING 3")));
            assert_eq!(
                lender.leases_of(shared.id),
                1,
                "the holder's lease is counted"
            );
            holder.kill().unwrap();
            holder.wait().unwrap();
            wait_for_leases(lender, shared.id, 0);
        }

        #[test]
        fn bad_handles_are_clear_errors() {
            let shared = share(&DeviceArray::from_record_batch(&batch())).unwrap();
            let handle = shared.handle().to_vec();
            let mut forged = handle.clone();
            forged[0] = b'X';
            assert!(open_shared(&forged, ValidationLevel::Full)
                .unwrap_err()
                .to_string()
                .contains("not an arrow-device share handle"));
            for end in [0, 5, 20, handle.len() - 1] {
                let err = open_shared(&handle[..end], ValidationLevel::Full)
                    .unwrap_err()
                    .to_string();
                assert!(
                    err.contains("the handle ends") || err.contains("refused"),
                    "{end}: {err}"
                );
            }
            drop(shared);
            let err = open_shared(&handle, ValidationLevel::Full)
                .unwrap_err()
                .to_string();
            assert!(err.contains("refused the handle"), "{err}");
        }
    }
}
