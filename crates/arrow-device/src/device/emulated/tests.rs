//! Tests of the emulated device. Timing only ever widens a window in which a
//! result is deterministic (a delayed copy has not run yet); no test asserts
//! on how long anything took.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::device::cpu::CpuDevice;

const POISON: u8 = 0xDB;

fn device(id: i64, strict: bool, delay_ms: u64) -> Arc<EmulatedDevice> {
    EmulatedDevice::new(
        id,
        EmulatedConfig {
            strict,
            delay: Duration::from_millis(delay_ms),
        },
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// An event recorded on a fresh stream behind an upload of `data` into
/// `buf` delayed by `delay` (the device's later work is not delayed): what
/// waits on the event waits that long. `data` must outlive the upload.
fn event_behind_a_slow_upload(
    device: &EmulatedDevice,
    buf: &DeviceBuffer,
    data: &[u8],
    delay: Duration,
) -> (Stream, Event) {
    let stream = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    device.set_config(EmulatedConfig {
        strict: true,
        delay,
    });
    // SAFETY: the caller keeps `data` alive until the upload has run; `buf`
    // holds `data.len()` bytes.
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), data.len(), &stream)
            .unwrap()
    };
    device.set_config(EmulatedConfig {
        strict: true,
        delay: Duration::ZERO,
    });
    device.record_event(&event, &stream).unwrap();
    (stream, event)
}

/// Copies `data` into `buf` on a fresh stream and waits for it.
fn upload(device: &EmulatedDevice, buf: &DeviceBuffer, data: &[u8]) {
    let stream = device.create_stream().unwrap();
    // SAFETY: `data` outlives the synchronize; `buf` holds `data.len()` bytes.
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), data.len(), &stream)
            .unwrap()
    };
    device.synchronize_stream(&stream).unwrap();
}

/// Copies `len` bytes of `ptr` back to the host on a fresh stream.
fn download(device: &EmulatedDevice, ptr: *const u8, len: usize) -> Vec<u8> {
    let stream = device.create_stream().unwrap();
    let mut out = vec![0u8; len];
    // SAFETY: `out` outlives the synchronize.
    unsafe {
        device
            .copy_to_host(ptr, out.as_mut_ptr(), len, &stream)
            .unwrap()
    };
    device.synchronize_stream(&stream).unwrap();
    out
}

#[test]
fn config_parse_reads_known_keys_and_ignores_garbage() {
    assert_eq!(
        EmulatedConfig::default(),
        EmulatedConfig {
            strict: true,
            delay: Duration::ZERO
        }
    );
    assert_eq!(
        EmulatedConfig::parse("").unwrap(),
        EmulatedConfig::default()
    );
    assert_eq!(
        EmulatedConfig::parse("strict=0,delay_ms=5").unwrap(),
        EmulatedConfig {
            strict: false,
            delay: Duration::from_millis(5)
        }
    );
    assert_eq!(
        EmulatedConfig::parse(" STRICT = off , delay_us = 250 ").unwrap(),
        EmulatedConfig {
            strict: false,
            delay: Duration::from_micros(250)
        }
    );
    let garbage =
        "garbage,,=,strict=2,delay_ms=-1,delay_ms=99999999999999999999999,=5,\u{1F600}=\u{1F600}";
    assert_eq!(
        EmulatedConfig::parse(garbage).unwrap(),
        EmulatedConfig::default()
    );
}

#[test]
fn config_parse_accepts_delays_up_to_the_bound_and_rejects_longer_ones() {
    assert_eq!(EmulatedConfig::MAX_DELAY, Duration::from_secs(10));
    assert_eq!(
        EmulatedConfig::parse("delay_ms=10000").unwrap().delay,
        EmulatedConfig::MAX_DELAY
    );
    assert_eq!(
        EmulatedConfig::parse("delay_us=10000000").unwrap().delay,
        EmulatedConfig::MAX_DELAY
    );
    let err = EmulatedConfig::parse("strict=1,delay_ms=10001").unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "ARROW_DEVICE_EMULATED: delay_ms=10001 is above the bound of 10000 ms (10 seconds)"
    );
    let err = EmulatedConfig::parse(" Delay_US = 18446744073709551615 ").unwrap_err();
    assert_eq!(
        err.to_string(),
        "ARROW_DEVICE_EMULATED: delay_us=18446744073709551615 is above the bound of \
         10000000 us (10 seconds)"
    );
    // A later valid delay does not excuse an earlier one over the bound.
    assert!(EmulatedConfig::parse("delay_ms=99999,delay_ms=1").is_err());
}

#[test]
fn global_instances_are_shared_per_id_and_bounded() {
    assert!(EmulatedDevice::global(-1).is_none());
    assert!(EmulatedDevice::global(MAX_GLOBAL_ID + 1).is_none());
    let a = EmulatedDevice::global(MAX_GLOBAL_ID).unwrap();
    let b = EmulatedDevice::global(MAX_GLOBAL_ID).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.device_id(), MAX_GLOBAL_ID);
    assert_eq!(a.config(), EmulatedDevice::global_config());
    let found = crate::device::lookup(DeviceType::EXT_DEV, MAX_GLOBAL_ID).unwrap();
    assert!(crate::device::same_device(&*found, &*a));
}

#[test]
fn global_config_applies_to_existing_and_later_instances() {
    // A local table: changing the real global configuration would reach
    // every other test running in this process.
    let mut globals = Globals {
        config: EmulatedConfig::default(),
        devices: BTreeMap::new(),
    };
    let early = globals.get(3).unwrap();
    let relaxed = EmulatedConfig {
        strict: false,
        delay: Duration::from_millis(7),
    };
    globals.set_config(relaxed);
    assert_eq!(early.config(), relaxed);
    assert_eq!(globals.get(4).unwrap().config(), relaxed);
    assert!(Arc::ptr_eq(&early, &globals.get(3).unwrap()));
    assert!(globals.get(MAX_GLOBAL_ID + 1).is_none());
}

#[test]
fn strict_round_trip_host_to_device_to_host() {
    let device = device(0, true, 0);
    assert_eq!(device.device_type(), DeviceType::EXT_DEV);
    assert_eq!(device.device_id(), 0);
    assert!(!device.is_host_accessible());
    let data = pattern(10_000, 7);
    let buf = device.allocate(data.len()).unwrap();
    assert_eq!(buf.len(), data.len());
    assert_eq!(buf.as_ptr() as usize % 64, 0);
    let stream = device.create_stream().unwrap();
    let mut back = vec![0u8; data.len()];
    // SAFETY: both host buffers outlive the synchronize.
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), data.len(), &stream)
            .unwrap();
        device
            .copy_to_host(buf.as_ptr(), back.as_mut_ptr(), data.len(), &stream)
            .unwrap();
    }
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(back, data);
}

#[test]
fn non_strict_device_pointers_are_plain_host_memory() {
    let device = device(0, false, 0);
    let data = pattern(300, 1);
    let buf = device.allocate(data.len()).unwrap();
    upload(&device, &buf, &data);
    // SAFETY: non-strict memory is one read-write mapping of at least 300
    // bytes, and the upload has completed.
    let seen = unsafe { std::slice::from_raw_parts(buf.as_ptr(), data.len()) };
    assert_eq!(seen, &data[..]);
}

#[test]
fn device_to_device_copies_between_ids_0_and_1() {
    let (d0, d1) = (device(0, true, 0), device(1, true, 0));
    let data = pattern(5000, 3);
    let a = d0.allocate(data.len()).unwrap();
    let b = d1.allocate(data.len() + 100).unwrap();
    upload(&d0, &a, &data);
    let stream = d1.create_stream().unwrap();
    // SAFETY: 100 bytes into `b` leaves `data.len()` bytes inside it.
    let b_tail = unsafe { b.as_ptr().add(100) };
    // SAFETY: both are live device buffers of at least `data.len()` bytes.
    unsafe {
        d1.copy_device_to_device(&*d0, a.as_ptr(), b_tail, data.len(), &stream)
            .unwrap()
    };
    d1.synchronize_stream(&stream).unwrap();
    assert_eq!(download(&d1, b_tail, data.len()), data);

    // The source must belong to the device named as the source.
    // SAFETY: rejected before anything is queued.
    let err =
        unsafe { d1.copy_device_to_device(&*d1, a.as_ptr(), b.as_ptr(), 8, &stream) }.unwrap_err();
    assert!(
        err.to_string()
            .contains("belongs to emulated device 0, not 1"),
        "{err}"
    );
    // A non-emulated source is for the caller to stage through the host.
    let host = [0u8; 8];
    // SAFETY: rejected before anything is queued.
    let err =
        unsafe { d1.copy_device_to_device(&CpuDevice, host.as_ptr(), b.as_ptr(), 8, &stream) }
            .unwrap_err();
    assert!(matches!(err, Error::NotSupported(_)), "{err}");
}

#[test]
fn delayed_copy_to_host_reads_poison_until_the_stream_is_synchronized() {
    let device = device(0, true, 0);
    let data = pattern(4096, 9);
    let buf = device.allocate(data.len()).unwrap();
    upload(&device, &buf, &data);
    device.set_config(EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(250),
    });
    let stream = device.create_stream().unwrap();
    let mut out = vec![0u8; data.len()];
    // SAFETY: `out` outlives the synchronize.
    unsafe {
        device
            .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), out.len(), &stream)
            .unwrap()
    };
    assert!(
        out.iter().all(|&b| b == POISON),
        "the destination is poisoned until the copy runs"
    );
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(out, data);
}

#[test]
fn queued_reads_keep_their_data_when_a_later_copy_overwrites_the_source() {
    // Write-after-read in stream order is legal: poisoning the second copy's
    // destination must not corrupt what the first copy still has to read.
    let device = device(0, true, 0);
    let (old, new) = (pattern(1000, 1), pattern(1000, 2));
    let buf = device.allocate(1000).unwrap();
    upload(&device, &buf, &old);
    device.set_config(EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(20),
    });
    let stream = device.create_stream().unwrap();
    let (mut first, mut second) = (vec![0u8; 1000], vec![0u8; 1000]);
    // SAFETY: all host buffers outlive the synchronize.
    unsafe {
        device
            .copy_to_host(buf.as_ptr(), first.as_mut_ptr(), 1000, &stream)
            .unwrap();
        device
            .copy_from_host(new.as_ptr(), buf.as_ptr(), 1000, &stream)
            .unwrap();
        device
            .copy_to_host(buf.as_ptr(), second.as_mut_ptr(), 1000, &stream)
            .unwrap();
    }
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(first, old);
    assert_eq!(second, new);
}

#[test]
fn an_event_orders_a_copy_on_one_stream_after_a_delayed_copy_on_another() {
    // A wide margin: stream c must run before stream a's copy lands, even on
    // a loaded machine.
    let device = device(0, true, 1000);
    let data = pattern(2048, 5);
    let buf = device.allocate(data.len()).unwrap();
    let (a, b, c) = (
        device.create_stream().unwrap(),
        device.create_stream().unwrap(),
        device.create_stream().unwrap(),
    );
    let event = device.create_event().unwrap();
    let (mut waited, mut raced) = (vec![0u8; data.len()], vec![0u8; data.len()]);
    // SAFETY: every host buffer outlives the synchronizes below; the event is
    // a live emulated event.
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), data.len(), &a)
            .unwrap();
        device.record_event(&event, &a).unwrap();
        device
            .stream_wait_sync_event(&b, event.sync_event())
            .unwrap();
        device.set_config(EmulatedConfig {
            strict: true,
            delay: Duration::from_millis(1),
        });
        device
            .copy_to_host(buf.as_ptr(), waited.as_mut_ptr(), data.len(), &b)
            .unwrap();
        // Stream c does not wait: it reads the device buffer while stream a's
        // copy is still pending, and gets the poison.
        device
            .copy_to_host(buf.as_ptr(), raced.as_mut_ptr(), data.len(), &c)
            .unwrap();
    }
    device.synchronize_stream(&b).unwrap();
    assert!(
        waited == data,
        "stream b read before the event: {:?}",
        &waited[..8]
    );
    device.synchronize_stream(&c).unwrap();
    assert!(
        raced.iter().all(|&byte| byte == POISON),
        "stream c did not see the pending copy's poison: {:?}",
        &raced[..8]
    );
    device.synchronize_stream(&a).unwrap();
}

#[test]
fn synchronize_sync_event_waits_for_a_delayed_copy() {
    let device = device(0, true, 0);
    let data = pattern(512, 11);
    let buf = device.allocate(data.len()).unwrap();
    upload(&device, &buf, &data);
    device.set_config(EmulatedConfig {
        strict: true,
        delay: Duration::from_millis(100),
    });
    let stream = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    assert!(!event.sync_event().is_null());
    let mut out = vec![0u8; data.len()];
    // SAFETY: `out` outlives the wait; the event is live.
    unsafe {
        device
            .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), out.len(), &stream)
            .unwrap();
        // Read before the record is queued: queueing takes the stream's lock,
        // which the worker takes again to start the copy (due 100 ms later),
        // so the read happens before the copy's write. Read after it, nothing
        // orders the two: a data race, which ThreadSanitizer reports.
        assert!(out.iter().all(|&b| b == POISON));
        device.record_event(&event, &stream).unwrap();
        device.synchronize_sync_event(event.sync_event()).unwrap();
    }
    assert_eq!(out, data);
}

#[test]
fn unrecorded_and_null_events_do_not_wait() {
    let device = device(0, true, 0);
    let stream = device.create_stream().unwrap();
    let event = device.create_event().unwrap();
    // SAFETY: NULL and a live, never-recorded emulated event.
    unsafe {
        device.synchronize_sync_event(std::ptr::null_mut()).unwrap();
        device
            .stream_wait_sync_event(&stream, std::ptr::null_mut())
            .unwrap();
        device.synchronize_sync_event(event.sync_event()).unwrap();
        device
            .stream_wait_sync_event(&stream, event.sync_event())
            .unwrap();
    }
    device.synchronize_stream(&stream).unwrap();
    // Recorded and reached: complete again.
    device.record_event(&event, &stream).unwrap();
    device.synchronize_stream(&stream).unwrap();
    // SAFETY: a live emulated event.
    unsafe { device.synchronize_sync_event(event.sync_event()).unwrap() };
}

#[test]
fn foreign_and_stale_sync_events_are_errors() {
    let device = device(0, true, 0);
    let stream = device.create_stream().unwrap();
    let mut not_an_event = 0u64;
    let foreign = &mut not_an_event as *mut u64 as *mut c_void;
    // SAFETY: the pointer is never dereferenced: it is not in the registry.
    let err = unsafe { device.synchronize_sync_event(foreign) }.unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "sync_event {foreign:p} is not a live emulated event"
        )),
        "{err}"
    );
    // SAFETY: as above.
    assert!(unsafe { device.stream_wait_sync_event(&stream, foreign) }.is_err());
    let event = device.create_event().unwrap();
    let stale = event.sync_event();
    drop(event);
    // SAFETY: as above; the event is gone from the registry.
    assert!(unsafe { device.synchronize_sync_event(stale) }.is_err());
    // Events and streams of other devices are not ours to drive.
    let cpu_stream = CpuDevice.create_stream().unwrap();
    let event = device.create_event().unwrap();
    assert!(device.record_event(&event, &cpu_stream).is_err());
    assert!(device
        .record_event(&CpuDevice.create_event().unwrap(), &stream)
        .is_err());
    assert!(device.synchronize_stream(&cpu_stream).is_err());
}

#[test]
fn foreign_and_out_of_range_device_pointers_are_errors() {
    let (d0, d1) = (device(0, true, 0), device(1, true, 0));
    let buf = d0.allocate(100).unwrap();
    let other = d1.allocate(100).unwrap();
    let stream = d0.create_stream().unwrap();
    let mut host = vec![0u8; 200];
    let copy_out = |src: *const u8, len: usize, host: &mut [u8]| {
        // SAFETY: `host` is large enough; bad device pointers are rejected
        // before anything is queued, and good ones are synchronized below.
        unsafe { d0.copy_to_host(src, host.as_mut_ptr(), len, &stream) }
    };
    // SAFETY: inside `buf`.
    let mid = unsafe { buf.as_ptr().add(50) };
    copy_out(mid, 50, &mut host).unwrap();
    let err = copy_out(mid, 51, &mut host).unwrap_err().to_string();
    assert!(
        err.contains(&format!("device pointer {:#x} (length 51)", mid as usize)),
        "{err}"
    );
    assert!(
        err.contains("runs 1 bytes past the end of its allocation (100 bytes"),
        "{err}"
    );
    // SAFETY: one past the end of `buf`.
    let end = unsafe { buf.as_ptr().add(100) };
    let err = copy_out(end, 1, &mut host).unwrap_err().to_string();
    assert!(
        err.contains("is not inside a live allocation of emulated device 0"),
        "{err}"
    );
    let host_ptr = host.as_ptr();
    let err = copy_out(host_ptr, 8, &mut [0u8; 8])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "{:#x} (length 8) is not inside a live allocation",
            host_ptr as usize
        )),
        "{err}"
    );
    let err = copy_out(other.as_ptr(), 8, &mut host)
        .unwrap_err()
        .to_string();
    assert!(err.contains("belongs to emulated device 1, not 0"), "{err}");
    let freed = d0.allocate(64).unwrap();
    let freed_ptr = freed.as_ptr();
    drop(freed);
    assert!(copy_out(freed_ptr, 8, &mut host).is_err());
    // Host sides are checked too: never NULL, never device memory.
    // SAFETY: rejected before anything is queued.
    let err = unsafe { d0.copy_from_host(buf.as_ptr(), buf.as_ptr(), 8, &stream) }
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("overlaps memory of emulated device 0"),
        "{err}"
    );
    // SAFETY: as above.
    let err = unsafe { d0.copy_to_host(buf.as_ptr(), std::ptr::null_mut(), 8, &stream) }
        .unwrap_err()
        .to_string();
    assert!(err.contains("host pointer 0x0 (length 8) is NULL"), "{err}");
    d0.synchronize_stream(&stream).unwrap();
}

#[test]
fn check_device_range_accepts_ranges_inside_an_allocation_and_names_what_is_wrong_otherwise() {
    let (d0, d1) = (device(0, true, 0), device(1, true, 0));
    let buf = d0.allocate(100).unwrap();
    let other = d1.allocate(100).unwrap();
    let base = buf.as_ptr() as usize;
    // SAFETY (all `add`s): inside `buf` or one past its end.
    let at = |offset: usize| unsafe { buf.as_ptr().add(offset) }.cast_const();
    d0.check_device_range(at(0), 100).unwrap();
    d0.check_device_range(at(99), 1).unwrap();
    d0.check_device_range(at(50), 50).unwrap();
    // A zero-length range is never checked, wherever it points.
    d0.check_device_range(std::ptr::null(), 0).unwrap();
    // A second instance of id 0 is the same device: it knows the memory.
    device(0, false, 0).check_device_range(at(0), 100).unwrap();

    let err = d0.check_device_range(at(50), 51).unwrap_err();
    assert!(matches!(err, Error::Device { device_id: 0, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "device EXT_DEV (id 0): check_device_range: device pointer {:#x} (length 51) runs \
             1 bytes past the end of its allocation (100 bytes at {base:#x}, range starts at \
             offset 50)",
            base + 50
        )
    );
    // The fuzzer's case: 8 GiB claimed over a small allocation, answered
    // from the registry without touching the range.
    let err = d0
        .check_device_range(at(0), 8 << 30)
        .unwrap_err()
        .to_string();
    assert!(err.contains("runs 8589934492 bytes past the end"), "{err}");
    let err = d0.check_device_range(at(100), 1).unwrap_err().to_string();
    assert!(
        err.contains("is not inside a live allocation of emulated device 0"),
        "{err}"
    );
    // What a zero-length allocation hands out is no allocation either.
    let empty = d0.allocate(0).unwrap();
    let err = d0
        .check_device_range(empty.as_ptr(), 4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "device pointer {:#x} (length 4) is not inside a live allocation",
            empty.as_ptr() as usize
        )),
        "{err}"
    );
    let host = [0u8; 8];
    let err = d0
        .check_device_range(host.as_ptr(), 8)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not inside a live allocation"), "{err}");
    let err = d0
        .check_device_range(other.as_ptr(), 8)
        .unwrap_err()
        .to_string();
    assert!(err.contains("belongs to emulated device 1, not 0"), "{err}");
    let freed = d0.allocate(64).unwrap();
    let freed_ptr = freed.as_ptr();
    drop(freed);
    assert!(d0.check_device_range(freed_ptr, 8).is_err());
    // Near the top of the address space, `ptr + len` would wrap: still an
    // error, not an overflow.
    let err = d0
        .check_device_range(at(1), usize::MAX)
        .unwrap_err()
        .to_string();
    assert!(err.contains("past the end of its allocation"), "{err}");
}

#[test]
fn zero_length_allocations_and_copies_are_no_ops() {
    let device = device(0, true, 0);
    let empty = device.allocate(0).unwrap();
    assert!(!empty.as_ptr().is_null());
    assert_eq!(empty.as_ptr() as usize % 64, 0);
    assert!(empty.is_empty());
    let stream = device.create_stream().unwrap();
    let dangling = std::ptr::NonNull::<u8>::dangling().as_ptr();
    // SAFETY: zero-length copies touch nothing.
    unsafe {
        device
            .copy_from_host(std::ptr::null(), empty.as_ptr(), 0, &stream)
            .unwrap();
        device
            .copy_to_host(dangling, std::ptr::null_mut(), 0, &stream)
            .unwrap();
        device
            .copy_device_to_device(&*device, empty.as_ptr(), dangling, 0, &stream)
            .unwrap();
    }
    device.synchronize_stream(&stream).unwrap();
}

#[test]
fn a_copy_that_fails_in_the_worker_is_reported_at_the_next_synchronize() {
    let device = device(0, true, 50);
    let buf = device.allocate(64).unwrap();
    let stream = device.create_stream().unwrap();
    let mut out = [0u8; 64];
    // SAFETY: `out` outlives the synchronize. The device buffer does not
    // (a caller bug, which is the point): the worker must notice, not crash.
    unsafe {
        device
            .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 64, &stream)
            .unwrap()
    };
    drop(buf);
    let err = device.synchronize_stream(&stream).unwrap_err().to_string();
    assert!(err.contains("the source allocation at"), "{err}");
    assert!(err.contains("was freed before the copy ran"), "{err}");
    assert_eq!(out, [POISON; 64]);
    // Reported once.
    device.synchronize_stream(&stream).unwrap();
}

#[test]
fn dropping_a_stream_runs_its_queued_work_first() {
    let device = device(0, true, 20);
    let data = pattern(256, 4);
    let buf = device.allocate(256).unwrap();
    let event = device.create_event().unwrap();
    let mut out = vec![0u8; 256];
    {
        let stream = device.create_stream().unwrap();
        // SAFETY: `out` and `data` outlive the stream, whose drop drains it.
        unsafe {
            device
                .copy_from_host(data.as_ptr(), buf.as_ptr(), 256, &stream)
                .unwrap();
            device
                .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 256, &stream)
                .unwrap();
        }
        device.record_event(&event, &stream).unwrap();
    }
    assert_eq!(out, data);
    // SAFETY: a live emulated event, reached by the drained stream.
    unsafe { device.synchronize_sync_event(event.sync_event()).unwrap() };
}

#[test]
fn dropping_an_event_that_a_stream_still_waits_on_is_safe() {
    let device = device(0, true, 60);
    let data = pattern(128, 8);
    let buf = device.allocate(128).unwrap();
    let (a, b) = (
        device.create_stream().unwrap(),
        device.create_stream().unwrap(),
    );
    let event = device.create_event().unwrap();
    let mut out = vec![0u8; 128];
    // SAFETY: host buffers outlive the synchronizes; the event is live here.
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), 128, &a)
            .unwrap();
        device.record_event(&event, &a).unwrap();
        device
            .stream_wait_sync_event(&b, event.sync_event())
            .unwrap();
    }
    drop(event);
    // SAFETY: as above.
    unsafe {
        device
            .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 128, &b)
            .unwrap()
    };
    device.synchronize_stream(&b).unwrap();
    assert_eq!(out, data);
}

#[test]
fn a_host_read_of_a_strict_device_pointer_dies_with_sigsegv() {
    let device = device(0, true, 0);
    let buf = device.allocate(64).unwrap();
    let ptr = buf.as_ptr() as *const u8;
    // SAFETY: the child makes only async-signal-safe calls (no allocation, no
    // locks) before it dies or _exits, as required after fork in a
    // multithreaded process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: see above. The volatile read of a PROT_NONE page is the
        // stray host dereference under test; it is meant to kill this child.
        unsafe {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGSEGV, &default, std::ptr::null_mut());
            let byte = std::ptr::read_volatile(ptr);
            // Survived: report it through an exit code the parent shows.
            libc::_exit(100 + i32::from(byte % 100));
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid {
            break;
        }
        let error = std::io::Error::last_os_error();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::Interrupted,
            "waitpid failed: {error}"
        );
    }
    assert!(
        libc::WIFSIGNALED(status),
        "the child read a strict device pointer and exited with {}",
        libc::WEXITSTATUS(status)
    );
    assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
    drop(buf);
}

/// Entries of /proc/self/`dir` whose `describe`d form satisfies `matches`.
fn count_proc(
    dir: &str,
    describe: impl Fn(&std::path::Path) -> Option<String>,
    matches: &str,
) -> usize {
    std::fs::read_dir(format!("/proc/self/{dir}"))
        .unwrap()
        .filter_map(|entry| describe(&entry.ok()?.path()))
        .filter(|text| text.trim_end() == matches)
        .count()
}

/// What this process holds for emulated device `id`: mapped views of its
/// memfds, open memfd descriptors, and stream worker threads.
fn resources(id: i64) -> (usize, usize, usize) {
    let memfd = format!("/memfd:arrow-device-emulated-{id} (deleted)");
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let views = maps
        .lines()
        .filter(|line| line.ends_with(&format!(" {memfd}")))
        .count();
    let fds = count_proc(
        "fd",
        |p| Some(std::fs::read_link(p).ok()?.to_string_lossy().into_owned()),
        &memfd,
    );
    let threads = count_proc(
        "task",
        |p| std::fs::read_to_string(p.join("comm")).ok(),
        &format!("arrow-emu-{id}"),
    );
    (views, fds, threads)
}

#[test]
fn many_allocations_streams_and_events_release_their_memory_and_threads() {
    // An id no other test uses: counts by name are immune to tests running
    // in parallel, which total fd and thread counts would not be.
    const ID: i64 = 977;
    let device = device(ID, true, 0);
    assert_eq!(resources(ID), (0, 0, 0));
    let mut held = Vec::new();
    for i in 0..500usize {
        let buf = device.allocate(1 + i * 37).unwrap();
        let stream = device.create_stream().unwrap();
        let event = device.create_event().unwrap();
        let byte = [i as u8];
        // SAFETY: `byte` outlives the synchronize.
        unsafe {
            device
                .copy_from_host(byte.as_ptr(), buf.as_ptr(), 1, &stream)
                .unwrap()
        };
        device.record_event(&event, &stream).unwrap();
        device.synchronize_stream(&stream).unwrap();
        held.push((buf, stream, event));
    }
    // Two views and one descriptor (kept for sharing, within the budget)
    // per allocation, and the streams share the device's few workers.
    let (views, fds, threads) = resources(ID);
    assert_eq!(views, 1000);
    assert!(
        fds <= 500 && fds as u64 <= super::memory::kept_files_budget(),
        "{fds} memory files kept for 500 allocations"
    );
    assert!(
        threads <= MAX_STREAM_WORKERS,
        "{threads} workers for 500 streams"
    );
    assert_eq!(download(&device, held[499].0.as_ptr(), 1), [499usize as u8]);
    drop(held);
    drop(device);
    // Workers of a device that is gone exit when idle; a joined thread can
    // linger in /proc for a moment while the kernel reaps it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while resources(ID).2 != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(resources(ID), (0, 0, 0));
}

/// Waits for `wait` on another thread, for at most `limit`: a deadlock fails
/// the test instead of hanging the suite. `wait` must own every stream (and
/// host buffer) of the test that could be stuck: on a timeout they are
/// leaked with its thread, rather than drained while the test unwinds,
/// which would hang again.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    wait: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(wait());
    });
    finished
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: not done after {limit:?} (deadlock?)"))
}

#[test]
fn thousands_of_live_streams_share_a_bounded_pool_of_workers() {
    const ID: i64 = 976;
    let device = device(ID, true, 0);
    let buf = device.allocate(4 * 3000).unwrap();
    let data: Vec<u8> = pattern(4 * 3000, 5);
    let streams: Vec<Stream> = (0..3000).map(|_| device.create_stream().unwrap()).collect();
    for (i, stream) in streams.iter().enumerate() {
        // SAFETY: `data` outlives the synchronizes below; the range lies
        // inside `buf`.
        unsafe {
            device
                .copy_from_host(data.as_ptr().add(4 * i), buf.as_ptr().add(4 * i), 4, stream)
                .unwrap()
        };
    }
    for stream in &streams {
        device.synchronize_stream(stream).unwrap();
    }
    let threads = resources(ID).2;
    assert!(
        threads <= MAX_STREAM_WORKERS,
        "{threads} workers for {} live streams",
        streams.len()
    );
    assert_eq!(download(&device, buf.as_ptr(), data.len()), data);
    assert!(pool::live_workers(device.pool.workers()) <= MAX_STREAM_WORKERS);
}

#[test]
fn operations_of_one_stream_run_in_order_across_turns() {
    // More operations than one turn of a worker: the order must survive the
    // stream being handed back to the pool between turns.
    let device = device(0, true, 0);
    let buf = device.allocate(8).unwrap();
    let stream = device.create_stream().unwrap();
    let values: Vec<[u8; 8]> = (0..1000u64).map(|i| i.to_le_bytes()).collect();
    let mut seen = vec![[0u8; 8]; values.len()];
    for (value, out) in values.iter().zip(seen.iter_mut()) {
        // SAFETY: `values` and `seen` outlive the synchronize below.
        unsafe {
            device
                .copy_from_host(value.as_ptr(), buf.as_ptr(), 8, &stream)
                .unwrap();
            device
                .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 8, &stream)
                .unwrap();
        }
    }
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(seen, values);
}

#[test]
fn streams_waiting_on_events_recorded_behind_them_do_not_deadlock_the_pool() {
    // Many more waiting streams than workers, each waiting (through a chain
    // of events) for a record that sits behind a delayed copy on another
    // stream. A pool whose workers blocked in waits would fill up with
    // waiters and never reach the records.
    const PAIRS: usize = 8 * MAX_STREAM_WORKERS;
    let device = device(0, true, 0);
    let data = pattern(64, 3);
    let buf = device.allocate(64).unwrap();
    let (gate_stream, gate) =
        event_behind_a_slow_upload(&device, &buf, &data, Duration::from_millis(200));
    let mut outs = vec![vec![0u8; 64]; PAIRS];
    let mut kept = Vec::new();
    for out in outs.iter_mut() {
        let (recorder, waiter) = (
            device.create_stream().unwrap(),
            device.create_stream().unwrap(),
        );
        let event = device.create_event().unwrap();
        // SAFETY: live events; `out` outlives the synchronizes below.
        unsafe {
            device
                .stream_wait_sync_event(&recorder, gate.sync_event())
                .unwrap();
            device.record_event(&event, &recorder).unwrap();
            device
                .stream_wait_sync_event(&waiter, event.sync_event())
                .unwrap();
            device
                .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 64, &waiter)
                .unwrap();
        }
        kept.push((recorder, waiter, event));
    }
    let device_ = Arc::clone(&device);
    let outs = within(Duration::from_secs(60), "waiting streams", move || {
        for (_, waiter, _) in &kept {
            device_.synchronize_stream(waiter).unwrap();
        }
        device_.synchronize_stream(&gate_stream).unwrap();
        drop((kept, gate_stream, data));
        outs
    });
    for out in &outs {
        assert_eq!(out, &pattern(64, 3));
    }
}

/// Keeps a host wait for `device`'s event `sync_event` until dropped.
struct WaitOnDrop {
    device: Arc<EmulatedDevice>,
    sync_event: usize,
    waited: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for WaitOnDrop {
    fn drop(&mut self) {
        // SAFETY: the test keeps the event alive until every release has run
        // (a stale pointer would be an error, not undefined behaviour: it is
        // looked up, never dereferenced).
        unsafe {
            self.device
                .synchronize_sync_event(self.sync_event as *mut c_void)
                .unwrap()
        };
        self.waited.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn releases_that_wait_on_the_host_do_not_starve_the_work_they_wait_for() {
    // Every worker is taken by a release whose drop waits on the host for
    // an event; the record of that event is queued (behind a delayed copy)
    // on another stream. The pool starts stand-ins for blocked workers.
    const ID: i64 = 975;
    const RELEASES: usize = 3 * MAX_STREAM_WORKERS;
    let device = device(ID, true, 0);
    let data = pattern(64, 9);
    let buf = device.allocate(64).unwrap();
    let (recorder, event) =
        event_behind_a_slow_upload(&device, &buf, &data, Duration::from_millis(300));
    let waited = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let streams: Vec<Stream> = (0..RELEASES)
        .map(|_| {
            let stream = device.create_stream().unwrap();
            let owner = WaitOnDrop {
                device: Arc::clone(&device),
                sync_event: event.sync_event() as usize,
                waited: Arc::clone(&waited),
            };
            assert!(device
                .release_after(&stream, Box::new(owner))
                .unwrap()
                .is_none());
            stream
        })
        .collect();
    let device_ = Arc::clone(&device);
    within(Duration::from_secs(60), "blocked releases", move || {
        for stream in &streams {
            device_.synchronize_stream(stream).unwrap();
        }
        device_.synchronize_stream(&recorder).unwrap();
        drop((streams, recorder, event, data));
    });
    assert_eq!(waited.load(Ordering::SeqCst), RELEASES);
    assert_eq!(download(&device, buf.as_ptr(), 64), pattern(64, 9));
    // The stand-ins leave once they are beyond the bound and free.
    let deadline = Instant::now() + Duration::from_secs(10);
    while resources(ID).2 > MAX_STREAM_WORKERS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(resources(ID).2 <= MAX_STREAM_WORKERS, "{:?}", resources(ID));
}

#[test]
fn dropping_a_stream_inside_a_release_waits_for_its_work() {
    // A release may drop an array's owner, and with it a stream: the drop
    // runs on a worker and must let the dropped stream's work finish.
    let device = device(0, true, 20);
    let data = pattern(256, 6);
    let buf = device.allocate(256).unwrap();
    let inner = device.create_stream().unwrap();
    let mut out = vec![0u8; 256];
    // SAFETY: `data` and `out` outlive the synchronize below, which comes
    // after the inner stream is dropped (and so drained).
    unsafe {
        device
            .copy_from_host(data.as_ptr(), buf.as_ptr(), 256, &inner)
            .unwrap();
        device
            .copy_to_host(buf.as_ptr(), out.as_mut_ptr(), 256, &inner)
            .unwrap();
    }
    let outer = device.create_stream().unwrap();
    device.release_after(&outer, Box::new(inner)).unwrap();
    device.synchronize_stream(&outer).unwrap();
    assert_eq!(out, data);
}
