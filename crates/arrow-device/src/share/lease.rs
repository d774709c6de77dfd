//! Leases: how an opener gets a shared object's memory files and keeps the
//! exporter's memory alive, one Unix socket connection per opener.
//!
//! Each process that shares runs one lender thread on an abstract Unix
//! socket. An opener connects and sends `(token, object id)`; the lender
//! answers with a status and, through `SCM_RIGHTS`, the object's memory
//! files. The connection then *is* the lease: the lender keeps a reference
//! to the object until the opener closes it, which the kernel does when the
//! opener exits, however it exits.

use std::any::Any;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an open request starts with.
const MAGIC: &[u8; 8] = b"ADLEASE1";
/// The most memory files one message passes (the kernel's `SCM_MAX_FD`
/// is 253); an object's files go in as many messages as they need.
const MAX_FDS: usize = 253;
/// The most allocations (so memory files, on the devices that pass them)
/// one shared array has.
pub const MAX_ALLOCATIONS: usize = 4096;
/// A grant's status bytes: granted (the last message), granted (more
/// files follow), refused.
const GRANTED: u8 = 0;
const MORE: u8 = 2;
const REFUSED: u8 = 1;
/// Refused: an object one opener may have (a stream) was taken; the
/// taker's pid follows (4 bytes).
const TAKEN: u8 = 3;
/// How long an opener may take to send its request, and the lender to answer.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// What is lent: memory files, and what keeps the memory alive; or, for
/// an object one opener takes (a stream), what serves its connection.
struct Lent {
    token: [u8; 16],
    fds: Vec<OwnedFd>,
    keep: Keep,
    take: Option<Serve>,
}

/// Serves the connection of the one opener of an object, on a thread of
/// its own.
pub type Serve = Box<dyn FnOnce(UnixStream) + Send>;

/// What keeps a lent object's memory alive while any lease holds it.
pub type Keep = Arc<dyn Any + Send + Sync>;

/// A granted lease: its connection, the object's id and reference.
type Granted = (UnixStream, u64, Keep);

/// This process's lender.
pub struct Lender {
    name: Vec<u8>,
    /// The listening socket (owned by the lender's thread), closed by a
    /// forked child that inherited it.
    listener: RawFd,
    objects: Mutex<HashMap<u64, Lent>>,
    /// Objects taken by their one opener: id → the opener's pid.
    taken: Mutex<HashMap<u64, u32>>,
    leases: Mutex<Vec<Granted>>,
    next_id: Mutex<u64>,
}

/// What an opener needs to reach a lent object (part of a handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The lender's abstract socket name.
    pub name: Vec<u8>,
    /// The object.
    pub id: u64,
    /// Its secret.
    pub token: [u8; 16],
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    // SAFETY: `N` writable bytes.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), N, 0) };
    if n != N as isize {
        return Err(format!("getrandom: {}", std::io::Error::last_os_error()));
    }
    Ok(bytes)
}

/// `bytes` as lowercase hexadecimal.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Lender {
    /// This process's lender, started on first use.
    ///
    /// A child forked after its parent shared inherits the parent's lender
    /// but not its thread: the child starts a lender of its own, and closes
    /// what it inherited (the parent's listening socket, its leases' and
    /// its lent objects' descriptors), so that only the parent answers for
    /// the parent's shares and a lease ends when the parent ends.
    pub fn get() -> Result<&'static Lender, String> {
        type Slot = Option<(u32, Result<&'static Lender, String>)>;
        static LENDER: Mutex<Slot> = Mutex::new(None);
        let pid = std::process::id();
        let mut slot = lock(&LENDER);
        match &*slot {
            Some((owner, lender)) if *owner == pid => return lender.clone(),
            Some((_, Ok(inherited))) => inherited.forsake(),
            _ => {}
        }
        let lender = Lender::start();
        *slot = Some((pid, lender.clone()));
        lender
    }

    /// In a forked child: closes the descriptors inherited from the
    /// parent's lender. What they kept alive is the parent's to free, so it
    /// is leaked here, never dropped (a drop could run device calls that a
    /// forked child may not make).
    fn forsake(&self) {
        // SAFETY: the listener's descriptor, inherited, closed once (this
        // lender is never used again in this process).
        unsafe { libc::close(self.listener) };
        // A lock held by a parent's thread at the fork stays held: those
        // descriptors are left open rather than risk waiting forever.
        if let Ok(mut leases) = self.leases.try_lock() {
            for (socket, _, keep) in leases.drain(..) {
                drop(socket);
                std::mem::forget(keep);
            }
        }
        if let Ok(mut objects) = self.objects.try_lock() {
            for (_, lent) in objects.drain() {
                let Lent {
                    fds, keep, take, ..
                } = lent;
                drop(fds);
                std::mem::forget((keep, take));
            }
        }
    }

    fn start() -> Result<&'static Lender, String> {
        let name = format!(
            "arrow-device/{}/{}",
            std::process::id(),
            hex(&random_bytes::<16>()?)
        )
        .into_bytes();
        let addr =
            SocketAddr::from_abstract_name(&name).map_err(|e| format!("socket name: {e}"))?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| format!("bind: {e}"))?;
        let lender: &'static Lender = Box::leak(Box::new(Lender {
            name,
            listener: listener.as_raw_fd(),
            objects: Mutex::new(HashMap::new()),
            taken: Mutex::new(HashMap::new()),
            leases: Mutex::new(Vec::new()),
            next_id: Mutex::new(1),
        }));
        std::thread::Builder::new()
            .name("arrow-device-lender".into())
            .spawn(move || lender.serve(listener))
            .map_err(|e| format!("the lender thread: {e}"))?;
        Ok(lender)
    }

    /// Lends `fds`, keeping `keep` alive while any lease holds it; the
    /// ticket opens it until [`Lender::withdraw`].
    pub fn lend(&self, fds: Vec<OwnedFd>, keep: Keep) -> Result<Ticket, String> {
        if fds.len() > MAX_ALLOCATIONS {
            return Err(format!(
                "{} memory files to lend (at most {MAX_ALLOCATIONS})",
                fds.len()
            ));
        }
        self.insert(Lent {
            token: [0; 16],
            fds,
            keep,
            take: None,
        })
    }

    /// Lends an object that one opener takes: its connection goes to
    /// `serve`, on a thread of its own, and later opens are refused with
    /// the taker's pid.
    pub fn lend_once(&self, serve: Serve) -> Result<Ticket, String> {
        self.insert(Lent {
            token: [0; 16],
            fds: Vec::new(),
            keep: Arc::new(()),
            take: Some(serve),
        })
    }

    fn insert(&self, mut lent: Lent) -> Result<Ticket, String> {
        lent.token = random_bytes::<16>()?;
        let token = lent.token;
        let id = {
            let mut next = lock(&self.next_id);
            *next += 1;
            *next
        };
        lock(&self.objects).insert(id, lent);
        Ok(Ticket {
            name: self.name.clone(),
            id,
            token,
        })
    }

    /// No new leases of `id`; the leases granted keep it until they end.
    pub fn withdraw(&self, id: u64) {
        // Dropped outside the lock: a stream's serve closure owns a reader.
        let lent = lock(&self.objects).remove(&id);
        lock(&self.taken).remove(&id);
        drop(lent);
    }

    /// The number of leases of object `id` held now.
    pub fn leases_of(&self, id: u64) -> usize {
        lock(&self.leases)
            .iter()
            .filter(|(_, of, _)| *of == id)
            .count()
    }

    fn serve(&'static self, listener: UnixListener) {
        loop {
            // The listener and every lease, polled together.
            let mut polled = vec![libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            polled.extend(
                lock(&self.leases)
                    .iter()
                    .map(|(socket, _, _)| libc::pollfd {
                        fd: socket.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    }),
            );
            // A new lease joins the poll within this timeout.
            // SAFETY: `polled` holds that many pollfds.
            let ready =
                unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 50) };
            if ready < 0 {
                continue;
            }
            let ended: Vec<RawFd> = polled[1..]
                .iter()
                .filter(|p| p.revents != 0)
                .map(|p| p.fd)
                .filter(|&fd| lease_ended(fd))
                .collect();
            if !ended.is_empty() {
                // Dropping a lease drops its reference (maybe the last).
                let gone: Vec<_> = {
                    let mut leases = lock(&self.leases);
                    let (gone, kept) = leases
                        .drain(..)
                        .partition(|(s, _, _)| ended.contains(&s.as_raw_fd()));
                    *leases = kept;
                    gone
                };
                drop(gone);
            }
            if polled[0].revents & libc::POLLIN != 0 {
                if let Ok((socket, _)) = listener.accept() {
                    // One opener's bad bytes end its connection only.
                    let _ = self.grant(socket);
                }
            }
        }
    }

    fn grant(&self, mut socket: UnixStream) -> Result<(), String> {
        socket
            .set_read_timeout(Some(HANDSHAKE))
            .map_err(|e| e.to_string())?;
        socket
            .set_write_timeout(Some(HANDSHAKE))
            .map_err(|e| e.to_string())?;
        let mut request = [0u8; 32];
        socket.read_exact(&mut request).map_err(|e| e.to_string())?;
        let id = u64::from_le_bytes(request[24..32].try_into().expect("8 bytes"));
        let mut objects = lock(&self.objects);
        let lent = objects
            .get(&id)
            .filter(|lent| &request[..8] == MAGIC && request[8..24] == lent.token);
        let Some(lent) = lent else {
            drop(objects);
            let taker = lock(&self.taken).get(&id).copied();
            let answer = match taker {
                Some(pid) => [&[TAKEN][..], &pid.to_le_bytes()].concat(),
                None => vec![REFUSED],
            };
            let _ = socket.write_all(&answer);
            return Err("refused".into());
        };
        if lent.take.is_some() {
            let lent = objects.remove(&id).expect("found just above");
            drop(objects);
            let pid = peer_pid(&socket).unwrap_or(0);
            lock(&self.taken).insert(id, pid);
            send_fds(&socket, &[])?;
            socket.set_read_timeout(None).map_err(|e| e.to_string())?;
            socket.set_write_timeout(None).map_err(|e| e.to_string())?;
            let serve = lent.take.expect("checked just above");
            std::thread::Builder::new()
                .name("arrow-device-stream".into())
                .spawn(move || serve(socket))
                .map_err(|e| format!("a stream's thread: {e}"))?;
            return Ok(());
        }
        let fds: Vec<RawFd> = lent.fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let keep = lent.keep.clone();
        let sent = send_fds(&socket, &fds);
        drop(objects);
        sent?;
        socket.set_read_timeout(None).map_err(|e| e.to_string())?;
        lock(&self.leases).push((socket, id, keep));
        Ok(())
    }
}

/// The pid of the process at the other end of `socket`.
fn peer_pid(socket: &UnixStream) -> Option<u32> {
    // SAFETY: a zeroed ucred is a valid out-parameter.
    let mut credentials: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket, out-parameter and length.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut credentials).cast(),
            &mut len,
        )
    };
    (done == 0).then_some(credentials.pid as u32)
}

/// Whether the lease socket `fd` was closed by its opener (EOF or error);
/// other bytes from an opener are read and ignored.
fn lease_ended(fd: RawFd) -> bool {
    let mut byte = [0u8; 64];
    // SAFETY: a valid socket and buffer; non-blocking for this one call.
    let n = unsafe { libc::recv(fd, byte.as_mut_ptr().cast(), byte.len(), libc::MSG_DONTWAIT) };
    n == 0 || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends a grant with `fds`, in messages of at most [`MAX_FDS`].
fn send_fds(socket: &UnixStream, fds: &[RawFd]) -> Result<(), String> {
    let mut chunks = fds.chunks(MAX_FDS).peekable();
    if chunks.peek().is_none() {
        return send_with_fds(socket, &[GRANTED], &[]);
    }
    while let Some(chunk) = chunks.next() {
        let status = if chunks.peek().is_some() {
            MORE
        } else {
            GRANTED
        };
        send_with_fds(socket, &[status], chunk)?;
    }
    Ok(())
}

/// Receives a grant's files, however many messages they take.
fn receive_fds(mut socket: &UnixStream) -> Result<Vec<OwnedFd>, String> {
    let mut all = Vec::new();
    loop {
        let (status, fds) = receive_with_fds(socket)?;
        all.extend(fds);
        match status {
            GRANTED => return Ok(all),
            MORE if all.len() <= MAX_ALLOCATIONS => continue,
            MORE => return Err(format!("the exporter sent more than {MAX_ALLOCATIONS} memory files")),
            TAKEN => {
                let mut pid = [0u8; 4];
                let pid = socket.read_exact(&mut pid).map(|()| u32::from_le_bytes(pid));
                return Err(format!(
                    "the exporting process refused the handle: it shares one opener only, and process {} opened it already",
                    pid.map_or("?".to_string(), |p| p.to_string())
                ));
            }
            _ => return Err("the exporting process refused the handle: it no longer shares this object, or the handle is forged".to_string()),
        }
    }
}

/// Sends `bytes` with `fds` attached (`SCM_RIGHTS`).
fn send_with_fds(socket: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> Result<(), String> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut control = vec![0u8; space.max(1)];
    // SAFETY: a zeroed msghdr is valid; the fields set point to live buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        // SAFETY: the control buffer has room for one header and the fds.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(header).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    // SAFETY: a valid socket and message.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &message, libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(format!("sendmsg: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Receives one byte with up to [`MAX_FDS`] fds attached.
fn receive_with_fds(socket: &UnixStream) -> Result<(u8, Vec<OwnedFd>), String> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a pure computation.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: as in `send_with_fds`.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space as _;
    // SAFETY: a valid socket and message; received fds are close-on-exec.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
    if n != 1 {
        return Err(if n == 0 {
            "the exporting process closed the connection (it no longer shares this object, or ended)".to_string()
        } else {
            format!(
                "the exporting process broke the connection before answering (it ended, or \
                 refused the request): recvmsg: {}",
                std::io::Error::last_os_error()
            )
        });
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let count =
                    ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(*data.add(i)));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    if message.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err("the memory files did not fit one message".to_string());
    }
    Ok((byte[0], fds))
}

/// A lease held by an opener: the connection (closing it ends the lease).
#[derive(Debug)]
pub struct Lease {
    socket: UnixStream,
}

impl Lease {
    /// The connection, for objects served over it (a stream's batches).
    pub fn socket(&self) -> &UnixStream {
        &self.socket
    }

    /// The exporting process's pid (0 where the kernel cannot tell).
    pub fn exporter_pid(&self) -> u32 {
        peer_pid(&self.socket).unwrap_or(0)
    }
}

/// Opens the object `ticket` names: its memory files and the lease.
pub fn borrow(ticket: &Ticket) -> Result<(Lease, Vec<OwnedFd>), String> {
    let addr =
        SocketAddr::from_abstract_name(&ticket.name).map_err(|e| format!("socket name: {e}"))?;
    let mut socket = UnixStream::connect_addr(&addr)
        .map_err(|e| format!("the exporting process does not answer ({e}): it ended, or the handle is not from this machine"))?;
    socket
        .set_read_timeout(Some(HANDSHAKE))
        .map_err(|e| e.to_string())?;
    let mut request = Vec::with_capacity(32);
    request.extend_from_slice(MAGIC);
    request.extend_from_slice(&ticket.token);
    request.extend_from_slice(&ticket.id.to_le_bytes());
    socket
        .write_all(&request)
        .map_err(|e| format!("the open request: {e}"))?;
    let fds = receive_fds(&socket)?;
    socket.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok((Lease { socket }, fds))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::share::memfd::Sealed;

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_lease_passes_the_files_and_keeps_the_object_until_it_ends() {
        let lender = Lender::get().unwrap();
        let sealed = Sealed::create("lease-test", 8, &[(0, b"abcdefgh")]).unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let keep: Keep = Arc::new(Flag(dropped.clone()));
        let ticket = lender
            .lend(vec![sealed.fd().try_clone().unwrap()], keep)
            .unwrap();
        let (lease, fds) = borrow(&ticket).unwrap();
        let opened = Sealed::open(fds.into_iter().next().unwrap(), 8).unwrap();
        // SAFETY: 8 readable bytes.
        assert_eq!(
            unsafe { std::slice::from_raw_parts(opened.as_ptr(), 8) },
            b"abcdefgh"
        );
        lender.withdraw(ticket.id);
        assert!(borrow(&ticket).unwrap_err().contains("refused"));
        assert!(
            !dropped.load(Ordering::SeqCst),
            "the lease keeps the object"
        );
        drop(lease);
        wait_for("the object is dropped once its lease ended", || {
            dropped.load(Ordering::SeqCst)
        });
    }

    #[test]
    fn a_forged_token_or_id_is_refused() {
        let lender = Lender::get().unwrap();
        let keep: Keep = Arc::new(());
        let ticket = lender.lend(Vec::new(), keep).unwrap();
        let mut forged = ticket.clone();
        forged.token[0] ^= 1;
        assert!(borrow(&forged).unwrap_err().contains("refused"));
        forged = ticket.clone();
        forged.id += 1000;
        assert!(borrow(&forged).unwrap_err().contains("refused"));
        forged = ticket.clone();
        forged.name = b"arrow-device/nobody".to_vec();
        assert!(borrow(&forged).unwrap_err().contains("does not answer"));
        lender.withdraw(ticket.id);
    }
}
