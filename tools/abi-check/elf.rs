//! Just enough ELF to read an initialised array out of a relocatable
//! object: the section and symbol tables, little-endian, 32 or 64 bit.

use std::fmt;

/// Why a symbol could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum ElfError {
    /// Not an ELF file, or a truncated or inconsistent one.
    Malformed(&'static str),
    /// Big-endian or another unsupported variant.
    Unsupported(&'static str),
    /// No symbol of that name.
    NoSymbol(String),
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Malformed(why) => write!(f, "malformed ELF object: {why}"),
            ElfError::Unsupported(why) => write!(f, "unsupported ELF object: {why}"),
            ElfError::NoSymbol(name) => write!(f, "no symbol {name} in the object"),
        }
    }
}

struct Elf<'a> {
    data: &'a [u8],
    is64: bool,
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;

impl<'a> Elf<'a> {
    fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
        if data.len() < 52 || &data[..4] != b"\x7fELF" {
            return Err(ElfError::Malformed("bad magic or too short"));
        }
        if data[5] != 1 {
            return Err(ElfError::Unsupported("not little-endian"));
        }
        let is64 = match data[4] {
            1 => false,
            2 => true,
            _ => return Err(ElfError::Malformed("bad class")),
        };
        Ok(Elf { data, is64 })
    }

    fn bytes(&self, off: usize, len: usize) -> Result<&'a [u8], ElfError> {
        off.checked_add(len)
            .and_then(|end| self.data.get(off..end))
            .ok_or(ElfError::Malformed("offset out of bounds"))
    }

    fn u16(&self, off: usize) -> Result<u64, ElfError> {
        Ok(u16::from_le_bytes(self.bytes(off, 2)?.try_into().unwrap_or_default()) as u64)
    }
    fn u32(&self, off: usize) -> Result<u64, ElfError> {
        Ok(u32::from_le_bytes(self.bytes(off, 4)?.try_into().unwrap_or_default()) as u64)
    }
    fn u64(&self, off: usize) -> Result<u64, ElfError> {
        Ok(u64::from_le_bytes(
            self.bytes(off, 8)?.try_into().unwrap_or_default(),
        ))
    }
    /// An address-sized field.
    fn word(&self, off: usize) -> Result<u64, ElfError> {
        if self.is64 {
            self.u64(off)
        } else {
            self.u32(off)
        }
    }

    fn sections(&self) -> Result<Vec<Section>, ElfError> {
        let (shoff, shentsize, shnum) = if self.is64 {
            (self.u64(0x28)?, self.u16(0x3A)?, self.u16(0x3C)?)
        } else {
            (self.u32(0x20)?, self.u16(0x2E)?, self.u16(0x30)?)
        };
        (0..shnum as usize)
            .map(|i| {
                let base = shoff as usize + i * shentsize as usize;
                Ok(if self.is64 {
                    Section {
                        kind: self.u32(base + 4)? as u32,
                        offset: self.u64(base + 0x18)? as usize,
                        size: self.u64(base + 0x20)? as usize,
                        link: self.u32(base + 0x28)? as usize,
                        entsize: self.u64(base + 0x38)? as usize,
                    }
                } else {
                    Section {
                        kind: self.u32(base + 4)? as u32,
                        offset: self.u32(base + 0x10)? as usize,
                        size: self.u32(base + 0x14)? as usize,
                        link: self.u32(base + 0x18)? as usize,
                        entsize: self.u32(base + 0x24)? as usize,
                    }
                })
            })
            .collect()
    }
}

/// The bytes of the defined symbol `name` in the relocatable object
/// `data` (zeros for a symbol in a no-bits section).
pub fn symbol_bytes(data: &[u8], name: &str) -> Result<Vec<u8>, ElfError> {
    let elf = Elf::parse(data)?;
    let sections = elf.sections()?;
    let symtab = sections
        .iter()
        .find(|s| s.kind == SHT_SYMTAB)
        .ok_or(ElfError::Malformed("no symbol table"))?;
    let strtab = sections
        .get(symtab.link)
        .ok_or(ElfError::Malformed("bad string table link"))?;
    let entsize = if symtab.entsize == 0 {
        return Err(ElfError::Malformed("zero symbol size"));
    } else {
        symtab.entsize
    };
    for i in 0..symtab.size / entsize {
        let base = symtab.offset + i * entsize;
        let (name_off, value, size, shndx) = if elf.is64 {
            (
                elf.u32(base)?,
                elf.u64(base + 8)?,
                elf.u64(base + 16)?,
                elf.u16(base + 6)?,
            )
        } else {
            (
                elf.u32(base)?,
                elf.word(base + 4)?,
                elf.u32(base + 8)?,
                elf.u16(base + 14)?,
            )
        };
        let start = strtab.offset + name_off as usize;
        let tail = elf.bytes(start, strtab.size.saturating_sub(name_off as usize))?;
        let sym_name = tail.split(|&b| b == 0).next().unwrap_or_default();
        if sym_name != name.as_bytes() {
            continue;
        }
        let section = sections
            .get(shndx as usize)
            .ok_or(ElfError::Malformed("symbol in no section"))?;
        if section.kind == SHT_NOBITS {
            return Ok(vec![0; size as usize]);
        }
        if value + size > section.size as u64 {
            return Err(ElfError::Malformed("symbol extends past its section"));
        }
        return Ok(elf
            .bytes(section.offset + value as usize, size as usize)?
            .to_vec());
    }
    Err(ElfError::NoSymbol(name.to_string()))
}

/// The defined symbol `name` read as an array of little-endian u64.
pub fn symbol_u64s(data: &[u8], name: &str) -> Result<Vec<u64>, ElfError> {
    let bytes = symbol_bytes(data, name)?;
    if bytes.len() % 8 != 0 {
        return Err(ElfError::Malformed("symbol size is not a multiple of 8"));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_elf() {
        assert_eq!(
            symbol_bytes(b"not an object at all, definitely not", "x"),
            Err(ElfError::Malformed("bad magic or too short"))
        );
        let mut big_endian = vec![0u8; 64];
        big_endian[..6].copy_from_slice(b"\x7fELF\x02\x02");
        assert_eq!(
            symbol_bytes(&big_endian, "x"),
            Err(ElfError::Unsupported("not little-endian"))
        );
        let mut no_sections = vec![0u8; 64];
        no_sections[..6].copy_from_slice(b"\x7fELF\x02\x01");
        assert_eq!(
            symbol_bytes(&no_sections, "x"),
            Err(ElfError::Malformed("no symbol table"))
        );
    }
}
