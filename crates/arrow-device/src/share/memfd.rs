//! Sealed memory files: the CPU's shared allocations. The exporter writes
//! the bytes once, seals the file against every change (`F_SEAL_WRITE`,
//! `F_SEAL_SHRINK`, `F_SEAL_GROW`, then `F_SEAL_SEAL`), and any number of
//! openers map it read-only: no process can change what a reader sees.

use std::ffi::{c_void, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::os_error;

/// A sealed, read-only memory file and this process's mapping of it.
#[derive(Debug)]
pub struct Sealed {
    fd: OwnedFd,
    map: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and sealed; nothing mutates it.
unsafe impl Send for Sealed {}
// SAFETY: as above.
unsafe impl Sync for Sealed {}

impl Sealed {
    /// A memory file of `len` bytes holding each `(offset, bytes)` piece
    /// (zeros elsewhere), sealed, mapped.
    ///
    /// The pieces are written with `pwrite`, straight into the file's pages:
    /// twice as fast as a copy through a fresh mapping, which takes a page
    /// fault per page.
    pub fn create(name: &str, len: usize, pieces: &[(usize, &[u8])]) -> Result<Sealed, String> {
        let name = CString::new(name).map_err(|_| "a memfd name holds a NUL byte".to_string())?;
        // SAFETY: a valid C string; the fd is owned below.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        // SAFETY: just created, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size =
            libc::off_t::try_from(len).map_err(|_| format!("{len} bytes do not fit a file"))?;
        // SAFETY: a valid fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(os_error("ftruncate"));
        }
        for &(offset, bytes) in pieces {
            if offset.checked_add(bytes.len()).is_none_or(|end| end > len) {
                return Err(format!(
                    "a piece of {} bytes at {offset} does not fit a file of {len}",
                    bytes.len()
                ));
            }
            let mut written = 0;
            while written < bytes.len() {
                let rest = &bytes[written..];
                // In bounds of `len`, which fits an off_t (checked above).
                let at = (offset + written) as libc::off_t;
                // SAFETY: a valid fd; `rest` is readable for its length.
                let n =
                    unsafe { libc::pwrite(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len(), at) };
                if n < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(os_error("pwrite"));
                }
                if n == 0 {
                    return Err("pwrite wrote nothing into the memory file".to_string());
                }
                written += n as usize;
            }
        }
        let seals =
            libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: a valid fd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_error("fcntl(F_ADD_SEALS)"));
        }
        Sealed::map(fd, len)
    }

    /// Maps a memory file another process shared; it must be sealed against
    /// writes and size changes, and be exactly `len` bytes long.
    pub fn open(fd: OwnedFd, len: usize) -> Result<Sealed, String> {
        // SAFETY: a valid fd.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let needed = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & needed != needed {
            return Err(
                "the shared memory file is not sealed against writes and resizing".to_string(),
            );
        }
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and out-parameter.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(os_error("fstat"));
        }
        if u64::try_from(stat.st_size).ok() != Some(len as u64) {
            return Err(format!(
                "the shared memory file has {} bytes, the handle says {len}",
                stat.st_size
            ));
        }
        Sealed::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Sealed, String> {
        let map = if len == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr().cast()
        } else {
            // SAFETY: a read-only mapping of the whole (sealed) file.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(os_error("mmap"));
            }
            map
        };
        Ok(Sealed { fd, map, len })
    }

    /// The mapping's first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.map.cast()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file, for passing to another process.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

impl Drop for Sealed {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping `map` made; nothing uses it after this.
            unsafe { libc::munmap(self.map, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_reads_back_and_refuses_every_change() {
        let low: Vec<u8> = (0..40).collect();
        let high: Vec<u8> = (60..100).collect();
        let sealed = Sealed::create("test", 100, &[(60, &high), (0, &low)]).unwrap();
        // SAFETY: 100 readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(sealed.as_ptr(), 100) };
        let expected: Vec<u8> = (0..100)
            .map(|i| if (40..60).contains(&i) { 0 } else { i })
            .collect();
        assert_eq!(bytes, expected, "the pieces, and zeros between them");
        assert!(Sealed::create("test", 10, &[(5, &low[..6])])
            .unwrap_err()
            .contains("does not fit a file of 10"));
        let fd = sealed.fd().as_raw_fd();
        // SAFETY: a valid fd; each call must fail on a sealed file.
        unsafe {
            assert_ne!(libc::ftruncate(fd, 10), 0);
            assert_eq!(
                libc::mmap(
                    std::ptr::null_mut(),
                    100,
                    libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0
                ),
                libc::MAP_FAILED
            );
            assert!(libc::write(fd, [1u8].as_ptr().cast(), 1) < 0);
        }
        let again = Sealed::open(sealed.fd().try_clone().unwrap(), 100).unwrap();
        // SAFETY: as above.
        assert_eq!(
            unsafe { std::slice::from_raw_parts(again.as_ptr(), 100) },
            bytes
        );
        assert!(Sealed::open(sealed.fd().try_clone().unwrap(), 99)
            .unwrap_err()
            .contains("has 100 bytes"));
    }

    #[test]
    fn an_unsealed_file_is_refused() {
        // SAFETY: a valid name; the fd is owned below.
        let fd = unsafe { libc::memfd_create(c"plain".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: just created.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        assert!(Sealed::open(fd, 0).unwrap_err().contains("not sealed"));
    }
}
