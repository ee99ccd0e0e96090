//! A trace context and its records (hwt_record.c): in thread mode the
//! images the traced process maps and its threads' buffers, in CPU mode
//! the kernel's objects and each CPU's buffer; and the trace taken out of
//! each ring as the unit goes round it.

use pmctool::Exit;
use uapi::hwt::*;
use uapi::pt::{PtCpuConfig, RTIT_CTL_BRANCHEN, RTIT_CTL_OS, RTIT_CTL_USER};

use crate::hwt_dev::{Dev, Kernel, Mapping, Region};
use crate::hwt_pt::Images;
use crate::{EX_DATAERR, EX_SOFTWARE, EX_USAGE, Options, PAGE_SIZE, PROG};
use hwt_ring::{ENTRY, Record, Ring, parse_record};

/// Records read at once.
const BATCH: usize = 256;
/// Bytes of the CPU set ALLOC is given (FreeBSD's `cpuset_t`, 1024
/// CPUs).
pub const CPUSET_SIZE: usize = 128;

/// `struct pt_cpu_config` for SET_CONFIG: RTIT_CTL's tracing bits and,
/// when given, one IP range (inclusive) to trace alone.
pub fn pt_config(rtit_ctl: u64, filter: Option<(u64, u64)>) -> Vec<u8> {
    use std::mem::{offset_of, size_of};
    let mut cfg = vec![0u8; size_of::<PtCpuConfig>()];
    let at = offset_of!(PtCpuConfig, rtit_ctl);
    cfg[at..at + 8].copy_from_slice(&rtit_ctl.to_ne_bytes());
    if let Some((a, b)) = filter {
        let at = offset_of!(PtCpuConfig, nranges);
        cfg[at..at + 4].copy_from_slice(&1i32.to_ne_bytes());
        let at = offset_of!(PtCpuConfig, ip_ranges);
        cfg[at..at + 8].copy_from_slice(&a.to_ne_bytes());
        cfg[at + 8..at + 16].copy_from_slice(&b.to_ne_bytes());
    }
    cfg
}

/// A traced thread's or CPU's buffer and the trace taken from it.
pub struct Thread {
    /// Its thread id in the context, or its CPU.
    pub id: i32,
    dev: Dev,
    map: Mapping,
    ring: Ring,
    /// The trace in pieces: a new piece after each loss.
    pub trace: Vec<Vec<u8>>,
}

/// A context: of one traced process, or of a set of CPUs.
pub struct Session<'k> {
    k: &'k Kernel,
    ident: i32,
    pid: u32,
    /// CPU mode: the buffers are the CPUs'.
    cpu_mode: bool,
    bufsize: u64,
    root: String,
    pub threads: Vec<Thread>,
    pub images: Images,
    /// The address range traced (-i/-f), inclusive.
    pub filter: Option<(u64, u64)>,
    /// EXEC and MMAP records read: with pause-on-mmap, the thread paused
    /// after each until a WAKEUP ([`Session::await_function`]).
    objects_recorded: u64,
}

fn os_err(what: &str, e: i32) -> Exit {
    PROG.err(EX_SOFTWARE, what, e)
}

impl<'k> Session<'k> {
    /// ALLOC of a thread-mode context for `pid`, its first buffer mapped,
    /// SET_CONFIG and START; with -i/-f, SET_CONFIG asks for the pause at
    /// exec and mmap instead, and tracing starts in
    /// [`Session::await_function`] once the function is known.
    pub fn new(k: &'k Kernel, pid: u32, o: &Options) -> Result<Session<'k>, Exit> {
        let mut s = Session::alloc(k, o, HWT_MODE_THREAD, pid, &[])?;
        s.add_thread(0)?;
        if o.pid.is_some() {
            s.seed_images(pid);
        }
        if o.func.is_some() {
            s.set_config(RTIT_CTL_USER | RTIT_CTL_BRANCHEN, true)?;
        } else {
            s.configure_and_start(RTIT_CTL_USER | RTIT_CTL_BRANCHEN)?;
        }
        Ok(s)
    }

    /// The pause protocol of -i/-f (the command released, paused after
    /// its exec and each mmap): at each pause the new records' images
    /// are loaded and the function looked up; once found, SET_CONFIG with
    /// its range and without the pause, START, and WAKEUP; until then,
    /// WAKEUP alone. An error if the command ends first.
    /// `exited` says whether the command ended; `wait` lets time pass.
    pub fn await_function(
        &mut self,
        o: &Options,
        exited: &dyn Fn() -> bool,
        wait: &dyn Fn(),
    ) -> Result<(), Exit> {
        let (Some(image), Some(func)) = (&o.image, &o.func) else {
            return Ok(());
        };
        // One WAKEUP for the pauses of the records read since the last:
        // the thread pauses once at a time, and a WAKEUP that comes
        // before its pause ends that pause at once. Counted by record,
        // not by image loaded: a record of an image already known or
        // that cannot be read paused the thread too, and the images of
        // -P came with no pause.
        let mut woken = 0;
        loop {
            self.poll_records()?;
            if let Some((a, b)) = self.images.function(image, func) {
                // The range is inclusive.
                self.filter = Some((a, b.saturating_sub(1)));
                self.configure_and_start(RTIT_CTL_USER | RTIT_CTL_BRANCHEN)?;
                return self.wakeup();
            }
            if self.objects_recorded > woken {
                woken = self.objects_recorded;
                self.wakeup()?;
            }
            if exited() {
                return Err(PROG.errx(
                    EX_USAGE,
                    format!("function \"{func}\" not found in {image}"),
                ));
            }
            wait();
        }
    }

    /// -P: the images the process mapped before it was attached, which
    /// no record will tell (kinfo_getvmmap(3)).
    fn seed_images(&mut self, pid: u32) {
        match self.k.proc_maps(pid) {
            Ok(maps) => {
                for (base, path) in maps {
                    let file = format!("{}{path}", self.root);
                    if let Err(e) = self.images.add(&path, &file, base) {
                        PROG.warnx(format!("{e}: its code will not be decoded"));
                    }
                }
            }
            Err(e) => PROG.warnx(format!(
                "the mappings of pid {pid}: {}: their code will not be decoded",
                pmctool::strerror(e)
            )),
        }
    }

    /// HWT_IOC_WAKEUP: the traced thread paused at exec or mmap goes on.
    fn wakeup(&mut self) -> Result<(), Exit> {
        let mut arg = vec![0u8; 16];
        self.k
            .ioctl(&self.threads[0].dev, HWT_IOC_WAKEUP, &mut arg, &mut [])
            .map_err(|e| os_err("HWT_IOC_WAKEUP", e))
    }

    /// ALLOC of a CPU-mode context for `cpus`, each CPU's buffer mapped,
    /// the kernel's objects read from its records and the function of
    /// -i/-f looked up in them, SET_CONFIG (kernel-mode branch tracing of
    /// that function) and START.
    pub fn cpus(k: &'k Kernel, cpus: &[u32], o: &Options) -> Result<Session<'k>, Exit> {
        let mut s = Session::alloc(k, o, HWT_MODE_CPU, 0, cpus)?;
        for &cpu in cpus {
            s.add_thread(cpu as i32)?;
        }
        // The KERNEL records, queued at ALLOC.
        s.poll_records()?;
        let (Some(image), Some(func)) = (&o.image, &o.func) else {
            return Err(PROG.errx(EX_USAGE, "-s: CPU mode needs -i and -f"));
        };
        let (a, b) = s.images.function(image, func).ok_or_else(|| {
            PROG.errx(
                EX_USAGE,
                format!("function \"{func}\" not found in {image}"),
            )
        })?;
        s.filter = Some((a, b.saturating_sub(1)));
        s.configure_and_start(RTIT_CTL_OS | RTIT_CTL_BRANCHEN)?;
        Ok(s)
    }

    /// HWT_IOC_ALLOC of a context of `mode`: for process `pid` or for the
    /// CPUs `cpus`.
    fn alloc(
        k: &'k Kernel,
        o: &Options,
        mode: i32,
        pid: u32,
        cpus: &[u32],
    ) -> Result<Session<'k>, Exit> {
        let ctl = k.open("/dev/hwt").map_err(|e| os_err("/dev/hwt", e))?;
        let mut arg = vec![0u8; 64];
        arg[0..8].copy_from_slice(&(o.bufsize as u64).to_ne_bytes());
        arg[8..12].copy_from_slice(&mode.to_ne_bytes());
        arg[12..16].copy_from_slice(&(pid as i32).to_ne_bytes());
        let mut name = o.backend.as_bytes().to_vec();
        name.push(0);
        let mut regions = vec![
            Region {
                at: 32,
                bytes: name,
            },
            Region {
                at: 40,
                bytes: (-1i32).to_ne_bytes().to_vec(),
            },
        ];
        if mode == HWT_MODE_CPU {
            let mut set = vec![0u8; CPUSET_SIZE];
            for &c in cpus {
                set[c as usize / 8] |= 1 << (c % 8);
            }
            regions.push(Region { at: 16, bytes: set });
            arg[24..32].copy_from_slice(&(CPUSET_SIZE as u64).to_ne_bytes());
        }
        arg[48..52].copy_from_slice(&(-1i32).to_ne_bytes());
        k.ioctl(&ctl, HWT_IOC_ALLOC, &mut arg, &mut regions)
            .map_err(|e| os_err("HWT_IOC_ALLOC", e))?;
        let ident = i32::from_ne_bytes(regions[1].bytes[..4].try_into().expect("4 bytes"));
        Ok(Session {
            k,
            ident,
            pid,
            cpu_mode: mode == HWT_MODE_CPU,
            bufsize: o.bufsize as u64,
            root: o.root.clone(),
            threads: Vec::new(),
            images: Images::new(),
            filter: None,
            objects_recorded: 0,
        })
    }

    /// SET_CONFIG of `rtit_ctl` with the filter, then START, on the
    /// first buffer's device (the context's control).
    fn configure_and_start(&mut self, rtit_ctl: u64) -> Result<(), Exit> {
        self.set_config(rtit_ctl, false)?;
        let mut arg = vec![0u8; 16];
        self.k
            .ioctl(&self.threads[0].dev, HWT_IOC_START, &mut arg, &mut [])
            .map_err(|e| os_err("HWT_IOC_START", e))
    }

    /// SET_CONFIG of `rtit_ctl` with the filter; `pause`: the thread
    /// pauses after its exec and each mmap until WAKEUP.
    fn set_config(&mut self, rtit_ctl: u64, pause: bool) -> Result<(), Exit> {
        let cfg = pt_config(rtit_ctl, self.filter);
        let mut arg = vec![0u8; 32];
        arg[0..4].copy_from_slice(&i32::from(pause).to_ne_bytes());
        arg[16..24].copy_from_slice(&(cfg.len() as u64).to_ne_bytes());
        arg[24..28].copy_from_slice(&1i32.to_ne_bytes());
        self.k
            .ioctl(
                &self.threads[0].dev,
                HWT_IOC_SET_CONFIG,
                &mut arg,
                &mut [Region { at: 8, bytes: cfg }],
            )
            .map_err(|e| PROG.err(EX_DATAERR, "HWT_IOC_SET_CONFIG", e))
    }

    /// HWT_IOC_STOP: the units stop writing.
    pub fn stop(&mut self) -> Result<(), Exit> {
        let mut arg = vec![0u8; 16];
        self.k
            .ioctl(&self.threads[0].dev, HWT_IOC_STOP, &mut arg, &mut [])
            .map_err(|e| os_err("HWT_IOC_STOP", e))
    }

    /// Maps the buffer of thread `id`, or of CPU `id` in CPU mode.
    fn add_thread(&mut self, id: i32) -> Result<(), Exit> {
        let path = if self.cpu_mode {
            format!("/dev/hwt_{}_{id}", self.ident)
        } else if id == 0 {
            format!("/dev/hwt_{}_{}", self.ident, self.pid)
        } else {
            format!("/dev/hwt_{}_{}_{id}", self.ident, self.pid)
        };
        let dev = self.k.open(&path).map_err(|e| os_err(&path, e))?;
        let map = self
            .k
            .map(&dev, self.bufsize as usize)
            .map_err(|e| os_err(&path, e))?;
        self.threads.push(Thread {
            id,
            dev,
            map,
            ring: Ring::new(self.bufsize),
            trace: vec![Vec::new()],
        });
        Ok(())
    }

    /// Reads the records there are, then takes from each ring what its
    /// unit wrote since the last time.
    pub fn poll(&mut self) -> Result<(), Exit> {
        self.poll_records()?;
        for i in 0..self.threads.len() {
            let at = self.bufptr(i)?;
            self.saw(i, at);
            self.take(i);
        }
        Ok(())
    }

    /// Reads and handles the records there are.
    fn poll_records(&mut self) -> Result<(), Exit> {
        loop {
            let recs = self.records()?;
            let n = recs.len();
            for r in recs {
                self.record(&r)?;
            }
            if n < BATCH {
                return Ok(());
            }
        }
    }

    /// Nothing more: the last bytes of each ring.
    pub fn finish(&mut self) {
        for i in 0..self.threads.len() {
            self.take(i);
        }
    }

    /// RECORD_GET of up to [`BATCH`] records, without waiting.
    fn records(&self) -> Result<Vec<Vec<u8>>, Exit> {
        let mut arg = vec![0u8; 32];
        let mut regions = [
            Region {
                at: 0,
                bytes: vec![0u8; ENTRY * BATCH],
            },
            Region {
                at: 8,
                bytes: (BATCH as i32).to_ne_bytes().to_vec(),
            },
        ];
        self.k
            .ioctl(
                &self.threads[0].dev,
                HWT_IOC_RECORD_GET,
                &mut arg,
                &mut regions,
            )
            .map_err(|e| os_err("HWT_IOC_RECORD_GET", e))?;
        let n = i32::from_ne_bytes(regions[1].bytes[..4].try_into().expect("4 bytes")).max(0);
        Ok(regions[0].bytes[..n as usize * ENTRY]
            .chunks(ENTRY)
            .map(<[u8]>::to_vec)
            .collect())
    }

    fn record(&mut self, r: &[u8]) -> Result<(), Exit> {
        match parse_record(r) {
            // An image to decode against.
            Some(Record::Object { path, addr, .. }) => {
                self.objects_recorded += 1;
                if self.images.objects.iter().any(|o| o.path == path) {
                    return Ok(());
                }
                let file = format!("{}{path}", self.root);
                if let Err(e) = self.images.add(&path, &file, addr) {
                    PROG.warnx(format!("{e}: its code will not be decoded"));
                }
            }
            // A kernel object (CPU mode): the kernel or a module.
            Some(Record::Kernel { path, addr }) => {
                if self.images.objects.iter().any(|o| o.path == path) {
                    return Ok(());
                }
                let file = format!("{}{path}", self.root);
                if let Err(e) = self.images.add_kernel(&path, &file, addr) {
                    PROG.warnx(format!("{e}: its code will not be decoded"));
                }
            }
            // A new thread's buffer.
            Some(Record::ThreadCreate { thread_id })
                if !self.threads.iter().any(|t| t.id == thread_id) =>
            {
                self.add_thread(thread_id)?;
            }
            // Where the unit of a thread is now.
            Some(Record::Buffer { buf_id, position }) => {
                if let Some(t) = self.threads.iter_mut().find(|t| t.id == buf_id) {
                    t.ring.saw(position);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// BUFPTR_GET of thread `i`'s buffer: the unit's position.
    fn bufptr(&self, i: usize) -> Result<u64, Exit> {
        let mut arg = vec![0u8; 32];
        let mut regions = [
            Region {
                at: 0,
                bytes: vec![0u8; 4],
            },
            Region {
                at: 8,
                bytes: vec![0u8; 8],
            },
        ];
        self.k
            .ioctl(
                &self.threads[i].dev,
                HWT_IOC_BUFPTR_GET,
                &mut arg,
                &mut regions,
            )
            .map_err(|e| os_err("HWT_IOC_BUFPTR_GET", e))?;
        let page = i32::from_ne_bytes(regions[0].bytes[..4].try_into().expect("4 bytes")) as u64;
        let off = u64::from_ne_bytes(regions[1].bytes[..8].try_into().expect("8 bytes"));
        Ok((page * PAGE_SIZE as u64 + off) % self.bufsize)
    }

    /// The unit of thread `i` is at `at`.
    fn saw(&mut self, i: usize, at: u64) {
        self.threads[i].ring.saw(at);
    }

    /// Takes what thread `i`'s unit wrote since the last take: all of it,
    /// or, when that is more than the ring holds, the ring's contents
    /// after a warning of what was lost.
    fn take(&mut self, i: usize) {
        let t = &mut self.threads[i];
        let Some(taken) = t.ring.take(t.map.bytes()) else {
            return;
        };
        if taken.lost > 0 {
            eprintln!(
                "hwt: {} {}: buffer wrapped: {} bytes of trace lost",
                if self.cpu_mode { "CPU" } else { "thread" },
                t.id,
                taken.lost
            );
            t.trace.push(Vec::new());
        }
        t.trace
            .last_mut()
            .expect("one piece at least")
            .extend_from_slice(&taken.bytes);
    }
}
