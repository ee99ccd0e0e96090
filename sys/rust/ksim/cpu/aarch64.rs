//! What the CPU needs to know of AArch64 machine code.

use super::events::BranchKind;

/// The branch kind of the instruction word `insn`, or `None` when it is
/// not a branch.
pub fn classify(insn: u32) -> Option<BranchKind> {
    match insn {
        // B.cond and BC.cond; CBZ/CBNZ; TBZ/TBNZ.
        _ if insn & 0xff00_0000 == 0x5400_0000 => Some(BranchKind::Conditional),
        _ if insn & 0x7e00_0000 == 0x3400_0000 => Some(BranchKind::Conditional),
        _ if insn & 0x7e00_0000 == 0x3600_0000 => Some(BranchKind::Conditional),
        _ if insn & 0xfc00_0000 == 0x1400_0000 => Some(BranchKind::Jump),
        _ if insn & 0xfc00_0000 == 0x9400_0000 => Some(BranchKind::Call),
        _ if insn & 0xffff_fc1f == 0xd61f_0000 => Some(BranchKind::IndirectJump),
        _ if insn & 0xffff_fc1f == 0xd63f_0000 => Some(BranchKind::IndirectCall),
        _ if insn & 0xffff_fc1f == 0xd65f_0000 => Some(BranchKind::Return),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_by_encoding() {
        use BranchKind::*;
        let cases = [
            (0x5400_0040, Some(Conditional)),  // b.eq .+8
            (0xb400_0040, Some(Conditional)),  // cbz x0, .+8
            (0x3700_0040, Some(Conditional)),  // tbnz w0, #0, .+8
            (0x1400_0002, Some(Jump)),         // b .+8
            (0x9400_0002, Some(Call)),         // bl .+8
            (0xd61f_0200, Some(IndirectJump)), // br x16
            (0xd63f_0100, Some(IndirectCall)), // blr x8
            (0xd65f_03c0, Some(Return)),       // ret
            (0xd400_0001, None),               // svc #0
            (0xa9bf_7bfd, None),               // stp x29, x30, [sp, #-16]!
            (0xd503_201f, None),               // nop
        ];
        for (insn, want) in cases {
            assert_eq!(classify(insn), want, "{insn:#010x}");
        }
    }
}
