//! pmcannotate(8): a program's C source or assembly, annotated line by
//! line with the samples that a pmcstat(8) log holds for it.
//!
//! The tool gathers nothing itself. It asks pmcstat(8) to turn the log
//! into its `-m` list (one line per sample: the sampled PC, the function
//! that holds it and that function's bounds), counts the samples per PC
//! and per function, keeps the functions above a lower bound, has
//! objdump(1) disassemble each of them (`-S` interleaves the C source,
//! `-d` is the assembly alone) and prints objdump's text with the counts
//! in a column on its left.
//!
//! The behaviour is that of FreeBSD's pmcannotate: the same options,
//! messages, exit statuses and report, with the function order and the
//! percentages computed as it computes them (single precision). Its bugs
//! are mended rather than reproduced; each place says so in a comment
//! starting with "FreeBSD", and the manual page lists them under CAVEATS.
//! One option is an extension: `-r fsroot`, passed on to pmcstat(8).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};

use pmctool::{Getopt, Opt, Program};

/// The name in the messages of getopt(3) and errx(3) (getprogname()).
const PROGRAM: Program = Program("pmcannotate");

/// The option string: FreeBSD's, and `r:` (the extension).
const OPTSTRING: &str = "ahk:l:m:r:";

/// The usage line after `usage: ` and the program's argv[0].
const USAGE: &str = "[-a] [-h] [-k kfile] [-l lb] [-m mode] [-r fsroot] pmcraw.out binary";

/// The lower bound, in percent of all samples, when `-l` is not given.
const DEFAULT_LIMIT: f32 = 0.5;

/// Exit statuses: the tool knows success and failure only.
const EXIT_SUCCESS: u8 = 0;
const EXIT_FAILURE: u8 = 1;

/// How a count is shown in the column on the left of a line (`-m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The number of samples.
    Raw,
    /// Percent of the samples of the line's function (the default).
    Block,
    /// Percent of all samples.
    Global,
}

/// The command line.
#[derive(Debug)]
struct Options {
    /// `-a`: assembly only (`objdump -d`), not C (`objdump -S`).
    asm: bool,
    /// `-k`: passed on to pmcstat(8) as `-k`.
    kfile: Option<OsString>,
    /// `-r` (extension): passed on to pmcstat(8) as `-r`.
    fsroot: Option<OsString>,
    /// `-l`: the lower bound in percent.
    limit: f32,
    /// `-m`.
    mode: Mode,
    /// The pmcstat(8) log.
    log: OsString,
    /// The program to annotate.
    binary: OsString,
}

/// How the program ends when it does not succeed.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// The usage line (on standard error), and the exit status.
    Usage(u8),
    /// errx(3): `pmcannotate: TEXT`, exit status 1.
    Errx(Vec<u8>),
    /// FreeBSD's fatal error: an optional first line saying why (perror(3)
    /// of a failed call, or what a program run for us did), then the
    /// message; each is prefixed with argv[0]. Exit status 1.
    Fatal {
        cause: Option<String>,
        message: &'static str,
    },
    /// Nothing to say (the report's reader went away); exit status 1.
    Quiet,
}

fn fatal(message: &'static str) -> Failure {
    Failure::Fatal {
        cause: None,
        message,
    }
}

fn fatal_io(message: &'static str, e: &io::Error) -> Failure {
    Failure::Fatal {
        cause: Some(error_text(e)),
        message,
    }
}

/// strerror(3) of an I/O error, or its own text if it has no errno.
fn error_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(errno) => pmctool::strerror(errno),
        None => e.to_string(),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| OsString::from("pmcannotate"));
    let args: Vec<OsString> = args.collect();
    let result = parse_options(&args).and_then(|o| run(&o));
    let name = argv0.as_bytes();
    let mut stderr = io::stderr().lock();
    // Nothing more can be done when standard error fails.
    let _ = match result {
        Ok(()) => return ExitCode::from(EXIT_SUCCESS),
        Err(Failure::Usage(code)) => {
            let _ = stderr
                .write_all(b"usage: ")
                .and_then(|()| stderr.write_all(name))
                .and_then(|()| writeln!(stderr, " {USAGE}"));
            return ExitCode::from(code);
        }
        Err(Failure::Errx(text)) => stderr
            .write_all(format!("{}: ", PROGRAM.0).as_bytes())
            .and_then(|()| stderr.write_all(&text))
            .and_then(|()| stderr.write_all(b"\n")),
        Err(Failure::Fatal { cause, message }) => {
            let mut line = |text: &str| {
                stderr.write_all(name)?;
                writeln!(stderr, ": {text}")
            };
            cause
                .as_deref()
                .map_or(Ok(()), &mut line)
                .and_then(|()| line(message))
        }
        Err(Failure::Quiet) => Ok(()),
    };
    ExitCode::from(EXIT_FAILURE)
}

/// The options and operands, processed in order as getopt(3) gives them.
fn parse_options(args: &[OsString]) -> Result<Options, Failure> {
    let mut o = Options {
        asm: false,
        kfile: None,
        fsroot: None,
        limit: DEFAULT_LIMIT,
        mode: Mode::Block,
        log: OsString::new(),
        binary: OsString::new(),
    };
    let mut g = Getopt::new(PROGRAM, args, OPTSTRING);
    while let Some(opt) = g.next_opt() {
        match opt {
            Opt::Opt(b'a', _) => o.asm = true,
            Opt::Opt(b'k', Some(v)) => o.kfile = Some(v.to_owned()),
            Opt::Opt(b'r', Some(v)) => o.fsroot = Some(v.to_owned()),
            // atof(3): what does not read as a number is 0.
            Opt::Opt(b'l', Some(v)) => o.limit = atof(v.as_bytes()) as f32,
            Opt::Opt(b'm', Some(v)) => {
                let v = v.as_bytes();
                o.mode = if v.eq_ignore_ascii_case(b"raw") {
                    Mode::Raw
                } else if v.eq_ignore_ascii_case(b"global") {
                    Mode::Global
                } else if v.eq_ignore_ascii_case(b"block") {
                    Mode::Block
                } else {
                    let mut text = b"Invalid mode ".to_vec();
                    text.extend_from_slice(v);
                    return Err(Failure::Errx(text));
                };
            }
            Opt::Opt(b'h', _) => return Err(Failure::Usage(EXIT_SUCCESS)),
            // FreeBSD exits with status 0 after the usage line even when
            // it reports a mistake (an unknown option, a missing
            // argument, the wrong number of operands); here a mistake
            // exits with 1, and only -h with 0.
            _ => return Err(Failure::Usage(EXIT_FAILURE)),
        }
    }
    match g.operands() {
        [log, binary] => {
            o.log = log.clone();
            o.binary = binary.clone();
            Ok(o)
        }
        _ => Err(Failure::Usage(EXIT_FAILURE)),
    }
}

/// atof(3) of a C string: the longest prefix that reads as a number
/// (after white space: a sign, then decimal digits with a point and an
/// exponent, hexadecimal ones with `0x` and a binary exponent, or
/// `inf`, `infinity`, `nan`), 0 when there is none.
fn atof(s: &[u8]) -> f64 {
    let mut i = s.iter().take_while(|&&b| is_space(b)).count();
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let rest = &s[i..];
    let starts =
        |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    let value = if starts(b"inf") {
        f64::INFINITY
    } else if starts(b"nan") {
        f64::NAN
    } else if starts(b"0x") && hex_float(&rest[2..]).is_some() {
        hex_float(&rest[2..]).unwrap_or(0.0)
    } else {
        decimal_float(rest)
    };
    if negative { -value } else { value }
}

/// The value of the longest decimal floating-point prefix of `s`, 0 if
/// there is none.
fn decimal_float(s: &[u8]) -> f64 {
    let digits = |from: usize| s[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let int = digits(0);
    let mut end = int;
    let mut mantissa = int;
    if s.get(end) == Some(&b'.') {
        let frac = digits(end + 1);
        mantissa += frac;
        end += 1 + frac;
    }
    if mantissa == 0 {
        return 0.0;
    }
    if matches!(s.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(s.get(end + 1), Some(b'+' | b'-')));
        let exp = digits(end + 1 + sign);
        if exp > 0 {
            end += 1 + sign + exp;
        }
    }
    std::str::from_utf8(&s[..end])
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0.0)
}

/// The value of a hexadecimal floating-point number after its `0x`, if
/// it has at least one digit.
fn hex_float(s: &[u8]) -> Option<f64> {
    let mut value = 0.0f64;
    let mut scale = 0i32;
    let mut any = false;
    let mut i = 0;
    let mut point = false;
    while let Some(&b) = s.get(i) {
        if let Some(d) = char::from(b).to_digit(16) {
            value = value * 16.0 + f64::from(d);
            if point {
                scale -= 4;
            }
            any = true;
        } else if b == b'.' && !point {
            point = true;
        } else {
            break;
        }
        i += 1;
    }
    if !any {
        return None;
    }
    if matches!(s.get(i), Some(b'p' | b'P')) {
        let negative = s.get(i + 1) == Some(&b'-');
        let sign = usize::from(matches!(s.get(i + 1), Some(b'+' | b'-')));
        let exp: i32 = s[i + 1 + sign..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .fold(0i32, |e, &b| {
                e.saturating_mul(10).saturating_add(i32::from(b - b'0'))
            });
        if s.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            scale = scale.saturating_add(if negative { -exp } else { exp });
        }
    }
    Some(value * 2f64.powi(scale))
}

/// isspace(3) in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// A reader of a line, as sscanf(3) reads one.
struct Scan<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn new(s: &'a [u8]) -> Scan<'a> {
        Scan { s, at: 0 }
    }

    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(|&b| is_space(b)) {
            self.at += 1;
        }
    }

    /// `%p`: white space, then a hexadecimal number with an optional sign
    /// and `0x`, as strtoumax(3) reads it (saturated when too large).
    fn pointer(&mut self) -> Option<u64> {
        self.skip_space();
        let s = self.s;
        let mut i = self.at;
        let negative = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        // `0x` not followed by a digit is the number 0 and an `x`.
        if s.get(i) == Some(&b'0')
            && matches!(s.get(i + 1), Some(b'x' | b'X'))
            && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        {
            i += 2;
        }
        let first = i;
        let mut value = 0u64;
        let mut overflow = false;
        while let Some(d) = s.get(i).and_then(|&b| char::from(b).to_digit(16)) {
            match value.checked_mul(16) {
                Some(v) => value = v + u64::from(d),
                None => overflow = true,
            }
            i += 1;
        }
        if i == first {
            return None;
        }
        self.at = i;
        Some(if overflow {
            u64::MAX
        } else if negative {
            value.wrapping_neg()
        } else {
            value
        })
    }

    /// `%s`: white space, then a word of one or more other bytes.
    fn word(&mut self) -> Option<&'a [u8]> {
        self.skip_space();
        let len = self.s[self.at..]
            .iter()
            .take_while(|&&b| !is_space(b))
            .count();
        if len == 0 {
            return None;
        }
        let word = &self.s[self.at..self.at + len];
        self.at += len;
        Some(word)
    }

    /// A literal byte of the format.
    fn literal(&mut self, b: u8) -> bool {
        if self.s.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }
}

/// The address of one of objdump's assembly lines: white space, a
/// hexadecimal number, `:` and white space. None for any other line.
fn asm_address(line: &[u8]) -> Option<u64> {
    let mut scan = Scan::new(line);
    let pc = scan.pointer()?;
    let next = |k: usize| line.get(scan.at + k).copied();
    (next(0) == Some(b':') && next(1).is_some_and(is_space)).then_some(pc)
}

/// The name in one of objdump's function headers, `ADDRESS <NAME>:`,
/// which starts at the first byte of the line.
///
/// FreeBSD's scan returns an undefined length for a line that has the
/// address, `<` and a name but not the closing `>:`, and its first pass
/// takes such a line for a header; here a header must have the `>:`.
fn function_header(line: &[u8]) -> Option<&[u8]> {
    if line.first().is_none_or(|&b| is_space(b)) {
        return None;
    }
    let mut scan = Scan::new(line);
    scan.pointer()?;
    scan.skip_space();
    if !scan.literal(b'<') {
        return None;
    }
    let start = scan.at;
    let len = line[start..]
        .iter()
        .take_while(|&&b| b != b'>' && b != b':')
        .count();
    if len == 0 {
        return None;
    }
    scan.at += len;
    (scan.literal(b'>') && scan.literal(b':')).then_some(&line[start..start + len])
}

/// The lines of a text, each with its newline (the last may have none).
fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|&b| b == b'\n').collect()
}

/// The samples of one PC.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    pc: u64,
    /// The function, its start and end, as the PC's first line gave them.
    name: Vec<u8>,
    start: u64,
    end: u64,
    count: u64,
}

/// The samples of pmcstat's `-m` list.
#[derive(Debug, Default)]
struct Samples {
    /// One entry per PC, in the order of first appearance.
    entries: Vec<Entry>,
    /// The entry of each PC.
    by_pc: HashMap<u64, usize>,
    /// Every sample.
    total: u64,
}

impl Samples {
    /// The samples of `pc`.
    fn count(&self, pc: u64) -> Option<u64> {
        self.by_pc.get(&pc).map(|&i| self.entries[i].count)
    }
}

/// Reads pmcstat's `-m` list: lines `PC NAME START END` (hexadecimal
/// numbers), lines that start with white space skipped. Any other line
/// is an error.
///
/// FreeBSD reads the list in 512-byte pieces and the name into a
/// 512-byte buffer without a bound, so a long name overflows it and a
/// long line is taken for several; here a line and a name have any
/// length.
fn parse_samples(text: &[u8]) -> Result<Samples, Failure> {
    let mut samples = Samples::default();
    for line in lines(text) {
        if is_space(line[0]) {
            continue;
        }
        let mut scan = Scan::new(line);
        let (Some(pc), Some(name), Some(start), Some(end)) =
            (scan.pointer(), scan.word(), scan.pointer(), scan.pointer())
        else {
            return Err(fatal("Invalid scan of function in the map file"));
        };
        samples.total += 1;
        match samples.by_pc.get(&pc) {
            Some(&i) => samples.entries[i].count += 1,
            None => {
                samples.by_pc.insert(pc, samples.entries.len());
                samples.entries.push(Entry {
                    pc,
                    name: name.to_vec(),
                    start,
                    end,
                    count: 1,
                });
            }
        }
    }
    Ok(samples)
}

/// The samples of one function.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    name: Vec<u8>,
    /// The bounds given with its first PC.
    start: u64,
    end: u64,
    count: u64,
}

/// The functions of the samples, the most sampled first.
///
/// FreeBSD keeps a list sorted as it goes: for each PC in the order of
/// first appearance, the PC's function gains the PC's samples and moves
/// (or, new, goes) in front of the first function that has fewer. So
/// among functions with equal counts, the one whose last PC (in that
/// order) came first stands first; sorting on that gives the same order
/// without the list's quadratic walk.
fn functions(samples: &Samples) -> Vec<Function> {
    let mut order: Vec<(Function, usize)> = Vec::new();
    let mut by_name: HashMap<&[u8], usize> = HashMap::new();
    for (i, e) in samples.entries.iter().enumerate() {
        match by_name.get(e.name.as_slice()) {
            Some(&f) => {
                order[f].0.count += e.count;
                order[f].1 = i;
            }
            None => {
                by_name.insert(&e.name, order.len());
                order.push((
                    Function {
                        name: e.name.clone(),
                        start: e.start,
                        end: e.end,
                        count: e.count,
                    },
                    i,
                ));
            }
        }
    }
    order.sort_by(|a, b| b.0.count.cmp(&a.0.count).then(a.1.cmp(&b.1)));
    order.into_iter().map(|(f, _)| f).collect()
}

/// Drops the functions below `limit` percent of `total` samples, with
/// the threshold computed as FreeBSD does (single precision, truncated).
///
/// A negative limit, undefined behaviour in FreeBSD's conversion, keeps
/// every function here.
fn apply_limit(functions: &mut Vec<Function>, limit: f32, total: u64) {
    if total == 0 {
        return;
    }
    let threshold = (limit * total as f32 / 100.0) as u64;
    functions.retain(|f| f.count >= threshold);
}

/// `n` in percent of `of`, in single precision as FreeBSD computes it.
fn percent(n: u64, of: u64) -> f64 {
    f64::from(n as f32 * 100.0 / of as f32)
}

/// The count shown on the left of a line.
fn count_text(mode: Mode, n: u64, function: u64, total: u64) -> String {
    match mode {
        Mode::Raw => n.to_string(),
        Mode::Block => format!("{:.2}%", percent(n, function)),
        Mode::Global => format!("{:.2}%", percent(n, total)),
    }
}

/// What stops the report.
#[derive(Debug)]
enum ReportError {
    /// Writing it failed.
    Io(io::Error),
    /// objdump's C text has an assembly line with no C line before it.
    BadC,
}

impl From<io::Error> for ReportError {
    fn from(e: io::Error) -> ReportError {
        ReportError::Io(e)
    }
}

/// What the report needs besides objdump's text.
struct Report<'a> {
    samples: &'a Samples,
    functions: &'a [Function],
    mode: Mode,
    asm: bool,
}

impl Report<'_> {
    /// Prints each function, in order, from objdump's text `dump`.
    fn write(&self, out: &mut impl Write, dump: &[u8]) -> Result<(), ReportError> {
        let lines = lines(dump);
        // Where each function's text starts: after the last header that
        // names it.
        let by_name: HashMap<&[u8], usize> = self
            .functions
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.as_slice(), i))
            .collect();
        let mut body = vec![None; self.functions.len()];
        for (i, line) in lines.iter().enumerate() {
            if let Some(&f) = function_header(line).and_then(|name| by_name.get(name)) {
                body[f] = Some(i + 1);
            }
        }
        for (f, at) in self.functions.iter().zip(body) {
            out.write_all(b"Profile trace for function: ")?;
            out.write_all(&f.name)?;
            writeln!(out, "() [{:.2}%]", percent(f.count, self.samples.total))?;
            // FreeBSD prints a function whose header objdump's text does
            // not have from the start of that text (someone else's lines,
            // or the file's heading); here it has no lines.
            if let Some(at) = at {
                if self.asm {
                    self.asm_body(out, &lines[at..], f)?;
                } else {
                    self.c_body(out, &lines[at..], f)?;
                }
            }
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// One line with its count on the left, or without.
    fn line(
        &self,
        out: &mut impl Write,
        count: Option<u64>,
        f: &Function,
        line: &[u8],
    ) -> io::Result<()> {
        match count {
            Some(n) => {
                let text = count_text(self.mode, n, f.count, self.samples.total);
                write!(out, "{text:>7} | ")?;
            }
            None => out.write_all(b"\t| ")?,
        }
        out.write_all(line)
    }

    /// `-a`: the assembly lines up to the next function's header, each
    /// with the samples of its address.
    fn asm_body(&self, out: &mut impl Write, lines: &[&[u8]], f: &Function) -> io::Result<()> {
        for line in lines {
            if function_header(line).is_some() {
                break;
            }
            if let Some(pc) = asm_address(line) {
                self.line(out, self.samples.count(pc), f, line)?;
            }
        }
        Ok(())
    }

    /// C: the text up to the next function's header is blocks of C lines,
    /// each followed by the assembly lines made of it. The C lines are
    /// printed, the first with the samples of the block's assembly; the
    /// assembly is not. Lines after the last block are left out.
    fn c_body(
        &self,
        out: &mut impl Write,
        lines: &[&[u8]],
        f: &Function,
    ) -> Result<(), ReportError> {
        let mut at = 0;
        while at < lines.len() && function_header(lines[at]).is_none() {
            let first = at;
            let asm = loop {
                let Some(line) = lines.get(at) else {
                    return Ok(());
                };
                if asm_address(line).is_some() {
                    break at;
                }
                if function_header(line).is_some() {
                    return Ok(());
                }
                at += 1;
            };
            if asm == first {
                return Err(ReportError::BadC);
            }
            let mut count = 0;
            while let Some(pc) = lines.get(at).and_then(|l| asm_address(l)) {
                count += self.samples.count(pc).unwrap_or(0);
                at += 1;
            }
            for (i, line) in lines[first..asm].iter().enumerate() {
                let shown = (i == 0 && count != 0).then_some(count);
                self.line(out, shown, f, line)?;
            }
        }
        Ok(())
    }
}

/// A temporary file of our own, removed when dropped.
///
/// FreeBSD builds both names from one template, leaks the descriptor of
/// the first, lets the shell append to the second by name, and on an
/// early error removes names that were never set.
#[derive(Debug)]
struct TempFile {
    path: PathBuf,
    file: File,
    armed: bool,
}

impl TempFile {
    /// A new file `pmcannotate.XXXXXX` in `dir`, readable and writable by
    /// us only, created with O_EXCL under a random name (as mkstemp(3)).
    fn create(dir: &Path) -> io::Result<TempFile> {
        const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let state = RandomState::new();
        for attempt in 0u32..1000 {
            let mut h = state.build_hasher();
            h.write_u32(std::process::id());
            h.write_u32(attempt);
            if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                h.write_u128(t.as_nanos());
            }
            let mut bits = h.finish();
            let mut name = b"pmcannotate.".to_vec();
            for _ in 0..6 {
                name.push(LETTERS[(bits % LETTERS.len() as u64) as usize]);
                bits /= LETTERS.len() as u64;
            }
            let path = dir.join(OsStr::from_bytes(&name));
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => {
                    return Ok(TempFile {
                        path,
                        file,
                        armed: true,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::from_raw_os_error(libc::EEXIST))
    }

    /// Removes the file now, reporting a failure.
    fn remove(mut self) -> io::Result<()> {
        self.armed = false;
        std::fs::remove_file(&self.path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The directory for the temporary files: TMPDIR, or /tmp.
///
/// FreeBSD takes an empty TMPDIR for the root directory and joins the
/// names with a second `/`.
fn temp_dir() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// Checks that `path` exists and can be read, with access(2) as FreeBSD
/// does (R_OK | F_OK): nothing is opened.
fn check_readable(path: &OsStr) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::F_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pmcstat(8) to run: $PMCSTAT, else the one installed beside this
/// program, else the one found in PATH.
fn pmcstat_program() -> OsString {
    if let Some(p) = std::env::var_os("PMCSTAT").filter(|p| !p.is_empty()) {
        return p;
    }
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("pmcstat")))
        .filter(|p| p.is_file())
    {
        return beside.into_os_string();
    }
    OsString::from("pmcstat")
}

/// The objdump(1) to run: $OBJDUMP, else the one found in PATH.
fn objdump_program() -> OsString {
    std::env::var_os("OBJDUMP")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from("objdump"))
}

/// SIGINT and SIGQUIT ignored while a child runs, as system(3) ignores
/// them; their dispositions come back when this is dropped.
struct IgnoredInterrupts {
    int: libc::sighandler_t,
    quit: libc::sighandler_t,
}

impl IgnoredInterrupts {
    fn new() -> IgnoredInterrupts {
        // SAFETY: SIG_IGN for two signals; the old dispositions are kept.
        unsafe {
            IgnoredInterrupts {
                int: libc::signal(libc::SIGINT, libc::SIG_IGN),
                quit: libc::signal(libc::SIGQUIT, libc::SIG_IGN),
            }
        }
    }
}

impl Drop for IgnoredInterrupts {
    fn drop(&mut self) {
        // SAFETY: the dispositions that signal(3) returned before.
        unsafe {
            libc::signal(libc::SIGINT, self.int);
            libc::signal(libc::SIGQUIT, self.quit);
        }
    }
}

/// How a program run for us ended, when it failed.
fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("terminated by signal {signal}"),
        (None, None) => format!("failed ({status})"),
    }
}

/// Runs `cmd` (no shell: its arguments are passed as they are) and waits
/// for it; a failure to start it or a non-zero status is fatal with
/// `message`, after a line that says what happened.
///
/// FreeBSD runs the programs with system(3) and prints perror(3) before
/// the message, so the first line shows whatever errno an earlier call
/// left, which has nothing to do with the failure.
fn run_program(mut cmd: Command, message: &'static str) -> Result<(), Failure> {
    let name = pmctool::quoted(cmd.get_program());
    // As system(3): an interrupt from the terminal ends the child, and this
    // program, which ignores it meanwhile, reports that and removes its
    // files; the child gets the dispositions this program had.
    let ignored = IgnoredInterrupts::new();
    let (int, quit) = (ignored.int, ignored.quit);
    // SAFETY: between fork and exec the closure only calls signal(3),
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, int);
            libc::signal(libc::SIGQUIT, quit);
            Ok(())
        });
    }
    let status = cmd.status();
    drop(ignored);
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(Failure::Fatal {
            cause: Some(format!("{name}: {}", status_text(status))),
            message,
        }),
        Err(e) => Err(Failure::Fatal {
            cause: Some(format!("{name}: {}", error_text(&e))),
            message,
        }),
    }
}

/// Standard error, for the standard output of pmcstat(8): its statistics
/// are not part of the report.
///
/// FreeBSD lets pmcstat(8) print its CONVERSION STATISTICS on the
/// standard output, before the report.
fn stderr_for_child() -> Stdio {
    io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

/// A path as an argument that no program takes for an option (FreeBSD
/// passes a name that starts with `-` to objdump as it is, which reads
/// it as an option).
fn operand(path: &OsStr) -> OsString {
    if path.as_bytes().starts_with(b"-") {
        Path::new(".").join(path).into_os_string()
    } else {
        path.to_owned()
    }
}

/// The whole run, after the options.
fn run(o: &Options) -> Result<(), Failure> {
    let checks = [
        (Some(&o.binary), "Impossible to locate the binary file"),
        (Some(&o.log), "Impossible to locate the pmcstat file"),
        (o.kfile.as_ref(), "Impossible to locate the kernel file"),
    ];
    for (path, message) in checks {
        if let Some(path) = path {
            check_readable(path).map_err(|e| fatal_io(message, &e))?;
        }
    }
    let dir = temp_dir();

    // pmcstat(8) writes the -m list of the log into a file of ours.
    // FreeBSD runs it through system(3), with the names unquoted.
    let map =
        TempFile::create(&dir).map_err(|e| fatal_io("Impossible to create the tmp file", &e))?;
    let mut pmcstat = Command::new(pmcstat_program());
    // FreeBSD 15.0's pmcstat has no -k, so that pmcannotate -k always
    // fails there; the pmcstat of this tree takes it.
    if let Some(k) = &o.kfile {
        pmcstat.arg("-k").arg(k);
    }
    if let Some(r) = &o.fsroot {
        pmcstat.arg("-r").arg(r);
    }
    pmcstat
        .arg("-R")
        .arg(&o.log)
        .arg("-m")
        .arg(&map.path)
        .stdin(Stdio::null())
        .stdout(stderr_for_child());
    run_program(pmcstat, "Impossible to create the tmp file")?;
    let text =
        std::fs::read(&map.path).map_err(|e| fatal_io("Impossible to open the map file", &e))?;
    let samples = parse_samples(&text)?;
    map.remove()
        .map_err(|e| fatal_io("Impossible to remove the tmpfile", &e))?;

    let mut functions = functions(&samples);
    apply_limit(&mut functions, o.limit, samples.total);

    // objdump(1) disassembles each function, its text appended to a file
    // of ours. FreeBSD runs it through system(3) with `>>`.
    let mut dump =
        TempFile::create(&dir).map_err(|e| fatal_io("Impossible to create the tmp file", &e))?;
    let binary = operand(&o.binary);
    for f in &functions {
        let out = dump
            .file
            .try_clone()
            .map_err(|e| fatal_io("Impossible to create the tmp file", &e))?;
        let mut objdump = Command::new(objdump_program());
        objdump
            .arg(format!("--start-address={:#x}", f.start))
            .arg(format!("--stop-address={:#x}", f.end))
            .arg(if o.asm { "-d" } else { "-S" })
            .arg(&binary)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out));
        run_program(objdump, "Impossible to create the tmp file")?;
    }
    let mut text = Vec::new();
    dump.file
        .seek(SeekFrom::Start(0))
        .and_then(|_| dump.file.read_to_end(&mut text))
        .map_err(|e| fatal_io("Impossible to open the binary file", &e))?;

    let report = Report {
        samples: &samples,
        functions: &functions,
        mode: o.mode,
        asm: o.asm,
    };
    let mut out = BufWriter::new(io::stdout().lock());
    let written = report.write(&mut out, &text);
    let flushed = out.flush();
    match written.and(flushed.map_err(ReportError::Io)) {
        Ok(()) => {}
        Err(ReportError::BadC) => return Err(fatal("Invalid format for the C file")),
        Err(ReportError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            return Err(Failure::Quiet);
        }
        Err(ReportError::Io(e)) => return Err(fatal_io("Impossible to write the report", &e)),
    }
    dump.remove()
        .map_err(|e| fatal_io("Impossible to remove the tmpfile", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn options() {
        let o = parse_options(&args(&[
            "-a", "-l", "2.5", "-m", "RaW", "-k", "/k", "log", "bin",
        ]))
        .unwrap();
        assert!(o.asm);
        assert_eq!(o.limit, 2.5);
        assert_eq!(o.mode, Mode::Raw);
        assert_eq!(o.kfile.as_deref(), Some(OsStr::new("/k")));
        assert_eq!(
            (o.log.as_os_str(), o.binary.as_os_str()),
            (OsStr::new("log"), OsStr::new("bin"))
        );
        let o = parse_options(&args(&["-mglobal", "-r", "/root", "l", "b"])).unwrap();
        assert_eq!(o.mode, Mode::Global);
        assert_eq!(o.limit, DEFAULT_LIMIT);
        assert_eq!(o.fsroot.as_deref(), Some(OsStr::new("/root")));
        assert_eq!(parse_options(&args(&["l", "b"])).unwrap().mode, Mode::Block);
        assert_eq!(
            parse_options(&args(&["-m", "x", "-h"])).unwrap_err(),
            Failure::Errx(b"Invalid mode x".to_vec())
        );
        assert_eq!(
            parse_options(&args(&["-h", "-m", "x"])).unwrap_err(),
            Failure::Usage(0)
        );
        assert_eq!(parse_options(&args(&["l"])).unwrap_err(), Failure::Usage(1));
        assert_eq!(
            parse_options(&args(&["l", "b", "c"])).unwrap_err(),
            Failure::Usage(1)
        );
        assert_eq!(
            parse_options(&args(&["-m"])).unwrap_err(),
            Failure::Usage(1)
        );
    }

    #[test]
    fn atof_reads_a_prefix() {
        assert_eq!(atof(b" 1.5x"), 1.5);
        assert_eq!(atof(b"-2e1"), -20.0);
        assert_eq!(atof(b"3e"), 3.0);
        assert_eq!(atof(b".25"), 0.25);
        assert_eq!(atof(b"0x10"), 16.0);
        assert_eq!(atof(b"0x1p-1"), 0.5);
        assert_eq!(atof(b"0xg"), 0.0);
        assert_eq!(atof(b"abc"), 0.0);
        assert_eq!(atof(b""), 0.0);
        assert!(atof(b"INF").is_infinite());
    }

    #[test]
    fn recognisers() {
        assert_eq!(
            asm_address(b"  2017c0:\t55   \tpush   %rbp\n"),
            Some(0x2017c0)
        );
        assert_eq!(asm_address(b"  2017fb:\t00 00 \n"), Some(0x2017fb));
        assert_eq!(asm_address(b"\ta = b;\n"), None);
        // The heuristic: a C label spelt in hexadecimal digits reads as one.
        assert_eq!(asm_address(b"bad:\n"), Some(0xbad));
        assert_eq!(asm_address(b"bad:"), None);
        assert_eq!(
            function_header(b"00000000002017c0 <quick_sort>:\n"),
            Some(&b"quick_sort"[..])
        );
        assert_eq!(
            function_header(b"0000000000201000 <main+0x10>:\n"),
            Some(&b"main+0x10"[..])
        );
        assert_eq!(function_header(b"0000000000201000 <std::x>:\n"), None);
        assert_eq!(function_header(b"0000000000201000 <open\n"), None);
        assert_eq!(function_header(b" 201000 <f>:\n"), None);
        assert_eq!(
            function_header(b"sort:     file format elf64-x86-64\n"),
            None
        );
        assert_eq!(function_header(b"Disassembly of section .text:\n"), None);
    }

    #[test]
    fn samples_and_their_order() {
        // b reaches 2 before a does: it stands first.
        let text = b"0x10 a 0x10 0x20\n0x30 b 0x30 0x40\n0x31 b 0x30 0x40\n\n  ignored\n0x11 a 0x10 0x20\n0x50 c 0x50 0x60\n0x31 b 0x30 0x40\n";
        let s = parse_samples(text).unwrap();
        assert_eq!(s.total, 6);
        assert_eq!(s.count(0x31), Some(2));
        assert_eq!(s.count(0x99), None);
        let f = functions(&s);
        let names: Vec<&[u8]> = f.iter().map(|f| f.name.as_slice()).collect();
        assert_eq!(names, [&b"b"[..], b"a", b"c"]);
        assert_eq!(f[0].count, 3);
        assert_eq!((f[1].start, f[1].end, f[1].count), (0x10, 0x20, 2));
        // Equal counts: the one whose last PC was seen first goes first.
        let s = parse_samples(b"0x1 a 0 9\n0x2 b 0 9\n0x3 b 0 9\n0x4 a 0 9\n").unwrap();
        let names: Vec<Vec<u8>> = functions(&s).into_iter().map(|f| f.name).collect();
        assert_eq!(names, [b"b".to_vec(), b"a".to_vec()]);
        let s = parse_samples(b"0x1 a 0 9\n0x2 b 0 9\n0x1 a 0 9\n0x2 b 0 9\n").unwrap();
        let names: Vec<Vec<u8>> = functions(&s).into_iter().map(|f| f.name).collect();
        assert_eq!(names, [b"a".to_vec(), b"b".to_vec()]);
        for bad in [
            &b"0x10 a 0x10\n"[..],
            b"zz a 1 2\n",
            b"0x10\n",
            b"0x1 a g h\n",
        ] {
            assert_eq!(
                parse_samples(bad).unwrap_err(),
                fatal("Invalid scan of function in the map file")
            );
        }
    }

    #[test]
    fn the_lower_bound() {
        let f = |n: &str, count| Function {
            name: n.as_bytes().to_vec(),
            start: 0,
            end: 0,
            count,
        };
        let mut v = vec![f("a", 900), f("b", 95), f("c", 5), f("d", 4)];
        apply_limit(&mut v, 0.5, 1004);
        assert_eq!(v.len(), 3);
        apply_limit(&mut v, -3.0, 1004);
        assert_eq!(v.len(), 3);
        apply_limit(&mut v, 50.0, 1004);
        assert_eq!(v.len(), 1);
    }

    fn report(text: &[u8], dump: &[u8], mode: Mode, asm: bool) -> Result<String, ReportError> {
        let samples = parse_samples(text).unwrap();
        let functions = functions(&samples);
        let r = Report {
            samples: &samples,
            functions: &functions,
            mode,
            asm,
        };
        let mut out = Vec::new();
        r.write(&mut out, dump)?;
        Ok(String::from_utf8(out).unwrap())
    }

    const MAP: &[u8] =
        b"0x102 f 0x100 0x108\n0x102 f 0x100 0x108\n0x105 f 0x100 0x108\n0x200 g 0x200 0x204\n";

    const ASM: &[u8] =
        b"\nbin:     file format elf64-x86-64\n\n\nDisassembly of section .text:\n\n\
0000000000000100 <f>:\n  100:\t55\tpush %rbp\n  102:\t90\tnop\n  105:\tc3\tret\n\n\
bin:     file format elf64-x86-64\n\n\nDisassembly of section .text:\n\n\
0000000000000200 <g>:\n  200:\tc3\tret\n";

    #[test]
    fn assembly_report() {
        assert_eq!(
            report(MAP, ASM, Mode::Raw, true).unwrap(),
            "Profile trace for function: f() [75.00%]\n\
             \t|   100:\t55\tpush %rbp\n      2 |   102:\t90\tnop\n      1 |   105:\tc3\tret\n\n\
             Profile trace for function: g() [25.00%]\n      1 |   200:\tc3\tret\n\n"
        );
        let out = report(MAP, ASM, Mode::Block, true).unwrap();
        assert!(out.contains(" 66.67% |   102:"), "{out}");
        assert!(out.contains("100.00% |   200:"), "{out}");
        let out = report(MAP, ASM, Mode::Global, true).unwrap();
        assert!(out.contains(" 50.00% |   102:"), "{out}");
        // A function whose header is missing gets no lines.
        assert_eq!(
            report(MAP, b"nothing\n  100:\t55\tpush\n", Mode::Raw, true).unwrap(),
            "Profile trace for function: f() [75.00%]\n\n\
             Profile trace for function: g() [25.00%]\n\n"
        );
    }

    #[test]
    fn c_report() {
        let dump = b"0000000000000100 <f>:\nint\nf(void)\n  100:\t55\tpush %rbp\n\tx++;\n  102:\t90\tnop\n  105:\tc3\tret\n\
\treturn;\n  106:\tc3\tret\ntrailing\n\n0000000000000200 <g>:\n}\n  200:\tc3\tret\n";
        assert_eq!(
            report(MAP, dump, Mode::Raw, false).unwrap(),
            "Profile trace for function: f() [75.00%]\n\
             \t| int\n\t| f(void)\n      3 | \tx++;\n\t| \treturn;\n\n\
             Profile trace for function: g() [25.00%]\n      1 | }\n\n"
        );
        // A block must start with C.
        let bad = b"0000000000000100 <f>:\n  100:\t55\tpush %rbp\n";
        assert!(matches!(
            report(MAP, bad, Mode::Raw, false),
            Err(ReportError::BadC)
        ));
    }
}
