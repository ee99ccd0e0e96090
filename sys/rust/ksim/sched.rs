//! Real concurrency, reproducibly: [`Machine::race`] runs pieces of kernel
//! work (a system call, a clock interrupt, a kernel process's pass) on host
//! threads of their own, as if on CPUs of their own, under a seeded
//! scheduler. One piece runs at a time; at every scheduling point, which
//! kpi's simulator backend puts at each lock, unlock and allocation, the
//! scheduler may hand the machine to another piece, chosen from the seed.
//! A piece that finds a lock held waits, and the others run until it is
//! free. The same seed gives the same interleaving, so a failure found
//! with one replays.
//!
//! This is randomized scheduling in the manner of shuttle: no exhaustive
//! search, but many seeds over many runs explore interleavings that one
//! thread of execution never shows (a system call on one CPU against an
//! interrupt on another, the log writer against the record emitters).
//!
//! The machine's per-CPU execution state (the thread and CPU the code runs
//! for, interrupt and NMI context, critical-section depth and the locks
//! the witness sees held) belongs to each piece: it is saved and restored
//! when the machine changes hands.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::machine::{Machine, current, try_current};

/// The execution state a piece of kernel work carries with it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskCtx {
    pub(crate) ctx: Option<(u32, u32)>,
    pub(crate) in_intr: bool,
    pub(crate) in_nmi: bool,
    pub(crate) critnest: u32,
    pub(crate) held: Vec<(&'static str, crate::witness::LockKind)>,
}

#[derive(Debug, Default)]
struct BatonState {
    /// A race is on.
    active: bool,
    /// The piece that may run.
    current: usize,
    done: Vec<bool>,
    saved: Vec<TaskCtx>,
    rng: u64,
    /// Hand-overs because the running piece waited for a lock, in a row.
    waits: u64,
    /// Hand-overs of the race so far.
    switches: u64,
    /// The pieces asleep in the kernel (`msleep`), each with what it
    /// sleeps on and, once woken, why.
    asleep: Vec<Option<Sleeper>>,
    /// Processes sent a signal that no PCATCH sleep has taken yet.
    pending_signals: Vec<u32>,
    /// Outside a race, a PCATCH sleep ends at once as if a signal had
    /// come, instead of being reported as a sleep nothing could end
    /// ([`Machine::set_unraced_sleeps_interrupted`]); and how many did.
    interrupt_unraced: bool,
    interrupted_unraced: u64,
}

/// A piece asleep on a wait channel.
#[derive(Debug, Clone, Copy)]
struct Sleeper {
    chan: usize,
    /// PCATCH: a signal to `pid` ends the sleep.
    catch: bool,
    pid: u32,
    woken: Option<Wake>,
}

/// Why a sleep ([`sleep`]) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// `wakeup(9)` on its channel.
    Wakeup,
    /// A signal to its process (PCATCH sleeps only).
    Signal,
    /// Nothing is left that could wake it (internal: [`sleep`] panics).
    Stuck,
}

/// The baton the pieces of a race pass around.
#[derive(Debug, Default)]
pub(crate) struct Baton {
    st: Mutex<BatonState>,
    cv: Condvar,
}

thread_local! {
    /// The piece of the current race this host thread runs.
    static TASK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Waiting for a lock this many hand-overs in a row, with every other
/// piece waiting or finished, is a deadlock.
const DEADLOCK: u64 = 100_000;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl BatonState {
    /// Piece `k` can run: not finished, and awake or woken.
    fn runnable(&self, k: usize) -> bool {
        !self.done[k] && self.asleep[k].is_none_or(|s| s.woken.is_some())
    }
}

impl Baton {
    fn lock(&self) -> MutexGuard<'_, BatonState> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands the machine to piece `next` and waits for it to come back.
    fn hand_over(&self, m: &Machine, me: usize, next: usize, mut b: MutexGuard<'_, BatonState>) {
        if next == me {
            return;
        }
        b.saved[me] = m.0.st().take_task_ctx();
        let ctx = std::mem::take(&mut b.saved[next]);
        m.0.st().put_task_ctx(ctx);
        b.current = next;
        b.switches += 1;
        self.cv.notify_all();
        let _b = self
            .cv
            .wait_while(b, |b| b.current != me)
            .unwrap_or_else(PoisonError::into_inner);
    }

    fn pick_other(b: &mut BatonState, me: usize) -> Option<usize> {
        let others: Vec<usize> = (0..b.done.len())
            .filter(|&k| k != me && b.runnable(k))
            .collect();
        if others.is_empty() {
            None
        } else {
            Some(others[(splitmix(&mut b.rng) % others.len() as u64) as usize])
        }
    }
}

/// A scheduling point: the running piece may lose the machine here.
pub fn point() {
    let Some(me) = TASK.with(Cell::get) else {
        return;
    };
    let Some(m) = try_current() else { return };
    let baton = &m.0.baton;
    let mut b = baton.lock();
    if !b.active {
        return;
    }
    b.waits = 0;
    // Switch about one time in three, to any piece still running.
    if splitmix(&mut b.rng) % 3 != 0 {
        return;
    }
    let runnable: Vec<usize> = (0..b.done.len()).filter(|&k| b.runnable(k)).collect();
    let next = runnable[(splitmix(&mut b.rng) % runnable.len() as u64) as usize];
    baton.hand_over(&m, me, next, b);
}

/// The running piece waits for a lock another piece holds: another piece
/// runs. Panics when none could ever free it (a deadlock), or outside a
/// race, where a held lock means the code took it twice.
pub fn wait_for(lock: &str) {
    let me = TASK.with(Cell::get);
    let m = current();
    let baton = &m.0.baton;
    let mut b = baton.lock();
    let Some(me) = me.filter(|_| b.active) else {
        panic!("lock {lock} taken while held");
    };
    b.waits += 1;
    assert!(b.waits < DEADLOCK, "deadlock: waiting for lock {lock}");
    match Baton::pick_other(&mut b, me) {
        Some(next) => baton.hand_over(&m, me, next, b),
        None => panic!("lock {lock} held by a piece that has finished, or taken twice"),
    }
}

/// `msleep(9)` of the running piece on `chan` for a thread of `pid`:
/// the piece is put on the sleep queue, `unlock` runs (msleep's
/// interlock: a wakeup after it is not lost), and other pieces run until
/// a [`wakeup`] of `chan` or, with `catch`, a signal to `pid` ([`signal`]).
/// Panics outside a race, where nothing could ever wake the thread, and
/// when every other piece has finished or sleeps too (a deadlock).
pub fn sleep(chan: usize, catch: bool, pid: u32, wmesg: &str, unlock: impl FnOnce()) -> Wake {
    let me = TASK.with(Cell::get);
    let m = current();
    let baton = &m.0.baton;
    {
        let mut b = baton.lock();
        let Some(me) = me.filter(|_| b.active) else {
            if catch && b.interrupt_unraced {
                b.interrupted_unraced += 1;
                drop(b);
                unlock();
                return Wake::Signal;
            }
            drop(b);
            panic!("a thread sleeps on \"{wmesg}\" outside a race: nothing could wake it");
        };
        // A signal already pending ends a PCATCH sleep before it starts.
        if let Some(i) = b
            .pending_signals
            .iter()
            .position(|&p| p == pid)
            .filter(|_| catch)
        {
            b.pending_signals.swap_remove(i);
            drop(b);
            unlock();
            return Wake::Signal;
        }
        b.asleep[me] = Some(Sleeper {
            chan,
            catch,
            pid,
            woken: None,
        });
    }
    unlock();
    let me = me.expect("in a race");
    let mut b = baton.lock();
    loop {
        if let Some(why) = b.asleep[me].and_then(|s| s.woken) {
            b.asleep[me] = None;
            if why == Wake::Stuck {
                drop(b);
                panic!("deadlock: a thread sleeps on \"{wmesg}\" and no other work could wake it");
            }
            return why;
        }
        match Baton::pick_other(&mut b, me) {
            Some(next) => {
                baton.hand_over(&m, me, next, b);
                b = baton.lock();
            }
            None => {
                drop(b);
                panic!("deadlock: a thread sleeps on \"{wmesg}\" and no other work could wake it");
            }
        }
    }
}

/// `wakeup(9)`: every piece asleep on `chan` may run again.
pub fn wakeup(chan: usize) {
    let Some(m) = try_current() else { return };
    let mut b = m.0.baton.lock();
    for s in b.asleep.iter_mut().flatten() {
        if s.chan == chan && s.woken.is_none() {
            s.woken = Some(Wake::Wakeup);
        }
    }
}

/// A signal to `pid` ends its threads' PCATCH sleeps.
pub fn signal(pid: u32) {
    let Some(m) = try_current() else { return };
    let mut b = m.0.baton.lock();
    let mut caught = false;
    for s in b.asleep.iter_mut().flatten() {
        if s.pid == pid && s.catch && s.woken.is_none() {
            s.woken = Some(Wake::Signal);
            caught = true;
        }
    }
    // Not asleep yet: the signal waits for its next PCATCH sleep.
    if !caught && b.active {
        b.pending_signals.push(pid);
    }
}

/// The pieces asleep now, as (wait channel, pid), for tests.
pub fn sleepers() -> Vec<(usize, u32)> {
    let Some(m) = try_current() else {
        return Vec::new();
    };
    let b = m.0.baton.lock();
    b.asleep
        .iter()
        .flatten()
        .filter(|s| s.woken.is_none())
        .map(|s| (s.chan, s.pid))
        .collect()
}

/// The piece the current host thread runs, if a race is on.
pub fn task() -> Option<usize> {
    TASK.with(Cell::get)
}

/// A piece of kernel work for [`Machine::race`].
pub type Piece<'a> = Box<dyn FnOnce() + Send + 'a>;

impl Machine {
    /// For a machine that serves requests one after another (ksimd),
    /// where a thread that sleeps outside a race could not be kept asleep
    /// until a later request wakes it: a PCATCH sleep there ends at once,
    /// as if the thread had been sent a signal. Off by default: a test
    /// that sleeps outside a race is told so.
    pub fn set_unraced_sleeps_interrupted(&self, on: bool) {
        self.0.baton.lock().interrupt_unraced = on;
    }

    /// How many PCATCH sleeps [`Machine::set_unraced_sleeps_interrupted`]
    /// ended.
    pub fn unraced_sleeps_interrupted(&self) -> u64 {
        self.0.baton.lock().interrupted_unraced
    }

    /// Runs `pieces` as concurrent kernel work, interleaved at kpi's
    /// scheduling points as `seed` decides; returns the number of
    /// hand-overs once every piece has finished. A panic in a piece is
    /// raised again here.
    pub fn race(&self, seed: u64, pieces: Vec<Piece<'_>>) -> u64 {
        if pieces.is_empty() {
            return 0;
        }
        self.race_inner(seed, pieces, None::<fn()>)
    }

    /// As [`Machine::race`], with the calling thread as one more piece,
    /// running `here` (which need not be `Send`: a daemon's own loop, say,
    /// that serves requests while another piece sleeps in the kernel; see
    /// [`run_others`]). Returns what `here` returned.
    pub fn race_here<R>(&self, seed: u64, others: Vec<Piece<'_>>, here: impl FnOnce() -> R) -> R {
        let mut out = None;
        self.race_inner(seed, others, Some(|| out = Some(here())));
        out.expect("the piece ran")
    }

    fn race_inner<F: FnOnce()>(&self, seed: u64, pieces: Vec<Piece<'_>>, here: Option<F>) -> u64 {
        let n = pieces.len() + usize::from(here.is_some());
        let start = self.0.st().take_task_ctx();
        {
            let mut b = self.0.baton.lock();
            assert!(!b.active, "a race inside a race");
            let mut rng = seed;
            let first = (splitmix(&mut rng) % n as u64) as usize;
            *b = BatonState {
                active: true,
                current: first,
                done: vec![false; n],
                saved: vec![start.clone(); n],
                rng,
                waits: 0,
                switches: 0,
                asleep: vec![None; n],
                pending_signals: Vec::new(),
                interrupt_unraced: b.interrupt_unraced,
                interrupted_unraced: b.interrupted_unraced,
            };
            let ctx = std::mem::take(&mut b.saved[first]);
            self.0.st().put_task_ctx(ctx);
        }
        let result = std::thread::scope(|scope| {
            let handles: Vec<_> = pieces
                .into_iter()
                .enumerate()
                .map(|(k, piece)| {
                    let m = self.clone();
                    scope.spawn(move || {
                        let _e = m.enter();
                        run_piece(&m, k, piece)
                    })
                })
                .collect();
            let mine = here.map(|f| run_piece(self, n - 1, f));
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(Err))
                .chain(mine)
                .collect::<Vec<_>>()
        });
        let switches = {
            let mut b = self.0.baton.lock();
            b.active = false;
            b.switches
        };
        self.0.st().put_task_ctx(start);
        for r in result {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
        switches
    }
}

/// Piece `k` of the race on `m`, on the calling thread: it waits for its
/// turn, runs, and hands the machine on when it has finished.
fn run_piece(
    m: &Machine,
    k: usize,
    piece: impl FnOnce(),
) -> Result<(), Box<dyn std::any::Any + Send>> {
    TASK.with(|t| t.set(Some(k)));
    let baton = &m.0.baton;
    {
        let b = baton.lock();
        drop(
            baton
                .cv
                .wait_while(b, |b| b.current != k)
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(piece));
    let mut b = baton.lock();
    b.done[k] = true;
    // Pieces still asleep with nothing left to wake them are deadlocked:
    // one is woken to say so.
    if Baton::pick_other(&mut b, k).is_none() {
        if let Some(s) = b.asleep.iter_mut().flatten().next() {
            s.woken = Some(Wake::Stuck);
        }
    }
    if let Some(next) = Baton::pick_other(&mut b, k) {
        b.saved[k] = TaskCtx::default();
        let ctx = std::mem::take(&mut b.saved[next]);
        m.0.st().put_task_ctx(ctx);
        b.current = next;
    }
    baton.cv.notify_all();
    drop(b);
    TASK.with(|t| t.set(None));
    r
}

/// The running piece lets the other pieces that can run do so, until
/// none can (each has finished or sleeps): what a piece that waits for
/// work from outside the machine does before it waits, so that a piece
/// its last work woke gets the machine.
pub fn run_others() {
    let Some(me) = TASK.with(Cell::get) else {
        return;
    };
    let Some(m) = try_current() else { return };
    let baton = &m.0.baton;
    loop {
        let mut b = baton.lock();
        if !b.active {
            return;
        }
        match Baton::pick_other(&mut b, me) {
            Some(next) => baton.hand_over(&m, me, next, b),
            None => return,
        }
    }
}
