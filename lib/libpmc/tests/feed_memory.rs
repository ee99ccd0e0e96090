//! pmclog_feed keeps a pointer to the caller's buffer, as FreeBSD's does:
//! reading a large fed log allocates about one record, not the log. The
//! heap is measured by a counting allocator; this file holds one test so
//! that no other test allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use core::ffi::c_int;
use pmc::pmclog::{
    PMCLOG_FD_NONE, PmclogEv, PmclogState, pmclog_close, pmclog_feed, pmclog_open, pmclog_read,
};

mod common;
use common::{encode, every_record};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; the counters
// only observe the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on to System.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's contract is passed on to System.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn feeding_a_large_buffer_does_not_copy_it() {
    // A 16 MiB log: every record type over and over, then CLOSELOG.
    let records = every_record();
    let (body, close) = records.split_at(records.len() - 1);
    let once = encode(body);
    let copies = (16 << 20) / once.len() + 1;
    let mut log = once.repeat(copies);
    log.extend_from_slice(&encode(close));
    let mut ev = PmclogEv::zeroed();

    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let cookie = pmclog_open(PMCLOG_FD_NONE);
    let mut n = 0usize;
    // SAFETY: `cookie` is live until pmclog_close, `ev` is writable, and
    // `log` outlives the parser.
    unsafe {
        assert_eq!(
            pmclog_feed(cookie, log.as_mut_ptr().cast(), log.len() as c_int),
            0
        );
        while pmclog_read(cookie, &mut *ev) == 0 {
            n += 1;
        }
        pmclog_close(cookie);
    }
    let grew = PEAK.load(Ordering::SeqCst) - base;

    assert_eq!(ev.pl_state, PmclogState::Eof as u32);
    assert_eq!(n, copies * body.len());
    // The parser, a PMU table looked up for the INITIALIZE record's CPU
    // and event names: far below the 16 MiB the log takes.
    assert!(
        grew < 1 << 20,
        "reading a fed 16 MiB log allocated {grew} bytes"
    );
}
