//! A log turned into profiles (libpmcstat_logging.c): the processes of
//! the log and what is mapped where in each (exec, map-in, map-out and
//! fork records), the images those mappings name, the PMCs and their
//! names, and each call chain sample handed to the analysis plugins with
//! the process it was taken in.
//!
//! Where this differs from FreeBSD's, on purpose: a sample that comes
//! after its process's exit record is resolved against the maps the
//! process had (FreeBSD's lookup drops an exited process's maps when its
//! late samples come, although its own comment says they are kept for
//! them); the PMC list, the process table and the images are not global
//! state, so a program may analyse several logs.

use rustc_hash::FxHashMap as HashMap;
use std::ffi::CStr;

use pmc::pmclog::PmclogEv;
use uapi::pmclog::PmclogBody;

use crate::libpmcstat_image::{Image, ImageType, ImageWarnings};
use crate::libpmcstat_string::{IStr, StringPool};

/// An index of [`Analysis::images`].
pub type ImageId = u32;

/// The kernel's pseudo-process in the log's records.
pub const KERNEL_PID: i32 = -1;

/// `struct pmcstat_pcmap`: the text of an image mapped at `low..high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcMap {
    /// First mapped text address.
    pub low: u64,
    /// One past the last.
    pub high: u64,
    /// The image.
    pub image: ImageId,
}

/// `struct pmcstat_process`: a process of the log and its address map.
#[derive(Debug, Clone, Default)]
pub struct LogProcess {
    /// Its pid (-1: the kernel).
    pub pid: i32,
    /// False once its exit was logged.
    pub active: bool,
    /// Mapped text, sorted by address, not overlapping.
    pub maps: Vec<PcMap>,
}

impl LogProcess {
    fn new(pid: i32) -> LogProcess {
        LogProcess {
            pid,
            active: true,
            maps: Vec::new(),
        }
    }

    /// `pmcstat_image_link`: the text of `image` (id `id`) mapped so that
    /// its load address is at `start`.
    pub fn link(&mut self, image: &Image, id: ImageId, start: u64) {
        if !image.has_text() {
            return;
        }
        let offset = start.wrapping_sub(image.vaddr);
        let map = PcMap {
            low: image.start.wrapping_add(offset),
            high: image.end.wrapping_add(offset),
            image: id,
        };
        if map.low >= map.high {
            return;
        }
        // Before the first entry at or past its end (overlaps do not
        // happen: each mapping is its own range of the address space).
        let at = self.maps.partition_point(|m| m.low < map.high);
        self.maps.insert(at, map);
    }

    /// `pmcstat_image_unmap`: takes `start..end` out of the map, cutting
    /// entries that straddle it.
    pub fn unmap(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut out = Vec::with_capacity(self.maps.len() + 1);
        for m in self.maps.drain(..) {
            if m.high <= start || m.low >= end {
                out.push(m);
                continue;
            }
            if m.low < start {
                out.push(PcMap { high: start, ..m });
            }
            if m.high > end {
                out.push(PcMap { low: end, ..m });
            }
        }
        self.maps = out;
    }

    /// `pmcstat_process_find_map`: the entry holding `pc`.
    pub fn find_map(&self, pc: u64) -> Option<&PcMap> {
        let i = self.maps.partition_point(|m| m.low <= pc);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (pc < m.high).then_some(m)
    }
}

/// `struct pmcstat_pmcrecord`: a PMC of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmcRecord {
    /// Its id.
    pub pmcid: u32,
    /// Its number, in order of appearance (`pr_pmcin`).
    pub index: u32,
    /// Its event's name.
    pub name: IStr,
    /// Samples it took.
    pub samples: u64,
    /// Samples whose PC no map holds.
    pub dubious_frames: u64,
    /// With PMC merging (`-T`), the first record of the same name.
    pub merge: usize,
}

/// `struct pmcstat_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// ELF executables seen.
    pub exec_elf: u64,
    /// a.out executables seen (none: FreeBSD reads no a.out either).
    pub exec_aout: u64,
    /// Executables of unknown kind.
    pub exec_indeterminable: u64,
    /// Errors while handling an exec.
    pub exec_errors: u64,
    /// Samples read.
    pub samples_total: u64,
    /// Samples left out (thread or CPU filter).
    pub samples_skipped: u64,
    /// Samples whose PC no map holds.
    pub samples_unknown_offset: u64,
    /// Samples in images of unknown kind.
    pub samples_indeterminable: u64,
    /// Samples in no known function.
    pub samples_unknown_function: u64,
    /// Call chains with a PC outside every map.
    pub callchain_dubious_frames: u64,
}

/// What the analysis is asked to do (pmcstat's options).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `-r`: the root under which the log's paths are looked up.
    pub fsroot: String,
    /// `-k`: where the kernel and its modules are, in place of the
    /// directory the log names.
    pub kerneldir: Option<String>,
    /// `-q` / `-v`.
    pub verbosity: u32,
    /// `-i`: only this thread's samples.
    pub tid: Option<u32>,
    /// `-c`: only these CPUs' samples (None: all).
    pub cpus: Option<Vec<u32>>,
    /// Merge PMCs of the same name (`-T`).
    pub merge_pmcs: bool,
}

/// A call chain sample, as the plugins get it.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// The process it was taken in.
    pub pid: i32,
    /// The thread.
    pub tid: u32,
    /// The PMC record (an index of [`Analysis::pmcs`]), merged if asked.
    pub pmc: usize,
    /// The PCs, the sampled one first.
    pub pcs: &'a [u64],
    /// Taken in user mode.
    pub usermode: bool,
    /// The CPU.
    pub cpu: u32,
}

/// `struct pmc_plugins`: what an analysis output does with the log.
pub trait Plugin {
    /// A new PMC appeared (`pl_newpmc`).
    fn new_pmc(&mut self, _analysis: &Analysis, _pmc: usize) {}
    /// A sample (`pl_process`).
    fn process(&mut self, analysis: &mut Analysis, sample: &Sample<'_>);
    /// The log ended: write the output (`pl_shutdown`); `mapfile` is
    /// where `-M` asked the image map to go.
    fn shutdown(
        &mut self,
        _analysis: &mut Analysis,
        _mapfile: Option<&mut dyn std::io::Write>,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

/// The state of a log's analysis.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Interned paths and names.
    pub strings: StringPool,
    /// Every image named so far.
    pub images: Vec<Image>,
    image_index: HashMap<(IStr, bool), ImageId>,
    /// Processes by pid, the kernel's (-1) included.
    pub procs: HashMap<i32, LogProcess>,
    /// PMCs in order of appearance.
    pub pmcs: Vec<PmcRecord>,
    /// Counts of what was seen.
    pub stats: Stats,
    /// The options.
    pub opts: Options,
    /// Warnings not yet printed, each a line without the program's name.
    pub warnings: Vec<String>,
    /// Sample total per PMC record since the last [`Analysis::take_period`]
    /// (the top display's refresh).
    pub samples_period: u64,
    /// The log's version, from its INITIALIZE record.
    pub log_version: Option<u32>,
    /// The current sample's PCs (kept to reuse its memory).
    chain: Vec<u64>,
    /// Changes with every record other than a sample, any of which may
    /// change how a PC resolves (a map, an exec, a fork, an exit): what
    /// a plugin remembers of earlier resolutions holds while it is the
    /// same.
    pub maps_generation: u64,
}

impl Analysis {
    /// `pmcstat_initialize_logging`: an analysis with the kernel's
    /// pseudo-process.
    pub fn new(opts: Options) -> Analysis {
        let mut a = Analysis {
            opts,
            ..Analysis::default()
        };
        a.procs.insert(KERNEL_PID, LogProcess::new(KERNEL_PID));
        a
    }

    /// `pmcstat_process_lookup(pid, PMCSTAT_ALLOCATE)` for a record that
    /// starts a process: an exited one with the same pid is replaced.
    fn fresh_process(&mut self, pid: i32) -> &mut LogProcess {
        let p = self
            .procs
            .entry(pid)
            .or_insert_with(|| LogProcess::new(pid));
        if !p.active {
            *p = LogProcess::new(pid);
        }
        p
    }

    /// The PMC records in the order FreeBSD lists them (the newest first).
    pub fn pmcs_listed(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pmcs.len()).rev()
    }

    /// The text of an interned string.
    pub fn string(&self, s: IStr) -> &str {
        self.strings.get(s)
    }

    /// The file an image was looked for at.
    fn lookup_path(&self, path: &str, is_kernel: bool) -> String {
        if let (true, Some(dir)) = (is_kernel, &self.opts.kerneldir) {
            let base = path.rsplit('/').next().unwrap_or(path);
            return format!("{dir}/{base}");
        }
        format!("{}{}", self.opts.fsroot, path)
    }

    /// `pmcstat_image_from_path` and, the first time, reading the file.
    pub fn image_from_path(&mut self, path: &str, is_kernel: bool) -> ImageId {
        let p = self.strings.intern(path);
        if let Some(&id) = self.image_index.get(&(p, is_kernel)) {
            return id;
        }
        let id = ImageId::try_from(self.images.len()).expect("fewer than 2^32 images");
        self.images.push(Image::new(p, is_kernel));
        self.image_index.insert((p, is_kernel), id);
        id
    }

    fn determine_type(&mut self, id: ImageId) {
        let image = &self.images[id as usize];
        if image.kind != ImageType::Unknown {
            return;
        }
        let path = self.lookup_path(self.strings.get(image.execpath), image.is_kernel_module);
        let mut warnings = ImageWarnings::default();
        let verbosity = self.opts.verbosity;
        self.images[id as usize].read(&mut self.strings, &path, verbosity, &mut warnings);
        self.warnings.extend(warnings.messages);
    }

    /// `pmcstat_process_exec`: process `pid` now runs `path`.
    fn process_exec(&mut self, pid: i32, path: &str, base: u64, dyn_base: u64) {
        let id = self.image_from_path(path, false);
        self.determine_type(id);
        match self.images[id as usize].kind {
            ImageType::Elf32 | ImageType::Elf64 => {}
            _ => {
                self.stats.exec_indeterminable += 1;
                return;
            }
        }
        self.stats.exec_elf += 1;
        let image = &self.images[id as usize];
        let start = image.vaddr.wrapping_add(dyn_base);
        let (dynamic, linker) = (image.is_dynamic, image.dynlinker);
        let proc = self.procs.get_mut(&pid).expect("exec's process exists");
        proc.link(&self.images[id as usize], id, start);
        if !dynamic {
            return;
        }
        let Some(linker) = linker else {
            return;
        };
        // The run-time linker is mapped at the exec's base address.
        let linker_path = self.strings.get(linker).to_owned();
        let rtld = self.image_from_path(&linker_path, false);
        self.determine_type(rtld);
        if !matches!(
            self.images[rtld as usize].kind,
            ImageType::Elf32 | ImageType::Elf64
        ) {
            self.warnings.push(format!(
                "WARNING: rtld not an ELF object \"{linker_path}\"."
            ));
            return;
        }
        let proc = self.procs.get_mut(&pid).expect("exec's process exists");
        proc.link(&self.images[rtld as usize], rtld, base);
    }

    /// `pmcstat_pmcid_add`: the PMC `pmcid` is called `name`.
    fn pmcid_add(&mut self, pmcid: u32, name: &str, plugins: &mut [Box<dyn Plugin>]) {
        let name = self.strings.intern(name);
        let mut same_name = None;
        for (i, pr) in self.pmcs.iter_mut().enumerate().rev() {
            if pr.pmcid == pmcid {
                pr.name = name;
                return;
            }
            if pr.name == name {
                same_name = Some(i);
            }
        }
        let index = self.pmcs.len();
        self.pmcs.push(PmcRecord {
            pmcid,
            index: u32::try_from(index).expect("fewer than 2^32 PMCs"),
            name,
            samples: 0,
            dubious_frames: 0,
            merge: same_name.unwrap_or(index),
        });
        for p in plugins.iter_mut() {
            p.new_pmc(self, index);
        }
    }

    /// `pmcstat_lookup_pmcid`.
    fn lookup_pmcid(&self, pmcid: u32) -> Option<usize> {
        let i = self.pmcs.iter().rposition(|p| p.pmcid == pmcid)?;
        Some(if self.opts.merge_pmcs {
            self.pmcs[i].merge
        } else {
            i
        })
    }

    /// One event of the log (`pmcstat_analyze_log`'s loop body).
    pub fn process_event(&mut self, ev: &PmclogEv, plugins: &mut [Box<dyn Plugin>]) {
        let Some(body) = ev.body() else {
            return;
        };
        if !matches!(body, PmclogBody::Callchain { .. }) {
            self.maps_generation += 1;
        }
        match body {
            PmclogBody::Initialize { version, .. } => {
                self.log_version = Some(version);
                let major = uapi::pmc::PMC_VERSION_MAJOR;
                if version & 0xFF00_0000 != major << 24 && self.opts.verbosity > 0 {
                    self.warnings.push(format!(
                        "WARNING: Log version {version:#x} does not match compiled version {major:#x}."
                    ));
                }
            }
            PmclogBody::MapIn {
                pid,
                start,
                pathname,
            } => {
                let pid = pid as i32;
                let is_kernel = pid == KERNEL_PID;
                if !is_kernel {
                    self.fresh_process(pid);
                }
                let path = String::from_utf8_lossy(pathname).into_owned();
                let id = self.image_from_path(&path, is_kernel);
                self.determine_type(id);
                if self.images[id as usize].kind != ImageType::Indeterminable {
                    let proc = self.procs.get_mut(&pid).expect("made above");
                    proc.link(&self.images[id as usize], id, start as u64);
                }
            }
            PmclogBody::MapOut { pid, start, end } => {
                if let Some(p) = self.procs.get_mut(&(pid as i32)) {
                    p.unmap(start as u64, end as u64);
                }
            }
            PmclogBody::Callchain {
                pid,
                tid,
                pmcid,
                cpuflags,
                pcs,
            } => {
                self.stats.samples_total += 1;
                self.samples_period += 1;
                let cpu = uapi::pmclog::pmc_callchain_cpuflags_to_cpu(cpuflags);
                if self.opts.tid.is_some_and(|t| t != tid) {
                    self.stats.samples_skipped += 1;
                    return;
                }
                if self.opts.cpus.as_ref().is_some_and(|c| !c.contains(&cpu)) {
                    self.stats.samples_skipped += 1;
                    return;
                }
                let pid = pid as i32;
                self.procs
                    .entry(pid)
                    .or_insert_with(|| LogProcess::new(pid));
                let Some(pmc) = self.lookup_pmcid(pmcid) else {
                    // A sample of a PMC the log never allocated: FreeBSD
                    // asserts; counted as skipped here.
                    self.stats.samples_skipped += 1;
                    return;
                };
                self.pmcs[pmc].samples += 1;
                let mut chain = std::mem::take(&mut self.chain);
                chain.clear();
                chain.extend(pcs.iter().map(|pc| pc as u64));
                let sample = Sample {
                    pid,
                    tid,
                    pmc,
                    pcs: &chain,
                    usermode: uapi::pmclog::pmc_callchain_cpuflags_to_usermode(cpuflags) != 0,
                    cpu,
                };
                for p in plugins.iter_mut() {
                    p.process(self, &sample);
                }
                self.chain = chain;
            }
            PmclogBody::Pmcallocate { pmcid, .. } => {
                let name = ev
                    .allocate_event_name()
                    .map(CStr::to_string_lossy)
                    .unwrap_or_default()
                    .into_owned();
                self.pmcid_add(pmcid, &name, plugins);
            }
            PmclogBody::Pmcallocatedyn { pmcid, evname, .. } => {
                let name = String::from_utf8_lossy(evname).into_owned();
                self.pmcid_add(pmcid, &name, plugins);
            }
            PmclogBody::Procexec {
                pid,
                base,
                dyn_base,
                pathname,
                ..
            } => {
                let pid = pid as i32;
                self.fresh_process(pid).maps.clear();
                let path = String::from_utf8_lossy(pathname).into_owned();
                self.process_exec(pid, &path, base as u64, dyn_base as u64);
            }
            PmclogBody::Procexit { pid, .. } | PmclogBody::Sysexit { pid } => {
                if let Some(p) = self.procs.get_mut(&(pid as i32)) {
                    p.active = false;
                }
            }
            PmclogBody::Procfork { oldpid, newpid } => {
                let maps = self.procs.get(&(oldpid as i32)).map(|p| p.maps.clone());
                let child = self.fresh_process(newpid as i32);
                if let Some(maps) = maps {
                    for m in maps {
                        let at = child.maps.partition_point(|c| c.low < m.high);
                        child.maps.insert(at, m);
                    }
                }
            }
            _ => {}
        }
    }

    /// Takes the warnings given so far.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The CONVERSION STATISTICS block `pmcstat_shutdown_logging` prints
    /// at verbosity 1 and above (every line at 2 and above, else only
    /// those not zero).
    pub fn statistics(&self) -> String {
        let s = &self.stats;
        let mut out = String::from("CONVERSION STATISTICS:\n");
        for (name, v) in [
            ("#exec/a.out", s.exec_aout),
            ("#exec/elf", s.exec_elf),
            ("#exec/unknown", s.exec_indeterminable),
            ("#exec handling errors", s.exec_errors),
            ("#samples/total", s.samples_total),
            ("#samples/unclaimed", s.samples_unknown_offset),
            ("#samples/unknown-object", s.samples_indeterminable),
            ("#samples/unknown-function", s.samples_unknown_function),
            ("#callchain/dubious-frames", s.callchain_dubious_frames),
        ] {
            if v != 0 || self.opts.verbosity >= 2 {
                out.push_str(&format!(" {name:<40} {v}\n"));
            }
        }
        out
    }

    /// Where `pc` of a sample of process `pid` lies: the map entry of the
    /// process (user mode) or of the kernel.
    pub fn find_map(&self, pid: i32, pc: u64, usermode: bool) -> Option<PcMap> {
        let who = if usermode { pid } else { KERNEL_PID };
        self.procs.get(&who)?.find_map(pc).copied()
    }

    /// The map entry of a sample's PC (its first), in the process for a
    /// user-mode sample, else in the kernel, with no fallback between the
    /// two (as gprof, annotate and their kin look); a PC in neither counts
    /// as unclaimed (`#samples/unclaimed`).
    pub fn claim_sampled_pc(&mut self, s: &Sample<'_>) -> Option<(u64, PcMap)> {
        let pc = *s.pcs.first()?;
        let map = self.find_map(s.pid, pc, s.usermode);
        if map.is_none() {
            self.stats.samples_unknown_offset += 1;
        }
        Some((pc, map?))
    }

    /// Each PC of a sample's chain with its map entry, as the call graph
    /// walks a chain: a kernel chain that goes on into the process's
    /// frames (a full capture) is looked up in the process from its first
    /// frame found only there on.
    pub fn chain_maps<'s>(
        &'s self,
        s: &'s Sample<'s>,
    ) -> impl Iterator<Item = (u64, Option<PcMap>)> + 's {
        let mut space = if s.usermode { s.pid } else { KERNEL_PID };
        s.pcs.iter().map(move |&pc| {
            let mut map = self.procs.get(&space).and_then(|p| p.find_map(pc)).copied();
            if map.is_none() && !s.usermode {
                map = self.procs.get(&s.pid).and_then(|p| p.find_map(pc)).copied();
                if map.is_some() {
                    space = s.pid;
                }
            }
            (pc, map)
        })
    }

    /// The name of the function at offset `func` of image `image`: its
    /// symbol's, or (without one) its address, as `%p` prints it.
    pub fn function_name(&self, image: ImageId, func: u64) -> String {
        let img = &self.images[image as usize];
        match img.symbols.search(func) {
            Some(sym) => self.strings.get(sym.name).to_owned(),
            None => format!("{:#x}", img.vaddr.wrapping_add(func)),
        }
    }

    /// The events of the log's PMCs, each once, in the order the log
    /// named them.
    pub fn event_names(&self) -> Vec<IStr> {
        let mut events: Vec<IStr> = Vec::new();
        for pr in &self.pmcs {
            if !events.contains(&pr.name) {
                events.push(pr.name);
            }
        }
        events
    }

    /// The offset of `pc` in the image of `map` (relative to its load
    /// address, as symbol offsets are).
    pub fn image_offset(&self, map: &PcMap, pc: u64) -> u64 {
        let image = &self.images[map.image as usize];
        let load = map.low.wrapping_add(image.vaddr).wrapping_sub(image.start);
        pc.wrapping_sub(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(start: u64, end: u64) -> Image {
        let mut strings = StringPool::new();
        let mut i = Image::new(strings.intern("/x"), false);
        i.kind = ImageType::Elf64;
        i.start = start;
        i.end = end;
        i.vaddr = 0;
        i
    }

    #[test]
    fn maps_link_find_and_unmap() {
        let mut p = LogProcess::new(5);
        p.link(&image(0x1000, 0x2000), 0, 0x40_0000);
        p.link(&image(0x100, 0x300), 1, 0x10_0000);
        assert_eq!(p.maps.len(), 2);
        assert_eq!(p.find_map(0x10_0100).map(|m| m.image), Some(1));
        assert_eq!(p.find_map(0x10_0300), None);
        assert_eq!(p.find_map(0x40_1fff).map(|m| m.image), Some(0));
        assert_eq!(p.find_map(0x40_2000), None);
        // A hole in the middle of an entry splits it.
        p.unmap(0x40_1400, 0x40_1800);
        assert_eq!(p.find_map(0x40_1500), None);
        assert_eq!(p.find_map(0x40_13ff).map(|m| m.image), Some(0));
        assert_eq!(p.find_map(0x40_1800).map(|m| m.image), Some(0));
        assert_eq!(p.maps.len(), 3);
        // A range covering entries removes them.
        p.unmap(0, u64::MAX);
        assert!(p.maps.is_empty());
    }
}
