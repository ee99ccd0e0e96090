//! Synthetic ELF images.
//!
//! [`ImageBuilder`] writes a small but real little-endian ELF64 x86-64 file
//! with a `.text` section of genuine machine code and a symbol table, so that
//! a profiler under test can resolve sampled PCs to function names exactly as
//! it would with binaries on disk, and so that standard tools (`readelf`,
//! `nm`) can inspect what the tests produced. [`parse_symbols`] is an
//! independent reader used to check the writer.

/// `e_ident[EI_OSABI]` of FreeBSD binaries.
const ELFOSABI_FREEBSD: u8 = 9;
/// `e_machine` of x86-64.
const EM_X86_64: u16 = 62;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const PF_R: u32 = 4;
const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const SHN_ABS: u16 = 0xfff1;
const STB_LOCAL: u8 = 0;
const STB_GLOBAL: u8 = 1;
const STT_FUNC: u8 = 2;
const STT_FILE: u8 = 4;

const EHDR_SIZE: u64 = 64;
const PHDR_SIZE: u64 = 56;
const SHDR_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;
/// File offset of `.text`: right after the ELF header and the single
/// program header, rounded to the function alignment.
const TEXT_OFFSET: u64 = (EHDR_SIZE + PHDR_SIZE).next_multiple_of(FUNC_ALIGN);
const FUNC_ALIGN: u64 = 16;
const PAGE_SIZE: u64 = 0x1000;

/// Section indices, fixed by the layout the builder writes.
const SHNDX_TEXT: u16 = 1;
const SHNDX_STRTAB: u32 = 3;
const SHNDX_SHSTRTAB: u16 = 4;
const SECTION_COUNT: u16 = 5;

/// Link-time base of executables (the usual amd64 one).
pub const EXECUTABLE_BASE: u64 = 0x40_0000;
/// Link-time base of a FreeBSD amd64 kernel (`KERNBASE` plus 2 MB).
pub const KERNEL_BASE: u64 = 0xffff_ffff_8020_0000;

/// Function prologue: `push %rbp; mov %rsp,%rbp`.
pub const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
/// Function epilogue: `pop %rbp; ret`.
pub const EPILOGUE: [u8; 2] = [0x5d, 0xc3];
/// Single-byte `nop` filling function bodies.
const NOP: u8 = 0x90;
/// `int3` between functions, so a stray jump traps.
const INT3: u8 = 0xcc;
/// The smallest function: prologue, two body bytes, epilogue (so a PC
/// strictly inside the body always exists).
pub const MIN_FUNCTION_SIZE: u64 = 8;

/// What kind of object an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// `ET_EXEC` linked at [`EXECUTABLE_BASE`].
    Executable,
    /// `ET_DYN` linked at 0; a loader adds its load base.
    SharedObject,
    /// `ET_EXEC` linked at [`KERNEL_BASE`], like a FreeBSD amd64 kernel.
    Kernel,
}

impl ImageKind {
    /// The link-time virtual address of the first byte of the file.
    pub fn base(self) -> u64 {
        match self {
            ImageKind::Executable => EXECUTABLE_BASE,
            ImageKind::SharedObject => 0,
            ImageKind::Kernel => KERNEL_BASE,
        }
    }

    fn elf_type(self) -> u16 {
        match self {
            ImageKind::Executable | ImageKind::Kernel => ET_EXEC,
            ImageKind::SharedObject => ET_DYN,
        }
    }
}

/// A function of an image.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Function {
    /// Symbol name.
    pub name: String,
    /// Link-time address of the first byte (the `push %rbp`).
    pub start: u64,
    /// Size in bytes, as recorded in the symbol table.
    pub size: u64,
}

impl Function {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

/// A built ELF image and where its functions are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Path the image pretends to live at.
    pub path: String,
    /// Kind of object.
    pub kind: ImageKind,
    /// Link-time virtual address of the first byte of the file mapping.
    pub base: u64,
    /// Link-time address of the start of `.text`.
    pub text_start: u64,
    /// Link-time address one past the end of `.text`.
    pub text_end: u64,
    /// Functions in address order (which is declaration order).
    pub functions: Vec<Function>,
    /// The ELF file.
    pub bytes: Vec<u8>,
}

impl Image {
    /// The function called `name`.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The function containing `addr` once the image is loaded `load_bias`
    /// above its link-time addresses, and the offset of `addr` in it.
    pub fn symbolize(&self, addr: u64, load_bias: u64) -> Option<(&str, u64)> {
        let addr = addr.checked_sub(load_bias)?;
        // Functions are sorted and disjoint: the candidate is the last one
        // starting at or below `addr`.
        let i = self.functions.partition_point(|f| f.start <= addr);
        let f = &self.functions[i.checked_sub(1)?];
        (addr < f.end()).then(|| (f.name.as_str(), addr - f.start))
    }

    /// The contents of `.text` (the machine code at `text_start`).
    pub fn text(&self) -> &[u8] {
        // The mapping starts at file offset 0, so addresses and offsets
        // differ by `base`.
        let start = (self.text_start - self.base) as usize;
        let end = (self.text_end - self.base) as usize;
        &self.bytes[start..end]
    }
}

/// Builds an [`Image`]: name the functions, then [`ImageBuilder::build`].
#[derive(Debug, Clone)]
pub struct ImageBuilder {
    path: String,
    kind: ImageKind,
    functions: Vec<(String, u64)>,
}

impl ImageBuilder {
    /// An image of `kind` that pretends to live at `path`.
    pub fn new(path: &str, kind: ImageKind) -> Self {
        ImageBuilder {
            path: path.to_owned(),
            kind,
            functions: Vec::new(),
        }
    }

    /// Appends a function of `size` bytes to `.text`.
    ///
    /// # Panics
    ///
    /// If `size` is below [`MIN_FUNCTION_SIZE`] or the name is empty,
    /// contains NUL or is already used: these are test-construction errors.
    pub fn function(&mut self, name: &str, size: u64) -> &mut Self {
        assert!(
            size >= MIN_FUNCTION_SIZE,
            "ImageBuilder::function({name:?}, {size}): a function needs at least \
             {MIN_FUNCTION_SIZE} bytes (prologue, body, epilogue)"
        );
        assert!(
            !name.is_empty() && !name.contains('\0'),
            "ImageBuilder::function({name:?}): a symbol name must be non-empty and without NUL"
        );
        assert!(
            self.functions.iter().all(|(n, _)| n != name),
            "ImageBuilder::function({name:?}): duplicate function name in {}",
            self.path
        );
        self.functions.push((name.to_owned(), size));
        self
    }

    /// Lays out the functions and writes the ELF file.
    pub fn build(&self) -> Image {
        let base = self.kind.base();
        let text_start = base + TEXT_OFFSET;

        // .text: functions back to back at 16-byte boundaries, int3 between.
        let mut text = Vec::new();
        let mut functions = Vec::with_capacity(self.functions.len());
        for (name, size) in &self.functions {
            let off = (text.len() as u64).next_multiple_of(FUNC_ALIGN);
            text.resize(off as usize, INT3);
            text.extend_from_slice(&PROLOGUE);
            text.resize(
                text.len() + (*size as usize - PROLOGUE.len() - EPILOGUE.len()),
                NOP,
            );
            text.extend_from_slice(&EPILOGUE);
            functions.push(Function {
                name: name.clone(),
                start: text_start + off,
                size: *size,
            });
        }
        let text_end = text_start + text.len() as u64;

        // .strtab: file name, then function names.
        let basename = self.path.rsplit('/').next().unwrap_or_default();
        let mut strtab = vec![0u8];
        let file_name = add_string(&mut strtab, basename);
        let mut symtab = vec![0u8; SYM_SIZE as usize]; // the null symbol
        push_symbol(
            &mut symtab,
            file_name,
            sym_info(STB_LOCAL, STT_FILE),
            SHN_ABS,
            0,
            0,
        );
        for f in &functions {
            let name = add_string(&mut strtab, &f.name);
            push_symbol(
                &mut symtab,
                name,
                sym_info(STB_GLOBAL, STT_FUNC),
                SHNDX_TEXT,
                f.start,
                f.size,
            );
        }
        // Locals first: the null and file symbols.
        let first_global = 2;

        let mut shstrtab = vec![0u8];
        let name_text = add_string(&mut shstrtab, ".text");
        let name_symtab = add_string(&mut shstrtab, ".symtab");
        let name_strtab = add_string(&mut shstrtab, ".strtab");
        let name_shstrtab = add_string(&mut shstrtab, ".shstrtab");

        // File layout: headers, .text, .symtab, .strtab, .shstrtab, section
        // headers.
        let text_off = TEXT_OFFSET;
        let symtab_off = (text_off + text.len() as u64).next_multiple_of(8);
        let strtab_off = symtab_off + symtab.len() as u64;
        let shstrtab_off = strtab_off + strtab.len() as u64;
        let shdr_off = (shstrtab_off + shstrtab.len() as u64).next_multiple_of(8);
        let file_size = shdr_off + SHDR_SIZE * u64::from(SECTION_COUNT);

        let mut out = Vec::with_capacity(file_size as usize);
        // e_ident
        out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, ELFOSABI_FREEBSD]);
        out.extend_from_slice(&[0; 8]);
        put16(&mut out, self.kind.elf_type());
        put16(&mut out, EM_X86_64);
        put32(&mut out, 1); // EV_CURRENT
        put64(&mut out, functions.first().map_or(0, |f| f.start));
        put64(&mut out, EHDR_SIZE); // e_phoff
        put64(&mut out, shdr_off);
        put32(&mut out, 0); // e_flags
        put16(&mut out, EHDR_SIZE as u16);
        put16(&mut out, PHDR_SIZE as u16);
        put16(&mut out, 1); // e_phnum
        put16(&mut out, SHDR_SIZE as u16);
        put16(&mut out, SECTION_COUNT);
        put16(&mut out, SHNDX_SHSTRTAB);

        // One R+X PT_LOAD from file offset 0 to the end of .text.
        put32(&mut out, PT_LOAD);
        put32(&mut out, PF_R | PF_X);
        put64(&mut out, 0);
        put64(&mut out, base);
        put64(&mut out, base);
        put64(&mut out, text_end - base);
        put64(&mut out, text_end - base);
        put64(&mut out, PAGE_SIZE);

        out.resize(text_off as usize, 0);
        out.extend_from_slice(&text);
        out.resize(symtab_off as usize, 0);
        out.extend_from_slice(&symtab);
        out.extend_from_slice(&strtab);
        out.extend_from_slice(&shstrtab);
        out.resize(shdr_off as usize, 0);

        out.extend_from_slice(&[0; SHDR_SIZE as usize]);
        let sections = [
            Shdr {
                name: name_text,
                kind: SHT_PROGBITS,
                flags: SHF_ALLOC | SHF_EXECINSTR,
                addr: text_start,
                offset: text_off,
                size: text.len() as u64,
                link: 0,
                info: 0,
                align: FUNC_ALIGN,
                entsize: 0,
            },
            Shdr {
                name: name_symtab,
                kind: SHT_SYMTAB,
                flags: 0,
                addr: 0,
                offset: symtab_off,
                size: symtab.len() as u64,
                link: SHNDX_STRTAB,
                info: first_global,
                align: 8,
                entsize: SYM_SIZE,
            },
            Shdr {
                name: name_strtab,
                kind: SHT_STRTAB,
                flags: 0,
                addr: 0,
                offset: strtab_off,
                size: strtab.len() as u64,
                link: 0,
                info: 0,
                align: 1,
                entsize: 0,
            },
            Shdr {
                name: name_shstrtab,
                kind: SHT_STRTAB,
                flags: 0,
                addr: 0,
                offset: shstrtab_off,
                size: shstrtab.len() as u64,
                link: 0,
                info: 0,
                align: 1,
                entsize: 0,
            },
        ];
        debug_assert_eq!(sections.len() + 1, usize::from(SECTION_COUNT));
        for s in &sections {
            s.write(&mut out);
        }
        debug_assert_eq!(out.len() as u64, file_size);

        Image {
            path: self.path.clone(),
            kind: self.kind,
            base,
            text_start,
            text_end,
            functions,
            bytes: out,
        }
    }
}

struct Shdr {
    name: u32,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

impl Shdr {
    fn write(&self, out: &mut Vec<u8>) {
        put32(out, self.name);
        put32(out, self.kind);
        put64(out, self.flags);
        put64(out, self.addr);
        put64(out, self.offset);
        put64(out, self.size);
        put32(out, self.link);
        put32(out, self.info);
        put64(out, self.align);
        put64(out, self.entsize);
    }
}

fn sym_info(bind: u8, kind: u8) -> u8 {
    (bind << 4) | kind
}

fn push_symbol(out: &mut Vec<u8>, name: u32, info: u8, shndx: u16, value: u64, size: u64) {
    put32(out, name);
    out.push(info);
    out.push(0); // st_other: STV_DEFAULT
    put16(out, shndx);
    put64(out, value);
    put64(out, size);
}

/// Appends a NUL-terminated string and returns its offset.
fn add_string(table: &mut Vec<u8>, s: &str) -> u32 {
    let off = u32::try_from(table.len()).expect("string table over 4 GB");
    table.extend_from_slice(s.as_bytes());
    table.push(0);
    off
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads the `STT_FUNC` symbols of an ELF64 little-endian file's `.symtab`
/// as `(name, value, size)`, in table order.
///
/// Written independently of [`ImageBuilder`] so tests can check it. Every
/// offset is bounds-checked: malformed input gives `Err`, never a panic.
pub fn parse_symbols(bytes: &[u8]) -> Result<Vec<(String, u64, u64)>, String> {
    let ehdr = range(bytes, 0, EHDR_SIZE, "ELF header")?;
    if ehdr[..4] != [0x7f, b'E', b'L', b'F'] {
        return Err("not an ELF file (bad magic)".into());
    }
    if ehdr[4] != 2 {
        return Err(format!("not ELF64 (EI_CLASS {})", ehdr[4]));
    }
    if ehdr[5] != 1 {
        return Err(format!("not little-endian (EI_DATA {})", ehdr[5]));
    }
    let shoff = le64(ehdr, 0x28)?;
    let shentsize = u64::from(le16(ehdr, 0x3a)?);
    let shnum = u64::from(le16(ehdr, 0x3c)?);
    if shnum == 0 {
        return Err("no section headers".into());
    }
    if shentsize < SHDR_SIZE {
        return Err(format!("section header size {shentsize} below {SHDR_SIZE}"));
    }
    let section = |i: u64| -> Result<&[u8], String> {
        if i >= shnum {
            return Err(format!("section index {i} out of range ({shnum} sections)"));
        }
        let off = i
            .checked_mul(shentsize)
            .and_then(|o| o.checked_add(shoff))
            .ok_or("section header offset overflows")?;
        range(bytes, off, SHDR_SIZE, "section header")
    };
    // Contents of a section, given its header.
    let contents = |sh: &[u8], what: &str| -> Result<&[u8], String> {
        range(bytes, le64(sh, 0x18)?, le64(sh, 0x20)?, what)
    };

    let mut symtab = None;
    for i in 0..shnum {
        let sh = section(i)?;
        if le32(sh, 4)? == SHT_SYMTAB {
            symtab = Some(sh);
            break;
        }
    }
    let symtab = symtab.ok_or("no .symtab section")?;
    let entsize = le64(symtab, 0x38)?;
    if entsize < SYM_SIZE {
        return Err(format!("symbol entry size {entsize} below {SYM_SIZE}"));
    }
    let syms = contents(symtab, ".symtab")?;
    let strtab_sh = section(u64::from(le32(symtab, 0x28)?))?;
    if le32(strtab_sh, 4)? != SHT_STRTAB {
        return Err(".symtab's sh_link is not a string table".into());
    }
    let strtab = contents(strtab_sh, ".strtab")?;

    let mut out = Vec::new();
    // `entsize` is at least 24, so this is bounded by the file size.
    let count = syms.len() as u64 / entsize;
    for i in 0..count {
        let sym = range(syms, i * entsize, SYM_SIZE, "symbol")?;
        if sym[4] & 0xf != STT_FUNC {
            continue;
        }
        let name_off = usize::try_from(le32(sym, 0)?).map_err(|_| "symbol name offset")?;
        let tail = strtab
            .get(name_off..)
            .ok_or_else(|| format!("symbol {i}: name offset {name_off} outside .strtab"))?;
        let len = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("symbol {i}: unterminated name"))?;
        let name = std::str::from_utf8(&tail[..len])
            .map_err(|_| format!("symbol {i}: name is not UTF-8"))?;
        out.push((name.to_owned(), le64(sym, 8)?, le64(sym, 16)?));
    }
    Ok(out)
}

/// `bytes[off..off + len]`, or an error naming `what`.
fn range<'a>(bytes: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8], String> {
    let end = off
        .checked_add(len)
        .ok_or_else(|| format!("{what}: offset {off:#x} + size {len:#x} overflows"))?;
    let (Ok(start), Ok(end)) = (usize::try_from(off), usize::try_from(end)) else {
        return Err(format!("{what}: offset {off:#x} out of range"));
    };
    bytes.get(start..end).ok_or_else(|| {
        format!(
            "{what}: bytes {start:#x}..{end:#x} outside the file ({:#x} bytes)",
            bytes.len()
        )
    })
}

fn le16(b: &[u8], off: usize) -> Result<u16, String> {
    field(b, off).map(u16::from_le_bytes)
}

fn le32(b: &[u8], off: usize) -> Result<u32, String> {
    field(b, off).map(u32::from_le_bytes)
}

fn le64(b: &[u8], off: usize) -> Result<u64, String> {
    field(b, off).map(u64::from_le_bytes)
}

fn field<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], String> {
    off.checked_add(N)
        .and_then(|end| b.get(off..end))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("field at {off:#x} outside its structure"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: ImageKind) -> Image {
        ImageBuilder::new("/usr/bin/sample", kind)
            .function("main", 64)
            .function("compute", 37)
            .function("helper", 8)
            .build()
    }

    const KINDS: [ImageKind; 3] = [
        ImageKind::Executable,
        ImageKind::SharedObject,
        ImageKind::Kernel,
    ];

    #[test]
    fn layout() {
        for kind in KINDS {
            let img = sample(kind);
            assert_eq!(img.base, kind.base());
            assert_eq!(img.text_start % FUNC_ALIGN, 0);
            let mut prev_end = img.text_start;
            for f in &img.functions {
                assert_eq!(f.start % FUNC_ALIGN, 0, "{}", f.name);
                assert!(f.start >= prev_end);
                prev_end = f.end();
            }
            assert_eq!(img.functions[0].start, img.text_start);
            assert_eq!(img.text_end, prev_end);
            let names: Vec<_> = img.functions.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, ["main", "compute", "helper"]);
            assert_eq!(img.text().len() as u64, img.text_end - img.text_start);
        }
    }

    #[test]
    fn symbols_round_trip() {
        for kind in KINDS {
            let img = sample(kind);
            let syms = parse_symbols(&img.bytes).unwrap();
            let expected: Vec<_> = img
                .functions
                .iter()
                .map(|f| (f.name.clone(), f.start, f.size))
                .collect();
            assert_eq!(syms, expected);
        }
    }

    #[test]
    fn header_fields() {
        for (kind, ty) in [
            (ImageKind::Executable, ET_EXEC),
            (ImageKind::SharedObject, ET_DYN),
            (ImageKind::Kernel, ET_EXEC),
        ] {
            let b = sample(kind).bytes;
            assert_eq!(&b[..4], b"\x7fELF");
            assert_eq!(b[4], 2, "ELFCLASS64");
            assert_eq!(b[5], 1, "ELFDATA2LSB");
            assert_eq!(b[7], ELFOSABI_FREEBSD);
            assert_eq!(le16(&b, 0x10).unwrap(), ty);
            assert_eq!(le16(&b, 0x12).unwrap(), EM_X86_64);
            let entry = le64(&b, 0x18).unwrap();
            assert_eq!(entry, kind.base() + TEXT_OFFSET);
        }
        let empty = ImageBuilder::new("empty", ImageKind::Executable).build();
        assert_eq!(le64(&empty.bytes, 0x18).unwrap(), 0);
        assert_eq!(parse_symbols(&empty.bytes).unwrap(), []);
    }

    #[test]
    fn machine_code() {
        let img = sample(ImageKind::Executable);
        let text = img.text();
        for f in &img.functions {
            let off = (f.start - img.text_start) as usize;
            let body = &text[off..off + f.size as usize];
            assert_eq!(body[..4], PROLOGUE, "{}", f.name);
            assert_eq!(body[body.len() - 2..], EPILOGUE, "{}", f.name);
            assert!(body[4..body.len() - 2].iter().all(|&b| b == NOP));
        }
        // Gaps between functions are int3.
        for w in img.functions.windows(2) {
            let gap = &text
                [(w[0].end() - img.text_start) as usize..(w[1].start - img.text_start) as usize];
            assert!(gap.iter().all(|&b| b == INT3));
        }
    }

    #[test]
    fn symbolize() {
        for (kind, bias) in [
            (ImageKind::Executable, 0),
            (ImageKind::SharedObject, 0x8_0000_0000),
            (ImageKind::Kernel, 0),
        ] {
            let img = sample(kind);
            for f in &img.functions {
                let a = f.start + bias;
                assert_eq!(img.symbolize(a, bias), Some((f.name.as_str(), 0)));
                let mid = f.size / 2;
                assert_eq!(img.symbolize(a + mid, bias), Some((f.name.as_str(), mid)));
                let last = f.size - 1;
                assert_eq!(img.symbolize(a + last, bias), Some((f.name.as_str(), last)));
                let past = img.symbolize(a + f.size, bias);
                assert!(past.is_none_or(|(n, o)| n != f.name && o == 0), "{past:?}");
            }
            // Before the first function, after the last, below the bias.
            assert_eq!(img.symbolize(img.text_start + bias - 1, bias), None);
            assert_eq!(img.symbolize(img.text_end + bias, bias), None);
            if bias > 0 {
                assert_eq!(img.symbolize(img.text_start, bias), None);
            }
        }
        // "compute" is 37 bytes: one past its end is int3 padding.
        let img = sample(ImageKind::Executable);
        let c = img.function("compute").unwrap();
        assert_eq!(img.symbolize(c.end(), 0), None);
        assert!(img.function("nonexistent").is_none());
    }

    #[test]
    #[should_panic(expected = "at least 8 bytes")]
    fn too_small() {
        ImageBuilder::new("x", ImageKind::Executable).function("tiny", 7);
    }

    #[test]
    #[should_panic(expected = "duplicate")]
    fn duplicate() {
        ImageBuilder::new("x", ImageKind::Executable)
            .function("f", 16)
            .function("f", 16);
    }

    /// Runs `tool args file` and returns its stdout, or `None` if the tool
    /// is not installed.
    fn run_tool(tool: &str, args: &[&str], img: &Image, tag: &str) -> Option<String> {
        let path = std::env::temp_dir().join(format!(
            "ksim-elf-{}-{tag}-{:?}",
            std::process::id(),
            img.kind
        ));
        std::fs::write(&path, &img.bytes).unwrap();
        let out = std::process::Command::new(tool)
            .args(args)
            .arg(&path)
            .output();
        std::fs::remove_file(&path).unwrap();
        let out = match out {
            Ok(out) => out,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("note: {tool} not found on PATH, skipping that check");
                return None;
            }
            Err(e) => panic!("running {tool}: {e}"),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{tool} failed: {stderr}\n{stdout}");
        assert!(stderr.is_empty(), "{tool} complained: {stderr}");
        Some(stdout)
    }

    #[test]
    fn readelf_accepts() {
        for kind in KINDS {
            let img = sample(kind);
            let Some(out) = run_tool("readelf", &["-W", "-s", "-l", "-h"], &img, "readelf") else {
                return;
            };
            for f in &img.functions {
                assert!(out.contains(&f.name), "{} missing from:\n{out}", f.name);
            }
            assert!(out.contains("sample"), "file symbol missing:\n{out}");
            assert!(out.contains("FreeBSD"), "OS/ABI missing:\n{out}");
            assert!(out.contains("LOAD"));
            let Some(all) = run_tool("readelf", &["-a", "-W"], &img, "readelf-a") else {
                return;
            };
            assert!(!all.to_lowercase().contains("warning"), "{all}");
        }
    }

    #[test]
    fn nm_accepts() {
        for kind in KINDS {
            let img = sample(kind);
            let Some(out) = run_tool("nm", &[], &img, "nm") else {
                return;
            };
            for f in &img.functions {
                let line = format!("{:016x} T {}", f.start, f.name);
                assert!(
                    out.lines().any(|l| l == line),
                    "{line:?} missing from:\n{out}"
                );
            }
        }
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(parse_symbols(&[]).is_err());
        assert!(parse_symbols(b"\x7fELF").is_err());
        let mut b = sample(ImageKind::Executable).bytes;
        b[4] = 1;
        assert!(parse_symbols(&b).is_err());
    }

    #[test]
    fn parse_never_panics_on_mutations() {
        let valid = sample(ImageKind::Executable).bytes;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut ok = 0;
        for _ in 0..5000 {
            let mut b = valid.clone();
            match next() % 4 {
                // Flip a few random bytes anywhere.
                0 => {
                    for _ in 0..1 + next() % 8 {
                        let i = (next() % b.len() as u64) as usize;
                        b[i] ^= next() as u8 | 1;
                    }
                }
                // Overwrite a field in the headers (where offsets and sizes
                // live) with an extreme or random value.
                1 => {
                    let i = (next() % 0x40) as usize;
                    let j =
                        b.len() - (SHDR_SIZE * 5) as usize + (next() % (SHDR_SIZE * 5)) as usize;
                    let v = match next() % 3 {
                        0 => u64::MAX,
                        1 => next(),
                        _ => next() % 0x200,
                    };
                    let at = if next() % 2 == 0 { i } else { j };
                    let n = [1usize, 2, 4, 8][(next() % 4) as usize];
                    for k in 0..n {
                        if let Some(x) = b.get_mut(at + k) {
                            *x = (v >> (8 * k)) as u8;
                        }
                    }
                }
                // Truncate.
                2 => b.truncate((next() % b.len() as u64) as usize),
                // Corrupt the symbol table and strings.
                _ => {
                    let start = TEXT_OFFSET as usize + 0x80;
                    for _ in 0..1 + next() % 16 {
                        let i = start + (next() % (b.len() - start) as u64) as usize;
                        b[i] = next() as u8;
                    }
                }
            }
            if parse_symbols(&b).is_ok() {
                ok += 1;
            }
        }
        // Some mutations are harmless; most structural ones are not.
        assert!(ok > 0 && ok < 5000, "{ok}");
    }
}

/// The address range of the text of an ELF64 image: its first PT_LOAD
/// segment that is executable, else its first PT_LOAD segment
/// (`[p_vaddr, p_vaddr + p_memsz)`), where exec maps it; `None` for
/// anything that is not a well-formed little-endian ELF64 file.
pub fn image_span(bytes: &[u8]) -> Option<(u64, u64)> {
    let loads = load_segments(bytes)?;
    // The map entry of a segment covers whole pages, as the kernel maps
    // it (and as hwpmc logs its start).
    loads
        .iter()
        .find(|l| l.flags & PF_X != 0)
        .or(loads.first())
        .and_then(|l| {
            let end = l.vaddr.checked_add(l.memsz)?;
            Some((l.vaddr & !(PAGE_SIZE - 1), end.next_multiple_of(PAGE_SIZE)))
        })
}

/// A PT_LOAD program header.
#[derive(Debug, Clone, Copy)]
struct LoadSegment {
    flags: u32,
    offset: u64,
    filesz: u64,
    vaddr: u64,
    memsz: u64,
}

/// The PT_LOAD segments of a little-endian ELF64 file, in order; `None`
/// for anything else, or headers that run past the file.
fn load_segments(bytes: &[u8]) -> Option<Vec<LoadSegment>> {
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    Some(
        (0..phnum)
            .filter_map(|i| {
                let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
                if u32_at(ph)? != 1 {
                    return None;
                }
                Some(LoadSegment {
                    flags: u32_at(ph + 4)?,
                    offset: u64_at(ph + 8)?,
                    vaddr: u64_at(ph + 0x10)?,
                    filesz: u64_at(ph + 0x20)?,
                    memsz: u64_at(ph + 0x28)?,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod span_tests {
    use super::*;

    #[test]
    fn the_load_segment_spans_the_text() {
        let img = ImageBuilder::new("/usr/bin/x", ImageKind::Executable)
            .function("main", 64)
            .build();
        let (start, end) = image_span(&img.bytes).unwrap();
        assert_eq!(start, EXECUTABLE_BASE);
        assert!(end >= img.text_end);
        assert_eq!(image_span(b"not elf"), None);
        assert_eq!(image_span(&img.bytes[..40]), None);
    }
}

/// The executable PT_LOAD segments of an ELF64 image, as (file offset,
/// file size, virtual address): what a trace decoder maps as the image's
/// code. Empty for anything that is not a well-formed little-endian
/// ELF64 file.
pub fn exec_segments(bytes: &[u8]) -> Vec<(u64, u64, u64)> {
    load_segments(bytes)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.flags & PF_X != 0)
        .map(|l| (l.offset, l.filesz, l.vaddr))
        .collect()
}
