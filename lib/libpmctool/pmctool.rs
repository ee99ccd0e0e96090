//! What pmcstat(8) and pmccontrol(8) share, which FreeBSD's C tools take
//! from the C library: getopt(3) over the program's arguments as they
//! come (`OsString`, any bytes), err(3)/errx(3)/warnx(3) messages (with
//! the extended error of a failed hwpmc request, as libc's err(3) adds
//! it) and strerror(3) text, and the exit codes of sysexits(3).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// Exit codes of sysexits(3).
pub mod sysexits {
    /// Bad usage.
    pub const EX_USAGE: u8 = 64;
    /// Bad input data.
    pub const EX_DATAERR: u8 = 65;
    /// A service is unavailable.
    pub const EX_UNAVAILABLE: u8 = 69;
    /// An internal error.
    pub const EX_SOFTWARE: u8 = 70;
    /// A system error.
    pub const EX_OSERR: u8 = 71;
    /// A configuration error.
    pub const EX_CONFIG: u8 = 78;
}

/// A failure that ends the program: the message for standard error
/// (already prefixed with the program's name; empty for none) and the
/// exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// What to print on standard error.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

impl Exit {
    /// Prints the message, if any, and gives the exit status.
    pub fn report(self) -> ExitCode {
        if !self.message.is_empty() {
            eprintln!("{}", self.message);
        }
        ExitCode::from(self.code)
    }
}

/// The running program's name for its messages.
#[derive(Debug, Clone, Copy)]
pub struct Program(pub &'static str);

impl Program {
    /// errx(3): `name: msg`, and the exit status `code`.
    pub fn errx(self, code: u8, msg: impl AsRef<str>) -> Exit {
        Exit {
            message: format!("{}: {}", self.0, msg.as_ref()),
            code,
        }
    }

    /// err(3): `name: msg: ` and the description of `errno`, then, as
    /// FreeBSD's libc adds it, the extended error of the last failed
    /// hwpmc request if it has one (libpmc's [`pmc::uexterr::gettext`]).
    pub fn err(self, code: u8, msg: impl AsRef<str>, errno: i32) -> Exit {
        Exit {
            message: err_text(self.0, msg.as_ref(), errno, &pmc::uexterr::gettext()),
            code,
        }
    }

    /// warnx(3): prints `name: msg` on standard error.
    pub fn warnx(self, msg: impl AsRef<str>) {
        eprintln!("{}: {}", self.0, msg.as_ref());
    }
}

/// err(3)'s line: `name: msg: strerror` and ` (extended error TEXT)`
/// when there is extended error text.
pub fn err_text(name: &str, msg: &str, errno: i32, exterr: &str) -> String {
    let mut line = format!("{name}: {msg}: {}", strerror(errno));
    if !exterr.is_empty() {
        line.push_str(&format!(" (extended error {exterr})"));
    }
    line
}

/// strerror(3): the C library's description of `errno`, or FreeBSD's
/// when it stands for an error of the driver's that only FreeBSD has (on
/// the simulator: EDOOFUS is "Programming error", not "Invalid argument").
pub fn strerror(errno: i32) -> String {
    if let Some(text) = pmc::transport::freebsd_text_of(errno) {
        return text.to_owned();
    }
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // Rust appends " (os error N)"; strerror(3) has the text alone.
    text.split(" (os error").next().unwrap_or(&text).to_owned()
}

/// A number as the C library's strtol(3) or strtoul(3) reads it (base 0:
/// leading blanks, a sign, `0x` and `0` prefixes, clamping on overflow,
/// as FreeBSD's tools read theirs): the value and how many bytes of `s`
/// it read, 0 when it read no number; None when `s` holds a NUL.
fn c_number<T>(
    s: &[u8],
    convert: unsafe extern "C" fn(*const libc::c_char, *mut *mut libc::c_char, libc::c_int) -> T,
) -> Option<(T, usize)> {
    let text = std::ffi::CString::new(s).ok()?;
    let mut end: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: `text` is a NUL-terminated string that outlives the call;
    // strtol and strtoul store in `end` a pointer into it.
    let value = unsafe { convert(text.as_ptr(), &mut end, 0) };
    // SAFETY: `end` points into `text`, at its NUL at the latest.
    let used = unsafe { end.offset_from(text.as_ptr()) } as usize;
    Some((value, used))
}

/// strtol(3) with base 0 (see [`c_number`]).
pub fn strtol(s: &[u8]) -> Option<(i64, usize)> {
    // A long is 32 bits on some targets (lib32), 64 on this one.
    #[allow(clippy::useless_conversion)]
    c_number(s, libc::strtol).map(|(v, used)| (i64::from(v), used))
}

/// strtoul(3) with base 0 (see [`c_number`]).
pub fn strtoul(s: &[u8]) -> Option<(u64, usize)> {
    #[allow(clippy::useless_conversion)]
    c_number(s, libc::strtoul).map(|(v, used)| (u64::from(v), used))
}

/// errno after a failed call, EIO when there is none.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(5)
}

/// What [`Getopt::next_opt`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt<'a> {
    /// An option of the option string, with its argument if it takes one.
    Opt(u8, Option<&'a OsStr>),
    /// A byte that is not an option of the option string (getopt's `?`).
    Unknown(u8),
    /// An option whose argument is missing (getopt's `:`, or `?` without
    /// a leading `:` in the option string).
    MissingArgument(u8),
}

/// getopt(3) as FreeBSD's C library does it, over arguments of any bytes:
/// options are single bytes after a `-`, may be grouped (`-qv`), and one
/// that takes an argument (a `:` after it in the option string) takes the
/// rest of its word or, when that is empty, the next word, whatever it
/// is. Parsing stops at the first word that is not an option (`-` alone
/// is none), which stays an operand, or after `--`, which does not; the
/// arguments are never reordered. Without a leading `:` in the option
/// string, an unknown option or a missing argument is reported on
/// standard error as FreeBSD's getopt(3) reports it.
#[derive(Debug)]
pub struct Getopt<'a> {
    program: Program,
    args: &'a [OsString],
    optstring: &'a [u8],
    quiet: bool,
    /// The next word to look at.
    optind: usize,
    /// The next byte of the current word, 0 before a word is entered.
    pos: usize,
}

impl<'a> Getopt<'a> {
    /// A parser of `args` (without the program's name) for `optstring`.
    pub fn new(program: Program, args: &'a [OsString], optstring: &'a str) -> Getopt<'a> {
        let bytes = optstring.as_bytes();
        let quiet = bytes.first() == Some(&b':');
        Getopt {
            program,
            args,
            optstring: if quiet { &bytes[1..] } else { bytes },
            quiet,
            optind: 0,
            pos: 0,
        }
    }

    /// Whether `c` is an option, and whether it takes an argument.
    fn lookup(&self, c: u8) -> Option<bool> {
        if c == b':' {
            return None;
        }
        let at = self.optstring.iter().position(|&o| o == c)?;
        Some(self.optstring.get(at + 1) == Some(&b':'))
    }

    /// The next option, or `None` at the end of the options.
    pub fn next_opt(&mut self) -> Option<Opt<'a>> {
        if self.pos == 0 {
            let word = self.args.get(self.optind)?.as_bytes();
            if word == b"--" {
                self.optind += 1;
                return None;
            }
            if word.len() < 2 || word[0] != b'-' {
                return None;
            }
            self.pos = 1;
        }
        let word = self.args[self.optind].as_bytes();
        let c = word[self.pos];
        self.pos += 1;
        let at_end = self.pos == word.len();
        let next_word = |g: &mut Self| {
            g.optind += 1;
            g.pos = 0;
        };
        match self.lookup(c) {
            None => {
                if at_end {
                    next_word(self);
                }
                if !self.quiet {
                    self.program
                        .warnx(format!("illegal option -- {}", shown(c)));
                }
                Some(Opt::Unknown(c))
            }
            Some(false) => {
                if at_end {
                    next_word(self);
                }
                Some(Opt::Opt(c, None))
            }
            Some(true) => {
                if !at_end {
                    let rest = OsStr::from_bytes(&word[self.pos..]);
                    next_word(self);
                    return Some(Opt::Opt(c, Some(rest)));
                }
                next_word(self);
                match self.args.get(self.optind) {
                    Some(value) => {
                        self.optind += 1;
                        Some(Opt::Opt(c, Some(value.as_os_str())))
                    }
                    None => {
                        if !self.quiet {
                            self.program
                                .warnx(format!("option requires an argument -- {}", shown(c)));
                        }
                        Some(Opt::MissingArgument(c))
                    }
                }
            }
        }
    }

    /// The arguments after the options (getopt's `argv + optind` once it
    /// has returned -1).
    pub fn operands(&self) -> &'a [OsString] {
        let at = if self.pos == 0 {
            self.optind
        } else {
            self.optind + 1
        };
        &self.args[at.min(self.args.len())..]
    }
}

/// An option byte for a message: itself when it is printable ASCII,
/// else `\xNN`.
pub fn shown(c: u8) -> String {
    if c.is_ascii_graphic() {
        char::from(c).to_string()
    } else {
        format!("\\x{c:02x}")
    }
}

/// An argument for a message: its text, with the bytes that are not
/// valid UTF-8 as `\xNN`.
pub fn quoted(arg: &OsStr) -> String {
    let mut out = String::new();
    for chunk in arg.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Program = Program("test");

    fn args(words: &[&[u8]]) -> Vec<OsString> {
        words
            .iter()
            .map(|w| OsStr::from_bytes(w).to_owned())
            .collect()
    }

    fn all<'a>(g: &mut Getopt<'a>) -> Vec<Opt<'a>> {
        std::iter::from_fn(|| g.next_opt()).collect()
    }

    #[test]
    fn grouped_flags_and_values() {
        let a = args(&[b"-qv", b"-o", b"out", b"-wfoo", b"-o", b"-x", b"cmd", b"-q"]);
        let mut g = Getopt::new(P, &a, "qvo:w:");
        assert_eq!(
            all(&mut g),
            [
                Opt::Opt(b'q', None),
                Opt::Opt(b'v', None),
                Opt::Opt(b'o', Some(OsStr::new("out"))),
                Opt::Opt(b'w', Some(OsStr::new("foo"))),
                // The next word is the argument, even one like an option.
                Opt::Opt(b'o', Some(OsStr::new("-x"))),
            ]
        );
        // No reordering: parsing stops at the first operand.
        assert_eq!(g.operands(), &args(&[b"cmd", b"-q"])[..]);
    }

    #[test]
    fn ends_of_the_options() {
        let a = args(&[b"-q", b"--", b"-v"]);
        let mut g = Getopt::new(P, &a, "qv");
        assert_eq!(all(&mut g), [Opt::Opt(b'q', None)]);
        assert_eq!(g.operands(), &args(&[b"-v"])[..]);
        let a = args(&[b"-", b"-q"]);
        let mut g = Getopt::new(P, &a, "q");
        assert_eq!(all(&mut g), []);
        assert_eq!(g.operands(), &a[..]);
        let a: Vec<OsString> = Vec::new();
        let mut g = Getopt::new(P, &a, "q");
        assert_eq!(all(&mut g), []);
        assert!(g.operands().is_empty());
    }

    #[test]
    fn unknown_options_and_missing_arguments() {
        let a = args(&[b"-qz:", b"-o"]);
        let mut g = Getopt::new(P, &a, ":qo:");
        assert_eq!(
            all(&mut g),
            [
                Opt::Opt(b'q', None),
                Opt::Unknown(b'z'),
                // A ':' is never an option.
                Opt::Unknown(b':'),
                Opt::MissingArgument(b'o'),
            ]
        );
        assert!(g.operands().is_empty());
    }

    #[test]
    fn arguments_of_any_bytes() {
        let a = args(&[b"-c", b"\xff\xfe", b"-\xe9", b"-c\xff"]);
        let mut g = Getopt::new(P, &a, ":c:");
        assert_eq!(
            all(&mut g),
            [
                Opt::Opt(b'c', Some(OsStr::from_bytes(b"\xff\xfe"))),
                Opt::Unknown(0xe9),
                Opt::Opt(b'c', Some(OsStr::from_bytes(b"\xff"))),
            ]
        );
        assert_eq!(quoted(OsStr::from_bytes(b"a\xffb")), "a\\xffb");
        assert_eq!(shown(0xe9), "\\xe9");
        assert_eq!(shown(b'x'), "x");
    }

    #[test]
    fn messages() {
        let e = P.errx(sysexits::EX_USAGE, "bad");
        assert_eq!((e.message.as_str(), e.code), ("test: bad", 64));
        let e = P.err(sysexits::EX_OSERR, "open", 2);
        assert_eq!(e.message, "test: open: No such file or directory");
        assert_eq!(strerror(22), "Invalid argument");
        // The driver's EDOOFUS, which this host has no number for: the
        // tools print FreeBSD's text.
        pmc::transport::note_freebsd_errno(88);
        let edoofus = pmc::transport::host_errno(88);
        if cfg!(not(target_os = "freebsd")) {
            assert_eq!(strerror(edoofus), "Programming error");
        }
        pmc::transport::note_freebsd_errno(0);
        assert_eq!(strerror(22), "Invalid argument");
        // FreeBSD's err(3) with an extended error.
        assert_eq!(
            err_text("pmcstat", "ERROR: x", 22, "Invalid PMC mode"),
            "pmcstat: ERROR: x: Invalid argument (extended error Invalid PMC mode)"
        );
        assert_eq!(err_text("p", "m", 22, ""), "p: m: Invalid argument");
    }
}
