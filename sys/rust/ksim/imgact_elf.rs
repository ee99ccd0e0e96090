//! Loading ELF64 executables into a CPU's address space, the part of
//! FreeBSD's ELF image activator that a static executable needs: the
//! PT_LOAD segments mapped at the addresses they ask for with their
//! rights, the rest of each segment's memory zero-filled, and a stack with
//! argc, argv, envp and the auxiliary vector laid out as FreeBSD's
//! exec_copyout_strings and auxargs do.
//!
//! Any file is read without a panic: what is wrong with a bad one comes
//! back as an [`ElfError`] that names it.

use std::fmt;

use crate::cpu::{Arch, Cpu, CpuError, PAGE_SIZE, Prot};

const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const ET_EXEC: u16 = 2;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PT_PHDR: u32 = 6;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
/// The most memory an image's segments may take together: the simulated
/// machine's limit (a resource limit, as RLIMIT_DATA is FreeBSD's), so that
/// a bad header cannot make the host map without bound.
pub const MAX_IMAGE_SIZE: u64 = 256 << 20;
/// More program headers than this is not a program (FreeBSD's limit is
/// what fits in the first page).
const MAX_PHNUM: u16 = 128;

/// The first address above user space on both architectures (48-bit
/// virtual addresses); FreeBSD puts the shared page just below it and the
/// stack below that.
pub const VM_MAXUSER_ADDRESS: u64 = 0x0000_8000_0000_0000;
/// The top of the initial stack (FreeBSD's USRSTACK with the shared page).
pub const USRSTACK: u64 = VM_MAXUSER_ADDRESS - PAGE_SIZE;
/// How much stack is mapped below [`USRSTACK`].
pub const STACK_SIZE: u64 = 8 << 20;

/// Auxiliary vector entries (sys/elf_common.h).
mod at {
    pub const NULL: u64 = 0;
    pub const PHDR: u64 = 3;
    pub const PHENT: u64 = 4;
    pub const PHNUM: u64 = 5;
    pub const PAGESZ: u64 = 6;
    pub const BASE: u64 = 7;
    pub const FLAGS: u64 = 8;
    pub const ENTRY: u64 = 9;
    pub const EXECPATH: u64 = 15;
    pub const NCPUS: u64 = 19;
    pub const EHDRFLAGS: u64 = 24;
    pub const ARGC: u64 = 28;
    pub const ARGV: u64 = 29;
    pub const ENVC: u64 = 30;
    pub const ENVV: u64 = 31;
    pub const USRSTACKBASE: u64 = 35;
    pub const USRSTACKLIM: u64 = 36;
}

/// What is wrong with an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfError {
    /// The file ends before a header or segment it declares.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed from the start of the file.
        needed: u64,
        /// The file's size.
        size: u64,
    },
    /// The first four bytes are not `\x7fELF`.
    BadMagic,
    /// `EI_CLASS` is not ELFCLASS64.
    NotElf64(u8),
    /// `EI_DATA` is not little-endian.
    NotLittleEndian(u8),
    /// `EI_VERSION` or `e_version` is not EV_CURRENT.
    BadVersion(u32),
    /// `e_type` is not ET_EXEC (position-independent and relocatable
    /// objects need a dynamic loader).
    NotExecutable(u16),
    /// `e_machine` is not x86-64 or AArch64.
    UnsupportedMachine(u16),
    /// `e_phentsize` is not the size of an ELF64 program header.
    BadPhentsize(u16),
    /// No program headers, or more than a program can have.
    BadPhnum(u16),
    /// A PT_INTERP header: the program wants a dynamic linker.
    Interpreter,
    /// No PT_LOAD segment.
    NoLoadableSegment,
    /// A segment whose file size exceeds its memory size.
    FileszExceedsMemsz {
        /// Program header index.
        index: usize,
    },
    /// A segment whose file offset and address differ modulo the page.
    Misaligned {
        /// Program header index.
        index: usize,
    },
    /// A segment that wraps around or reaches outside user space.
    OutsideUserSpace {
        /// Program header index.
        index: usize,
        /// Its address.
        vaddr: u64,
        /// Its memory size.
        memsz: u64,
    },
    /// Two segments map the same page with different contents rules
    /// (overlapping byte ranges).
    Overlap {
        /// The later segment's program header index.
        index: usize,
    },
    /// The entry point is not in an executable segment.
    EntryNotExecutable(u64),
    /// The file is for another architecture than the CPU's.
    WrongArch {
        /// The file's.
        file: Arch,
        /// The CPU's.
        cpu: Arch,
    },
    /// The segments together ask for more than [`MAX_IMAGE_SIZE`].
    TooLarge {
        /// Program header index of the segment that went past the limit.
        index: usize,
    },
    /// Arguments and environment do not fit in the stack.
    ArgumentsTooLong,
    /// The CPU refused a mapping or write.
    Cpu(CpuError),
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Truncated { what, needed, size } => {
                write!(
                    f,
                    "truncated: {what} needs {needed} bytes, the file has {size}"
                )
            }
            ElfError::BadMagic => f.write_str("not an ELF file (bad magic)"),
            ElfError::NotElf64(c) => write!(f, "not ELF64 (EI_CLASS {c})"),
            ElfError::NotLittleEndian(d) => write!(f, "not little-endian (EI_DATA {d})"),
            ElfError::BadVersion(v) => write!(f, "ELF version {v}, not 1"),
            ElfError::NotExecutable(t) => write!(f, "e_type {t} is not ET_EXEC"),
            ElfError::UnsupportedMachine(m) => write!(f, "e_machine {m} is not x86-64 or AArch64"),
            ElfError::BadPhentsize(s) => write!(f, "e_phentsize {s}, not {PHDR_SIZE}"),
            ElfError::BadPhnum(n) => write!(f, "e_phnum {n} (1 to {MAX_PHNUM})"),
            ElfError::Interpreter => f.write_str("dynamically linked (PT_INTERP)"),
            ElfError::NoLoadableSegment => f.write_str("no PT_LOAD segment"),
            ElfError::FileszExceedsMemsz { index } => {
                write!(f, "segment {index}: p_filesz exceeds p_memsz")
            }
            ElfError::Misaligned { index } => {
                write!(
                    f,
                    "segment {index}: p_offset and p_vaddr differ modulo the page size"
                )
            }
            ElfError::OutsideUserSpace {
                index,
                vaddr,
                memsz,
            } => {
                write!(
                    f,
                    "segment {index}: {vaddr:#x}+{memsz:#x} is outside user space"
                )
            }
            ElfError::Overlap { index } => write!(f, "segment {index} overlaps an earlier one"),
            ElfError::EntryNotExecutable(e) => {
                write!(f, "entry point {e:#x} is not in an executable segment")
            }
            ElfError::WrongArch { file, cpu } => {
                write!(f, "an {} program for an {} CPU", file.name(), cpu.name())
            }
            ElfError::TooLarge { index } => write!(
                f,
                "segment {index}: the segments take more than {MAX_IMAGE_SIZE} bytes"
            ),
            ElfError::ArgumentsTooLong => f.write_str("arguments and environment too long"),
            ElfError::Cpu(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ElfError {}

impl From<CpuError> for ElfError {
    fn from(e: CpuError) -> Self {
        ElfError::Cpu(e)
    }
}

/// A loadable segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Its address.
    pub vaddr: u64,
    /// Bytes of memory.
    pub memsz: u64,
    /// Where its bytes start in the file.
    pub offset: u64,
    /// Bytes taken from the file (the rest is zero).
    pub filesz: u64,
    /// Its rights.
    pub prot: Prot,
}

/// What a well-formed executable asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executable {
    /// The instruction set.
    pub arch: Arch,
    /// The entry point.
    pub entry: u64,
    /// `e_flags`.
    pub flags: u32,
    /// The loadable segments, in file order.
    pub segments: Vec<Segment>,
    /// The address of the program headers in memory, when a segment
    /// holds them.
    pub phdr: Option<u64>,
    /// The number of program headers.
    pub phnum: u16,
}

fn need(bytes: &[u8], what: &'static str, off: u64, len: u64) -> Result<(), ElfError> {
    let end = off.checked_add(len).ok_or(ElfError::Truncated {
        what,
        needed: u64::MAX,
        size: bytes.len() as u64,
    })?;
    if end > bytes.len() as u64 {
        return Err(ElfError::Truncated {
            what,
            needed: end,
            size: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Little-endian fields at offsets checked by `need` first.
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn page_down(a: u64) -> u64 {
    a & !(PAGE_SIZE - 1)
}

/// Reads and checks an executable's headers.
pub fn parse(bytes: &[u8]) -> Result<Executable, ElfError> {
    need(bytes, "ELF header", 0, EHDR_SIZE as u64)?;
    if bytes[..4] != [0x7f, b'E', b'L', b'F'] {
        return Err(ElfError::BadMagic);
    }
    if bytes[4] != 2 {
        return Err(ElfError::NotElf64(bytes[4]));
    }
    if bytes[5] != 1 {
        return Err(ElfError::NotLittleEndian(bytes[5]));
    }
    if bytes[6] != 1 {
        return Err(ElfError::BadVersion(u32::from(bytes[6])));
    }
    let e_type = u16_at(bytes, 0x10);
    let machine = u16_at(bytes, 0x12);
    let version = u32_at(bytes, 0x14);
    let entry = u64_at(bytes, 0x18);
    let phoff = u64_at(bytes, 0x20);
    let flags = u32_at(bytes, 0x30);
    let phentsize = u16_at(bytes, 0x36);
    let phnum = u16_at(bytes, 0x38);
    if version != 1 {
        return Err(ElfError::BadVersion(version));
    }
    if e_type != ET_EXEC {
        return Err(ElfError::NotExecutable(e_type));
    }
    let arch = match machine {
        EM_X86_64 => Arch::X86_64,
        EM_AARCH64 => Arch::Aarch64,
        m => return Err(ElfError::UnsupportedMachine(m)),
    };
    if usize::from(phentsize) != PHDR_SIZE {
        return Err(ElfError::BadPhentsize(phentsize));
    }
    if phnum == 0 || phnum > MAX_PHNUM {
        return Err(ElfError::BadPhnum(phnum));
    }
    need(
        bytes,
        "program headers",
        phoff,
        u64::from(phnum) * PHDR_SIZE as u64,
    )?;

    let mut segments: Vec<Segment> = Vec::new();
    let mut phdr = None;
    let mut total: u64 = 0;
    for index in 0..usize::from(phnum) {
        // In range: checked by `need` above, and phoff + the table fits
        // in the file, hence in usize.
        let h = &bytes[phoff as usize + index * PHDR_SIZE..][..PHDR_SIZE];
        let p_type = u32_at(h, 0);
        let p_flags = u32_at(h, 4);
        let offset = u64_at(h, 8);
        let vaddr = u64_at(h, 16);
        let filesz = u64_at(h, 32);
        let memsz = u64_at(h, 40);
        match p_type {
            PT_INTERP => return Err(ElfError::Interpreter),
            PT_PHDR => phdr = Some(vaddr),
            PT_LOAD => {
                if filesz > memsz {
                    return Err(ElfError::FileszExceedsMemsz { index });
                }
                if offset % PAGE_SIZE != vaddr % PAGE_SIZE {
                    return Err(ElfError::Misaligned { index });
                }
                need(bytes, "segment contents", offset, filesz)?;
                match vaddr.checked_add(memsz) {
                    Some(end) if end <= USRSTACK - STACK_SIZE && vaddr >= PAGE_SIZE => {}
                    _ => {
                        return Err(ElfError::OutsideUserSpace {
                            index,
                            vaddr,
                            memsz,
                        });
                    }
                }
                // The pages it touches; no overflow, as vaddr + memsz is
                // below USRSTACK.
                total += (vaddr + memsz).next_multiple_of(PAGE_SIZE) - page_down(vaddr);
                if total > MAX_IMAGE_SIZE {
                    return Err(ElfError::TooLarge { index });
                }
                if segments
                    .iter()
                    .any(|s| vaddr < s.vaddr + s.memsz && s.vaddr < vaddr + memsz)
                {
                    return Err(ElfError::Overlap { index });
                }
                let mut prot = Prot::NONE;
                if p_flags & PF_R != 0 {
                    prot = prot.union(Prot::READ);
                }
                if p_flags & PF_W != 0 {
                    prot = prot.union(Prot::WRITE);
                }
                if p_flags & PF_X != 0 {
                    prot = prot.union(Prot::EXEC);
                }
                segments.push(Segment {
                    vaddr,
                    memsz,
                    offset,
                    filesz,
                    prot,
                });
            }
            _ => {}
        }
    }
    if segments.is_empty() {
        return Err(ElfError::NoLoadableSegment);
    }
    if !segments
        .iter()
        .any(|s| s.prot.contains(Prot::EXEC) && s.vaddr <= entry && entry < s.vaddr + s.memsz)
    {
        return Err(ElfError::EntryNotExecutable(entry));
    }
    // Without PT_PHDR, the headers are in memory when a segment maps the
    // file bytes that hold them.
    if phdr.is_none() {
        let table_end = phoff + u64::from(phnum) * PHDR_SIZE as u64;
        phdr = segments
            .iter()
            .find(|s| s.offset <= phoff && table_end <= s.offset + s.filesz)
            .map(|s| s.vaddr + (phoff - s.offset));
    }
    Ok(Executable {
        arch,
        entry,
        flags,
        segments,
        phdr,
        phnum,
    })
}

/// Where a loaded program starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// The entry point.
    pub entry: u64,
    /// The initial stack pointer: it points at argc.
    pub stack: u64,
}

/// Maps `exe`'s segments (from `bytes`, the file it was parsed from) into
/// `cpu`'s address space and builds the initial stack from `argv` and
/// `envp`. Pages shared by two segments get the rights of both.
pub fn load(
    cpu: &mut Cpu,
    exe: &Executable,
    bytes: &[u8],
    path: &str,
    argv: &[&str],
    envp: &[&str],
) -> Result<Loaded, ElfError> {
    if exe.arch != cpu.arch() {
        return Err(ElfError::WrongArch {
            file: exe.arch,
            cpu: cpu.arch(),
        });
    }
    // The pages of all segments with their combined rights.
    let mut pages: std::collections::BTreeMap<u64, Prot> = std::collections::BTreeMap::new();
    for s in &exe.segments {
        if s.memsz == 0 {
            continue;
        }
        let mut page = page_down(s.vaddr);
        while page < s.vaddr + s.memsz {
            let p = pages.entry(page).or_default();
            *p = p.union(s.prot);
            page += PAGE_SIZE;
        }
    }
    // Runs of adjacent pages with the same rights, mapped at once.
    let mut runs: Vec<(u64, u64, Prot)> = Vec::new();
    for (&page, &prot) in &pages {
        match runs.last_mut() {
            Some((start, len, p)) if *start + *len == page && *p == prot => *len += PAGE_SIZE,
            _ => runs.push((page, PAGE_SIZE, prot)),
        }
    }
    for &(start, len, prot) in &runs {
        cpu.map(start, len, prot)?;
    }
    for s in &exe.segments {
        // parse checked that the range is in the file.
        let contents = &bytes[s.offset as usize..][..s.filesz as usize];
        cpu.write(s.vaddr, contents)?;
    }

    let stack = build_stack(cpu, exe, path, argv, envp)?;
    cpu.set_exec_registers(exe.entry, stack);
    Ok(Loaded {
        entry: exe.entry,
        stack,
    })
}

/// Maps the stack and lays out, from the top down: the strings (the
/// executable's path, the arguments, the environment), then, 16-byte
/// aligned, argc, argv[] and NULL, envp[] and NULL, and the auxiliary
/// vector. Returns the address of argc.
fn build_stack(
    cpu: &mut Cpu,
    exe: &Executable,
    path: &str,
    argv: &[&str],
    envp: &[&str],
) -> Result<u64, ElfError> {
    let base = USRSTACK - STACK_SIZE;
    cpu.map(base, STACK_SIZE, Prot::READ.union(Prot::WRITE))?;

    let strings_len: usize = std::iter::once(path)
        .chain(argv.iter().copied())
        .chain(envp.iter().copied())
        .map(|s| s.len() + 1)
        .sum();
    // Keep half the stack for the program.
    if strings_len as u64 + 8 * (argv.len() + envp.len()) as u64 > STACK_SIZE / 2 {
        return Err(ElfError::ArgumentsTooLong);
    }
    let mut top = USRSTACK;
    let mut put_string = |cpu: &mut Cpu, s: &str| -> Result<u64, ElfError> {
        top -= s.len() as u64 + 1;
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        cpu.write(top, &b)?;
        Ok(top)
    };
    let execpath = put_string(cpu, path)?;
    let arg_ptrs = argv
        .iter()
        .map(|s| put_string(cpu, s))
        .collect::<Result<Vec<_>, _>>()?;
    let env_ptrs = envp
        .iter()
        .map(|s| put_string(cpu, s))
        .collect::<Result<Vec<_>, _>>()?;

    // argc, argv[] and NULL, envp[] and NULL, 16 auxv pairs and AT_NULL's.
    let words = 1 + arg_ptrs.len() + 1 + env_ptrs.len() + 1 + 2 * (16 + 1);
    let sp = (top - 8 * words as u64) & !0xf;
    let argv_addr = sp + 8;
    let envv_addr = argv_addr + 8 * (arg_ptrs.len() as u64 + 1);
    let auxv: [(u64, u64); 16] = [
        (at::PHDR, exe.phdr.unwrap_or(0)),
        (at::PHENT, PHDR_SIZE as u64),
        (at::PHNUM, u64::from(exe.phnum)),
        (at::PAGESZ, PAGE_SIZE),
        (at::FLAGS, 0),
        (at::ENTRY, exe.entry),
        (at::BASE, 0),
        (at::EHDRFLAGS, u64::from(exe.flags)),
        (at::EXECPATH, execpath),
        (at::NCPUS, 1),
        (at::ARGC, arg_ptrs.len() as u64),
        (at::ARGV, argv_addr),
        (at::ENVC, env_ptrs.len() as u64),
        (at::ENVV, envv_addr),
        (at::USRSTACKBASE, USRSTACK),
        (at::USRSTACKLIM, STACK_SIZE),
    ];
    let mut v: Vec<u64> = Vec::with_capacity(words + 2);
    v.push(arg_ptrs.len() as u64);
    v.extend(&arg_ptrs);
    v.push(0);
    v.extend(&env_ptrs);
    v.push(0);
    for (k, val) in auxv {
        v.push(k);
        v.push(val);
    }
    v.push(at::NULL);
    v.push(0);
    debug_assert_eq!(v.len(), words);
    let bytes: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
    cpu.write(sp, &bytes)?;
    Ok(sp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs;

    fn sort() -> Vec<u8> {
        programs::image(Arch::X86_64, "sort").expect("the build made it")
    }

    fn set16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn set32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn set64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Offset of program header `i` and the index of the first PT_LOAD.
    fn phdr(b: &[u8], i: usize) -> usize {
        u64_at(b, 0x20) as usize + i * PHDR_SIZE
    }
    fn load_indices(b: &[u8]) -> Vec<usize> {
        (0..usize::from(u16_at(b, 0x38)))
            .filter(|&i| u32_at(b, phdr(b, i)) == PT_LOAD)
            .collect()
    }

    #[test]
    fn real_programs_parse() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            for name in programs::NAMES {
                let image = programs::image(arch, name).unwrap();
                let exe = parse(&image).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(exe.arch, arch);
                assert!(exe.segments.iter().any(|s| s.prot.contains(Prot::EXEC)));
                assert!(exe.phdr.is_some(), "{name}: lld writes PT_PHDR");
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let image = sort();
        let headers_end = phdr(&image, usize::from(u16_at(&image, 0x38)));
        for len in 0..headers_end {
            let e = parse(&image[..len]).expect_err("truncated");
            assert!(matches!(e, ElfError::Truncated { .. }), "{len}: {e}");
        }
        assert_eq!(
            parse(&image[..10]),
            Err(ElfError::Truncated {
                what: "ELF header",
                needed: 64,
                size: 10
            })
        );
        // Cut inside the last segment's contents.
        let last = *load_indices(&image).last().unwrap();
        let end = u64_at(&image, phdr(&image, last) + 8) + u64_at(&image, phdr(&image, last) + 32);
        let e = parse(&image[..end as usize - 1]).unwrap_err();
        assert_eq!(
            e,
            ElfError::Truncated {
                what: "segment contents",
                needed: end,
                size: end - 1
            }
        );
    }

    #[test]
    fn corrupt_headers_name_what_is_wrong() {
        let good = sort();
        let loads = load_indices(&good);
        let text = loads
            .iter()
            .copied()
            .find(|&i| u32_at(&good, phdr(&good, i) + 4) & PF_X != 0)
            .unwrap();
        let data = *loads.last().unwrap();
        type Corrupt = fn(&mut Vec<u8>, usize, usize);
        let cases: Vec<(Corrupt, ElfError)> = vec![
            (|b, _, _| b[0] = 0x7e, ElfError::BadMagic),
            (|b, _, _| b[4] = 1, ElfError::NotElf64(1)),
            (|b, _, _| b[5] = 2, ElfError::NotLittleEndian(2)),
            (|b, _, _| b[6] = 0, ElfError::BadVersion(0)),
            (|b, _, _| set32(b, 0x14, 2), ElfError::BadVersion(2)),
            (
                |b, _, _| set16(b, 0x10, ET_DYN_FOR_TEST),
                ElfError::NotExecutable(3),
            ),
            (|b, _, _| set16(b, 0x12, 3), ElfError::UnsupportedMachine(3)),
            (|b, _, _| set16(b, 0x36, 32), ElfError::BadPhentsize(32)),
            (|b, _, _| set16(b, 0x38, 0), ElfError::BadPhnum(0)),
            (|b, _, _| set16(b, 0x38, 1000), ElfError::BadPhnum(1000)),
            (
                |b, _, _| set64(b, 0x18, 0x10),
                ElfError::EntryNotExecutable(0x10),
            ),
            (
                |b, t, _| {
                    let o = phdr(b, t);
                    set32(b, o, PT_INTERP);
                },
                ElfError::Interpreter,
            ),
            (
                |b, _, d| {
                    let o = phdr(b, d);
                    let memsz = u64_at(b, o + 40);
                    set64(b, o + 32, memsz + 1);
                },
                ElfError::FileszExceedsMemsz { index: 0 },
            ),
            (
                |b, _, d| {
                    let o = phdr(b, d);
                    let off = u64_at(b, o + 8);
                    set64(b, o + 8, off + 1);
                },
                ElfError::Misaligned { index: 0 },
            ),
            (
                |b, _, d| {
                    let o = phdr(b, d);
                    let v = u64_at(b, o + 16);
                    set64(b, o + 16, v + 0xffff_8000_0000_0000);
                },
                ElfError::OutsideUserSpace {
                    index: 0,
                    vaddr: 0,
                    memsz: 0,
                },
            ),
            (
                |b, _, d| {
                    let o = phdr(b, d);
                    set64(b, o + 40, u64::MAX - 0x10);
                    set64(b, o + 32, 0);
                },
                ElfError::OutsideUserSpace {
                    index: 0,
                    vaddr: 0,
                    memsz: 0,
                },
            ),
            (
                |b, _, d| {
                    let o = phdr(b, d);
                    set64(b, o + 40, 1 << 40);
                },
                ElfError::TooLarge { index: 0 },
            ),
            (
                |b, t, d| {
                    // The data segment moved onto the text segment.
                    let (ot, od) = (phdr(b, t), phdr(b, d));
                    let (v, off) = (u64_at(b, ot + 16), u64_at(b, ot + 8));
                    set64(b, od + 16, v);
                    set64(b, od + 8, off);
                    set64(b, od + 32, 0);
                },
                ElfError::Overlap { index: 0 },
            ),
            (
                |b, t, _| {
                    for i in 0..usize::from(u16_at(b, 0x38)) {
                        let o = phdr(b, i);
                        if u32_at(b, o) == PT_LOAD && i != t {
                            set32(b, o, 0);
                        }
                    }
                    let o = phdr(b, t);
                    set32(b, o, 0);
                },
                ElfError::NoLoadableSegment,
            ),
        ];
        for (i, (corrupt, want)) in cases.into_iter().enumerate() {
            let mut b = good.clone();
            corrupt(&mut b, text, data);
            let got = parse(&b).expect_err(&format!("case {i} is corrupt"));
            // Index, address and size fields vary with the layout: compare
            // the kind of error.
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(&want),
                "case {i}: {got}"
            );
            if !matches!(
                want,
                ElfError::FileszExceedsMemsz { .. }
                    | ElfError::Misaligned { .. }
                    | ElfError::OutsideUserSpace { .. }
                    | ElfError::Overlap { .. }
                    | ElfError::TooLarge { .. }
            ) {
                assert_eq!(got, want, "case {i}");
            }
            assert!(!got.to_string().is_empty());
        }
    }

    const ET_DYN_FOR_TEST: u16 = 3;

    /// Random byte changes in the headers never panic the parser or the
    /// loader.
    #[test]
    fn random_corruption_never_panics() {
        let good = sort();
        let headers_end = phdr(&good, usize::from(u16_at(&good, 0x38)));
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut loaded = 0;
        for _ in 0..1000 {
            let mut b = good.clone();
            for _ in 0..(rand() % 4 + 1) {
                let at = (rand() % headers_end as u64) as usize;
                b[at] = rand() as u8;
            }
            if let Ok(exe) = parse(&b) {
                let mut cpu = Cpu::new(exe.arch, 0).unwrap();
                if load(&mut cpu, &exe, &b, "/x", &["x"], &[]).is_ok() {
                    loaded += 1;
                }
            }
        }
        assert!(loaded > 0, "some changes leave a loadable program");
    }

    #[test]
    fn load_maps_segments_and_builds_the_stack() {
        let image = sort();
        let exe = parse(&image).unwrap();
        let mut cpu = Cpu::new(Arch::X86_64, 0).unwrap();
        let loaded = load(
            &mut cpu,
            &exe,
            &image,
            "/bin/sort",
            &["sort", "7"],
            &["A=b"],
        )
        .unwrap();
        assert_eq!(cpu.pc(), exe.entry);
        for s in &exe.segments {
            let mut mem = vec![0u8; s.memsz as usize];
            cpu.read(s.vaddr, &mut mem).unwrap();
            let file = &image[s.offset as usize..][..s.filesz as usize];
            assert_eq!(&mem[..file.len()], file);
            assert!(mem[file.len()..].iter().all(|&b| b == 0), "bss is zero");
        }
        let word = |cpu: &Cpu, a: u64| {
            let mut b = [0u8; 8];
            cpu.read(a, &mut b).unwrap();
            u64::from_le_bytes(b)
        };
        let string = |cpu: &Cpu, a: u64| {
            let mut s = Vec::new();
            let mut b = [0u8; 1];
            for i in 0.. {
                cpu.read(a + i, &mut b).unwrap();
                if b[0] == 0 {
                    break;
                }
                s.push(b[0]);
            }
            String::from_utf8(s).unwrap()
        };
        let sp = loaded.stack;
        assert_eq!(sp % 16, 0);
        assert_eq!(word(&cpu, sp), 2, "argc");
        assert_eq!(string(&cpu, word(&cpu, sp + 8)), "sort");
        assert_eq!(string(&cpu, word(&cpu, sp + 16)), "7");
        assert_eq!(word(&cpu, sp + 24), 0);
        assert_eq!(string(&cpu, word(&cpu, sp + 32)), "A=b");
        assert_eq!(word(&cpu, sp + 40), 0);
        // The auxiliary vector, up to AT_NULL.
        let mut aux = std::collections::HashMap::new();
        let mut a = sp + 48;
        loop {
            let (k, v) = (word(&cpu, a), word(&cpu, a + 8));
            if k == at::NULL {
                break;
            }
            aux.insert(k, v);
            a += 16;
        }
        assert_eq!(aux[&at::ENTRY], exe.entry);
        assert_eq!(aux[&at::PAGESZ], PAGE_SIZE);
        assert_eq!(aux[&at::PHNUM], u64::from(exe.phnum));
        assert_eq!(aux[&at::ARGC], 2);
        assert_eq!(aux[&at::ARGV], sp + 8);
        assert_eq!(aux[&at::ENVV], sp + 32);
        assert_eq!(string(&cpu, aux[&at::EXECPATH]), "/bin/sort");
        // The program headers are where AT_PHDR says.
        let mut ph = vec![0u8; PHDR_SIZE];
        cpu.read(aux[&at::PHDR], &mut ph).unwrap();
        let off = u64_at(&image, 0x20) as usize;
        assert_eq!(ph, image[off..off + PHDR_SIZE]);

        // An arm64 file on an amd64 CPU.
        let arm = programs::image(Arch::Aarch64, "sort").unwrap();
        let exe = parse(&arm).unwrap();
        let mut cpu = Cpu::new(Arch::X86_64, 0).unwrap();
        assert_eq!(
            load(&mut cpu, &exe, &arm, "/x", &[], &[]),
            Err(ElfError::WrongArch {
                file: Arch::Aarch64,
                cpu: Arch::X86_64
            })
        );
    }
}
