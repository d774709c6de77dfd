//! The runtime behind the blocking API: one multi-threaded tokio runtime
//! per process, started on first use. Async callers never touch it: their
//! futures run on their own runtime.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Runtime;

use crate::error::{Error, Result};

/// The crate's runtime: a few worker threads (the work per batch is a copy
/// and an IPC decode or encode, done on blocking threads), named so that a
/// stack dump says whose they are.
pub(crate) fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        let workers = std::thread::available_parallelism()
            .map(|n| n.get().min(4))
            .unwrap_or(2);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("arrow-device-flight")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    runtime.as_ref().map_err(|e| Error::Io {
        context: "starting the Flight runtime".into(),
        source: std::io::Error::other(e.clone()),
    })
}

/// Runs `future` to completion on the crate's runtime and waits for it on
/// this thread. Works from any thread, also one that is inside another
/// tokio runtime (where `Runtime::block_on` would panic): the future runs
/// on the crate's workers and this thread waits on a plain channel.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().map_err(|_| {
        Error::Device(arrow_device::Error::Panic(
            "a task of the Flight runtime panicked".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn block_on_works_inside_another_runtime() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let value = outer.block_on(async { super::block_on(async { 41 + 1 }).unwrap() });
        assert_eq!(value, 42);
    }

    #[test]
    fn a_panicking_future_is_an_error_not_a_panic() {
        let e = super::block_on(async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
    }
}
