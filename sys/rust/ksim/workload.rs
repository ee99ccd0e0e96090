//! Workload programs: thread activities whose samples have known
//! distributions.
//!
//! A [`Program`] is built from [`Image`]s: each declared function gets a
//! weight (its share of the thread's ticks spent in the function itself) and
//! a call chain. Every [`Activity::step`] picks a function with probability
//! proportional to its weight and reports a PC inside its body plus the
//! return addresses of its callers, so a profile of the thread can be
//! compared with [`Program::expected_share`] and [`Program::call_site`].
//! Everything is deterministic from the seed.

use crate::elf::{EPILOGUE, Function, Image, PROLOGUE};
use crate::machine::{Activity, Location};

/// One choice of [`Program::step`]: where the thread is when it is picked.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    weight: u32,
    kernel: bool,
    /// PCs are drawn from `pc_lo..pc_hi` (absolute addresses).
    pc_lo: u64,
    pc_hi: u64,
    /// Return addresses of the callers, innermost first (absolute).
    returns: Vec<u64>,
}

/// A thread activity that spends configured shares of its ticks in
/// functions of an executable (and optionally of a kernel), with fixed call
/// chains. Build it with [`Program::builder`].
#[derive(Debug, Clone)]
pub struct Program {
    load_bias: u64,
    user_functions: Vec<Function>,
    kernel_functions: Vec<Function>,
    entries: Vec<Entry>,
    /// Running sums of the weights, for picking an entry.
    cumulative: Vec<u64>,
    total: u64,
    /// Distinct names in declaration order.
    names: Vec<String>,
    /// User stack (PC first) while the thread is in the kernel.
    syscall_stack: Vec<u64>,
    rng: u64,
}

/// The return address used when `caller` calls `callee`: a fixed spot in
/// `caller`'s body (after the prologue, before the epilogue) chosen by a
/// hash of both names, so different callees get different call sites.
fn site(caller: &Function, callee: &str) -> u64 {
    let body = caller.size - (PROLOGUE.len() + EPILOGUE.len()) as u64;
    caller.start
        + PROLOGUE.len() as u64
        + fnv1a(&[caller.name.as_bytes(), callee.as_bytes()]) % body
}

/// FNV-1a over the parts, with a separator so ("ab","c") != ("a","bc").
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for &b in part.iter().chain(&[0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Pseudo-callee naming the syscall instruction of the user function the
/// thread entered the kernel from.
const SYSCALL_SITE: &str = "<syscall>";

/// The range of PCs strictly inside `f`'s body, shifted by `bias`.
fn body_range(f: &Function, bias: u64) -> (u64, u64) {
    (
        f.start + PROLOGUE.len() as u64 + bias,
        f.end() - EPILOGUE.len() as u64 + bias,
    )
}

fn lookup<'a>(img: &'a Image, name: &str, what: &str) -> &'a Function {
    img.function(name).unwrap_or_else(|| {
        panic!(
            "workload: {what} {name:?} is not a function of {} (functions: {:?})",
            img.path,
            img.functions.iter().map(|f| &f.name).collect::<Vec<_>>()
        )
    })
}

/// Return addresses of a call chain: `name` is called by `callers[0]`,
/// which is called by `callers[1]`, and so on.
fn chain(img: &Image, name: &str, callers: &[&str], bias: u64) -> Vec<u64> {
    let mut callee = name;
    callers
        .iter()
        .map(|&caller| {
            let ret = site(lookup(img, caller, "caller"), callee) + bias;
            callee = caller;
            ret
        })
        .collect()
}

impl Program {
    /// Starts a program running `exe` loaded `load_bias` above its link-time
    /// addresses, with its random choices seeded by `seed`.
    pub fn builder(exe: &Image, load_bias: u64, seed: u64) -> ProgramBuilder<'_> {
        ProgramBuilder {
            exe,
            load_bias,
            seed,
            entries: Vec::new(),
            user_chains: Vec::new(),
            kernel_functions: Vec::new(),
            syscall_from: None,
        }
    }

    /// The share of ticks the program spends in `name` itself: its weight
    /// over the total (summing every declaration of `name`, user and
    /// kernel). 0 for an undeclared name.
    pub fn expected_share(&self, name: &str) -> f64 {
        let w: u64 = self
            .entries
            .iter()
            .filter(|e| e.name == name)
            .map(|e| u64::from(e.weight))
            .sum();
        w as f64 / self.total as f64
    }

    /// The share of ticks spent in kernel mode.
    pub fn kernel_share(&self) -> f64 {
        let w: u64 = self
            .entries
            .iter()
            .filter(|e| e.kernel)
            .map(|e| u64::from(e.weight))
            .sum();
        w as f64 / self.total as f64
    }

    /// The return address in `caller` when it calls `callee`, as it appears
    /// in stacks. `caller` is looked up in the executable first (and the
    /// address includes the load bias), then in the kernels given to
    /// [`ProgramBuilder::kernel`] (address as-is).
    ///
    /// # Panics
    ///
    /// If `caller` is in neither.
    pub fn call_site(&self, caller: &str, callee: &str) -> u64 {
        if let Some(f) = self.user_functions.iter().find(|f| f.name == caller) {
            return site(f, callee) + self.load_bias;
        }
        self.kernel_call_site(caller, callee)
    }

    /// Like [`Program::call_site`], but only for kernel functions (for a
    /// name that exists in both the executable and a kernel).
    ///
    /// # Panics
    ///
    /// If `caller` is not a function of a kernel given to the builder.
    pub fn kernel_call_site(&self, caller: &str, callee: &str) -> u64 {
        let f = self
            .kernel_functions
            .iter()
            .find(|f| f.name == caller)
            .unwrap_or_else(|| panic!("workload: no function {caller:?} in the program's kernels"));
        site(f, callee)
    }

    /// The return address of the syscall in the user function the thread
    /// enters the kernel from (the first user PC of kernel-mode locations).
    pub fn syscall_site(&self) -> Option<u64> {
        self.syscall_stack.first().copied()
    }

    /// The load bias of the executable.
    pub fn load_bias(&self) -> u64 {
        self.load_bias
    }

    /// The distinct declared function names, in declaration order.
    pub fn functions(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// xorshift64*.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (multiply-shift, so no modulo bias).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

impl Activity for Program {
    fn step(&mut self) -> Location {
        let r = self.below(self.total);
        let i = self.cumulative.partition_point(|&c| c <= r);
        let (lo, hi) = (self.entries[i].pc_lo, self.entries[i].pc_hi);
        let pc = lo + self.below(hi - lo);
        let e = &self.entries[i];
        let stack: Vec<u64> = std::iter::once(pc)
            .chain(e.returns.iter().copied())
            .collect();
        if e.kernel {
            Location {
                user_mode: false,
                kernel_stack: stack,
                user_stack: self.syscall_stack.clone(),
                user_regs: None,
            }
        } else {
            Location {
                user_mode: true,
                kernel_stack: Vec::new(),
                user_stack: stack,
                user_regs: None,
            }
        }
    }
}

/// Builds a [`Program`]; see [`Program::builder`].
#[derive(Debug)]
pub struct ProgramBuilder<'a> {
    exe: &'a Image,
    load_bias: u64,
    seed: u64,
    entries: Vec<Entry>,
    /// Name and user return addresses of each user declaration, for
    /// [`ProgramBuilder::syscall_from`].
    user_chains: Vec<(String, Vec<u64>)>,
    kernel_functions: Vec<Function>,
    syscall_from: Option<String>,
}

impl ProgramBuilder<'_> {
    /// Declares user time: `weight` is the relative share of ticks spent in
    /// `name` itself; `callers` is its call chain from the direct caller
    /// outward (`func("leaf", 30, &["mid", "main"])`: main calls mid calls
    /// leaf). A name may be declared more than once with different chains.
    ///
    /// # Panics
    ///
    /// If `name` or a caller is not a function of the executable.
    pub fn func(&mut self, name: &str, weight: u32, callers: &[&str]) -> &mut Self {
        let f = lookup(self.exe, name, "function");
        let (pc_lo, pc_hi) = body_range(f, self.load_bias);
        let returns = chain(self.exe, name, callers, self.load_bias);
        self.user_chains.push((name.to_owned(), returns.clone()));
        self.entries.push(Entry {
            name: name.to_owned(),
            weight,
            kernel: false,
            pc_lo,
            pc_hi,
            returns,
        });
        self
    }

    /// Declares kernel time: when chosen, the thread is in kernel mode in
    /// `name` of `kernel` (addresses as linked), called through `callers`
    /// (as for [`ProgramBuilder::func`]), having entered the kernel from the
    /// user function of [`ProgramBuilder::syscall_from`].
    ///
    /// # Panics
    ///
    /// If `name` or a caller is not a function of `kernel`.
    pub fn kernel(
        &mut self,
        kernel: &Image,
        name: &str,
        weight: u32,
        callers: &[&str],
    ) -> &mut Self {
        let f = lookup(kernel, name, "kernel function");
        let (pc_lo, pc_hi) = body_range(f, 0);
        let returns = chain(kernel, name, callers, 0);
        for k in &kernel.functions {
            if !self.kernel_functions.contains(k) {
                self.kernel_functions.push(k.clone());
            }
        }
        self.entries.push(Entry {
            name: name.to_owned(),
            weight,
            kernel: true,
            pc_lo,
            pc_hi,
            returns,
        });
        self
    }

    /// The user function (declared with [`ProgramBuilder::func`], its first
    /// declaration's chain is used) that makes the system calls; by default
    /// the first declared one.
    pub fn syscall_from(&mut self, name: &str) -> &mut Self {
        self.syscall_from = Some(name.to_owned());
        self
    }

    /// Finishes the program.
    ///
    /// # Panics
    ///
    /// If the weights sum to 0, or kernel time is declared but the
    /// `syscall_from` function is not a declared user function.
    pub fn build(&self) -> Program {
        let mut cumulative = Vec::with_capacity(self.entries.len());
        let mut total = 0u64;
        for e in &self.entries {
            total += u64::from(e.weight);
            cumulative.push(total);
        }
        assert!(total > 0, "workload: the program's weights sum to 0");

        let mut syscall_stack = Vec::new();
        if self.entries.iter().any(|e| e.kernel) {
            let from = self
                .syscall_from
                .as_deref()
                .or(self.user_chains.first().map(|(n, _)| n.as_str()));
            let from =
                from.expect("workload: kernel time needs a user function to enter the kernel from");
            let (_, returns) = self
                .user_chains
                .iter()
                .find(|(n, _)| n == from)
                .unwrap_or_else(|| {
                    panic!("workload: syscall_from({from:?}) is not a declared user function")
                });
            let pc = site(lookup(self.exe, from, "function"), SYSCALL_SITE) + self.load_bias;
            syscall_stack.push(pc);
            syscall_stack.extend_from_slice(returns);
        }

        let mut names: Vec<String> = Vec::new();
        for e in &self.entries {
            if !names.contains(&e.name) {
                names.push(e.name.clone());
            }
        }

        // splitmix64 of the seed, so nearby seeds give unrelated sequences;
        // xorshift must not start at 0.
        let mut z = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;

        Program {
            load_bias: self.load_bias,
            user_functions: self.exe.functions.clone(),
            kernel_functions: self.kernel_functions.clone(),
            entries: self.entries.clone(),
            cumulative,
            total,
            names,
            syscall_stack,
            rng: if z == 0 { 1 } else { z },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::{ImageBuilder, ImageKind};
    use std::collections::HashMap;

    fn exe(kind: ImageKind) -> Image {
        ImageBuilder::new("/usr/bin/work", kind)
            .function("_start", 32)
            .function("main", 200)
            .function("mid", 120)
            .function("leaf", 61)
            .function("util", 8)
            .build()
    }

    fn kernel() -> Image {
        ImageBuilder::new("/boot/kernel/kernel", ImageKind::Kernel)
            .function("amd64_syscall", 300)
            .function("sys_read", 100)
            .function("vn_read", 150)
            .function("bcopy", 40)
            .build()
    }

    /// (name, weight, callers) of the four-function test program.
    const FUNCS: [(&str, u32, &[&str]); 4] = [
        ("main", 10, &["_start"]),
        ("mid", 20, &["main", "_start"]),
        ("leaf", 40, &["mid", "main", "_start"]),
        ("util", 30, &["leaf", "mid", "main", "_start"]),
    ];

    fn program(img: &Image, bias: u64, seed: u64) -> Program {
        let mut b = Program::builder(img, bias, seed);
        for (name, weight, callers) in FUNCS {
            b.func(name, weight, callers);
        }
        b.build()
    }

    /// Checks a user stack against the declared chain of the function its
    /// PC is in, and returns that function's name.
    fn check_user_stack<'a>(p: &Program, img: &'a Image, bias: u64, stack: &[u64]) -> &'a str {
        let (name, off) = img
            .symbolize(stack[0], bias)
            .expect("PC outside every function");
        let f = img.function(name).unwrap();
        assert!(
            off >= 4 && off < f.size - 2,
            "PC {name}+{off} in prologue/epilogue"
        );
        let (_, _, callers) = FUNCS
            .iter()
            .find(|(n, _, _)| *n == name)
            .expect("undeclared function");
        assert_eq!(stack.len(), 1 + callers.len());
        let mut callee = name;
        for (ret, caller) in stack[1..].iter().zip(callers.iter()) {
            let (n, off) = img.symbolize(*ret, bias).unwrap();
            assert_eq!(n, *caller);
            let cf = img.function(caller).unwrap();
            assert!(off >= 4 && off < cf.size - 2);
            assert_eq!(*ret, p.call_site(caller, callee));
            callee = caller;
        }
        name
    }

    #[test]
    fn distribution_and_stacks() {
        for (kind, bias) in [
            (ImageKind::Executable, 0),
            (ImageKind::SharedObject, 0x0000_0008_0020_0000),
        ] {
            let img = exe(kind);
            let mut p = program(&img, bias, 42);
            assert_eq!(
                p.functions().collect::<Vec<_>>(),
                ["main", "mid", "leaf", "util"]
            );
            let n = 100_000;
            let mut counts: HashMap<&str, u32> = HashMap::new();
            for _ in 0..n {
                let loc = p.step();
                assert!(loc.user_mode);
                assert!(loc.kernel_stack.is_empty());
                let name = check_user_stack(&p, &img, bias, &loc.user_stack);
                *counts.entry(name).or_default() += 1;
            }
            for (name, weight, _) in FUNCS {
                let expected = p.expected_share(name);
                assert!((expected - f64::from(weight) / 100.0).abs() < 1e-12);
                let observed = f64::from(counts[name]) / f64::from(n);
                assert!(
                    (observed - expected).abs() < 0.01,
                    "{name}: observed {observed}, expected {expected}"
                );
            }
            assert_eq!(p.expected_share("_start"), 0.0);
        }
    }

    #[test]
    fn call_sites_differ_per_callee() {
        let img = exe(ImageKind::Executable);
        let p = program(&img, 0, 1);
        let main = img.function("main").unwrap();
        let a = p.call_site("main", "mid");
        let b = p.call_site("main", "leaf");
        assert_ne!(a, b);
        for s in [a, b] {
            assert!(s >= main.start + 4 && s < main.end() - 2);
        }
        // Fixed across programs and seeds.
        assert_eq!(a, program(&img, 0, 2).call_site("main", "mid"));
        assert_eq!(
            program(&img, 0x1000, 2).call_site("main", "mid"),
            a + 0x1000
        );
    }

    #[test]
    fn deterministic() {
        let img = exe(ImageKind::Executable);
        let run = |seed| {
            let mut p = program(&img, 0, seed);
            (0..1000).map(|_| p.step()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert_ne!(run(0), run(1));
        // A cloned program continues the same sequence.
        let mut p = program(&img, 0, 3);
        p.step();
        let mut q = p.clone();
        for _ in 0..100 {
            assert_eq!(p.step(), q.step());
        }
    }

    #[test]
    fn kernel_time() {
        let img = exe(ImageKind::SharedObject);
        let k = kernel();
        let bias = 0x8_0000_0000;
        let mut b = Program::builder(&img, bias, 9);
        for (name, weight, callers) in FUNCS {
            b.func(name, weight, callers);
        }
        let mut p = b
            .kernel(&k, "vn_read", 50, &["sys_read", "amd64_syscall"])
            .kernel(&k, "bcopy", 50, &["vn_read", "sys_read", "amd64_syscall"])
            .syscall_from("leaf")
            .build();
        assert!((p.kernel_share() - 0.5).abs() < 1e-12);
        assert!((p.expected_share("bcopy") - 0.25).abs() < 1e-12);
        assert!((p.expected_share("util") - 0.15).abs() < 1e-12);
        let (mut kernel, mut user) = (0u32, 0u32);
        for _ in 0..20_000 {
            let loc = p.step();
            if loc.user_mode {
                user += 1;
                check_user_stack(&p, &img, bias, &loc.user_stack);
                continue;
            }
            kernel += 1;
            let ks = &loc.kernel_stack;
            let (name, off) = k.symbolize(ks[0], 0).expect("kernel PC outside the kernel");
            assert!(name == "vn_read" || name == "bcopy");
            assert!(off >= 4 && off < k.function(name).unwrap().size - 2);
            let callers: &[&str] = if name == "bcopy" {
                &["vn_read", "sys_read", "amd64_syscall"]
            } else {
                &["sys_read", "amd64_syscall"]
            };
            assert_eq!(ks.len(), 1 + callers.len());
            let mut callee = name;
            for (ret, caller) in ks[1..].iter().zip(callers) {
                assert_eq!(k.symbolize(*ret, 0).unwrap().0, *caller);
                assert_eq!(*ret, p.call_site(caller, callee));
                callee = caller;
            }
            // Entered from leaf, with leaf's user chain.
            assert_eq!(check_user_stack(&p, &img, bias, &loc.user_stack), "leaf");
            assert_eq!(Some(loc.user_stack[0]), p.syscall_site());
        }
        let share = f64::from(kernel) / f64::from(kernel + user);
        assert!((share - 0.5).abs() < 0.02, "{share}");
    }

    #[test]
    fn syscall_from_defaults_to_first_func() {
        let img = exe(ImageKind::Executable);
        let k = kernel();
        let mut p = Program::builder(&img, 0, 1)
            .func("mid", 0, &["main"])
            .func("leaf", 1, &["mid", "main"])
            .kernel(&k, "sys_read", 1, &["amd64_syscall"])
            .build();
        let loc = (0..100).map(|_| p.step()).find(|l| !l.user_mode).unwrap();
        assert_eq!(img.symbolize(loc.user_stack[0], 0).unwrap().0, "mid");
        assert_eq!(loc.user_stack[1], p.call_site("main", "mid"));
    }

    #[test]
    fn zero_weight_never_chosen() {
        let img = exe(ImageKind::Executable);
        let mut p = Program::builder(&img, 0, 5)
            .func("main", 0, &[])
            .func("leaf", 3, &[])
            .func("util", 0, &[])
            .build();
        for _ in 0..1000 {
            let loc = p.step();
            assert_eq!(img.symbolize(loc.user_stack[0], 0).unwrap().0, "leaf");
        }
    }

    #[test]
    #[should_panic(expected = "\"nosuch\" is not a function of /usr/bin/work")]
    fn unknown_function() {
        let img = exe(ImageKind::Executable);
        Program::builder(&img, 0, 1).func("nosuch", 1, &[]);
    }

    #[test]
    #[should_panic(expected = "caller \"nosuch\"")]
    fn unknown_caller() {
        let img = exe(ImageKind::Executable);
        Program::builder(&img, 0, 1).func("leaf", 1, &["nosuch"]);
    }

    #[test]
    #[should_panic(expected = "not a declared user function")]
    fn undeclared_syscall_from() {
        let img = exe(ImageKind::Executable);
        let k = kernel();
        Program::builder(&img, 0, 1)
            .func("leaf", 1, &[])
            .kernel(&k, "sys_read", 1, &[])
            .syscall_from("main")
            .build();
    }

    #[test]
    #[should_panic(expected = "sum to 0")]
    fn zero_total() {
        let img = exe(ImageKind::Executable);
        Program::builder(&img, 0, 1).func("leaf", 0, &[]).build();
    }
}
