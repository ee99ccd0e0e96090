//! pmclog_read over arbitrary bytes fed in arbitrary pieces: it never
//! panics or reads past what it was fed, and it sees exactly the records
//! a whole-buffer decode sees, however the bytes are split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogEv, PmclogState};
use uapi::pmclog::{PmclogType, records};

fuzz_target!(|input: &[u8]| {
    let Some((&split, log)) = input.split_first() else { return };
    let chunk = usize::from(split % 64) + 1;

    // What a decode of the whole buffer makes of it.
    let mut expected = Vec::new();
    let mut expect_error = false;
    for r in records(log) {
        match r {
            Ok(rec) if rec.kind() == PmclogType::Closelog => break,
            Ok(rec) => expected.push((rec.kind().raw(), rec.tsc)),
            Err(uapi::pmclog::PmclogDecodeError::Truncated { .. }) => break,
            Err(_) => {
                expect_error = true;
                break;
            }
        }
    }

    let mut parser = Parser::new(PMCLOG_FD_NONE);
    let mut ev = PmclogEv::zeroed();
    let mut rest = log;
    let mut fed = 0usize;
    let mut seen = Vec::new();
    let end = loop {
        match parser.read(&mut ev) {
            PmclogState::Ok => {
                let len = ev.pl_len as usize;
                assert!(len >= 16 && len % 4 == 0, "record length {len}");
                assert!(ev.pl_offset as usize <= fed, "offset past the fed bytes");
                // SAFETY: pl_data holds pl_len bytes until the next read.
                let bytes = unsafe { core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), len) };
                let start = ev.pl_offset as usize - len;
                assert_eq!(bytes, &log[start..start + len]);
                seen.push((ev.pl_type, ev.pl_ts.tv_sec as u64));
            }
            PmclogState::RequireData if !rest.is_empty() => {
                let n = chunk.min(rest.len());
                parser.feed(&rest[..n]);
                rest = &rest[n..];
                fed += n;
            }
            state => break state,
        }
    };
    assert_eq!(seen, expected);
    if expect_error {
        assert_eq!(end, PmclogState::Error);
        assert_eq!(parser.read(&mut ev), PmclogState::Error, "errors are final");
    } else {
        assert_ne!(end, PmclogState::Error);
    }
});
