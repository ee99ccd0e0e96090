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
}

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
        let mut image = Image::new(self.pool.intern(path), false);
        let mut warnings = ImageWarnings::default();
        image.read_bytes(&mut self.pool, file, &bytes, 0, &mut warnings);
        if image.end <= image.start {
            return Err(format!("{file}: no text to decode"));
        }
        let bias = if mapped == 0 {
            0
        } else {
            mapped.wrapping_sub(image.vaddr & !0xfff)
        };
        self.objects.push(Object {
            path: path.to_string(),
            file: file.to_string(),
            bias,
            start: image.start.wrapping_add(bias),
            end: image.end.wrapping_add(bias),
            image,
        });
        Ok(self.objects.last().expect("pushed"))
    }

    /// The object holding run-time address `pc`, its symbol and offset.
    fn lookup(&self, pc: u64) -> Option<(&Object, Option<(&str, u64)>)> {
        let o = self.objects.iter().find(|o| pc >= o.start && pc < o.end)?;
        // libpmcstat keeps symbols as offsets from the image's vaddr.
        let rel = pc.wrapping_sub(o.bias).wrapping_sub(o.image.vaddr);
        let sym = o
            .image
            .symbols
            .search(rel)
            .map(|s| (self.pool.get(s.name), rel - s.start));
        Some((o, sym))
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

/// One decoded instruction, as its columns say it.
struct Line<'a> {
    thread: i32,
    pc: u64,
    offset: Option<u64>,
    image: &'a str,
    symbol: String,
}

impl Line<'_> {
    fn text(&self, c: Column) -> String {
        match c {
            Column::Id => format!("thr {}", self.thread),
            Column::Pc => format!("pc {:#010x}", self.pc),
            Column::Offset => self.offset.map_or("(?)".into(), |o| format!("({o:x})")),
            Column::Image => format!("{:>12}", self.image),
            Column::Symbol => self.symbol.clone(),
        }
    }

    fn json(&self, c: Column) -> String {
        let v = match c {
            Column::Id => return format!("\"id\":{}", self.thread),
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

/// Decodes one contiguous piece of a thread's trace and prints each
/// instruction as `thr N<TAB>pc 0x...<TAB>(rel)<TAB>image<TAB>sym+0x..`.
#[allow(clippy::too_many_arguments)]
pub fn decode(
    out: &mut dyn Write,
    style: &Style,
    thread: i32,
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
    for item in dec.decode_all() {
        match item {
            ipt::Item::Insn(insn) => {
                summary.insns += 1;
                let pc = insn.ip;
                let line = match images.lookup(pc) {
                    Some((o, sym)) => Line {
                        thread,
                        pc,
                        offset: Some(pc.wrapping_sub(o.start)),
                        image: o.path.rsplit('/').next().unwrap_or(&o.path),
                        symbol: match sym {
                            Some((s, off)) => format!("{s}+{off:#x}"),
                            None => "?".into(),
                        },
                    },
                    None => Line {
                        thread,
                        pc,
                        offset: None,
                        image: "?",
                        symbol: "?".into(),
                    },
                };
                line.write(out, style, &mut summary.first)?;
            }
            ipt::Item::Lost { error, at, resync } => {
                summary.lost += 1;
                eprintln!(
                    "hwt: thread {thread}: decoding failed at offset {} ({}); resumed at {}",
                    at.map_or("?".into(), |a| format!("{a:#x}")),
                    error.text(),
                    resync.map_or("the end".into(), |r| format!("{r:#x}"))
                );
            }
            ipt::Item::Event(_) => {}
        }
    }
    Ok(())
}
