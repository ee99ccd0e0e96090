//! A deterministic cycle cost model over the event stream, with a simple
//! branch predictor and a simple data cache, so that cycles, branch misses
//! and cache misses exist for the hardware models to count.
//!
//! The model, in full:
//! - every retired instruction costs [`CostConfig::base`] cycles;
//! - conditional branches are predicted by 2-bit saturating counters
//!   ([`PREDICTOR_ENTRIES`] of them, indexed by a hash of the PC, starting
//!   weakly not-taken); indirect jumps and calls by a direct-mapped branch
//!   target buffer ([`BTB_ENTRIES`], the last target seen at that PC);
//!   returns by a return stack of [`RETURN_STACK_DEPTH`] entries that
//!   calls push (the oldest entry is lost when it is full). Direct jumps
//!   and calls are always predicted. A misprediction costs
//!   [`CostConfig::mispredict_penalty`] cycles;
//! - data accesses go through one level-1 data cache, [`L1D_SETS`] sets of
//!   [`L1D_WAYS`] ways of [`LINE_SIZE`]-byte lines (32 KiB), with LRU
//!   replacement, write-allocate; an access that spans two lines looks up
//!   both. A miss costs [`CostConfig::miss_penalty`] cycles (an L2 that
//!   always hits).
//!
//! Nothing depends on time or addresses outside the event stream: the same
//! run gives the same cycles and misses.

use super::events::{BranchKind, Retired, Subscriber};

/// Conditional-branch predictor entries.
pub const PREDICTOR_ENTRIES: usize = 4096;
/// Branch target buffer entries.
pub const BTB_ENTRIES: usize = 1024;
/// Return stack depth.
pub const RETURN_STACK_DEPTH: usize = 16;
/// Cache line size in bytes.
pub const LINE_SIZE: u64 = 64;
/// L1D sets.
pub const L1D_SETS: usize = 64;
/// L1D ways.
pub const L1D_WAYS: usize = 8;

/// The model's costs in cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostConfig {
    /// Cycles of every instruction.
    pub base: u64,
    /// Extra cycles of a mispredicted branch.
    pub mispredict_penalty: u64,
    /// Extra cycles of an L1D miss.
    pub miss_penalty: u64,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            base: 1,
            mispredict_penalty: 16,
            miss_penalty: 14,
        }
    }
}

/// What the model counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostCounts {
    /// Instructions seen.
    pub instructions: u64,
    /// Cycles.
    pub cycles: u64,
    /// Branches whose direction or target was mispredicted.
    pub branch_misses: u64,
    /// L1D lookups (one per line an access touches).
    pub cache_accesses: u64,
    /// L1D misses.
    pub cache_misses: u64,
}

/// The cost model: a [`Subscriber`] that keeps [`CostCounts`].
#[derive(Debug, Clone)]
pub struct CostModel {
    config: CostConfig,
    counts: CostCounts,
    counters: Vec<u8>,
    btb: Vec<(u64, u64)>,
    return_stack: Vec<u64>,
    /// Per set, the tags of its lines, most recently used first.
    sets: Vec<Vec<u64>>,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel::new(CostConfig::default())
    }
}

fn pc_hash(pc: u64) -> usize {
    (pc ^ (pc >> 12) ^ (pc >> 24)) as usize
}

impl CostModel {
    /// A model with cold predictors and an empty cache.
    pub fn new(config: CostConfig) -> Self {
        CostModel {
            config,
            counts: CostCounts::default(),
            counters: vec![1; PREDICTOR_ENTRIES],
            btb: vec![(u64::MAX, 0); BTB_ENTRIES],
            return_stack: Vec::with_capacity(RETURN_STACK_DEPTH),
            sets: (0..L1D_SETS)
                .map(|_| Vec::with_capacity(L1D_WAYS))
                .collect(),
        }
    }

    /// Its costs.
    pub fn config(&self) -> CostConfig {
        self.config
    }

    /// What it has counted so far.
    pub fn counts(&self) -> CostCounts {
        self.counts
    }

    /// Whether the branch of `insn` was mispredicted; trains the
    /// predictors.
    fn predict(&mut self, insn: &Retired<'_>, kind: BranchKind, taken: bool) -> bool {
        let fallthrough = insn.pc + u64::from(insn.len);
        match kind {
            BranchKind::Conditional => {
                let c = &mut self.counters[pc_hash(insn.pc) % PREDICTOR_ENTRIES];
                let predicted = *c >= 2;
                *c = if taken {
                    (*c + 1).min(3)
                } else {
                    c.saturating_sub(1)
                };
                predicted != taken
            }
            BranchKind::Jump => false,
            BranchKind::Call => {
                self.push_return(fallthrough);
                false
            }
            BranchKind::IndirectJump | BranchKind::IndirectCall => {
                if kind == BranchKind::IndirectCall {
                    self.push_return(fallthrough);
                }
                let e = &mut self.btb[pc_hash(insn.pc) % BTB_ENTRIES];
                let hit = *e == (insn.pc, insn.next_pc);
                *e = (insn.pc, insn.next_pc);
                !hit
            }
            BranchKind::Return => self.return_stack.pop() != Some(insn.next_pc),
        }
    }

    fn push_return(&mut self, addr: u64) {
        if self.return_stack.len() == RETURN_STACK_DEPTH {
            self.return_stack.remove(0);
        }
        self.return_stack.push(addr);
    }

    /// Looks up one line; whether it missed.
    fn touch(&mut self, line: u64) -> bool {
        let set = &mut self.sets[(line % L1D_SETS as u64) as usize];
        let tag = line / L1D_SETS as u64;
        match set.iter().position(|&t| t == tag) {
            Some(i) => {
                set[..=i].rotate_right(1);
                false
            }
            None => {
                if set.len() == L1D_WAYS {
                    set.pop();
                }
                set.insert(0, tag);
                true
            }
        }
    }
}

impl Subscriber for CostModel {
    fn retired(&mut self, insn: &Retired<'_>) {
        let mut cycles = self.config.base;
        if let Some(b) = insn.branch
            && self.predict(insn, b.kind, b.taken)
        {
            self.counts.branch_misses += 1;
            cycles += self.config.mispredict_penalty;
        }
        for a in insn.accesses {
            let first = a.addr / LINE_SIZE;
            let last = (a.addr + u64::from(a.size.max(1)) - 1) / LINE_SIZE;
            for line in first..=last {
                self.counts.cache_accesses += 1;
                if self.touch(line) {
                    self.counts.cache_misses += 1;
                    cycles += self.config.miss_penalty;
                }
            }
        }
        self.counts.instructions += 1;
        self.counts.cycles += cycles;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::events::{AccessKind, Branch, MemAccess, Mode};

    fn insn(
        pc: u64,
        next_pc: u64,
        branch: Option<(BranchKind, bool)>,
        accesses: &[MemAccess],
    ) -> Retired<'_> {
        Retired {
            cpu: 0,
            mode: Mode::User,
            pc,
            len: 4,
            next_pc,
            branch: branch.map(|(kind, taken)| Branch { kind, taken }),
            accesses,
        }
    }

    fn load(addr: u64, size: u32) -> MemAccess {
        MemAccess {
            kind: AccessKind::Load,
            addr,
            size,
        }
    }

    #[test]
    fn two_bit_counters() {
        // Always taken: the cold counter (weakly not-taken) misses once.
        let mut m = CostModel::default();
        for _ in 0..100 {
            m.retired(&insn(
                0x1000,
                0x800,
                Some((BranchKind::Conditional, true)),
                &[],
            ));
        }
        assert_eq!(m.counts().branch_misses, 1);
        assert_eq!(m.counts().cycles, 100 + 16);
        // Alternating from weakly not-taken: every one misses (T: 1->2,
        // N: 2->1, ...).
        let mut m = CostModel::default();
        for i in 0..100 {
            let taken = i % 2 == 0;
            let next = if taken { 0x800 } else { 0x1004 };
            m.retired(&insn(
                0x1000,
                next,
                Some((BranchKind::Conditional, taken)),
                &[],
            ));
        }
        assert_eq!(m.counts().branch_misses, 100);
        // Not taken from the start: never a miss.
        let mut m = CostModel::default();
        for _ in 0..10 {
            m.retired(&insn(
                0x1000,
                0x1004,
                Some((BranchKind::Conditional, false)),
                &[],
            ));
        }
        assert_eq!(m.counts().branch_misses, 0);
    }

    #[test]
    fn return_stack_and_btb() {
        // 20 nested calls and their returns: the return stack keeps the
        // innermost 16, so the outer 4 returns miss.
        let mut m = CostModel::default();
        for d in 0..20u64 {
            let pc = 0x1000 + d * 0x100;
            m.retired(&insn(pc, pc + 0x100, Some((BranchKind::Call, true)), &[]));
        }
        for d in (0..20u64).rev() {
            let ret_to = 0x1000 + d * 0x100 + 4;
            m.retired(&insn(0x9000, ret_to, Some((BranchKind::Return, true)), &[]));
        }
        assert_eq!(m.counts().branch_misses, 4);
        // An indirect jump: cold miss, hit on the same target, miss on a
        // new one.
        let mut m = CostModel::default();
        for next in [0x2000, 0x2000, 0x3000, 0x3000] {
            m.retired(&insn(
                0x1000,
                next,
                Some((BranchKind::IndirectJump, true)),
                &[],
            ));
        }
        assert_eq!(m.counts().branch_misses, 2);
    }

    #[test]
    fn lru_cache() {
        // 32 KiB read twice: 512 cold misses, then all hits.
        let mut m = CostModel::default();
        for round in 0..2 {
            for line in 0..512u64 {
                m.retired(&insn(
                    0x1000,
                    0x1004,
                    None,
                    &[load(0x10_0000 + line * 64, 8)],
                ));
            }
            assert_eq!(m.counts().cache_misses, 512, "round {round}");
        }
        // Nine lines of one set (4 KiB apart) in turn: LRU evicts each
        // before its reuse, so every access misses.
        let mut m = CostModel::default();
        for _ in 0..5 {
            for i in 0..9u64 {
                m.retired(&insn(
                    0x1000,
                    0x1004,
                    None,
                    &[load(0x20_0000 + i * 4096, 8)],
                ));
            }
        }
        assert_eq!(m.counts().cache_misses, 45);
        // Eight fit.
        let mut m = CostModel::default();
        for _ in 0..5 {
            for i in 0..8u64 {
                m.retired(&insn(
                    0x1000,
                    0x1004,
                    None,
                    &[load(0x20_0000 + i * 4096, 8)],
                ));
            }
        }
        assert_eq!(m.counts().cache_misses, 8);
        // An access across a line boundary looks up both lines.
        let mut m = CostModel::default();
        m.retired(&insn(0x1000, 0x1004, None, &[load(0x30_003c, 8)]));
        assert_eq!((m.counts().cache_accesses, m.counts().cache_misses), (2, 2));
        assert_eq!(m.counts().cycles, 1 + 2 * 14);
    }
}
