//! Executable images (libpmcstat_image.c): an ELF file named by a log's
//! exec and map-in records, read from under the analysis's file system
//! root, with the range of its text, its load address and its function
//! symbols, and (on demand) its DWARF line table.
//!
//! The ELF and DWARF formats are read with the `object` and `addr2line`
//! (`gimli`) crates. Differences from FreeBSD's reader, on purpose: an
//! image without executable sections gets no map entry (FreeBSD's
//! asserts); ARM mapping symbols and Thumb bits are handled by the
//! image's machine, not the host's, so that a log can be analysed on
//! another architecture.

use std::borrow::Cow;
use std::rc::Rc;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, FileKind, Object, ObjectSection};

use crate::libpmcstat_string::{IStr, StringPool};
use crate::libpmcstat_symbol::{Symbol, SymbolTable};

/// `enum pmcstat_image_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageType {
    /// Not looked at yet.
    Unknown,
    /// Looked at, and not something pmcstat can use.
    Indeterminable,
    /// A 32-bit ELF object.
    Elf32,
    /// A 64-bit ELF object.
    Elf64,
}

type Lines = addr2line::Context<gimli::EndianRcSlice<gimli::RunTimeEndian>>;

#[derive(Default)]
enum LineTable {
    #[default]
    NotRead,
    Absent,
    Read(Box<Lines>),
}

impl std::fmt::Debug for LineTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LineTable::NotRead => "NotRead",
            LineTable::Absent => "Absent",
            LineTable::Read(_) => "Read",
        })
    }
}

/// `struct pmcstat_image`.
#[derive(Debug)]
pub struct Image {
    /// The path the log named (`pi_execpath`).
    pub execpath: IStr,
    /// The file read: the path under the file system root (`pi_fullpath`).
    pub fullpath: Option<IStr>,
    /// The file's last path component (`pi_name`).
    pub name: Option<IStr>,
    /// What the file is.
    pub kind: ImageType,
    /// First byte of its text, as a link-time address.
    pub start: u64,
    /// One past the last byte of its text.
    pub end: u64,
    /// Where its first executable segment loads (`pi_vaddr`); symbol
    /// offsets are relative to it.
    pub vaddr: u64,
    /// It has a dynamic section.
    pub is_dynamic: bool,
    /// It was mapped into the kernel (the kernel or a module).
    pub is_kernel_module: bool,
    /// Its run-time linker (PT_INTERP).
    pub dynlinker: Option<IStr>,
    /// Its function symbols.
    pub symbols: SymbolTable,
    /// Its ELF machine (`e_machine`).
    pub machine: u16,
    lines: LineTable,
}

/// What reading an image said, for the caller to print: FreeBSD's
/// warnings, and whether it counts as an error of exec handling.
#[derive(Debug, Default)]
pub struct ImageWarnings {
    /// Messages, each one line without the program's name.
    pub messages: Vec<String>,
}

/// A source position of an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    /// The source file.
    pub file: String,
    /// Its line (0: unknown).
    pub line: u32,
}

impl Image {
    /// `pmcstat_image_from_path`'s new descriptor: not read yet.
    pub fn new(execpath: IStr, is_kernel_module: bool) -> Image {
        Image {
            execpath,
            fullpath: None,
            name: None,
            kind: ImageType::Unknown,
            start: !0,
            end: 0,
            vaddr: 0,
            is_dynamic: false,
            is_kernel_module,
            dynlinker: None,
            symbols: SymbolTable::default(),
            machine: 0,
            lines: LineTable::NotRead,
        }
    }

    /// `pmcstat_image_get_elf_params` and `pmcstat_image_determine_type`:
    /// reads the file `fullpath` (the log's path under the file system
    /// root), leaving the image Indeterminable when it cannot be used.
    /// `verbosity` decides which of FreeBSD's warnings are given.
    pub fn read(
        &mut self,
        strings: &mut StringPool,
        fullpath: &str,
        verbosity: u32,
        warnings: &mut ImageWarnings,
    ) {
        self.kind = ImageType::Indeterminable;
        self.start = !0;
        self.end = 0;
        self.vaddr = 0;
        self.is_dynamic = false;
        self.dynlinker = None;
        let data = match std::fs::read(fullpath) {
            Ok(d) => d,
            Err(_) => {
                warnings
                    .messages
                    .push(format!("WARNING: Cannot open \"{fullpath}\"."));
                return;
            }
        };
        self.read_bytes(strings, fullpath, &data, verbosity, warnings);
    }

    /// [`Image::read`] of the file's contents `data`, read from
    /// `fullpath`: any bytes give an image or a warning, never a panic
    /// (fuzzed).
    pub fn read_bytes(
        &mut self,
        strings: &mut StringPool,
        fullpath: &str,
        data: &[u8],
        verbosity: u32,
        warnings: &mut ImageWarnings,
    ) {
        self.kind = ImageType::Indeterminable;
        let parsed = match FileKind::parse(data) {
            Ok(FileKind::Elf32) => {
                parse_elf::<elf::FileHeader32<Endianness>>(data, self.is_kernel_module)
            }
            Ok(FileKind::Elf64) => {
                parse_elf::<elf::FileHeader64<Endianness>>(data, self.is_kernel_module)
            }
            _ => {
                if verbosity >= 2 {
                    warnings.messages.push(format!(
                        "WARNING: Cannot determine the type of \"{fullpath}\"."
                    ));
                }
                return;
            }
        };
        let elf = match parsed {
            Ok(e) => e,
            Err(e) => {
                warnings.messages.push(e.message(fullpath));
                return;
            }
        };
        let mut symbols = Vec::with_capacity(elf.symbols.len());
        for (name, value, size) in &elf.symbols {
            let start = value.wrapping_sub(elf.vaddr);
            symbols.push(Symbol {
                name: strings.intern(name),
                start,
                end: start.wrapping_add(*size),
            });
        }
        self.symbols = SymbolTable::new(symbols);
        self.is_dynamic = elf.is_dynamic;
        self.dynlinker = elf.interp.as_deref().map(|p| strings.intern(p));
        self.vaddr = elf.vaddr;
        self.start = elf.text.0;
        self.end = elf.text.1;
        self.kind = elf.class;
        self.machine = elf.machine;
        self.fullpath = Some(strings.intern(fullpath));
        let name = fullpath.rsplit('/').next().unwrap_or(fullpath);
        self.name = Some(strings.intern(name));
        self.lines = LineTable::NotRead;
    }

    /// Takes the DWARF line table from `data` (the image's file) instead
    /// of reading the file again; any bytes are accepted (fuzzed).
    pub fn set_lines_from(&mut self, data: &[u8]) {
        self.lines = lines_from(data).map_or(LineTable::Absent, |l| LineTable::Read(Box::new(l)));
    }

    /// True when the image has text that samples can fall in.
    pub fn has_text(&self) -> bool {
        self.start < self.end
    }

    /// The source line of the image offset `offset` (an address less
    /// [`Image::vaddr`]), from the file's DWARF line table, read the
    /// first time it is asked for.
    pub fn source_line(&mut self, strings: &StringPool, offset: u64) -> Option<SourceLine> {
        let vaddr = self.vaddr;
        let lines = self.line_table(strings)?;
        let loc = lines
            .find_location(vaddr.wrapping_add(offset))
            .ok()
            .flatten()?;
        Some(SourceLine {
            file: loc.file?.to_owned(),
            line: loc.line.unwrap_or(0),
        })
    }
}

/// What `addr2line -f` (without `-i`) says of an address, as FreeBSD's
/// pmcstat reads it from its pipe: the function the address lies in,
/// which is the innermost inlined one when the address is in code
/// inlined into another function, and the source position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLine {
    /// The function's name from the DWARF information (`??` when there
    /// is none).
    pub function: String,
    /// The source file and line of the address (the line is never 0).
    pub place: SourceLine,
}

impl Image {
    /// The DWARF information, read the first time it is asked for.
    fn line_table(&mut self, strings: &StringPool) -> Option<&Lines> {
        if let LineTable::NotRead = self.lines {
            self.lines = self
                .fullpath
                .and_then(|p| read_lines(strings.get(p)))
                .map_or(LineTable::Absent, |l| LineTable::Read(Box::new(l)));
        }
        match &self.lines {
            LineTable::Read(lines) => Some(lines),
            _ => None,
        }
    }

    /// `pmcstat_image_addr2line`: the function and source position of the
    /// image offset `offset`, or None when the DWARF information has no
    /// line for it (FreeBSD's gives up on a line 0 as well).
    pub fn function_line(&mut self, strings: &StringPool, offset: u64) -> Option<FunctionLine> {
        let probe = self.vaddr.wrapping_add(offset);
        let lines = self.line_table(strings)?;
        let loc = lines.find_location(probe).ok().flatten()?;
        let place = SourceLine {
            file: loc.file?.to_owned(),
            line: loc.line.filter(|&l| l != 0)?,
        };
        // The first frame is the innermost: the inlined function when
        // the address is in inlined code, else the function itself.
        let function = lines
            .find_frames(probe)
            .skip_all_loads()
            .ok()
            .and_then(|mut frames| frames.next().ok().flatten())
            .and_then(|f| f.function)
            .and_then(|f| f.demangle().ok().map(|n| n.into_owned()))
            .unwrap_or_else(|| "??".to_owned());
        Some(FunctionLine { function, place })
    }
}

/// What an ELF file holds for the analysis.
struct ElfParams {
    class: ImageType,
    machine: u16,
    vaddr: u64,
    is_dynamic: bool,
    interp: Option<String>,
    /// Lowest and one past the highest address of executable sections;
    /// (!0, 0) without any.
    text: (u64, u64),
    /// Function symbols: name, value, size.
    symbols: Vec<(String, u64, u64)>,
}

/// Why an ELF file could not be used, as FreeBSD words it.
enum ElfError {
    Header(String),
    UnsupportedType,
    ProgramHeaders(String),
    Sections(String),
}

impl ElfError {
    fn message(&self, path: &str) -> String {
        match self {
            ElfError::Header(e) => {
                format!("WARNING: Cannot retrieve the ELF Header for \"{path}\": {e}.")
            }
            ElfError::UnsupportedType => {
                format!("WARNING: \"{path}\" is of an unsupported ELF type.")
            }
            ElfError::ProgramHeaders(e) => format!(
                "WARNING: Could not determine the number of program headers in \"{path}\": {e}."
            ),
            ElfError::Sections(e) => {
                format!("WARNING: Could not determine the number of sections for \"{path}\": {e}.")
            }
        }
    }
}

fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    is_kernel_module: bool,
) -> Result<ElfParams, ElfError> {
    let header = Elf::parse(data).map_err(|e| ElfError::Header(e.to_string()))?;
    let endian = header
        .endian()
        .map_err(|e| ElfError::Header(e.to_string()))?;
    let e_type = header.e_type(endian);
    if e_type != elf::ET_EXEC
        && e_type != elf::ET_DYN
        && !(is_kernel_module && e_type == elf::ET_REL)
    {
        return Err(ElfError::UnsupportedType);
    }
    let class = if header.is_class_32() {
        ImageType::Elf32
    } else {
        ImageType::Elf64
    };
    let mut params = ElfParams {
        class,
        machine: header.e_machine(endian).0,
        vaddr: 0,
        is_dynamic: false,
        interp: None,
        text: (!0, 0),
        symbols: Vec::new(),
    };
    if e_type != elf::ET_REL {
        let phdrs = header
            .program_headers(endian, data)
            .map_err(|e| ElfError::ProgramHeaders(e.to_string()))?;
        let mut first_exec = true;
        for ph in phdrs {
            match ph.p_type(endian) {
                elf::PT_DYNAMIC => params.is_dynamic = true,
                elf::PT_INTERP => {
                    if let Ok(Some(bytes)) = ph.interpreter(endian, data) {
                        params.interp = Some(String::from_utf8_lossy(bytes).into_owned());
                    }
                }
                elf::PT_LOAD if ph.p_flags(endian).0 & elf::PF_X.0 != 0 && first_exec => {
                    let align: u64 = ph.p_align(endian).into();
                    let vaddr: u64 = ph.p_vaddr(endian).into();
                    params.vaddr = vaddr & align.wrapping_neg();
                    first_exec = false;
                }
                _ => {}
            }
        }
    }
    let sections = header
        .sections(endian, data)
        .map_err(|e| ElfError::Sections(e.to_string()))?;
    let arm = matches!(header.e_machine(endian), elf::EM_ARM | elf::EM_AARCH64);
    for section in sections.iter() {
        if section.sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0 {
            let addr: u64 = section.sh_addr(endian).into();
            let size: u64 = section.sh_size(endian).into();
            params.text.0 = params.text.0.min(addr);
            params.text.1 = params.text.1.max(addr.wrapping_add(size));
        }
    }
    for kind in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        let Ok(table) = sections.symbols(endian, data, kind) else {
            continue;
        };
        for sym in table.iter() {
            if sym.st_type() != elf::STT_FUNC || sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let Ok(name) = table.symbol_name(endian, sym) else {
                continue;
            };
            let mut value: u64 = sym.st_value(endian).into();
            if arm {
                if let [b'$', b'a' | b't' | b'd' | b'x', ..] = name {
                    continue;
                }
                value &= !1;
            }
            let size: u64 = sym.st_size(endian).into();
            params
                .symbols
                .push((String::from_utf8_lossy(name).into_owned(), value, size));
        }
    }
    Ok(params)
}

/// The DWARF line table of the ELF file at `path`, if it has one.
fn read_lines(path: &str) -> Option<Lines> {
    lines_from(&std::fs::read(path).ok()?)
}

/// The DWARF line table of an ELF file's contents, if it has one.
fn lines_from(data: &[u8]) -> Option<Lines> {
    let file = object::File::parse(data).ok()?;
    file.section_by_name(".debug_line")?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<_, gimli::Error> {
        let bytes: Cow<'_, [u8]> = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianRcSlice::new(Rc::from(&*bytes), endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}
