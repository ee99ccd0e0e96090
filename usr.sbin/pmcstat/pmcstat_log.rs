//! The text dump of a log (`pmcstat -R file` without an analysis option,
//! and the live dump of a sampling run without -O): one line per record,
//! in the formats of FreeBSD's print loop (`pmcstat_print_log`), byte for
//! byte: strings are printed as the bytes they are, as C's `%s` prints
//! them. The text is formatted by hand into the caller's buffer; printf's
//! interpretation of a format string per field is most of the C loop's
//! time.

use core::ffi::{CStr, c_char};

use Field::{Char, Dec, Hex, Hex0x, Quoted};
use pmc::pmclog::PmclogEv;
use uapi::pmc::{PMC_VERSION, PMC_VERSION_MAJOR, PmcCputype};
use uapi::pmclog::{PmclogType, pmc_callchain_cpuflags_to_cpu, pmc_callchain_cpuflags_to_usermode};

/// The bytes of a C string held in a fixed array, up to its NUL.
fn text(chars: &[c_char]) -> &[u8] {
    // SAFETY: c_char and u8 have the same size and alignment and every
    // bit pattern is valid for both.
    let bytes = unsafe { core::slice::from_raw_parts(chars.as_ptr().cast::<u8>(), chars.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// A line of the dump being built: FreeBSD's `"%-9s"` tag, a space, then
/// fields appended by the methods.
struct Line<'a>(&'a mut Vec<u8>);

impl<'a> Line<'a> {
    #[inline]
    fn new(out: &'a mut Vec<u8>, tag: &str) -> Self {
        out.extend_from_slice(tag.as_bytes());
        // "%-9s" pads to nine columns; the space follows in any case.
        out.extend_from_slice(&b"          "[..10usize.saturating_sub(tag.len()).max(1)]);
        Line(out)
    }

    #[inline]
    fn space(self) -> Self {
        self.0.push(b' ');
        self
    }

    /// `%x`: lowercase hexadecimal, no prefix.
    #[inline]
    fn hex(self, v: u64) -> Self {
        let digits = (64 - (v | 1).leading_zeros()).div_ceil(4) as usize;
        let mut buf = [0u8; 16];
        for (i, slot) in buf[..digits].iter_mut().rev().enumerate() {
            *slot = HEX_DIGITS[((v >> (4 * i)) & 0xf) as usize];
        }
        self.0.extend_from_slice(&buf[..digits]);
        self
    }

    /// `0x%x`, and FreeBSD's `%p` (which prints a null pointer as 0x0).
    #[inline]
    fn hex0x(self, v: u64) -> Self {
        self.0.extend_from_slice(b"0x");
        self.hex(v)
    }

    /// `%d` and `%jd`.
    #[inline]
    fn dec(self, v: i64) -> Self {
        if v < 0 {
            self.0.push(b'-');
        }
        let mut n = v.unsigned_abs();
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.0.extend_from_slice(&buf[at..]);
        self
    }

    /// `"%s"`.
    #[inline]
    fn quoted(self, s: &[u8]) -> Self {
        self.0.push(b'"');
        self.0.extend_from_slice(s);
        self.0.push(b'"');
        self
    }

    #[inline]
    fn char(self, c: u8) -> Self {
        self.0.push(c);
        self
    }

    #[inline]
    fn end(self) {
        self.0.push(b'\n');
    }
}

/// One field of a dump line, in the format of FreeBSD's print loop.
#[derive(Clone, Copy)]
enum Field<'a> {
    /// `%d` and `%jd`.
    Dec(i64),
    /// `%x`.
    Hex(u64),
    /// `0x%x` and `%p`.
    Hex0x(u64),
    /// `"%s"`.
    Quoted(&'a [u8]),
    /// `%c`.
    Char(u8),
}

/// A dump line: the tag, then the fields separated by spaces.
#[inline]
fn line(out: &mut Vec<u8>, tag: &str, fields: &[Field<'_>]) {
    let mut l = Line::new(out, tag);
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            l = l.space();
        }
        l = match *f {
            Field::Dec(v) => l.dec(v),
            Field::Hex(v) => l.hex(v),
            Field::Hex0x(v) => l.hex0x(v),
            Field::Quoted(s) => l.quoted(s),
            Field::Char(c) => l.char(c),
        };
    }
    l.end();
}

/// The `...` line of one program counter of a call chain.
#[inline]
fn pc_line(out: &mut Vec<u8>, pc: usize) {
    out.extend_from_slice(b"...       ");
    Line(out).hex0x(pc as u64).end();
}

/// Prints one event as FreeBSD's print loop does; a version warning goes
/// to `warn`. The CLOSELOG record that ends a log is not an event
/// (`pmclog_read` returns EOF for it), so it is never printed; FreeBSD's
/// loop has a `closelog` line that it cannot reach.
pub fn print_event(out: &mut Vec<u8>, warn: &mut Vec<u8>, ev: &PmclogEv) {
    // SAFETY: each arm reads the union member that pl_type selects, which
    // the reader filled.
    unsafe {
        let u = &ev.pl_u;
        match PmclogType::from_raw(ev.pl_type) {
            Some(PmclogType::Callchain) => {
                let c = &u.pl_cc;
                let mode = if pmc_callchain_cpuflags_to_usermode(c.pl_cpuflags) != 0 {
                    b'u'
                } else {
                    b's'
                };
                line(
                    out,
                    "callchain",
                    &[
                        Dec(i64::from(c.pl_pid as i32)),
                        Hex0x(u64::from(c.pl_pmcid)),
                        Dec(i64::from(pmc_callchain_cpuflags_to_cpu(c.pl_cpuflags))),
                        Dec(i64::from(c.pl_npc as i32)),
                        Char(mode),
                    ],
                );
                let n = (c.pl_npc as usize).min(c.pl_pc.len());
                // The chain's lines take at most 29 bytes each.
                out.reserve(n * 29);
                for &pc in &c.pl_pc[..n] {
                    pc_line(out, pc);
                }
            }
            Some(PmclogType::Closelog) => line(out, "closelog", &[]),
            Some(PmclogType::Dropnotify) => line(out, "drop", &[]),
            Some(PmclogType::Initialize) => {
                let i = &u.pl_i;
                let cputype = PmcCputype::from_raw(i.pl_arch).map_or("(null)", PmcCputype::name);
                line(
                    out,
                    "initlog",
                    &[Hex0x(u64::from(i.pl_version)), Quoted(cputype.as_bytes())],
                );
                if i.pl_version & 0xFF00_0000 != PMC_VERSION_MAJOR << 24 {
                    warn.extend_from_slice(
                        format!(
                            "pmcstat: WARNING: Log version {:#x} != expected version {:#x}.\n",
                            i.pl_version, PMC_VERSION
                        )
                        .as_bytes(),
                    );
                }
            }
            Some(PmclogType::MapIn) => {
                let m = &u.pl_mi;
                line(
                    out,
                    "map-in",
                    &[
                        Dec(i64::from(m.pl_pid)),
                        Hex0x(m.pl_start as u64),
                        Quoted(text(&m.pl_pathname)),
                    ],
                );
            }
            Some(PmclogType::MapOut) => {
                let m = &u.pl_mo;
                line(
                    out,
                    "map-out",
                    &[
                        Dec(i64::from(m.pl_pid)),
                        Hex0x(m.pl_start as u64),
                        Hex0x(m.pl_end as u64),
                    ],
                );
            }
            Some(PmclogType::Pmcallocate) => {
                let a = &u.pl_a;
                // printf's "%s" of a null pointer.
                let name = if a.pl_evname.is_null() {
                    b"(null)".as_slice()
                } else {
                    CStr::from_ptr(a.pl_evname).to_bytes()
                };
                line(
                    out,
                    "allocate",
                    &[
                        Hex0x(u64::from(a.pl_pmcid)),
                        Quoted(name),
                        Hex0x(u64::from(a.pl_flags)),
                    ],
                );
            }
            Some(PmclogType::Pmcallocatedyn) => {
                let a = &u.pl_ad;
                line(
                    out,
                    "allocatedyn",
                    &[
                        Hex0x(u64::from(a.pl_pmcid)),
                        Quoted(text(&a.pl_evname)),
                        Hex0x(u64::from(a.pl_flags)),
                    ],
                );
            }
            Some(PmclogType::Pmcattach) => {
                let t = &u.pl_t;
                line(
                    out,
                    "attach",
                    &[
                        Hex0x(u64::from(t.pl_pmcid)),
                        Dec(i64::from(t.pl_pid)),
                        Quoted(text(&t.pl_pathname)),
                    ],
                );
            }
            Some(PmclogType::Pmcdetach) => line(
                out,
                "detach",
                &[
                    Hex0x(u64::from(u.pl_d.pl_pmcid)),
                    Dec(i64::from(u.pl_d.pl_pid)),
                ],
            ),
            Some(PmclogType::Proccsw) => {
                let c = u.pl_c;
                line(
                    out,
                    "cswval",
                    &[
                        Hex0x(u64::from(c.pl_pmcid)),
                        Dec(i64::from(c.pl_pid)),
                        Dec(c.pl_value as i64),
                    ],
                );
            }
            Some(PmclogType::ProcCreate) => {
                let p = &u.pl_pc;
                line(
                    out,
                    "create",
                    &[
                        Dec(i64::from(p.pl_pid)),
                        Hex(u64::from(p.pl_flags)),
                        Quoted(text(&p.pl_pcomm)),
                    ],
                );
            }
            Some(PmclogType::Procexec) => {
                let x = &u.pl_x;
                line(
                    out,
                    "exec",
                    &[
                        Hex0x(u64::from(x.pl_pmcid)),
                        Dec(i64::from(x.pl_pid)),
                        Hex0x(x.pl_baseaddr as u64),
                        Hex0x(x.pl_dynaddr as u64),
                        Quoted(text(&x.pl_pathname)),
                    ],
                );
            }
            Some(PmclogType::Procexit) => {
                let e = u.pl_e;
                line(
                    out,
                    "exitval",
                    &[
                        Hex0x(u64::from(e.pl_pmcid)),
                        Dec(i64::from(e.pl_pid as i32)),
                        Dec(e.pl_value as i64),
                    ],
                );
            }
            Some(PmclogType::Procfork) => line(
                out,
                "fork",
                &[
                    Dec(i64::from(u.pl_f.pl_oldpid)),
                    Dec(i64::from(u.pl_f.pl_newpid)),
                ],
            ),
            Some(PmclogType::Userdata) => {
                line(out, "userdata", &[Hex0x(u64::from(u.pl_u.pl_userdata))])
            }
            Some(PmclogType::Sysexit) => line(out, "exit", &[Dec(i64::from(u.pl_se.pl_pid))]),
            Some(PmclogType::ThrCreate) => {
                let t = &u.pl_tc;
                line(
                    out,
                    "thr-create",
                    &[
                        Dec(i64::from(t.pl_tid)),
                        Dec(i64::from(t.pl_pid)),
                        Hex(u64::from(t.pl_flags)),
                        Quoted(text(&t.pl_tdname)),
                    ],
                );
            }
            // FreeBSD prints the thread of pl_tc, whose first field is
            // pl_te's.
            Some(PmclogType::ThrExit) => line(out, "thr-exit", &[Dec(i64::from(u.pl_te.pl_tid))]),
            None => {
                out.extend_from_slice(b"unknown event (type ");
                Line(out)
                    .dec(i64::from(ev.pl_type as i32))
                    .char(b')')
                    .char(b'.')
                    .end();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogState};
    use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord, Timespec};

    /// One record encoded as the driver writes it, read back by libpmc's
    /// reader and printed: the dump and the warnings.
    fn printed(body: B<'_>) -> (Vec<u8>, Vec<u8>) {
        let rec = PmclogRecord { tsc: 1, body };
        let mut b = vec![0u8; rec.encoded_len()];
        rec.encode(&mut b).unwrap();
        let mut parser = Parser::new(PMCLOG_FD_NONE);
        parser.feed(&b);
        let mut ev = PmclogEv::zeroed();
        assert_eq!(parser.read(&mut ev), PmclogState::Ok);
        let (mut out, mut warn) = (Vec::new(), Vec::new());
        print_event(&mut out, &mut warn, &ev);
        (out, warn)
    }

    /// Every record type through the reader and the printer, against
    /// FreeBSD's formats filled in by hand.
    #[test]
    fn every_record_type_in_freebsds_format() {
        let pcs = [0x40_1000usize, 0xffff_ffff_8020_0000];
        let cases: Vec<(B<'_>, &str)> = vec![
            (
                B::Initialize {
                    version: 0x0A03_0000,
                    cpu: 0x87,
                    tsc_freq: 1,
                    ts: Timespec::default(),
                    cpuid: b"x",
                },
                "initlog   0xa030000 \"INTEL_CORE\"",
            ),
            (
                B::Pmcallocate {
                    pmcid: 0x100,
                    event: 0x1000,
                    flags: 0x20,
                    rate: 0,
                },
                // libpmc's table name of PMC_EV_TSC_TSC.
                "allocate  0x100 \"cycles\" 0x20",
            ),
            (
                B::Pmcallocatedyn {
                    pmcid: 0x200f00,
                    event: 0x20000,
                    flags: 0x80,
                    evname: b"CLOCK.HARD",
                },
                "allocatedyn 0x200f00 \"CLOCK.HARD\" 0x80",
            ),
            (
                B::Pmcattach {
                    pmcid: 0x100,
                    pid: 42,
                    pathname: b"/usr/bin/make",
                },
                "attach    0x100 42 \"/usr/bin/make\"",
            ),
            (
                B::Pmcdetach {
                    pmcid: 0x100,
                    pid: 42,
                },
                "detach    0x100 42",
            ),
            (
                B::Proccsw {
                    value: u64::MAX,
                    pmcid: 0x100,
                    pid: 42,
                    tid: 7,
                },
                "cswval    0x100 42 -1",
            ),
            (
                B::Procexec {
                    pid: 42,
                    pmcid: 0x100,
                    base: 0x20_0000,
                    dyn_base: 0,
                    pathname: b"/bin/sh",
                },
                "exec      0x100 42 0x200000 0x0 \"/bin/sh\"",
            ),
            (
                B::Procexit {
                    pmcid: 0x100,
                    pid: 42,
                    value: 987,
                },
                "exitval   0x100 42 987",
            ),
            (
                B::Procfork {
                    oldpid: 42,
                    newpid: 43,
                },
                "fork      42 43",
            ),
            (B::Sysexit { pid: 43 }, "exit      43"),
            (B::Userdata { userdata: 0xbeef }, "userdata  0xbeef"),
            (
                B::MapIn {
                    pid: u32::MAX,
                    start: 0xffff_ffff_8020_0000,
                    pathname: b"/boot/kernel/kernel",
                },
                "map-in    -1 0xffffffff80200000 \"/boot/kernel/kernel\"",
            ),
            (
                B::MapOut {
                    pid: 42,
                    start: 0x1000,
                    end: 0x2000,
                },
                "map-out   42 0x1000 0x2000",
            ),
            (
                B::Callchain {
                    pid: 42,
                    tid: 7,
                    pmcid: 0x100,
                    cpuflags: (3 << 16) | 1,
                    pcs: PcList::from_words(&pcs),
                },
                "callchain 42 0x100 3 2 u\n...       0x401000\n...       0xffffffff80200000",
            ),
            (
                B::ThrCreate {
                    tid: 100_043,
                    pid: 42,
                    flags: 0x800000,
                    tdname: b"worker",
                },
                "thr-create 100043 42 800000 \"worker\"",
            ),
            (B::ThrExit { tid: 100_043 }, "thr-exit  100043"),
            (
                B::ProcCreate {
                    pid: 44,
                    flags: 0x10,
                    pcomm: b"cc",
                },
                "create    44 10 \"cc\"",
            ),
            (B::Dropnotify, "drop      "),
        ];
        let mut log = Vec::new();
        let mut want = String::new();
        for (body, line) in &cases {
            let rec = PmclogRecord {
                tsc: 1,
                body: *body,
            };
            let mut b = vec![0u8; rec.encoded_len()];
            rec.encode(&mut b).unwrap();
            log.extend_from_slice(&b);
            want.push_str(line);
            want.push('\n');
        }
        let mut parser = Parser::new(PMCLOG_FD_NONE);
        parser.feed(&log);
        let mut ev = PmclogEv::zeroed();
        let (mut out, mut warn) = (Vec::new(), Vec::new());
        while parser.read(&mut ev) == PmclogState::Ok {
            print_event(&mut out, &mut warn, &ev);
        }
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert!(warn.is_empty());
    }

    /// What printf's conversions do at the edges: null and widest
    /// pointers, negative and extreme numbers, and bytes that are not
    /// UTF-8, which `%s` prints as they are.
    #[test]
    fn numbers_at_their_limits_and_strings_as_bytes() {
        let pcs = [0usize, usize::MAX, 0xa];
        let cases: Vec<(B<'_>, &[u8])> = vec![
            (
                B::Callchain {
                    pid: u32::MAX,
                    tid: 0,
                    pmcid: 0,
                    cpuflags: 0xffff_0000,
                    pcs: PcList::from_words(&pcs),
                },
                b"callchain -1 0x0 65535 3 s\n...       0x0\n...       0xffffffffffffffff\n...       0xa\n",
            ),
            (
                B::Proccsw {
                    value: 1 << 63,
                    pmcid: u32::MAX,
                    pid: 0x8000_0000,
                    tid: 0,
                },
                b"cswval    0xffffffff -2147483648 -9223372036854775808\n",
            ),
            (
                B::MapIn {
                    pid: 7,
                    start: 0,
                    pathname: b"/lib/\xff\xfe\x80.so",
                },
                b"map-in    7 0x0 \"/lib/\xff\xfe\x80.so\"\n",
            ),
            (
                B::ProcCreate {
                    pid: 1,
                    flags: 0,
                    pcomm: b"",
                },
                b"create    1 0 \"\"\n",
            ),
        ];
        for (body, want) in cases {
            let (out, _) = printed(body);
            assert_eq!(
                out,
                want,
                "{:?} against {:?}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(want)
            );
        }
    }

    #[test]
    fn another_major_version_is_warned_about() {
        let (out, warn) = printed(B::Initialize {
            version: 0x0903_0000,
            cpu: 0,
            tsc_freq: 0,
            ts: Timespec::default(),
            cpuid: b"",
        });
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "initlog   0x9030000 \"(null)\"\n"
        );
        assert_eq!(
            String::from_utf8(warn).unwrap(),
            "pmcstat: WARNING: Log version 0x9030000 != expected version 0xa030000.\n"
        );
    }
}
