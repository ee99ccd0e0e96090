//! hwt(8)'s record reader and ring accounting over arbitrary bytes: the
//! input is a ring size and a stream of record entries, the BUFFER ones
//! moving the unit; no entry panics, and every take gives at most a ring
//! of bytes, the rest counted as lost.
#![no_main]

use hwt_ring::{ENTRY, Record, Ring, parse_record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((size, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let size = u64::from(u32::from_ne_bytes(*size) % (1 << 20)) + 1;
    let ring: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut r = Ring::new(size);
    let mut written = 0u64;
    let mut at = 0u64;
    for e in rest.chunks(ENTRY) {
        let parsed = parse_record(e);
        assert_eq!(parsed.is_some(), e.len() == ENTRY);
        if let Some(Record::Buffer { position, .. }) = parsed {
            let p = position % size;
            written += (p + size - at) % size;
            at = p;
            r.saw(position);
        }
        if e.first().is_some_and(|b| b & 1 == 1) {
            if let Some(t) = r.take(&ring) {
                assert!(t.bytes.len() as u64 <= size);
                assert_eq!(t.lost + t.bytes.len() as u64, written);
                written = 0;
            } else {
                assert_eq!(written, 0);
            }
        }
    }
});
