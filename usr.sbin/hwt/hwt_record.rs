//! The context of a traced process and its records (hwt_record.c): the
//! images the process maps, its threads' buffers, and the trace taken out
//! of each ring as the unit goes round it.

use pmctool::Exit;
use uapi::hwt::*;

use crate::hwt_dev::{Dev, Kernel, Mapping, Region};
use crate::hwt_pt::Images;
use crate::{EX_DATAERR, EX_SOFTWARE, EX_USAGE, Options, PAGE_SIZE, PROG};
use hwt_ring::{ENTRY, Record, Ring, parse_record};

/// Records read at once.
const BATCH: usize = 256;
/// RTIT_CTL.OS, .USER and .BranchEn.
const RTIT_CTL_USER: u64 = 1 << 3;
const RTIT_CTL_BRANCHEN: u64 = 1 << 13;

/// A traced thread's buffer and the trace taken from it.
pub struct Thread {
    /// Its thread id in the context.
    pub id: i32,
    dev: Dev,
    map: Mapping,
    ring: Ring,
    /// The trace in pieces: a new piece after each loss.
    pub trace: Vec<Vec<u8>>,
}

/// The context of one traced process.
pub struct Session<'k> {
    k: &'k Kernel,
    ident: i32,
    pid: u32,
    bufsize: u64,
    root: String,
    pub threads: Vec<Thread>,
    pub images: Images,
    /// The address range traced (-i/-f), inclusive.
    pub filter: Option<(u64, u64)>,
}

fn os_err(what: &str, e: i32) -> Exit {
    PROG.err(EX_SOFTWARE, what, e)
}

impl<'k> Session<'k> {
    /// ALLOC of a thread-mode context for `pid`, its first buffer mapped,
    /// SET_CONFIG (with the -i/-f range) and START.
    pub fn new(k: &'k Kernel, pid: u32, o: &Options) -> Result<Session<'k>, Exit> {
        let ctl = k.open("/dev/hwt").map_err(|e| os_err("/dev/hwt", e))?;
        let mut arg = vec![0u8; 64];
        arg[0..8].copy_from_slice(&(o.bufsize as u64).to_ne_bytes());
        arg[8..12].copy_from_slice(&HWT_MODE_THREAD.to_ne_bytes());
        arg[12..16].copy_from_slice(&(pid as i32).to_ne_bytes());
        let mut name = o.backend.as_bytes().to_vec();
        name.push(0);
        let mut regions = [
            Region {
                at: 32,
                bytes: name,
            },
            Region {
                at: 40,
                bytes: (-1i32).to_ne_bytes().to_vec(),
            },
        ];
        arg[48..52].copy_from_slice(&(-1i32).to_ne_bytes());
        k.ioctl(&ctl, HWT_IOC_ALLOC, &mut arg, &mut regions)
            .map_err(|e| os_err("HWT_IOC_ALLOC", e))?;
        let ident = i32::from_ne_bytes(regions[1].bytes[..4].try_into().expect("4 bytes"));
        let mut s = Session {
            k,
            ident,
            pid,
            bufsize: o.bufsize as u64,
            root: o.root.clone(),
            threads: Vec::new(),
            images: Images::new(),
            filter: None,
        };
        s.add_thread(0)?;
        if let (Some(image), Some(func)) = (&o.image, &o.func) {
            s.filter = Some(s.resolve(o, image, func)?);
        }
        let mut cfg = vec![0u8; 72];
        cfg[0..8].copy_from_slice(&(RTIT_CTL_USER | RTIT_CTL_BRANCHEN).to_ne_bytes());
        if let Some((a, b)) = s.filter {
            cfg[16..20].copy_from_slice(&1i32.to_ne_bytes());
            cfg[24..32].copy_from_slice(&a.to_ne_bytes());
            cfg[32..40].copy_from_slice(&b.to_ne_bytes());
        }
        let mut arg = vec![0u8; 32];
        arg[16..24].copy_from_slice(&(cfg.len() as u64).to_ne_bytes());
        arg[24..28].copy_from_slice(&1i32.to_ne_bytes());
        let dev = &s.threads[0].dev;
        k.ioctl(
            dev,
            HWT_IOC_SET_CONFIG,
            &mut arg,
            &mut [Region { at: 8, bytes: cfg }],
        )
        .map_err(|e| PROG.err(EX_DATAERR, "HWT_IOC_SET_CONFIG", e))?;
        let mut arg = vec![0u8; 16];
        k.ioctl(dev, HWT_IOC_START, &mut arg, &mut [])
            .map_err(|e| os_err("HWT_IOC_START", e))?;
        Ok(s)
    }

    /// The range of function `func` of image `image`: the command's own
    /// executable, read before it runs (a library would need the pause on
    /// its mmap).
    fn resolve(&mut self, o: &Options, image: &str, func: &str) -> Result<(u64, u64), Exit> {
        let Some(cmd) = o.command.first() else {
            return Err(PROG.errx(EX_USAGE, "-i/-f need a command"));
        };
        let path = if cmd.starts_with('/') {
            cmd.clone()
        } else {
            format!("/usr/bin/{cmd}")
        };
        if path.rsplit('/').next() != Some(image) {
            return Err(PROG.errx(
                EX_USAGE,
                format!("-i {image}: only the command's own image can be filtered on so far"),
            ));
        }
        let file = format!("{}{path}", self.root);
        self.images
            .add(&path, &file, 0)
            .map_err(|e| PROG.errx(EX_USAGE, e))?;
        let (a, b) = self.images.function(image, func).ok_or_else(|| {
            PROG.errx(
                EX_USAGE,
                format!("function \"{func}\" not found in {image}"),
            )
        })?;
        // The range is inclusive.
        Ok((a, b.saturating_sub(1)))
    }

    /// Maps the buffer of thread `id`.
    fn add_thread(&mut self, id: i32) -> Result<(), Exit> {
        let path = if id == 0 {
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
        loop {
            let recs = self.records()?;
            let n = recs.len();
            for r in recs {
                self.record(&r)?;
            }
            if n < BATCH {
                break;
            }
        }
        for i in 0..self.threads.len() {
            let at = self.bufptr(i)?;
            self.saw(i, at);
            self.take(i);
        }
        Ok(())
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
                if self.images.objects.iter().any(|o| o.path == path) {
                    return Ok(());
                }
                let file = format!("{}{path}", self.root);
                if let Err(e) = self.images.add(&path, &file, addr) {
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
                "hwt: thread {}: buffer wrapped: {} bytes of trace lost",
                t.id, taken.lost
            );
            t.trace.push(Vec::new());
        }
        t.trace
            .last_mut()
            .expect("one piece at least")
            .extend_from_slice(&taken.bytes);
    }
}
