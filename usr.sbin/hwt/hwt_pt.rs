//! Intel PT decoding for hwt(8) (hwt_pt.c): the trace of each thread, as
//! collected from its ring buffer, decoded with Intel's libipt against the
//! images the records named, each instruction printed with its image and
//! function.

use std::io::Write;

use libpmcstat::libpmcstat_image::{Image, ImageWarnings};
use libpmcstat::libpmcstat_string::StringPool;

/// An object the process mapped, as the records said: its file, where
/// its code is, and its symbols.
pub struct Object {
    /// The path the record named.
    pub path: String,
    /// The file read (under the file system root).
    pub file: String,
    /// Load bias: run-time address minus link-time address.
    pub bias: u64,
    /// Its text, at run-time addresses.
    pub start: u64,
    pub end: u64,
    image: Image,
    /// The file name as each instruction's line shows it (right-aligned
    /// to 12 columns).
    column: String,
    /// Its symbols' ranges in address order (link-time addresses, less
    /// the image's vaddr, as libpmcstat keeps them).
    ranges: Vec<(u64, u64)>,
}

/// What an instruction's address is in: its object, and its symbol's name
/// and run-time start.
type Found<'a> = (&'a Object, Option<(&'a str, u64)>);

/// The images of a traced process.
pub struct Images {
    pool: StringPool,
    pub objects: Vec<Object>,
}

impl Images {
    pub fn new() -> Images {
        Images {
            pool: StringPool::new(),
            objects: Vec::new(),
        }
    }

    /// Reads `file` (the record's `path` under the root) mapped with its
    /// text mapping at `mapped` (the start of the page-aligned mapping of
    /// its first executable segment; 0 for an executable that loads where
    /// it was linked). None, with the reason, when it cannot be used.
    pub fn add(&mut self, path: &str, file: &str, mapped: u64) -> Result<&Object, String> {
        let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
        self.add_bytes(path, file, &bytes, mapped, false)
    }

    /// Reads the kernel object `file` (a KERNEL record's `path` under the
    /// root) that the kernel loaded at `addr`: the kernel itself, an
    /// executable, runs where it was linked; a module is placed at
    /// `addr`.
    pub fn add_kernel(&mut self, path: &str, file: &str, addr: u64) -> Result<&Object, String> {
        let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
        let executable = object::File::parse(&*bytes)
            .is_ok_and(|f| object::Object::kind(&f) == object::ObjectKind::Executable);
        let mapped = if executable { 0 } else { addr };
        self.add_bytes(path, file, &bytes, mapped, true)
    }

    fn add_bytes(
        &mut self,
        path: &str,
        file: &str,
        bytes: &[u8],
        mapped: u64,
        kernel: bool,
    ) -> Result<&Object, String> {
        let mut image = Image::new(self.pool.intern(path), kernel);
        let mut warnings = ImageWarnings::default();
        image.read_bytes(&mut self.pool, file, bytes, 0, &mut warnings);
        if image.end <= image.start {
            return Err(format!("{file}: no text to decode"));
        }
        let bias = if mapped == 0 {
            0
        } else {
            mapped.wrapping_sub(image.vaddr & !0xfff)
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        self.objects.push(Object {
            path: path.to_string(),
            file: file.to_string(),
            bias,
            start: image.start.wrapping_add(bias),
            end: image.end.wrapping_add(bias),
            column: format!("{name:>12}"),
            ranges: image.symbols.iter().map(|s| (s.start, s.end)).collect(),
            image,
        });
        Ok(self.objects.last().expect("pushed"))
    }

    /// The object holding run-time address `pc`, its symbol (with its
    /// run-time start), and the run-time addresses `lo..hi` around `pc`
    /// for which the lookup gives the same object and symbol.
    fn lookup_range(&self, pc: u64) -> Option<(Found<'_>, (u64, u64))> {
        let k = self
            .objects
            .iter()
            .position(|o| pc >= o.start && pc < o.end)?;
        let o = &self.objects[k];
        // libpmcstat keeps symbols as offsets from the image's vaddr.
        let base = o.bias.wrapping_add(o.image.vaddr);
        let rel = pc.wrapping_sub(base);
        let found = o.image.symbols.search(rel);
        // The search's answer changes only where a symbol starts or
        // ends: it stays the same from `rel` up to the next start and the
        // symbol's end; and down to the symbol's start when it is the
        // last symbol starting at or below `rel`.
        let next = o.ranges.partition_point(|r| r.0 <= rel);
        let mut hi = o.ranges.get(next).map_or(u64::MAX, |r| r.0);
        let mut lo = rel;
        if let Some(s) = found {
            hi = hi.min(s.end);
            if next > 0 && o.ranges[next - 1] == (s.start, s.end) {
                lo = s.start;
            }
        }
        // Back to run-time addresses, within the object and off the
        // objects before it in the list (the first that holds an address
        // is its object).
        let mut lo = pc.saturating_sub(rel - lo).max(o.start);
        let mut hi = pc.saturating_add(hi - rel).min(o.end);
        for e in &self.objects[..k] {
            if e.end <= pc {
                lo = lo.max(e.end);
            }
            if e.start > pc {
                hi = hi.min(e.start);
            }
        }
        let sym = found.map(|s| (self.pool.get(s.name), s.start.wrapping_add(base)));
        Some(((o, sym), (lo, hi)))
    }

    /// The link-time address range of function `name` in the object
    /// whose file name is `image`, at its run-time addresses.
    pub fn function(&self, image: &str, name: &str) -> Option<(u64, u64)> {
        let o = self
            .objects
            .iter()
            .find(|o| o.path.rsplit('/').next() == Some(image))?;
        let id = self.pool.lookup(name)?;
        let s = o.image.symbols.by_name(id)?;
        let base = o.bias.wrapping_add(o.image.vaddr);
        Some((s.start.wrapping_add(base), s.end.wrapping_add(base)))
    }

    /// libipt's image: the executable segments of every object.
    fn ipt_image(&self) -> ipt::Image {
        let mut image = ipt::Image::new("hwt");
        for o in &self.objects {
            let Ok(bytes) = std::fs::read(&o.file) else {
                continue;
            };
            for (off, size, vaddr) in exec_segments(&bytes) {
                let _ = image.add_file(
                    std::path::Path::new(&o.file),
                    off,
                    size,
                    vaddr.wrapping_add(o.bias),
                );
            }
        }
        image
    }
}

/// The executable PT_LOAD segments of an ELF64 file: (offset, size,
/// vaddr).
fn exec_segments(bytes: &[u8]) -> Vec<(u64, u64, u64)> {
    use object::{Object as _, ObjectSegment};
    let Ok(file) = object::File::parse(bytes) else {
        return Vec::new();
    };
    file.segments()
        .filter(|s| {
            matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0)
        })
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect()
}

/// The CPU the trace comes from, for libipt's errata.
#[derive(Debug, Clone, Copy)]
pub struct Cpu {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
}

impl Cpu {
    /// From a `kern.hwpmc.cpuid` string (`GenuineIntel-6-55-4`), as the
    /// simulated machine tells its CPU.
    #[cfg(feature = "sim")]
    pub fn from_key(key: &str) -> Option<Cpu> {
        let mut p = key.split('-');
        if p.next()? != "GenuineIntel" {
            return None;
        }
        let family = p.next()?.parse().ok()?;
        let model = u8::from_str_radix(p.next()?, 16).ok()?;
        let stepping = p
            .next()
            .map_or(Some(0), |s| u8::from_str_radix(s, 16).ok())?;
        Some(Cpu {
            family,
            model,
            stepping,
        })
    }
}

/// A column of the decoded output (-o).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `thr N`: the thread.
    Id,
    /// `pc 0x...`: the instruction's address.
    Pc,
    /// `(offset)`: its address from the start of its image.
    Offset,
    /// The image's file name.
    Image,
    /// `symbol+0x..`: its function and the offset in it.
    Symbol,
}

impl Column {
    /// The column named `name` (-o's words).
    pub fn from_name(name: &str) -> Option<Column> {
        Some(match name {
            "id" => Column::Id,
            "pc" => Column::Pc,
            "offset" => Column::Offset,
            "image" => Column::Image,
            "symbol" => Column::Symbol,
            _ => return None,
        })
    }

    fn key(self) -> &'static str {
        match self {
            Column::Id => "id",
            Column::Pc => "pc",
            Column::Offset => "offset",
            Column::Image => "image",
            Column::Symbol => "symbol",
        }
    }
}

/// How lines are written: FreeBSD's text, or libxo's JSON style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Style {
    /// The columns, in order; None for the default line.
    pub columns: Option<Vec<Column>>,
    /// libxo's JSON (`--libxo json`) instead of text.
    pub json: bool,
}

/// Whose trace a line comes from: a thread's (thread mode) or a CPU's
/// (CPU mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    Thread(i32),
    Cpu(i32),
}

impl Id {
    /// The number alone.
    pub fn number(self) -> i32 {
        match self {
            Id::Thread(n) | Id::Cpu(n) => n,
        }
    }
}

impl std::fmt::Display for Id {
    /// The id column: `thr N` or `CPU N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Thread(n) => write!(f, "thr {n}"),
            Id::Cpu(n) => write!(f, "CPU {n}"),
        }
    }
}

/// One decoded instruction, as its columns say it.
struct Line<'a> {
    id: Id,
    pc: u64,
    offset: Option<u64>,
    image: &'a str,
    symbol: String,
}

impl Line<'_> {
    /// The line of the instruction at `pc`, which `found` is in.
    fn of(id: Id, pc: u64, found: Option<Found<'_>>) -> Line<'_> {
        match found {
            Some((o, sym)) => Line {
                id,
                pc,
                offset: Some(pc.wrapping_sub(o.start)),
                image: o.path.rsplit('/').next().unwrap_or(&o.path),
                symbol: match sym {
                    Some((s, start)) => format!("{s}+{:#x}", pc.wrapping_sub(start)),
                    None => "?".into(),
                },
            },
            None => Line {
                id,
                pc,
                offset: None,
                image: "?",
                symbol: "?".into(),
            },
        }
    }

    fn text(&self, c: Column) -> String {
        match c {
            Column::Id => self.id.to_string(),
            Column::Pc => format!("pc {:#010x}", self.pc),
            Column::Offset => self.offset.map_or("(?)".into(), |o| format!("({o:x})")),
            Column::Image => format!("{:>12}", self.image),
            Column::Symbol => self.symbol.clone(),
        }
    }

    fn json(&self, c: Column) -> String {
        let v = match c {
            Column::Id => return format!("\"id\":{}", self.id.number()),
            Column::Pc => format!("{:#x}", self.pc),
            Column::Offset => self.offset.map_or("?".into(), |o| format!("{o:#x}")),
            Column::Image => self.image.to_string(),
            Column::Symbol => self.symbol.clone(),
        };
        let mut escaped = String::with_capacity(v.len());
        for ch in v.chars() {
            match ch {
                '"' => escaped.push_str("\\\""),
                '\\' => escaped.push_str("\\\\"),
                c if (c as u32) < 0x20 => escaped.push_str(&format!("\\u{:04x}", c as u32)),
                c => escaped.push(c),
            }
        }
        format!("\"{}\":\"{escaped}\"", c.key())
    }

    fn write(&self, out: &mut dyn Write, style: &Style, first: &mut bool) -> std::io::Result<()> {
        const DEFAULT: [Column; 4] = [Column::Id, Column::Pc, Column::Image, Column::Symbol];
        let cols: &[Column] = style.columns.as_deref().unwrap_or(&DEFAULT);
        if style.json {
            let fields: Vec<String> = if style.columns.is_none() {
                [
                    Column::Id,
                    Column::Pc,
                    Column::Offset,
                    Column::Image,
                    Column::Symbol,
                ]
                .iter()
                .map(|&c| self.json(c))
                .collect()
            } else {
                cols.iter().map(|&c| self.json(c)).collect()
            };
            let sep = if std::mem::take(first) { "" } else { ",\n" };
            return write!(out, "{sep}{{{}}}", fields.join(","));
        }
        if style.columns.is_none() && matches!(self.id, Id::Cpu(_)) {
            // CPU mode's line: the PC without the offset in its image.
            return writeln!(
                out,
                "{}\t{}\t{}\t{}",
                self.text(Column::Id),
                self.text(Column::Pc),
                self.text(Column::Image),
                self.text(Column::Symbol)
            );
        }
        if style.columns.is_none() {
            // FreeBSD's line: the offset follows the PC, in one column.
            return writeln!(
                out,
                "{}\t{} {}\t{}\t{}",
                self.text(Column::Id),
                self.text(Column::Pc),
                self.text(Column::Offset),
                self.text(Column::Image),
                self.text(Column::Symbol)
            );
        }
        let fields: Vec<String> = cols.iter().map(|&c| self.text(c)).collect();
        writeln!(out, "{}", fields.join("\t"))
    }
}

/// Opens and closes libxo's JSON document around the lines.
pub fn begin(out: &mut dyn Write, style: &Style) -> std::io::Result<()> {
    if style.json {
        writeln!(out, "{{\"hwt\": {{\"instruction\": [")?;
    }
    Ok(())
}

/// Ends what [`begin`] began.
pub fn end(out: &mut dyn Write, style: &Style) -> std::io::Result<()> {
    if style.json {
        writeln!(out, "\n]}}}}")?;
    }
    Ok(())
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            insns: 0,
            lost: 0,
            first: true,
        }
    }
}

/// What a decoded trace gave.
#[derive(Debug)]
pub struct Summary {
    /// Instructions printed.
    pub insns: u64,
    /// Places where decoding failed and resumed at the next PSB.
    pub lost: u64,
    /// No line was written yet (JSON separates them).
    pub first: bool,
}

/// Output gathered before a write.
const OUT_CHUNK: usize = 64 << 10;

/// The 16 hexadecimal digits of `v`, lower case, most significant first
/// (as bytes of a `u128`, in registers: the digits are not stored byte by
/// byte and read back, which would stall the copy of them).
fn hex_digits(v: u64) -> u128 {
    // Each nibble of a 32-bit half into a byte of its own, nibble k in
    // byte k.
    let spread = |x: u64| {
        let x = (x | x << 16) & 0x0000_FFFF_0000_FFFF;
        let x = (x | x << 8) & 0x00FF_00FF_00FF_00FF;
        (x | x << 4) & 0x0F0F_0F0F_0F0F_0F0F
    };
    // '0' + b, and 'a' - '0' - 10 more for the bytes above 9.
    let ascii = |x: u64| {
        let above9 = (x + 0x0606_0606_0606_0606) >> 4 & 0x0101_0101_0101_0101;
        x + 0x3030_3030_3030_3030 + above9 * (b'a' - b'0' - 10) as u64
    };
    u128::from(ascii(spread(v >> 32))) << 64 | u128::from(ascii(spread(v & 0xFFFF_FFFF)))
}

/// `v` in hexadecimal, lower case, in at least `min` digits (as `{:x}`
/// and `{:0min$x}`; `min` at most 16).
fn hex(buf: &mut Vec<u8>, v: u64, min: u32) {
    let n = (64 - v.leading_zeros()).div_ceil(4).max(min).clamp(1, 16);
    // The n digits first; sixteen bytes copied (a size the compiler
    // knows: no memcpy call), the unused ones cut off again.
    let end = buf.len() + n as usize;
    let shifted = if n == 16 { v } else { v << (4 * (16 - n)) };
    buf.extend_from_slice(&hex_digits(shifted).to_be_bytes());
    buf.truncate(end);
}

/// Bytes kept in blocks of 16, which are appended block by block (sizes
/// the compiler knows: no memcpy call for a few bytes) and cut to their
/// length.
#[derive(Default)]
struct Blocks {
    blocks: Vec<[u8; 16]>,
    len: usize,
}

impl Blocks {
    fn of(parts: &[&[u8]]) -> Blocks {
        let mut b = Blocks::default();
        b.set(parts);
        b
    }

    /// Makes them the concatenation of `parts`.
    fn set(&mut self, parts: &[&[u8]]) {
        self.blocks.clear();
        self.len = 0;
        for &byte in parts.iter().copied().flatten() {
            if self.len % 16 == 0 {
                self.blocks.push([0; 16]);
            }
            self.blocks[self.len / 16][self.len % 16] = byte;
            self.len += 1;
        }
    }

    fn put(&self, buf: &mut Vec<u8>) {
        let end = buf.len() + self.len;
        for b in &self.blocks {
            buf.extend_from_slice(b);
        }
        buf.truncate(end);
    }
}

/// What follows an instruction's address (and its offset in its object)
/// on its line, up to its offset in its function: `)<TAB>image<TAB>sym+0x`,
/// `)<TAB>image<TAB>?` outside every symbol, ` (?)<TAB>?<TAB>?` outside
/// every object.
fn tail(found: Option<Found<'_>>, into: &mut Blocks) {
    match found {
        Some((o, Some((name, _)))) => {
            into.set(&[b")\t", o.column.as_bytes(), b"\t", name.as_bytes(), b"+0x"])
        }
        Some((o, None)) => into.set(&[b")\t", o.column.as_bytes(), b"\t?"]),
        None => into.set(&[b" (?)\t           ?\t?"]),
    }
}

/// One instruction's line: `prefix` (`thr N<TAB>pc 0x`), the address,
/// and what `lookup` found for it, whose [`tail`] is `tail`.
fn line(buf: &mut Vec<u8>, prefix: &Blocks, pc: u64, found: Option<Found<'_>>, tail: &Blocks) {
    prefix.put(buf);
    hex(buf, pc, 8);
    if let Some((o, sym)) = found {
        buf.extend_from_slice(b" (");
        hex(buf, pc.wrapping_sub(o.start), 1);
        tail.put(buf);
        if let Some((_, start)) = sym {
            hex(buf, pc.wrapping_sub(start), 1);
        }
    } else {
        tail.put(buf);
    }
    buf.push(b'\n');
}

/// Decodes one contiguous piece of the trace of `id` and prints each
/// instruction: a thread's as `thr N<TAB>pc 0x...<TAB>(rel)<TAB>image<TAB>sym+0x..`,
/// a CPU's as `CPU N<TAB>pc 0x...<TAB>image<TAB>sym+0x..`.
#[allow(clippy::too_many_arguments)]
pub fn decode_as(
    out: &mut dyn Write,
    style: &Style,
    id: Id,
    trace: &[u8],
    images: &Images,
    cpu: Cpu,
    filter: Option<(u64, u64)>,
    summary: &mut Summary,
) -> std::io::Result<()> {
    if trace.is_empty() {
        return Ok(());
    }
    let mut cfg = match ipt::Config::new(trace).cpu(cpu.family, cpu.model, cpu.stepping) {
        Ok(c) => c,
        Err(_) => ipt::Config::new(trace),
    };
    if let Some((a, b)) = filter {
        cfg = cfg.addr_filter(1, &[(a, b)]);
    }
    let mut image = images.ipt_image();
    let Ok(mut dec) = ipt::InsnDecoder::new(&cfg, &mut image) else {
        return Ok(());
    };
    // FreeBSD's default line is written by hand; -o's columns and libxo's
    // JSON go through `Line`.
    // CPU mode's default line has no offset: through `Line` too.
    let fast = style.columns.is_none() && !style.json && matches!(id, Id::Thread(_));
    let prefix = Blocks::of(&[format!("{id}\tpc 0x").as_bytes()]);
    // The tail of the lines of the last lookup's symbol.
    let mut tail_of_last = Blocks::default();
    let mut buf: Vec<u8> = Vec::with_capacity(OUT_CHUNK + 512);
    // The last lookup and the addresses it holds for: consecutive
    // instructions are mostly in one function.
    let mut last: Option<(Found<'_>, (u64, u64))> = None;
    dec.decode_each(|item| {
        match item {
            ipt::Item::Insn(insn) => {
                summary.insns += 1;
                let pc = insn.ip;
                let found = match last {
                    Some((found, (lo, hi))) if pc >= lo && pc < hi => Some(found),
                    _ => {
                        last = images.lookup_range(pc);
                        let found = last.map(|(found, _)| found);
                        if fast {
                            tail(found, &mut tail_of_last);
                        }
                        found
                    }
                };
                if fast {
                    line(&mut buf, &prefix, pc, found, &tail_of_last);
                    if buf.len() >= OUT_CHUNK {
                        out.write_all(&buf)?;
                        buf.clear();
                    }
                } else {
                    Line::of(id, pc, found).write(out, style, &mut summary.first)?;
                }
            }
            ipt::Item::Lost { error, at, resync } => {
                summary.lost += 1;
                out.write_all(&buf)?;
                buf.clear();
                eprintln!(
                    "hwt: {}: decoding failed at offset {} ({}); resumed at {}",
                    match id {
                        Id::Thread(n) => format!("thread {n}"),
                        Id::Cpu(n) => format!("CPU {n}"),
                    },
                    at.map_or("?".into(), |a| format!("{a:#x}")),
                    error.text(),
                    resync.map_or("the end".into(), |r| format!("{r:#x}"))
                );
            }
            ipt::Item::Event(_) => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    use ksim::cpu::Arch;
    use ksim::programs;

    /// The reference: the lookup (libpmcstat's symbol search of every
    /// address) and the line (`Line`'s `format!`s and `writeln!`) of
    /// hwt's default output as it was before lines were written by hand.
    fn reference(images: &Images, thread: i32, pc: u64) -> String {
        let line = match images.objects.iter().find(|o| pc >= o.start && pc < o.end) {
            Some(o) => {
                let rel = pc.wrapping_sub(o.bias).wrapping_sub(o.image.vaddr);
                Line {
                    id: Id::Thread(thread),
                    pc,
                    offset: Some(pc.wrapping_sub(o.start)),
                    image: o.path.rsplit('/').next().unwrap_or(&o.path),
                    symbol: match o.image.symbols.search(rel) {
                        Some(s) => format!("{}+{:#x}", images.pool.get(s.name), rel - s.start),
                        None => "?".into(),
                    },
                }
            }
            None => Line {
                id: Id::Thread(thread),
                pc,
                offset: None,
                image: "?",
                symbol: "?".into(),
            },
        };
        let mut out = Vec::new();
        let style = Style {
            columns: None,
            json: false,
        };
        line.write(&mut out, &style, &mut true).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn ours(images: &Images, thread: i32, pc: u64) -> String {
        let mut buf = Vec::new();
        let found = images.lookup_range(pc).map(|(found, (lo, hi))| {
            assert!(lo <= pc && pc < hi, "{pc:#x} outside {lo:#x}..{hi:#x}");
            found
        });
        let mut t = Blocks::default();
        tail(found, &mut t);
        let prefix = Blocks::of(&[format!("thr {thread}\tpc 0x").as_bytes()]);
        line(&mut buf, &prefix, pc, found, &t);
        String::from_utf8(buf).unwrap()
    }

    /// Two programs, one of them loaded high above where it was linked,
    /// under names shorter and longer than the column.
    fn images(test: &str) -> (Images, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("hwt-pt-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut images = Images::new();
        for (name, path, mapped) in [
            ("calls", "/usr/bin/calls", 0),
            (
                "recurse",
                "/usr/local/bin/a-program-name-wider-than-12",
                0x7fff_1234_5000u64,
            ),
        ] {
            let file = dir.join(name);
            std::fs::write(&file, programs::image(Arch::X86_64, name).unwrap()).unwrap();
            images.add(path, file.to_str().unwrap(), mapped).unwrap();
        }
        (images, dir)
    }

    #[test]
    fn hex_is_that_of_format() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            15,
            16,
            0xabcdef,
            u64::MAX,
            1 << 63,
            0x1234_5678_9abc_def0,
        ];
        values.extend((0..64).map(|i| 1u64 << i));
        values.extend((0..64).map(|i| (1u64 << i) - 1));
        for v in values {
            let mut buf = b"x".to_vec();
            hex(&mut buf, v, 1);
            hex(&mut buf, v, 8);
            assert_eq!(String::from_utf8(buf).unwrap(), format!("x{v:x}{v:08x}"));
        }
    }

    #[test]
    fn lines_are_those_of_format() {
        let (images, dir) = images("lines");
        for o in &images.objects {
            for pc in o.start.saturating_sub(64)..o.end + 64 {
                for thread in [0, 7, -1, 123456] {
                    assert_eq!(ours(&images, thread, pc), reference(&images, thread, pc));
                }
            }
        }
        for pc in [
            0,
            1,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
            0x8000_0000_0000_0000,
        ] {
            assert_eq!(ours(&images, 3, pc), reference(&images, 3, pc));
        }
        // An instruction outside every symbol of its object.
        let o = &images.objects[0];
        let mut buf = Vec::new();
        let mut t = Blocks::default();
        tail(Some((o, None)), &mut t);
        line(
            &mut buf,
            &Blocks::of(&[b"thr 0\tpc 0x"]),
            o.start + 5,
            Some((o, None)),
            &t,
        );
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            format!("thr 0\tpc {:#010x} (5)\t{:>12}\t?\n", o.start + 5, "calls")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cpu_mode_lines_name_the_cpu_and_have_no_offset() {
        let (images, dir) = images("cpu");
        let text = Style {
            columns: None,
            json: false,
        };
        let mut n = 0;
        for o in &images.objects {
            for pc in (o.start..o.end).step_by(7) {
                let found = images.lookup_range(pc).map(|(found, _)| found);
                let mut out = Vec::new();
                Line::of(Id::Cpu(3), pc, found)
                    .write(&mut out, &text, &mut true)
                    .unwrap();
                // Thread mode's line, with `CPU 3` for `thr 3` and
                // without the offset after the PC.
                let thread = reference(&images, 3, pc);
                let f: Vec<&str> = thread.split('\t').collect();
                let pc_alone = f[1].split(' ').take(2).collect::<Vec<_>>().join(" ");
                let want = format!("CPU 3\t{pc_alone}\t{}\t{}", f[2], f[3]);
                assert_eq!(String::from_utf8(out).unwrap(), want);
                n += 1;
            }
        }
        assert!(n > 100);
        // libxo's JSON: the CPU's number as the id.
        let o = &images.objects[0];
        let mut out = Vec::new();
        let json = Style {
            columns: Some(vec![Column::Id, Column::Pc]),
            json: true,
        };
        Line::of(Id::Cpu(1), o.start, None)
            .write(&mut out, &json, &mut true)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{{\"id\":1,\"pc\":\"{:#x}\"}}", o.start)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_lookup_holds_over_its_range() {
        let (images, dir) = images("ranges");
        for o in &images.objects {
            let mut pc = o.start.saturating_sub(64);
            while pc < o.end + 64 {
                match images.lookup_range(pc) {
                    Some(((o, sym), (lo, hi))) => {
                        // Every address of the range looks up the same
                        // (and lines_are_those_of_format checks each
                        // lookup against the reference).
                        for a in lo..hi {
                            let ((o2, sym2), _) = images.lookup_range(a).unwrap();
                            assert!(
                                std::ptr::eq(o, o2) && sym == sym2,
                                "{a:#x} in {lo:#x}..{hi:#x}"
                            );
                        }
                        pc = hi;
                    }
                    None => pc += 1,
                }
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
