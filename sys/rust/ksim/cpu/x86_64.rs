//! What the CPU needs to know of x86-64 machine code and of FreeBSD's
//! amd64 user ABI.

use super::events::BranchKind;

/// The longest x86 instruction.
pub const MAX_INSN_LEN: usize = 15;

/// The branch kind of the instruction in `bytes` (which start at the
/// instruction and may run past its end), or `None` when it is not a
/// branch. Only the prefixes and the opcode are looked at: that is all
/// that tells branches apart.
pub fn classify(bytes: &[u8]) -> Option<BranchKind> {
    let mut i = 0;
    // Legacy prefixes and REX, in any number (the CPU accepts up to the
    // 15-byte limit; the emulator has already checked that).
    while let Some(&b) = bytes.get(i) {
        match b {
            0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 => i += 1,
            0x40..=0x4f => i += 1,
            _ => break,
        }
    }
    let op = *bytes.get(i)?;
    match op {
        0x70..=0x7f | 0xe0..=0xe3 => Some(BranchKind::Conditional),
        0xe8 => Some(BranchKind::Call),
        0xe9 | 0xeb => Some(BranchKind::Jump),
        0xc2 | 0xc3 | 0xca | 0xcb => Some(BranchKind::Return),
        0x0f => match *bytes.get(i + 1)? {
            0x80..=0x8f => Some(BranchKind::Conditional),
            _ => None,
        },
        0xff => {
            // The ModRM reg field picks the operation of opcode FF.
            let modrm = *bytes.get(i + 1)?;
            match (modrm >> 3) & 7 {
                2 | 3 => Some(BranchKind::IndirectCall),
                4 | 5 => Some(BranchKind::IndirectJump),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_by_opcode() {
        use BranchKind::*;
        let cases: &[(&[u8], Option<BranchKind>)] = &[
            (&[0x74, 0x05], Some(Conditional)),             // je
            (&[0x0f, 0x85, 0, 0, 0, 0], Some(Conditional)), // jne rel32
            (&[0xe2, 0xfe], Some(Conditional)),             // loop
            (&[0xe8, 0, 0, 0, 0], Some(Call)),
            (&[0xe9, 0, 0, 0, 0], Some(Jump)),
            (&[0xeb, 0xfe], Some(Jump)),
            (&[0xc3], Some(Return)),
            (&[0xf3, 0xc3], Some(Return)),             // rep ret
            (&[0xff, 0xd0], Some(IndirectCall)),       // call *%rax
            (&[0x41, 0xff, 0xd3], Some(IndirectCall)), // call *%r11
            (&[0xff, 0x24, 0xc5, 0, 0, 0, 0], Some(IndirectJump)), // jmp *(,%rax,8)
            (&[0x3e, 0xff, 0xe0], Some(IndirectJump)), // notrack jmp *%rax
            (&[0xff, 0xc0], None),                     // inc %eax
            (&[0xff, 0x30], None),                     // push (%rax)
            (&[0x0f, 0x05], None),                     // syscall
            (&[0x48, 0x89, 0xe5], None),               // mov %rsp,%rbp
            (&[0x66, 0x0f, 0x1f, 0x44, 0, 0], None),   // nopw
            (&[], None),
            (&[0x66], None),
            (&[0xff], None),
        ];
        for (bytes, want) in cases {
            assert_eq!(classify(bytes), *want, "{bytes:02x?}");
        }
    }
}
