//! The reuse rules of [`HostStaging`], proven on the emulated device in
//! strict mode (device memory is `PROT_NONE` on the host), some tests
//! delayed (a copy's destination holds poison until the copy has run).

use std::any::Any;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::builder::{ListBuilder, StringDictionaryBuilder};
use arrow_array::types::Int8Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch,
    StringArray,
};
use arrow_buffer::MutableBuffer;

use super::*;
use crate::device::emulated::{EmulatedConfig, EmulatedDevice};
use crate::device::{DeviceRef, Event, Stream};
use crate::DeviceArray;

/// A private emulated device, strict, with `delay` per copy.
fn emulated(id: i64, delay: Duration) -> DeviceRef {
    EmulatedDevice::new(
        id,
        EmulatedConfig {
            strict: true,
            delay,
        },
    )
}

fn on_device(batch: &RecordBatch, device: &DeviceRef) -> DeviceArray {
    DeviceArray::from_record_batch(batch)
        .to_device(device)
        .unwrap()
}

/// `rows` rows of ints and short strings, with nulls; `seed` changes every value.
fn numbered(rows: usize, seed: i32) -> RecordBatch {
    let ints: Int32Array = (0..rows as i32)
        .map(|i| (i % 5 != 1).then_some(i * 7 + seed))
        .collect();
    let strings: StringArray = (0..rows as i32)
        .map(|i| (i % 3 != 2).then(|| format!("{seed}-{i}")))
        .collect();
    RecordBatch::try_from_iter([
        ("int", Arc::new(ints) as ArrayRef),
        ("string", Arc::new(strings) as ArrayRef),
    ])
    .unwrap()
}

/// The capacities of the kept buffers, smallest first.
fn capacities(staging: &HostStaging) -> Vec<usize> {
    let mut capacities: Vec<usize> = staging.lock().buffers.iter().map(|b| b.capacity).collect();
    capacities.sort_unstable();
    capacities
}

/// The bytes of `batch` in the IPC stream format: every byte a writer reads
/// of its buffers, values under nulls included.
fn ipc_bytes(batch: &RecordBatch) -> Vec<u8> {
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap();
    writer.write(batch).unwrap();
    writer.into_inner().unwrap()
}

#[test]
fn equal_batches_reuse_one_buffer_once_each_result_is_dropped() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(2);
    for seed in 0..10 {
        let batch = numbered(100, seed);
        let copied = on_device(&batch, &device)
            .to_record_batch_staged(&staging)
            .unwrap();
        assert_eq!(copied, batch, "batch {seed}");
    }
    assert_eq!(staging.allocations(), 1);
    assert_eq!(staging.reuses(), 9);
    assert_eq!((staging.retained(), staging.pinned()), (1, 0));
}

#[test]
fn a_live_result_column_or_slice_keeps_its_buffer_from_being_lent() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(4);
    let (a, b) = (numbered(64, 1), numbered(64, 2));
    let (on_a, on_b) = (on_device(&a, &device), on_device(&b, &device));

    let whole = on_a.to_record_batch_staged(&staging).unwrap();
    let column = on_a
        .to_record_batch_staged(&staging)
        .unwrap()
        .column(1)
        .clone();
    let slice = on_a
        .to_record_batch_staged(&staging)
        .unwrap()
        .column(0)
        .slice(3, 10);
    // Each of the three holds its copy's buffer: a fourth copy allocates,
    // and writing it leaves the three alone.
    let other = on_b.to_record_batch_staged(&staging).unwrap();
    assert_eq!((staging.allocations(), staging.reuses()), (4, 0));
    assert_eq!(other, b);
    assert_eq!(whole, a);
    assert_eq!(column.as_ref(), a.column(1).as_ref());
    assert_eq!(slice.as_ref(), &a.column(0).slice(3, 10));

    // Once one goes, its buffer is lent again, and only its.
    drop(column);
    let again = on_b.to_record_batch_staged(&staging).unwrap();
    assert_eq!((staging.allocations(), staging.reuses()), (4, 1));
    assert_eq!(again, b);
    let another = on_b.to_record_batch_staged(&staging).unwrap();
    assert_eq!((staging.allocations(), staging.reuses()), (5, 1));
    assert_eq!(staging.retained(), 4, "the pool keeps at most its slots");
    assert_eq!(another, b);
    assert_eq!(slice.as_ref(), &a.column(0).slice(3, 10));
    assert_eq!(whole, a);
}

#[test]
fn a_full_pool_of_lent_buffers_allocates_without_keeping() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(1);
    let (a, b) = (numbered(50, 1), numbered(50, 2));
    let held = on_device(&a, &device)
        .to_record_batch_staged(&staging)
        .unwrap();
    for _ in 0..3 {
        let copied = on_device(&b, &device)
            .to_record_batch_staged(&staging)
            .unwrap();
        assert_eq!(copied, b);
    }
    assert_eq!((staging.allocations(), staging.reuses()), (4, 0));
    assert_eq!(staging.retained(), 1);
    assert_eq!(held, a);
    drop(held);
    let copied = on_device(&b, &device)
        .to_record_batch_staged(&staging)
        .unwrap();
    assert_eq!(copied, b);
    assert_eq!((staging.allocations(), staging.reuses()), (4, 1));
}

#[test]
fn a_larger_batch_replaces_a_smaller_free_buffer_and_then_serves_smaller_ones() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(1);
    let copy = |batch: &RecordBatch| {
        let copied = on_device(batch, &device)
            .to_record_batch_staged(&staging)
            .unwrap();
        assert_eq!(&copied, batch);
    };
    let (small, large) = (numbered(10, 1), numbered(5000, 2));
    copy(&small);
    copy(&small);
    let small_capacity = capacities(&staging)[0];
    assert_eq!((staging.allocations(), staging.reuses()), (1, 1));

    copy(&large);
    assert_eq!((staging.allocations(), staging.reuses()), (2, 1));
    let large_capacity = capacities(&staging)[0];
    assert_eq!(staging.retained(), 1);
    assert!(
        large_capacity > 10 * small_capacity,
        "{large_capacity} bytes kept for 5000 rows, {small_capacity} for 10"
    );

    copy(&small);
    copy(&large);
    assert_eq!((staging.allocations(), staging.reuses()), (2, 3));
    assert_eq!(capacities(&staging), [large_capacity]);
}

#[test]
fn zero_slots_keep_nothing_and_every_copy_allocates() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(0);
    let batch = numbered(30, 3);
    for _ in 0..5 {
        let copied = on_device(&batch, &device)
            .to_record_batch_staged(&staging)
            .unwrap();
        assert_eq!(copied, batch);
    }
    assert_eq!((staging.allocations(), staging.reuses()), (5, 0));
    assert_eq!(staging.retained(), 0);
}

#[test]
fn delayed_copies_into_reused_memory_never_show_the_previous_batch() {
    let device = emulated(0, Duration::from_millis(5));
    let staging = HostStaging::new(1);
    let rows = 1000;
    // A: every byte 0xAA where a byte can be chosen.
    let a = RecordBatch::try_from_iter([
        (
            "int",
            Arc::new(Int32Array::from(vec![0xAAAA_AAAAu32 as i32; rows])) as ArrayRef,
        ),
        (
            "bytes",
            Arc::new(BinaryArray::from_iter_values(std::iter::repeat_n(
                [0xAAu8; 16],
                rows,
            ))) as ArrayRef,
        ),
        (
            "bool",
            Arc::new(BooleanArray::from(vec![true; rows])) as ArrayRef,
        ),
    ])
    .unwrap();
    // B: the same sizes, other values, and nulls whose slots hold zeros.
    let valid = |i: usize| i % 7 != 3;
    let b = RecordBatch::try_from_iter([
        (
            "int",
            Arc::new(Int32Array::from_iter(
                (0..rows).map(|i| valid(i).then_some(i as i32)),
            )) as ArrayRef,
        ),
        (
            "bytes",
            Arc::new(BinaryArray::from_iter(
                (0..rows).map(|i| valid(i).then_some([(i % 251) as u8; 16])),
            )) as ArrayRef,
        ),
        (
            "bool",
            Arc::new(BooleanArray::from_iter(
                (0..rows).map(|i| valid(i).then_some(i % 2 == 0)),
            )) as ArrayRef,
        ),
    ])
    .unwrap();
    let on_a = on_device(&a, &device);
    let on_b = on_device(&b, &device);

    let first = on_a.to_record_batch_staged(&staging).unwrap();
    assert_eq!(first, a);
    drop(first);
    let second = on_b.to_record_batch_staged(&staging).unwrap();
    assert_eq!((staging.allocations(), staging.reuses()), (1, 1));
    assert_eq!(second, b);
    // Under the nulls too: the raw values are B's zeros, not A's 0xAA.
    let ints = |batch: &RecordBatch| {
        let column = batch.column(0).as_any().downcast_ref::<Int32Array>();
        column.unwrap().values().to_vec()
    };
    assert_eq!(ints(&second), ints(&b));
    assert_eq!(
        ipc_bytes(&second),
        ipc_bytes(&on_b.to_record_batch().unwrap())
    );
}

#[test]
fn strings_lists_dictionaries_and_slices_match_to_record_batch() {
    let device = emulated(0, Duration::from_millis(1));
    let staging = HostStaging::new(2);
    let rows = 3000;
    // 1.5 MiB of string data, above the size whose slices are narrowed.
    let strings: StringArray = (0..rows)
        .map(|i| (i % 11 != 4).then(|| format!("{i:0>500}")))
        .collect();
    let mut lists = ListBuilder::new(Int32Array::builder(0));
    for i in 0..rows as i32 {
        if i % 9 == 5 {
            lists.append_null();
        } else {
            lists.append_value((0..i % 4).map(|j| Some(i + j)));
        }
    }
    let mut dictionary = StringDictionaryBuilder::<Int8Type>::new();
    for i in 0..rows {
        dictionary.append_option((i % 6 != 0).then(|| ["x", "yy", "zzz"][i % 3]));
    }
    let batch = RecordBatch::try_from_iter([
        ("string", Arc::new(strings) as ArrayRef),
        ("list", Arc::new(lists.finish()) as ArrayRef),
        ("dictionary", Arc::new(dictionary.finish()) as ArrayRef),
        (
            "int64",
            Arc::new(Int64Array::from_iter((0..rows as i64).map(Some))) as ArrayRef,
        ),
    ])
    .unwrap();

    let whole = on_device(&batch, &device);
    let cases = [
        ("whole", whole.clone(), batch.clone()),
        // Slices whose offsets cut through bitmap bytes, one of a tail.
        (
            "slice 3..",
            whole.slice(3, rows - 3).unwrap(),
            batch.slice(3, rows - 3),
        ),
        (
            "slice 1001..1100",
            whole.slice(1001, 99).unwrap(),
            batch.slice(1001, 99),
        ),
        // Columns sliced before the copy to the device: the device batch
        // has children with offsets.
        (
            "sliced columns",
            on_device(&batch.slice(5, 17), &device),
            batch.slice(5, 17),
        ),
    ];
    for (name, array, expected) in cases {
        let staged = array.to_record_batch_staged(&staging).unwrap();
        let fresh = array.to_record_batch().unwrap();
        assert_eq!(staged, fresh, "{name}");
        assert_eq!(staged, expected, "{name}");
        assert_eq!(ipc_bytes(&staged), ipc_bytes(&fresh), "{name}");
        // A child as the producer laid it out (the parent's offset not
        // applied), on its own.
        let child = &array.children()[1];
        let staged = child.to_host_staged(&staging).unwrap();
        let fresh = child.to_host().unwrap();
        let list = staged.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(list, fresh.as_any().downcast_ref().unwrap(), "{name}");
    }
    assert!(staging.reuses() >= 6, "{staging:?}");
    assert_eq!(staging.retained(), 2);
}

#[test]
fn cpu_arrays_are_wrapped_without_a_copy() {
    let staging = HostStaging::new(2);
    let batch = numbered(20, 4);
    let array = DeviceArray::from_record_batch(&batch);
    assert_eq!(array.to_record_batch_staged(&staging).unwrap(), batch);
    let column = array.children()[0].to_host_staged(&staging).unwrap();
    assert_eq!(
        column.to_data().buffers()[0].as_ptr(),
        batch.column(0).to_data().buffers()[0].as_ptr()
    );
    assert_eq!((staging.allocations(), staging.retained()), (0, 0));
}

#[test]
fn a_non_struct_array_is_refused_as_by_to_record_batch() {
    let staging = HostStaging::new(1);
    let array = DeviceArray::from_array(&Int32Array::from(vec![1, 2]));
    let staged = array.to_record_batch_staged(&staging).unwrap_err();
    let fresh = array.to_record_batch().unwrap_err();
    assert_eq!(staged.to_string(), fresh.to_string());
    assert!(staged
        .to_string()
        .contains("a record batch needs a struct array, found Int32"));
}

#[test]
fn threads_sharing_one_staging_each_get_their_own_batches() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(2);
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (device, staging) = (&device, &staging);
            scope.spawn(move || {
                for round in 0..20 {
                    let batch = numbered(200, thread * 1000 + round);
                    let copied = on_device(&batch, device)
                        .to_record_batch_staged(staging)
                        .unwrap();
                    assert_eq!(copied, batch, "thread {thread} round {round}");
                }
            });
        }
    });
    assert_eq!(staging.allocations() + staging.reuses(), 80);
    assert!(staging.retained() <= 2);
}

#[test]
fn a_leaked_buffer_leaves_the_pool_and_is_not_lent_again() {
    let device = emulated(0, Duration::ZERO);
    let staging = HostStaging::new(2);
    let target = HostTarget::acquire(1000, device.as_ref(), Some(&staging)).unwrap();
    let HostTarget::Lent { buffer, .. } = &target else {
        panic!("a staging with room lends");
    };
    let leaked = Arc::downgrade(buffer);
    assert_eq!(staging.retained(), 1);
    target.leak();
    assert_eq!(staging.retained(), 0);
    assert!(
        leaked.upgrade().is_some(),
        "the leaked memory is never freed"
    );
    let next = HostTarget::acquire(1000, device.as_ref(), Some(&staging)).unwrap();
    let HostTarget::Lent { buffer, .. } = &next else {
        panic!("a staging with room lends");
    };
    assert!(!Arc::ptr_eq(buffer, &leaked.upgrade().unwrap()));
    assert_eq!((staging.allocations(), staging.reuses()), (2, 0));
    // Give back what the test leaked on purpose, so that LeakSanitizer
    // (scripts/sanitizers.sh) reports only real leaks.
    let reclaimed = leaked.upgrade().unwrap();
    // SAFETY: `leak` forgot exactly one strong reference to this buffer,
    // and nothing writes to it anymore.
    unsafe { Arc::decrement_strong_count(Arc::as_ptr(&reclaimed)) };
    drop(reclaimed);
    assert!(leaked.upgrade().is_none(), "given back");
}

#[test]
fn capacities_round_up_by_at_most_an_eighth() {
    assert_eq!(capacity_for(1), 64);
    assert_eq!(capacity_for(1000), 1024);
    assert_eq!(capacity_for(1024), 1024);
    assert_eq!(capacity_for(1025), 1152);
    assert_eq!(capacity_for(3 << 20), 3 << 20);
    assert_eq!(capacity_for((3 << 20) + 1), (3 << 20) + (256 << 10));
    // Below 512 bytes the 64-byte alignment is the larger step.
    assert_eq!(capacity_for(100), 128);
    for len in [513, 4097, 65_537, 1_000_001, (1 << 30) + 1] {
        let capacity = capacity_for(len);
        assert!(
            capacity >= len && capacity - len <= len / 8,
            "{len} -> {capacity}"
        );
        assert_eq!(capacity % ALIGN, 0);
    }
    assert_eq!(capacity_for(usize::MAX), usize::MAX);
}

/// An emulated device that offers host memory of its own
/// (`allocate_host_accessible`), as a CUDA device offers pinned memory;
/// everything else goes to the emulated device.
#[derive(Debug)]
struct Pinning {
    inner: DeviceRef,
    offered: AtomicUsize,
}

fn pinning(id: i64) -> DeviceRef {
    Arc::new(Pinning {
        inner: emulated(id, Duration::ZERO),
        offered: AtomicUsize::new(0),
    })
}

// SAFETY: every promise is the emulated device's, and the offered host
// memory is a live, 64-byte aligned arrow-rs allocation of `len` bytes that
// the returned buffer owns.
unsafe impl Device for Pinning {
    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }
    fn device_id(&self) -> i64 {
        self.inner.device_id()
    }
    fn check_device_range(&self, ptr: *const u8, len: usize) -> Result<()> {
        self.inner.check_device_range(ptr, len)
    }
    fn allocate_host_accessible(&self, len: usize) -> Option<DeviceBuffer> {
        self.offered.fetch_add(1, Ordering::SeqCst);
        let mut memory = MutableBuffer::from_len_zeroed(len);
        let ptr = memory.as_mut_ptr();
        // SAFETY: `memory` owns `len` bytes at `ptr` and frees them on drop.
        Some(unsafe { DeviceBuffer::new(ptr, len, Box::new(memory)) })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn allocate(&self, len: usize) -> Result<DeviceBuffer> {
        self.inner.allocate(len)
    }
    fn create_stream(&self) -> Result<Stream> {
        self.inner.create_stream()
    }
    fn create_event(&self) -> Result<Event> {
        self.inner.create_event()
    }
    fn record_event(&self, event: &Event, stream: &Stream) -> Result<()> {
        self.inner.record_event(event, stream)
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.inner.synchronize_stream(stream)
    }
    fn release_after(
        &self,
        stream: &Stream,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Option<Box<dyn Any + Send + Sync>>> {
        self.inner.release_after(stream, owner)
    }
    unsafe fn stream_wait_sync_event(&self, stream: &Stream, event: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.stream_wait_sync_event(stream, event) }
    }
    unsafe fn synchronize_sync_event(&self, event: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.synchronize_sync_event(event) }
    }
    unsafe fn copy_from_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.copy_from_host(src, dst, len, stream) }
    }
    unsafe fn copy_to_host(
        &self,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.copy_to_host(src, dst, len, stream) }
    }
    unsafe fn copy_device_to_device(
        &self,
        src_device: &dyn Device,
        src: *const u8,
        dst: *mut u8,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            self.inner
                .copy_device_to_device(src_device, src, dst, len, stream)
        }
    }
}

fn offered(device: &DeviceRef) -> usize {
    let pinning = device.as_any().downcast_ref::<Pinning>().unwrap();
    pinning.offered.load(Ordering::SeqCst)
}

#[test]
fn a_devices_host_memory_is_kept_and_serves_only_that_device() {
    let (zero, one) = (pinning(0), pinning(1));
    let staging = HostStaging::new(2);
    let batch = numbered(100, 5);
    for _ in 0..3 {
        let copied = on_device(&batch, &zero)
            .to_record_batch_staged(&staging)
            .unwrap();
        assert_eq!(copied, batch);
    }
    assert_eq!((staging.allocations(), staging.reuses()), (1, 2));
    assert_eq!(
        (staging.retained(), staging.pinned(), offered(&zero)),
        (1, 1, 1)
    );

    // Device 1 cannot use device 0's memory, free as it is.
    let copied = on_device(&batch, &one)
        .to_record_batch_staged(&staging)
        .unwrap();
    assert_eq!(copied, batch);
    assert_eq!((staging.allocations(), staging.reuses()), (2, 2));
    assert_eq!(
        (staging.retained(), staging.pinned(), offered(&one)),
        (2, 2, 1)
    );
}

#[test]
fn ordinary_host_memory_serves_every_device_and_is_never_pinned_unkept() {
    let staging = HostStaging::new(1);
    let batch = numbered(100, 6);
    let plain = emulated(0, Duration::ZERO);
    let copied = on_device(&batch, &plain)
        .to_record_batch_staged(&staging)
        .unwrap();
    drop(copied);
    // Ordinary memory, kept from the plain device, serves the pinning one.
    let zero = pinning(0);
    let on_zero = on_device(&batch, &zero);
    let held = on_zero.to_record_batch_staged(&staging).unwrap();
    assert_eq!((staging.allocations(), staging.reuses()), (1, 1));
    // The pool is full of lent memory: the next copy's memory will not be
    // kept, so it is not pinned either (pinning costs more than the copy).
    let unkept = on_zero.to_record_batch_staged(&staging).unwrap();
    assert_eq!((held, unkept), (batch.clone(), batch));
    assert_eq!(
        (staging.allocations(), staging.pinned(), offered(&zero)),
        (2, 0, 0)
    );
}
