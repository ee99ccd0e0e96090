//! Processes and threads of the simulated machine: creation, fork, exec,
//! threads, exit in two halves and reaping, their mappings and activities,
//! and the kernel's modules and files.

use super::devices;
use super::*;
use crate::user_process::{ExecError, UserProcess, UserThread};

impl Machine {
    pub(super) fn insert_proc(
        &self,
        pid: u32,
        ppid: u32,
        cred: Cred,
        comm: &str,
        path: &str,
        system: bool,
    ) -> u32 {
        let mut st = self.st();
        let tid = st.new_thread(pid, comm);
        st.procs.insert(
            pid,
            Proc {
                info: ProcInfo {
                    pid,
                    ppid,
                    cred,
                    sugid: false,
                    system,
                    zombie: false,
                    flags: 0,
                    comm: comm.into(),
                    path: path.into(),
                    threads: vec![tid],
                    exit_status: None,
                },
                umem: BTreeMap::new(),
                prot: BTreeMap::new(),
                next_uaddr: 0x1000_0000,
                fds: BTreeMap::new(),
                maps: Vec::new(),
                flag2: 0,
                output: Default::default(),
            },
        );
        tid
    }

    /// Creates a process as if it existed before the test started (no
    /// fork event), child of init. Returns (pid, main thread id).
    pub fn spawn(&self, cred: Cred, comm: &str) -> (u32, u32) {
        self.spawn_as(None, cred, comm)
    }

    /// [`Machine::spawn`] with the pid `want` when it is free (a host
    /// process mirrored under its own pid), else the next free one.
    pub fn spawn_as(&self, want: Option<u32>, cred: Cred, comm: &str) -> (u32, u32) {
        let pid = self.st().pid_for(want);
        let tid = self.insert_proc(pid, 1, cred, comm, &format!("/usr/bin/{comm}"), false);
        (pid, tid)
    }

    /// fork(2): a child with the parent's credentials and image; runs the
    /// process_fork event handlers in the parent's context.
    pub fn fork(&self, parent: u32) -> (u32, u32) {
        self.fork_as(parent, None)
    }

    /// [`Machine::fork`] with the child's pid `want` when it is free.
    pub fn fork_as(&self, parent: u32, want: Option<u32>) -> (u32, u32) {
        self.advance_ns(1000);
        let (info, ptid) = {
            let st = self.st();
            let p = &st.procs[&parent];
            (p.info.clone(), p.info.threads[0])
        };
        let pid = self.st().pid_for(want);
        let tid = self.insert_proc(pid, parent, info.cred, &info.comm, &info.path, false);
        {
            let mut st = self.st();
            let maps = st.maps(parent);
            let child = st.procs.get_mut(&pid).unwrap();
            child.info.sugid = info.sugid;
            child.maps = maps;
            st.exterr_inherit(ptid, tid, true);
        }
        self.with_ctx(ptid, || {
            self.event(&Event::ProcessFork { parent, child: pid })
        });
        (pid, tid)
    }

    /// setuid(2) and setgid(2) to `cred` (a mirrored host process changed
    /// its credentials): the process is marked set-id (`P_SUGID`) when
    /// they change, as the kernel marks it.
    pub fn set_cred(&self, pid: u32, cred: Cred) {
        let mut st = self.st();
        if let Some(p) = st.procs.get_mut(&pid) {
            if p.info.cred != cred {
                p.info.cred = cred;
                p.info.sugid = true;
            }
        }
    }

    /// execve(2) of `path`; `setid` gives the credentials of a set-id
    /// image. PMC_FN_PROCESS_EXEC runs, as in kern_exec.c, only while
    /// system-wide sampling is active or the process uses PMCs.
    pub fn exec(&self, pid: u32, path: &str, setid: Option<Cred>) {
        self.advance_ns(1000);
        let tid = {
            let mut st = self.st();
            // A new address space: a new CR3 at the next switch-in.
            st.cr3s.remove(&pid);
            let p = st.procs.get_mut(&pid).expect("exec of unknown pid");
            p.info.path = path.into();
            p.info.comm = path
                .rsplit('/')
                .next()
                .unwrap_or(path)
                .chars()
                .take(MAXCOMLEN)
                .collect();
            if let Some(c) = setid {
                if c != p.info.cred {
                    p.info.sugid = true;
                }
                p.info.cred = c;
            }
            let (tid, comm) = (p.info.threads[0], p.info.comm.clone());
            if let Some(t) = st.threads.get_mut(&tid) {
                t.name = comm;
            }
            tid
        };
        {
            let mut st = self.st();
            let image = st.vfs.get(path).and_then(|b| crate::elf::image_span(b));
            let (start, end) = image.unwrap_or((
                crate::elf::EXECUTABLE_BASE,
                crate::elf::EXECUTABLE_BASE + 0x1000,
            ));
            let p = st.procs.get_mut(&pid).unwrap();
            p.maps = vec![Mapping {
                start,
                end,
                path: path.into(),
            }];
            for t in p.info.threads.clone() {
                st.exterr_inherit(t, t, false);
            }
        }
        if self.system_sampling_active() || self.thread_uses_pmcs(tid) {
            let changed = setid.is_some();
            self.with_ctx(tid, || {
                self.hook(&HookCall::ProcessExec {
                    credentials_changed: changed,
                    // FreeBSD's et_dyn_addr: 0 for an ET_EXEC image, which
                    // loads where it was linked (ksim's programs all are).
                    base: 0,
                    dyn_base: 0,
                })
            });
        }
        // kern_exec.c: a traced process tells hwt(4) its new image (PIE
        // base, run-time linker base), which may pause it there.
        if self.proc_flag2(pid) & devices::P2_HWT != 0 {
            let entry = devices::HwtRecordEntry {
                record_type: uapi::hwt_record::HwtRecordType::Executable.raw(),
                fullpath: Some(path.into()),
                addr: 0,
                baseaddr: 0,
            };
            self.hwt_hook(tid, tid, &devices::HwtHookCall::Exec(entry));
        }
    }

    /// execve(2) of a real program: the ELF file `image` (installed at
    /// `path` when nothing is there) is loaded into a new address space
    /// with `argv`, the exec hooks run as for [`Machine::exec`], and the
    /// process's thread runs the program from the next clock tick on
    /// ([`UserThread`], [`MachineConfig::insns_per_tick`] a tick). The
    /// process exits when the program does, with its status in
    /// [`ProcInfo::exit_status`]. A file that is not a loadable executable
    /// is refused before anything changes.
    pub fn exec_program(
        &self,
        pid: u32,
        path: &str,
        image: &[u8],
        argv: &[&str],
    ) -> Result<(), ExecError> {
        let per_tick = self.st().cfg.insns_per_tick;
        let process = UserProcess::exec(image, path, argv, &[], pid as i32, 0)?;
        self.exec_user_thread(pid, path, image, UserThread::new(process, per_tick));
        Ok(())
    }

    /// [`Machine::exec_program`] of a program already loaded into
    /// `thread` (whose CPU a test may have subscribed to): `image` is its
    /// ELF file, installed at `path` when nothing is there.
    pub fn exec_user_thread(&self, pid: u32, path: &str, image: &[u8], mut thread: UserThread) {
        let ppid = self
            .st()
            .procs
            .get(&pid)
            .expect("exec of a program in an unknown pid")
            .info
            .ppid;
        thread.process_mut().set_ppid(ppid as i32);
        {
            let mut st = self.st();
            st.vfs.entry(path.into()).or_insert_with(|| image.to_vec());
            let kernel = crate::user_process::kernel_image();
            st.vfs
                .entry(kernel.path.clone())
                .or_insert_with(|| kernel.bytes.clone());
        }
        self.exec(pid, path, None);
        let tid = self.st().procs[&pid].info.threads[0];
        self.set_activity(tid, Box::new(thread));
    }

    /// thr_new(2): a new thread in `pid`, named after the process. As in
    /// kern_thr.c, the creator calls PMC_FN_THR_CREATE when the process
    /// uses PMCs, else PMC_FN_THR_CREATE_LOG while system-wide sampling is
    /// active, else nothing.
    pub fn thread_create(&self, pid: u32) -> u32 {
        self.thread_create_interleaved(pid, |_| {})
    }

    /// [`Self::thread_create`] with `between` run in kern_thr.c's window
    /// after the new thread is linked into its process and before the
    /// creation hook (an attach there sees the thread already).
    pub fn thread_create_interleaved(&self, pid: u32, between: impl FnOnce(u32)) -> u32 {
        let tid = {
            let mut st = self.st();
            let tid = st.next_tid;
            st.next_tid += 1;
            tid
        };
        // As on FreeBSD, the creator (here the process's first thread)
        // runs the hook about the new one.
        let creator = self.st().procs[&pid].info.threads.first().copied();
        self.thread_link(pid, tid);
        between(tid);
        self.thread_created_hooks(creator.unwrap_or(tid), tid);
        tid
    }

    /// thr_new(2) by thread `creator` of `pid`, of a thread whose id `tid`
    /// was reserved.
    pub(crate) fn thread_create_reserved(&self, pid: u32, tid: u32, creator: u32) {
        self.thread_link(pid, tid);
        self.thread_created_hooks(creator, tid);
    }

    /// thread_link(9): the thread joins its process.
    fn thread_link(&self, pid: u32, tid: u32) {
        {
            let mut st = self.st();
            let comm = st.procs[&pid].info.comm.clone();
            st.insert_thread(pid, &comm, tid);
            st.procs.get_mut(&pid).unwrap().info.threads.push(tid);
        }
    }

    /// What thr_new(2) calls about new thread `tid` once it is linked,
    /// run by `creator`.
    fn thread_created_hooks(&self, creator: u32, tid: u32) {
        if self.thread_uses_pmcs(tid) {
            self.with_ctx(creator, || self.hook(&HookCall::ThrCreate { tid }));
        } else if self.system_sampling_active() {
            let call = self.thr_create_log(tid);
            self.with_ctx(creator, || self.hook(&call));
        }
        self.hwt_hook(creator, tid, &devices::HwtHookCall::ThreadCreate);
    }

    /// The PMC_FN_THR_CREATE_LOG call about `tid`, with what the hook
    /// reads of the thread and its process.
    pub(super) fn thr_create_log(&self, tid: u32) -> HookCall {
        let st = self.0.st();
        let t = &st.threads[&tid];
        HookCall::ThrCreateLog {
            tid,
            pid: t.pid,
            flags: st.procs[&t.pid].info.flags,
            name: t.name.clone(),
        }
    }

    /// thr_set_name(2) by the thread itself: the name changes and, as in
    /// kern_thr.c, PMC_FN_THR_CREATE_LOG tells the system samplers (and
    /// the driver, when the process uses PMCs) its new name.
    pub fn thread_set_name(&self, tid: u32, name: &str) {
        let name: String = name.chars().take(MAXCOMLEN).collect();
        self.st()
            .threads
            .get_mut(&tid)
            .expect("thread_set_name of unknown thread")
            .name = name;
        if self.thread_uses_pmcs(tid) || self.system_sampling_active() {
            let call = self.thr_create_log(tid);
            self.with_ctx(tid, || self.hook(&call));
        }
        self.hwt_hook(tid, tid, &devices::HwtHookCall::ThreadSetName);
    }

    /// A thread's name (`td_name`).
    pub fn thread_name(&self, tid: u32) -> Option<String> {
        self.0.st().threads.get(&tid).map(|t| t.name.clone())
    }

    /// A thread exits (thr_exit(2)) and is gone.
    pub fn thread_exit(&self, tid: u32) {
        self.thread_exit_hooks(tid);
        let mut st = self.st();
        if let Some(t) = st.threads.remove(&tid) {
            if let Some(p) = st.procs.get_mut(&t.pid) {
                p.info.threads.retain(|&x| x != tid);
            }
        }
    }

    /// The hooks of thread_exit() (kern_thread.c), which runs with the
    /// process's spin lock held: a thread of a process using PMCs is
    /// switched out (PMC_FN_CSW_OUT) and PMC_FN_THR_EXIT follows;
    /// otherwise PMC_FN_THR_EXIT_LOG while system-wide sampling is active.
    pub(super) fn thread_exit_hooks(&self, tid: u32) {
        let on_cpu = self.st().threads.get(&tid).and_then(|t| t.cpu);
        // HWT_THREAD_EXIT, with the process lock held, on the thread's
        // CPU; the switch that follows (sched_throw) calls no hwt hook.
        if self.hwt_hook_installed() {
            let hook = || {
                crate::kern::lock_acquire("proc", crate::witness::LockKind::Sleep);
                if let Some(h) = self.0.handlers().hwt_hook.clone() {
                    h(tid, &devices::HwtHookCall::ThreadExit);
                }
                crate::kern::lock_release("proc");
            };
            match on_cpu {
                Some(cpu) => self.with_ctx_on(cpu, tid, hook),
                None => self.with_ctx(tid, hook),
            }
        }
        if self.thread_uses_pmcs(tid) {
            // The borrow of the state ends before the switch-out borrows it.
            if let Some(cpu) = on_cpu {
                self.switch_out_hooks(cpu, false);
            }
            self.with_ctx(tid, || self.critical_hook(&HookCall::ThrExit { tid }));
        } else {
            if let Some(cpu) = on_cpu {
                self.switch_out_hooks(cpu, false);
            }
            if self.system_sampling_active() {
                self.with_ctx(tid, || self.critical_hook(&HookCall::ThrExitLog { tid }));
            }
        }
    }

    /// exit(2): [`Machine::exit_begin`], then [`Machine::exit_finish`].
    pub fn exit(&self, pid: u32) {
        self.exit_begin(pid);
        self.exit_finish(pid);
    }

    /// The first half of exit1(): the process is marked exiting
    /// (`P_WEXIT`), its other threads exit (thread_single, each through
    /// thread_exit()'s hooks), the process_exit handlers run in its last
    /// thread's context, on its CPU if it runs, and then that thread is
    /// switched out. It is still there until
    /// [`Machine::exit_finish`]: other processes' system calls may find it
    /// in the middle of exiting.
    pub fn exit_begin(&self, pid: u32) {
        let threads = {
            let mut st = self.st();
            let p = st.procs.get_mut(&pid).expect("exit of unknown pid");
            assert!(p.info.flags & P_WEXIT == 0, "exit of an exiting process");
            p.info.flags |= P_WEXIT;
            p.info.threads.clone()
        };
        for &tid in &threads[1..] {
            self.thread_exit(tid);
        }
        // The handlers run while the last thread is still on its CPU,
        // as FreeBSD's exit1() calls them; it leaves the CPU after them.
        let last = threads[0];
        self.with_ctx(last, || self.event(&Event::ProcessExit { pid }));
        let on_cpu = self.st().threads.get(&last).and_then(|t| t.cpu);
        if let Some(cpu) = on_cpu {
            self.switch_out(cpu);
        }
    }

    /// The rest of exit1(): the last thread goes through thread_exit()'s
    /// hooks and the process becomes a zombie; its descriptors close and
    /// its children go to init.
    pub fn exit_finish(&self, pid: u32) {
        let threads = self.st().procs[&pid].info.threads.clone();
        for &tid in &threads {
            self.thread_exit_hooks(tid);
        }
        let mut st = self.st();
        for tid in &threads {
            st.threads.remove(tid);
        }
        let p = st.procs.get_mut(&pid).unwrap();
        p.info.zombie = true;
        p.info.threads.clear();
        p.umem.clear();
        let fds: Vec<u64> = std::mem::take(&mut p.fds).into_values().collect();
        for id in fds {
            st.unref_file(id);
        }
        // Orphans are reparented to init.
        for q in st.procs.values_mut() {
            if q.info.ppid == pid {
                q.info.ppid = 1;
            }
        }
        drop(st);
        self.settle();
    }

    /// wait(2) by the parent: the zombie disappears.
    pub fn reap(&self, pid: u32) {
        let mut st = self.st();
        assert!(
            st.procs.get(&pid).is_some_and(|p| p.info.zombie),
            "reap of a live process"
        );
        st.procs.remove(&pid);
    }

    /// The process, if it exists (zombies included).
    pub fn proc_info(&self, pid: u32) -> Option<ProcInfo> {
        self.0.st().procs.get(&pid).map(|p| p.info.clone())
    }

    /// Gives a thread an activity, asked for its location every tick.
    pub fn set_activity(&self, tid: u32, activity: Box<dyn Activity>) {
        self.st()
            .threads
            .get_mut(&tid)
            .expect("set_activity of unknown thread")
            .activity = Some(activity);
    }

    /// Where the last tick left a thread.
    pub fn location_of(&self, tid: u32) -> Location {
        self.st().location(tid)
    }

    /// Puts a thread at a location (for interrupts between ticks).
    pub fn set_location(&self, tid: u32, location: Location) {
        self.st()
            .threads
            .get_mut(&tid)
            .expect("set_location of unknown thread")
            .location = location;
    }

    /// mmap(2) of an executable object at `[addr, addr + len)` by `pid`
    /// (PMC_FN_MMAP in the process's context).
    pub fn mmap(&self, pid: u32, path: &str, addr: u64, len: u64) {
        let tid = self
            .st()
            .procs
            .get(&pid)
            .expect("mmap in unknown pid")
            .info
            .threads[0];
        self.mmap_by(tid, pid, path, addr, len);
    }

    /// [`Machine::mmap`] by thread `tid` of `pid`: PMC_FN_MMAP, then (as
    /// vn_mmap() does) HWT_MMAP, which may pause the thread.
    pub(crate) fn mmap_by(&self, tid: u32, pid: u32, path: &str, addr: u64, len: u64) {
        {
            let mut st = self.st();
            let p = st.procs.get_mut(&pid).expect("mmap in unknown pid");
            p.maps.push(Mapping {
                start: addr,
                end: addr + len,
                path: path.into(),
            });
        }
        self.with_ctx(tid, || self.hook(&HookCall::Mmap { addr }));
        let entry = devices::HwtRecordEntry {
            record_type: uapi::hwt_record::HwtRecordType::Mmap.raw(),
            fullpath: Some(path.into()),
            addr,
            baseaddr: 0,
        };
        self.hwt_hook(tid, tid, &devices::HwtHookCall::Mmap(entry));
        self.settle();
    }

    /// munmap(2) of `[addr, addr + len)` (PMC_FN_MUNMAP).
    pub fn munmap(&self, pid: u32, addr: u64, len: u64) {
        let tid = self
            .st()
            .procs
            .get(&pid)
            .expect("munmap in unknown pid")
            .info
            .threads[0];
        self.munmap_by(tid, pid, addr, len);
    }

    /// [`Machine::munmap`] by thread `tid` of `pid`: PMC_FN_MUNMAP, then
    /// HWT_RECORD with the MUNMAP record.
    pub(crate) fn munmap_by(&self, tid: u32, pid: u32, addr: u64, len: u64) {
        {
            let mut st = self.st();
            let p = st.procs.get_mut(&pid).expect("munmap in unknown pid");
            p.maps.retain(|m| m.end <= addr || m.start >= addr + len);
        }
        self.with_ctx(tid, || self.hook(&HookCall::Munmap { addr, size: len }));
        let entry = devices::HwtRecordEntry {
            record_type: uapi::hwt_record::HwtRecordType::Munmap.raw(),
            fullpath: None,
            addr,
            baseaddr: 0,
        };
        self.hwt_hook(tid, tid, &devices::HwtHookCall::Record(entry));
        self.settle();
    }

    /// kldload(2) of a module at `[addr, addr + len)`; the kld_load
    /// handlers run in the context of `by`'s thread.
    pub fn kld_load(&self, by: u32, path: &str, addr: u64, len: u64) {
        self.st().klds.push(Mapping {
            start: addr,
            end: addr + len,
            path: path.into(),
        });
        self.with_ctx(by, || self.event(&Event::KldLoad { addr }));
        self.settle();
    }

    /// kldunload(2) of the module loaded at `addr`.
    pub fn kld_unload(&self, by: u32, addr: u64) {
        let m = {
            let mut st = self.st();
            let i = st
                .klds
                .iter()
                .position(|m| m.start == addr)
                .expect("no module there");
            st.klds.remove(i)
        };
        self.with_ctx(by, || {
            self.event(&Event::KldUnload {
                addr,
                size: m.end - m.start,
            })
        });
        self.settle();
    }

    /// The live processes as (pid, command name), in pid order, as the
    /// `kern.proc.proc` sysctl lists them.
    pub fn processes(&self) -> Vec<(u32, String)> {
        let st = self.0.st();
        st.live_pids()
            .into_iter()
            .filter_map(|pid| st.procs.get(&pid).map(|p| (pid, p.info.comm.clone())))
            .collect()
    }

    /// What the program process `pid` runs wrote to descriptor `fd` (1
    /// or 2) so far, zombies included.
    pub fn program_output(&self, pid: u32, fd: i32) -> Vec<u8> {
        self.0
            .st()
            .procs
            .get(&pid)
            .map(|p| p.output[usize::from(fd == 2)].clone())
            .unwrap_or_default()
    }

    /// The mappings of process `pid` (what kernel code sees of its
    /// executable objects).
    pub fn mappings(&self, pid: u32) -> Vec<Mapping> {
        self.st().maps(pid)
    }

    /// Installs a file (an executable, a library, a kernel module).
    pub fn install(&self, path: &str, bytes: Vec<u8>) {
        self.st().vfs.insert(path.into(), bytes);
    }

    /// A file's contents.
    pub fn read_file(&self, path: &str) -> Option<Vec<u8>> {
        self.0.st().vfs.get(path).cloned()
    }

    /// Writes the machine's files (the programs and libraries installed
    /// or run, and the kernel) under `dir`, each at its path there: the
    /// file system root that `pmcstat -r` takes to analyse a log of this
    /// machine.
    pub fn export_files(&self, dir: &std::path::Path) -> std::io::Result<()> {
        let kernel = crate::user_process::kernel_image();
        let mut files = self.0.st().vfs.clone();
        files
            .entry(kernel.path.clone())
            .or_insert_with(|| kernel.bytes.clone());
        for (path, bytes) in files {
            let rel = path.trim_start_matches('/');
            if rel.is_empty() || rel.split('/').any(|c| c == "..") {
                continue;
            }
            let at = dir.join(rel);
            if let Some(parent) = at.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(at, bytes)?;
        }
        Ok(())
    }
}
