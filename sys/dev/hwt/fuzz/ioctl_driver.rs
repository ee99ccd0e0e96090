//! Drives hwt(4) on a simulated machine with a stream of operations
//! decoded from arbitrary bytes: ALLOC and every context ioctl with
//! argument fields and pointers taken from the input (good memory, short
//! memory, bad addresses), mmap, and the traced process's events
//! (switches, mmap, exec, threads, exit) and its owner's exit. Every call
//! ends in success or one of the errnos hwt(4) documents; nothing panics,
//! and once the module unloads no memory, device or witness violation is
//! left. Shared by the fuzz target (`ioctl`) and the seeded test of
//! sys/dev/hwt/tests/ioctl_mutations.rs.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use hwt::{BackendOps, BufId, BufPtr, HwtBackend, HwtContext};
use kpi::KResult;
use kpi::malloc::Wait;
use ksim::{Cred, DevFd, Machine, MachineConfig};
use uapi::hwt::*;

/// A backend that accepts everything.
struct Quiet;

impl HwtBackend for Quiet {
    fn ops(&self) -> BackendOps {
        BackendOps::STOP | BackendOps::SVC_BUF | BackendOps::THREAD_DATA
    }
    fn init(&self, _: &HwtContext) -> KResult<()> {
        Ok(())
    }
    fn deinit(&self, _: &HwtContext) {}
    fn configure(&self, ctx: &HwtContext, _: u32, _: BufId) -> KResult<()> {
        ctx.with_config(|c| c.map(|_| ()).ok_or(kpi::errno::EINVAL))
    }
    fn enable(&self, _: &HwtContext, _: u32) {}
    fn disable(&self, _: &HwtContext, _: u32) {}
    fn read(&self, _: &HwtContext, _: BufId) -> KResult<BufPtr> {
        Ok(BufPtr::default())
    }
}

/// The errnos hwt(4) gives.
const ALLOWED: &[i32] = &[
    1,  // EPERM
    2,  // ENOENT
    6,  // ENXIO
    12, // ENOMEM
    13, // EACCES
    14, // EFAULT
    16, // EBUSY
    17, // EEXIST
    19, // ENODEV
    22, // EINVAL
    27, // EFBIG
    45, // EOPNOTSUPP
    63, // ENAMETOOLONG
];

/// The input, read a byte or a word at a time (zeros once it ends).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, i| v | u64::from(self.u8()) << (8 * i))
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a run did: calls made and calls that succeeded.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub calls: u64,
    pub allocs: u64,
    pub succeeded: u64,
}

fn check(stats: &mut Stats, what: &str, r: Result<(), i32>) {
    stats.calls += 1;
    match r {
        Ok(()) => stats.succeeded += 1,
        Err(e) => assert!(ALLOWED.contains(&e), "{what}: errno {e}"),
    }
}

/// A pointer field: good memory of `len` bytes (from the input), memory
/// too short, null, or an address nothing is mapped at.
fn pointer(m: &Machine, pid: u32, inp: &mut Input<'_>, len: usize) -> u64 {
    match inp.u8() % 5 {
        0 => 0,
        1 => 0xdead_0000,
        2 => {
            let a = m.user_alloc(pid, 4096);
            a + 4096 - (len.min(4096) / 2) as u64
        }
        _ => {
            let bytes = inp.bytes(len.min(64));
            let a = m.user_alloc(pid, len.max(1));
            m.user_write(pid, a, &bytes);
            a
        }
    }
}

/// Runs the operations `data` describes.
pub fn run(data: &[u8]) -> Stats {
    let mut stats = Stats::default();
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let before = m.kmem_live();
    let (_, kld) = m.spawn(Cred::root(), "kldload");
    let (module, tag) = m.in_thread(kld, || {
        let module = hwt::Module::load().expect("loads");
        let ops = kpi::kbox_dyn!(Quiet, Wait::WaitOk, dyn HwtBackend).expect("memory");
        let tag = module
            .register_backend("test", true, ops)
            .expect("registers");
        (module, tag)
    });
    let mut inp = Input(data);
    let (mut opid, mut otid) = m.spawn(Cred::root(), "owner");
    let (tpid, ttid) = m.spawn(Cred::root(), "target");
    let mut devs: Vec<DevFd> = Vec::new();
    let ctl = m.dev_open(otid, "/dev/hwt", true, true).expect("opens");
    let mut steps = 0;
    while !inp.done() && steps < 64 {
        steps += 1;
        match inp.u8() % 12 {
            0 => {
                // Each field good unless its bit of `bad` says otherwise
                // (about one in four), so that many ALLOCs succeed.
                let bad = inp.u8() & inp.u8();
                let mut a = vec![0u8; 64];
                let bufsize = if bad & 1 != 0 {
                    inp.u64()
                } else {
                    4096 * u64::from(inp.u8() % 8 + 1)
                };
                a[0..8].copy_from_slice(&bufsize.to_ne_bytes());
                let mode = if bad & 2 != 0 {
                    i32::from(inp.u8())
                } else {
                    1 + i32::from(inp.u8() % 2)
                };
                a[8..12].copy_from_slice(&mode.to_ne_bytes());
                let pid = if bad & 4 != 0 { inp.u64() as u32 } else { tpid };
                a[12..16].copy_from_slice(&pid.to_ne_bytes());
                let set = if bad & 8 != 0 {
                    pointer(&m, opid, &mut inp, 128)
                } else {
                    let a = m.user_alloc(opid, 128);
                    m.user_write(opid, a, &[1 + inp.u8() % 3]);
                    a
                };
                a[16..24].copy_from_slice(&set.to_ne_bytes());
                let setsize: u64 = if bad & 8 != 0 { inp.u64() % 512 } else { 128 };
                a[24..32].copy_from_slice(&setsize.to_ne_bytes());
                let name = if bad & 16 != 0 {
                    pointer(&m, opid, &mut inp, 300)
                } else {
                    let a = m.user_alloc(opid, 5);
                    m.user_write(opid, a, b"test\0");
                    a
                };
                a[32..40].copy_from_slice(&name.to_ne_bytes());
                let ident = if bad & 32 != 0 {
                    pointer(&m, opid, &mut inp, 4)
                } else {
                    m.user_alloc(opid, 4)
                };
                a[40..48].copy_from_slice(&ident.to_ne_bytes());
                let at = m.user_alloc(opid, 64);
                m.user_write(opid, at, &a);
                let r = m.dev_ioctl(otid, &ctl, HWT_IOC_ALLOC, at);
                stats.allocs += u64::from(r.is_ok());
                check(&mut stats, "ALLOC", r);
                // Every context device there is now, for the next steps.
                devs = m
                    .dev_names()
                    .into_iter()
                    .filter(|n| n.starts_with("hwt_"))
                    .filter_map(|n| m.dev_open(otid, &format!("/dev/{n}"), true, true).ok())
                    .collect();
            }
            1..=7 => {
                if devs.is_empty() {
                    continue;
                }
                let dev = &devs[inp.u8() as usize % devs.len()];
                let cmds = [
                    HWT_IOC_START,
                    HWT_IOC_STOP,
                    HWT_IOC_RECORD_GET,
                    HWT_IOC_BUFPTR_GET,
                    HWT_IOC_SET_CONFIG,
                    HWT_IOC_WAKEUP,
                    HWT_IOC_SVC_BUF,
                    0xc010_4299,
                ];
                let cmd = cmds[inp.u8() as usize % cmds.len()];
                let size = ((cmd >> 16) & 0x1fff) as usize;
                let mut a = inp.bytes(size);
                // Pointer fields of each command's struct.
                let fields: &[(usize, usize)] = match cmd {
                    HWT_IOC_RECORD_GET => &[(0, 1056 * 4), (8, 4)],
                    HWT_IOC_BUFPTR_GET => &[(0, 4), (8, 8), (16, 8)],
                    HWT_IOC_SET_CONFIG => &[(8, 256)],
                    HWT_IOC_SVC_BUF => &[(0, 64)],
                    _ => &[],
                };
                for &(at, len) in fields {
                    let p = pointer(&m, opid, &mut inp, len);
                    a[at..at + 8].copy_from_slice(&p.to_ne_bytes());
                }
                // Nothing sleeps here, outside a race: RECORD_GET does not
                // wait, and no pause is asked for (the lifecycle tests have
                // both).
                if cmd == HWT_IOC_RECORD_GET {
                    a[16..20].fill(0);
                }
                if cmd == HWT_IOC_SET_CONFIG {
                    a[0..4].fill(0);
                }
                let at = m.user_alloc(opid, size.max(1));
                m.user_write(opid, at, &a);
                check(&mut stats, "context ioctl", m.dev_ioctl(otid, dev, cmd, at));
            }
            8 => {
                if let Some(dev) = devs.first() {
                    let (off, len, prot) =
                        (inp.u64() % 8192, inp.u64() % 65536, i32::from(inp.u8() % 4));
                    if let Err(e) = m.dev_mmap(otid, dev, off, len, prot) {
                        assert!(ALLOWED.contains(&e), "mmap: {e}");
                    }
                }
            }
            9 => {
                if m.proc_info(tpid).is_some_and(|p| !p.zombie) {
                    match inp.u8() % 5 {
                        0 => {
                            m.switch_in(inp.u8() as u32 % 2, ttid);
                            m.switch_out(0);
                            m.switch_out(1);
                        }
                        1 => m.mmap(tpid, "/lib/libx.so", 0x4000_0000, 0x1000),
                        2 => m.munmap(tpid, 0x4000_0000, 0x1000),
                        3 => {
                            let t = m.thread_create(tpid);
                            if inp.u8() & 1 == 1 {
                                m.thread_exit(t);
                            }
                        }
                        _ => {
                            // No pause may happen outside a race.
                            m.exec(tpid, "/usr/bin/next", None);
                        }
                    }
                }
            }
            10 => {
                m.exit(opid);
                devs.clear();
                (opid, otid) = m.spawn(Cred::root(), "owner");
            }
            _ => {
                // A second owner tries the same devices: ENXIO or EPERM.
                if let Some(dev) = devs.first() {
                    let (p2, t2) = m.spawn(Cred::root(), "other");
                    let at = m.user_alloc(p2, 16);
                    check(
                        &mut stats,
                        "stranger",
                        m.dev_ioctl(t2, dev, HWT_IOC_START, at),
                    );
                    m.exit(p2);
                }
            }
        }
    }
    m.exit(opid);
    let (_, unload) = m.spawn(Cred::root(), "kldunload");
    m.in_thread(unload, || {
        drop(tag);
        drop(module);
    });
    assert!(m.dev_names().is_empty(), "{:?}", m.dev_names());
    assert_eq!(m.violations(), vec![], "witness");
    assert_eq!(m.kmem_live(), before, "kernel memory left");
    stats
}
