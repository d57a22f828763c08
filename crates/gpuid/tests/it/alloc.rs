//! Memory use of the parser, measured with a counting allocator: bytes
//! allocated by the parsing thread stay proportional to what is kept,
//! never to the size of what is skipped.

// A `GlobalAlloc` is an unsafe trait: this module is the one place in the
// workspace allowed unsafe code (gpuid's Cargo.toml denies it elsewhere).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gpuid::smi;

struct CountingAllocator;

thread_local! {
    // Const-initialised cells without destructors: safe to touch from the
    // allocator at any point of a thread's life, and they never allocate.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// wrapper only updates thread-local counters.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            track(layout.size() as isize);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(pointer, layout) };
        track(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Peak bytes allocated (above the starting level) by this thread while
/// running `work`.
fn peak_allocation(work: impl FnOnce()) -> usize {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    work();
    let peak = PEAK.with(Cell::get);
    usize::try_from(peak - start).unwrap_or(0)
}

fn document(body: &str) -> Vec<u8> {
    format!("<nvidia_smi_log><driver_version>1</driver_version>{body}</nvidia_smi_log>")
        .into_bytes()
}

#[test]
fn skipping_megabytes_of_unknown_content_allocates_almost_nothing() {
    let filler = "y".repeat(4 * 1024 * 1024 - 200);
    let xml = document(&format!(
        "<gpu><uuid>GPU-1</uuid><unknown>{filler}</unknown></gpu>"
    ));
    assert!(xml.len() <= smi::Limits::DEFAULT.max_input_bytes);
    let peak = peak_allocation(|| {
        let report = smi::parse(&xml).unwrap();
        assert_eq!(report.gpus.len(), 1);
    });
    assert!(
        peak < 64 * 1024,
        "parsing allocated {peak} bytes for a 4 MiB document it mostly skips"
    );
}

#[test]
fn memory_for_kept_fields_is_bounded_by_the_input_size() {
    // 1,024 GPUs with 3 KiB serials: about 3 MiB of kept text.
    let gpu = format!(
        "<gpu><serial>{}</serial><uuid>GPU-x</uuid></gpu>",
        "5".repeat(3 * 1024)
    );
    let xml = document(&gpu.repeat(1024));
    let peak = peak_allocation(|| {
        let report = smi::parse(&xml).unwrap();
        assert_eq!(report.gpus.len(), 1024);
    });
    assert!(
        peak < 2 * xml.len(),
        "parsing a {}-byte document allocated {peak} bytes",
        xml.len()
    );
}
