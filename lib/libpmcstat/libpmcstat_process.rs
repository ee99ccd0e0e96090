//! pmcstat's process control, as libpmcstat_process.c and pmcstat.c have
//! it: the command created held before its exec and started once its
//! PMCs are attached (`pmcstat_create_process`, `pmcstat_start_process`),
//! the PMCs attached to the targets (`pmcstat_attach_pmcs`), the targets
//! that `-t` names (`pmcstat_find_targets`), and the command interrupted
//! (`pmcstat_kill_process`); [`HostProcesses`] does it on this machine.

use core::ffi::c_int;
use std::ffi::CString;
use std::sync::Mutex;
use std::time::Duration;

use pmc::pmc::Pmc;
use pmc::regcomp::Regex;
use uapi::pmc::PmcId;

use crate::{Pid, ProcessControl};

/// Why [`ProcessControl::create_process`] failed, with the errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateError {
    /// socketpair(2) failed ("ERROR: cannot create socket pair").
    SocketPair(c_int),
    /// fork(2) failed ("ERROR: cannot fork").
    Fork(c_int),
    /// The child's "ready" token did not come ("ERROR (parent): cannot
    /// read token").
    Token(c_int),
    /// There is no such command ("ERROR: execvp "command" failed").
    Exec(c_int),
}

impl CreateError {
    /// FreeBSD's message for the failure (err(3) adds the errno's text),
    /// for the command `argv0`.
    pub fn message(&self, argv0: &str) -> String {
        match self {
            CreateError::SocketPair(_) => "ERROR: cannot create socket pair".into(),
            CreateError::Fork(_) => "ERROR: cannot fork".into(),
            CreateError::Token(_) => "ERROR (parent): cannot read token".into(),
            CreateError::Exec(_) => format!("ERROR: execvp \"{argv0}\" failed"),
        }
    }

    /// The errno.
    pub fn errno(&self) -> c_int {
        match *self {
            CreateError::SocketPair(e)
            | CreateError::Fork(e)
            | CreateError::Token(e)
            | CreateError::Exec(e) => e,
        }
    }
}

/// Why [`ProcessControl::start_process`] failed, with the errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartError {
    /// The "go" token could not be written, or the process is not one
    /// that waits for it ("ERROR (parent): write of token failed").
    Token(c_int),
    /// The command's exec failed ("ERROR: execvp "command" failed").
    Exec(c_int),
}

impl StartError {
    /// FreeBSD's message for the failure, for the command `argv0`.
    pub fn message(&self, argv0: &str) -> String {
        match self {
            StartError::Token(_) => "ERROR (parent): write of token failed".into(),
            StartError::Exec(_) => format!("ERROR: execvp \"{argv0}\" failed"),
        }
    }

    /// The errno.
    pub fn errno(&self) -> c_int {
        match *self {
            StartError::Token(e) | StartError::Exec(e) => e,
        }
    }
}

/// Why [`attach_pmcs`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachError {
    /// PMC `name` could not be attached to process `pid`, for another
    /// reason than the process being gone.
    Failed {
        /// The PMC's name as pmcstat shows it.
        name: String,
        /// The target.
        pid: Pid,
        /// The errno of pmc_attach(3).
        errno: c_int,
    },
    /// No PMC could be attached to any target.
    NoneAttached,
}

impl core::fmt::Display for AttachError {
    /// FreeBSD's message (err(3) adds the errno's text to `Failed`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AttachError::Failed { name, pid, .. } => {
                write!(f, "ERROR: cannot attach pmc \"{name}\" to process {pid}")
            }
            AttachError::NoneAttached => f.write_str("ERROR: No processes were attached to."),
        }
    }
}

/// `pmcstat_attach_pmcs`: attaches every process PMC of `pmcs` (id and
/// name) to every target, as FreeBSD does: PMC by PMC, target by target.
/// A target that is gone (ESRCH) is passed over; any other failure ends
/// the attaching. Returns how many attachments were made, at least one.
pub fn attach_pmcs<'a>(
    pmc: &Pmc,
    pmcs: impl IntoIterator<Item = (PmcId, &'a str)>,
    targets: &[Pid],
) -> Result<usize, AttachError> {
    let mut count = 0;
    for (id, name) in pmcs {
        for &pid in targets {
            match pmc.attach(id, pid) {
                Ok(()) => count += 1,
                Err(libc::ESRCH) => {}
                Err(errno) => {
                    return Err(AttachError::Failed {
                        name: name.to_owned(),
                        pid,
                        errno,
                    });
                }
            }
        }
    }
    if count == 0 {
        Err(AttachError::NoneAttached)
    } else {
        Ok(count)
    }
}

/// `pmcstat_find_targets` for regular expressions: the processes whose
/// command names `patterns` match (any of them), in the order of the
/// process table, each once.
pub fn find_targets(control: &dyn ProcessControl, patterns: &[Regex]) -> Result<Vec<Pid>, c_int> {
    let mut found = Vec::new();
    for (pid, comm) in control.processes()? {
        if patterns.iter().any(|re| re.is_match(&comm)) && !found.contains(&pid) {
            found.push(pid);
        }
    }
    Ok(found)
}

/// A command's process between its fork and its exec: it waits on its
/// end of a socket pair for the token that lets it exec.
#[derive(Debug)]
struct Held {
    pid: Pid,
    /// The parent's end of the socket pair.
    gate: c_int,
}

/// Process control on the machine pmcstat runs on.
#[derive(Debug, Default)]
pub struct HostProcesses {
    held: Mutex<Vec<Held>>,
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// read(2) of one buffer, again after EINTR: the count, or the errno.
fn read_fd(fd: c_int, buf: &mut [u8]) -> Result<usize, c_int> {
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Marks a descriptor close-on-exec.
fn cloexec(fd: c_int) -> Result<(), c_int> {
    // SAFETY: F_SETFD on a descriptor of ours.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

impl HostProcesses {
    /// Process control of this machine.
    pub fn new() -> HostProcesses {
        HostProcesses::default()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HostProcesses {
    fn drop(&mut self) {
        for h in self.held().drain(..) {
            // SAFETY: our end of the pair, closed once; the child then
            // reads end-of-file and exits without its exec.
            unsafe { libc::close(h.gate) };
        }
    }
}

/// Exit status of a child whose exec failed (EX_OSERR, as FreeBSD's
/// child's err(3)).
const EXEC_FAILED: c_int = 71;

impl ProcessControl for HostProcesses {
    fn create_process(&self, argv: &[String]) -> Result<Pid, CreateError> {
        // Everything the child needs is prepared before fork(2): after it,
        // the child makes only async-signal-safe calls.
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| CreateError::Exec(libc::EINVAL)))
            .collect::<Result<_, _>>()?;
        if args.is_empty() {
            return Err(CreateError::Exec(libc::EINVAL));
        }
        let mut ptrs: Vec<*const core::ffi::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(core::ptr::null());
        let mut pair: [c_int; 2] = [-1; 2];
        // SAFETY: `pair` has room for the two descriptors.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } < 0 {
            return Err(CreateError::SocketPair(errno()));
        }
        let [parent_end, child_end] = pair;
        let close_both = || {
            // SAFETY: our descriptors, closed once.
            unsafe {
                libc::close(parent_end);
                libc::close(child_end);
            }
        };
        // Neither end may outlive the exec: the command's successful exec
        // closes the child's end, which is how the parent learns of it.
        if let Err(e) = cloexec(parent_end).and_then(|()| cloexec(child_end)) {
            close_both();
            return Err(CreateError::SocketPair(e));
        }
        // SAFETY: the child runs only async-signal-safe calls (close,
        // write, read, execvp, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = errno();
            close_both();
            return Err(CreateError::Fork(e));
        }
        if pid == 0 {
            // SAFETY: see above; the child never returns.
            unsafe {
                libc::close(parent_end);
                // Tell the parent the child runs, then wait for its go.
                let mut token = b'+';
                if libc::write(child_end, (&token as *const u8).cast(), 1) == 1
                    && libc::read(child_end, (&mut token as *mut u8).cast(), 1) == 1
                {
                    libc::execvp(ptrs[0], ptrs.as_ptr());
                    // The exec failed: its errno goes to the parent (read
                    // from errno; nothing is allocated).
                    let e = std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO);
                    let bytes = e.to_ne_bytes();
                    libc::write(child_end, bytes.as_ptr().cast(), bytes.len());
                }
                libc::_exit(EXEC_FAILED);
            }
        }
        // SAFETY: the child's end, not ours; closed once.
        unsafe { libc::close(child_end) };
        let mut token = [0u8; 1];
        match read_fd(parent_end, &mut token) {
            Ok(1) => {}
            Ok(_) => {
                // SAFETY: ours, closed once.
                unsafe { libc::close(parent_end) };
                return Err(CreateError::Token(libc::EPIPE));
            }
            Err(e) => {
                // SAFETY: ours, closed once.
                unsafe { libc::close(parent_end) };
                return Err(CreateError::Token(e));
            }
        }
        self.held().push(Held {
            pid,
            gate: parent_end,
        });
        Ok(pid)
    }

    fn start_process(&self, pid: Pid) -> Result<(), StartError> {
        let gate = {
            let mut held = self.held();
            let at = held
                .iter()
                .position(|h| h.pid == pid)
                .ok_or(StartError::Token(libc::ESRCH))?;
            held.swap_remove(at).gate
        };
        let token = b"!";
        // SAFETY: the gate is our open descriptor; one byte is written.
        let wrote = unsafe { libc::write(gate, token.as_ptr().cast(), 1) };
        if wrote != 1 {
            let e = errno();
            // SAFETY: closed once, here.
            unsafe { libc::close(gate) };
            return Err(StartError::Token(e));
        }
        // End of file: the exec closed the child's end. Four bytes: the
        // errno of a failed exec.
        let mut status = [0u8; 4];
        let mut got = 0;
        let r = loop {
            match read_fd(gate, &mut status[got..]) {
                Ok(0) => break Ok(got),
                Ok(n) => {
                    got += n;
                    if got == status.len() {
                        break Ok(got);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        // SAFETY: closed once, here.
        unsafe { libc::close(gate) };
        match r {
            Ok(0) => Ok(()),
            Ok(4) => Err(StartError::Exec(c_int::from_ne_bytes(status))),
            Ok(_) => Err(StartError::Exec(libc::EIO)),
            Err(e) => Err(StartError::Token(e)),
        }
    }

    fn exited(&self, pid: Pid) -> bool {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on our child only writes `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        r == pid || (r < 0 && errno() == libc::ECHILD)
    }

    fn kill_process(&self, pid: Pid) -> Result<(), c_int> {
        // SAFETY: kill(2) sends a signal; no memory is involved.
        if unsafe { libc::kill(pid, libc::SIGINT) } < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    fn wait(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    #[cfg(target_os = "freebsd")]
    fn processes(&self) -> Result<Vec<(Pid, String)>, c_int> {
        let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PROC];
        let entry = core::mem::size_of::<libc::kinfo_proc>();
        // The table may grow between sizing and reading it: retry.
        for _ in 0..8 {
            let mut len = 0usize;
            // SAFETY: a NULL buffer asks only for the size.
            let r = unsafe {
                libc::sysctl(
                    mib.as_ptr(),
                    3,
                    core::ptr::null_mut(),
                    &mut len,
                    core::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                return Err(errno());
            }
            len += len / 8 + entry;
            let mut table: Vec<libc::kinfo_proc> = Vec::with_capacity(len / entry);
            let mut bytes = table.capacity() * entry;
            // SAFETY: the buffer has `bytes` writable bytes of kinfo_proc
            // storage; the kernel writes whole entries.
            let r = unsafe {
                libc::sysctl(
                    mib.as_ptr(),
                    3,
                    table.as_mut_ptr().cast(),
                    &mut bytes,
                    core::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                if errno() == libc::ENOMEM {
                    continue;
                }
                return Err(errno());
            }
            // SAFETY: the kernel initialised `bytes / entry` entries.
            unsafe { table.set_len(bytes / entry) };
            return Ok(table
                .iter()
                .map(|p| {
                    let comm: Vec<u8> = p
                        .ki_comm
                        .iter()
                        .take_while(|&&c| c != 0)
                        .map(|&c| c as u8)
                        .collect();
                    (p.ki_pid, String::from_utf8_lossy(&comm).into_owned())
                })
                .collect());
        }
        Err(libc::ENOMEM)
    }

    /// Linux has no kinfo_proc: the names are /proc/PID/comm.
    #[cfg(target_os = "linux")]
    fn processes(&self) -> Result<Vec<(Pid, String)>, c_int> {
        let dir = std::fs::read_dir("/proc").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let mut list: Vec<(Pid, String)> = dir
            .filter_map(|d| {
                let d = d.ok()?;
                let pid: Pid = d.file_name().to_str()?.parse().ok()?;
                // A process may exit while the table is read.
                let comm = std::fs::read(d.path().join("comm")).ok()?;
                let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
                Some((pid, String::from_utf8_lossy(comm).into_owned()))
            })
            .collect();
        list.sort_unstable_by_key(|&(pid, _)| pid);
        Ok(list)
    }

    #[cfg(not(any(target_os = "freebsd", target_os = "linux")))]
    fn processes(&self) -> Result<Vec<(Pid, String)>, c_int> {
        Err(libc::ENOSYS)
    }
}
