//! Our consumer ([`AsyncDeviceStream`]), polled by hand with a counting
//! waker: every poll is checked for lost wake-ups, and every item against
//! what the producer's `extract_data` wrote.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use arrow_device::abi::DeviceType;
use arrow_device::stream::AsyncDeviceStream;
use arrow_device::DeviceArray;
use futures_core::Stream;

use super::producer::Shared;
use crate::stream_cases::Expected;

#[derive(Default)]
struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Our consumer, polled by hand.
pub(super) struct Consumer {
    pub stream: Option<AsyncDeviceStream>,
    device_type: DeviceType,
    wakes: Arc<WakeCount>,
    waker: Waker,
    /// Per future (`poll_next`, `wait_schema`): the wake count before its
    /// last poll that returned `Pending`.
    pending_since: [Option<usize>; 2],
    pub ended: bool,
    failed: bool,
    pub yielded: Vec<(DeviceArray, Expected)>,
}

impl Consumer {
    pub(super) fn new(stream: AsyncDeviceStream, device_type: DeviceType) -> Consumer {
        let wakes = Arc::new(WakeCount::default());
        Consumer {
            stream: Some(stream),
            device_type,
            waker: Waker::from(wakes.clone()),
            wakes,
            pending_since: [None; 2],
            ended: false,
            failed: false,
            yielded: Vec::new(),
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }

    /// Records the readiness of a poll of `future` (0 `poll_next`, 1
    /// `wait_schema`); panics on a lost wake-up.
    fn readiness(&mut self, future: usize, ready: bool, wakes_before: usize) {
        let pending_since = &mut self.pending_since[future];
        if ready {
            if let Some(since) = pending_since.take() {
                assert!(
                    self.wakes() > since,
                    "lost wake-up: a poll returned Pending, and a later one Ready, without the waker being woken in between"
                );
            }
        } else if pending_since.is_none() {
            *pending_since = Some(wakes_before);
        }
    }

    /// Polls the stream once; `None` when it is dropped. Panics when an
    /// oracle fails.
    pub(super) fn poll(&mut self, shared: &Shared) -> Option<Poll<()>> {
        let stream = self.stream.as_mut()?;
        let wakes_before = self.wakes.0.load(Ordering::SeqCst);
        let mut cx = Context::from_waker(&self.waker);
        let item = Pin::new(stream).poll_next(&mut cx);
        self.readiness(0, item.is_ready(), wakes_before);
        let Poll::Ready(item) = item else {
            assert!(!self.ended, "the stream returned Pending after its end");
            return Some(Poll::Pending);
        };
        let finished = self.ended || self.failed;
        match item {
            None => {
                // A consumer that refused a call knows the stream is
                // incomplete: it must not end as if it were complete.
                assert!(
                    finished || !shared.borrow().refused,
                    "the stream ended cleanly (None) after refusing a schema or a task: the refused batch is lost without an error"
                );
                self.ended = true;
            }
            Some(item) => {
                assert!(
                    !finished,
                    "the stream yielded an item after its end or an error"
                );
                match item {
                    Err(_) => self.failed = true,
                    Ok(array) => {
                        let expected = shared
                            .borrow_mut()
                            .extracted
                            .take()
                            .expect("the stream yielded an array no extract_data wrote");
                        assert_eq!(
                            array.device_type(),
                            self.device_type,
                            "the stream yielded an array on another device type than the producer's"
                        );
                        if let Ok(host) = array.to_host() {
                            expected.check(host.as_ref(), "AsyncDeviceStream");
                        }
                        self.yielded.push((array, expected));
                    }
                }
            }
        }
        Some(Poll::Ready(()))
    }

    /// Polls `wait_schema` once.
    pub(super) fn poll_schema(&mut self) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let wakes_before = self.wakes.0.load(Ordering::SeqCst);
        let mut cx = Context::from_waker(&self.waker);
        let outcome = {
            let mut wait = std::pin::pin!(stream.wait_schema());
            wait.as_mut().poll(&mut cx).map(|field| field.is_ok())
        };
        self.readiness(1, outcome.is_ready(), wakes_before);
        // An error here is the stream's one error: it ends.
        self.failed |= outcome == Poll::Ready(false);
    }
}
