//! Top mode (`-T`; pmcstat_log.c's display and keys, the top views of
//! pmcpl_callgraph.c and pmcpl_calltree.c): the samples of one PMC,
//! redrawn every `-w` seconds from the log as it comes (live, through a
//! pipe) or once from a log read with `-R`, in one of two views that `n`
//! switches between, as FreeBSD's plugins with a top display: the call
//! graph (the sampled functions, the most sampled first, with their
//! image and their callers) and the calltree (the paths from the root of
//! the calltree, [`crate::pmcpl_calltree`]).
//!
//! The layout is FreeBSD's: `PMC: NAME Samples: N (P%) , U unresolved`, a
//! blank line (where a key's answer shows), then the view. The call
//! graph's has the header
//! `%SAMP IMAGE      FUNCTION                       CALLERS`, then a row
//! per function (`%5.5s %-10.10s %-30.30s` and its callers, with their
//! shares when there are several); the calltree's the header
//! `%SAMP CALLTREE` and a row per path. On a terminal the screen is
//! redrawn in place (ANSI escape sequences; FreeBSD's uses curses) and
//! the keys are read without echo: `q` quits, space pauses, `c` then `d`
//! or another key chooses delta or accumulated counts, `p` the next PMC,
//! `m` merging of PMCs of one event, `A` and `I` what the call graph's
//! function column shows, `n` the next view (which starts from no
//! samples, as FreeBSD's plugins start again), `f` in the calltree
//! whether functions under the threshold show as `.`. Elsewhere each
//! redraw is written out and ends with `---`. Shares at or above 10, 5
//! and 2.5 percent are red, yellow and green (bold without colours).
//!
//! Mended on purpose: a log read with `-R` is shown once it has been
//! read (FreeBSD's shows nothing for a file), and from then on it is
//! the whole log that each view shows, whatever the mode or the view
//! (there are no samples to come); the man page's Ctrl+A and Ctrl+D are
//! accepted for accumulate and delta as well as `c`.

use std::cell::RefCell;
use std::io::Write;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use libpmcstat::libpmcstat_logging::{Analysis, Options, Plugin, Sample};
use pmc::pmclog::{Parser, PmclogEv, PmclogState};

use crate::pmcpl_callgraph::{CallGraph, CgOptions};
use crate::pmcpl_calltree::{CallTree, TopStyle};

/// The call graph and the calltree the views draw, shared with the
/// plugin that fills them.
struct Sink(Rc<RefCell<CallGraph>>, Rc<RefCell<CallTree>>);

impl Plugin for Sink {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.0.borrow_mut().add(a, s);
        self.1.borrow_mut().add(a, s);
    }
}

/// FreeBSD's plugins with a top display, in the order of its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `callgraph`.
    CallGraph,
    /// `calltree`.
    CallTree,
}

impl View {
    /// The plugin's name.
    pub fn name(self) -> &'static str {
        match self {
            View::CallGraph => "callgraph",
            View::CallTree => "calltree",
        }
    }

    /// The next one with a top display, as `n` finds it.
    fn next(self) -> View {
        match self {
            View::CallGraph => View::CallTree,
            View::CallTree => View::CallGraph,
        }
    }
}

/// The top view's state.
pub struct Top {
    analysis: Analysis,
    graph: Rc<RefCell<CallGraph>>,
    tree: Rc<RefCell<CallTree>>,
    view: View,
    /// The calltree's `.` for functions under the threshold.
    skiplink: bool,
    /// The log has been read to its end: no samples are to come.
    ended: bool,
    plugins: Vec<Box<dyn Plugin>>,
    cg: CgOptions,
    out: Box<dyn Write>,
    tty: bool,
    colors: bool,
    height: usize,
    width: usize,
    filter: u32,
    delta: bool,
    paused: bool,
    threshold: f64,
    /// A key's answer, shown on the second line until the next redraw.
    message: String,
    /// `c` was pressed: the next key chooses the mode.
    choosing_mode: bool,
}

/// What a key asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyResult {
    /// Go on.
    Continue,
    /// `q`: end the run.
    Quit,
}

impl Top {
    /// A top view writing into `out`; `tty` when `out` is a terminal of
    /// `height` by `width` usable characters.
    pub fn new(
        opts: Options,
        cg: CgOptions,
        threshold: f64,
        out: Box<dyn Write>,
        tty: Option<(usize, usize)>,
    ) -> Top {
        let graph = Rc::new(RefCell::new(CallGraph::new(cg)));
        // Top mode keeps no instructions (`pa_ctdumpinstr` is 0).
        let tree = Rc::new(RefCell::new(CallTree::new(false)));
        let (height, width) = tty.unwrap_or((256, 1024));
        Top {
            analysis: Analysis::new(Options {
                merge_pmcs: true,
                ..opts
            }),
            plugins: vec![Box::new(Sink(graph.clone(), tree.clone()))],
            graph,
            tree,
            view: View::CallGraph,
            skiplink: false,
            ended: false,
            cg,
            out,
            tty: tty.is_some(),
            colors: tty.is_some() && std::env::var("TERM").is_ok_and(|t| t != "dumb"),
            height,
            width,
            filter: 0,
            delta: true,
            paused: false,
            threshold,
            message: String::new(),
            choosing_mode: false,
        }
    }

    /// At the run's end, after the display: the conversion statistics
    /// of the samples shown, unless -q, as FreeBSD's shutdown of the
    /// analysis prints them after leaving the display.
    pub fn print_statistics(&mut self) -> std::io::Result<()> {
        if self.analysis.opts.verbosity == 0 {
            return Ok(());
        }
        self.out.write_all(self.analysis.statistics().as_bytes())?;
        self.out.flush()
    }

    /// Starts with `view` rather than the call graph (the plugin the
    /// options chose last, as FreeBSD's does).
    pub fn set_view(&mut self, view: View) {
        self.view = view;
    }

    /// The calltree's `skiplink` (`-f skiplink=N`).
    pub fn set_skiplink(&mut self, on: bool) {
        self.skiplink = on;
    }

    /// The log has ended: the samples read are all there will be, and
    /// they are kept from now on.
    pub fn end_of_log(&mut self) {
        self.ended = true;
    }

    /// One event of the log.
    pub fn event(&mut self, ev: &PmclogEv) {
        self.analysis.process_event(ev, &mut self.plugins);
        for w in self.analysis.take_warnings() {
            crate::PROGRAM.warnx(w);
        }
    }

    /// Reads what the log has (without waiting); false at its end.
    pub fn read_available(&mut self, parser: &mut Parser, ev: &mut PmclogEv) -> bool {
        loop {
            match parser.read(ev) {
                PmclogState::Ok => self.event(ev),
                PmclogState::RequireData => return true,
                PmclogState::Eof | PmclogState::Error => return false,
            }
        }
    }

    fn reset(&mut self) {
        *self.graph.borrow_mut() = CallGraph::new(self.cg);
        *self.tree.borrow_mut() = CallTree::new(false);
        for p in &mut self.analysis.pmcs {
            p.samples = 0;
            p.dubious_frames = 0;
        }
        self.analysis.samples_period = 0;
    }

    fn attr(&self, v: f64, text: &str) -> String {
        let code = if v > 10.0 {
            if self.colors { "31" } else { "1" }
        } else if v > 5.0 && self.colors {
            "33"
        } else if v > 2.5 && self.colors {
            "32"
        } else {
            return text.to_owned();
        };
        if self.tty {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// The record the view shows, by its number.
    fn shown(&self) -> Option<usize> {
        self.analysis
            .pmcs
            .iter()
            .position(|p| p.index == self.filter)
    }

    /// Writes the view as it is now.
    pub fn redraw(&mut self) -> std::io::Result<()> {
        let text = self.render();
        if self.tty {
            self.out.write_all(b"\x1b[H\x1b[2J")?;
            // The terminal is in raw mode: each line ends with CR LF.
            self.out.write_all(text.replace('\n', "\r\n").as_bytes())?;
        } else {
            self.out.write_all(text.as_bytes())?;
            self.out.write_all(b"---\n")?;
        }
        self.out.flush()
    }

    /// The periodic redraw (pmcstat_display_log): the view unless
    /// paused, then in delta mode the counts start again.
    pub fn display(&mut self) -> std::io::Result<()> {
        if !self.paused {
            self.redraw()?;
            self.message.clear();
        }
        if self.delta && !self.ended {
            self.reset();
        }
        Ok(())
    }

    /// The text of the view.
    pub fn render(&self) -> String {
        let a = &self.analysis;
        let Some(i) = self.shown() else {
            return String::new();
        };
        let pr = &a.pmcs[i];
        let name = if a.opts.merge_pmcs {
            format!("[{}]", a.string(pr.name))
        } else {
            format!("{}.{}", a.string(pr.name), pr.index)
        };
        let v = if a.samples_period == 0 {
            0.0
        } else {
            pr.samples as f64 * 100.0 / a.samples_period as f64
        };
        let mut s = format!("PMC: {name} Samples: {} ", pr.samples);
        s.push_str(&self.attr(v, &format!("({v:.1}%)")));
        s.push_str(&format!(" , {} unresolved\n", pr.dubious_frames));
        s.push_str(&self.message);
        s.push('\n');
        match self.view {
            View::CallGraph => s.push_str(&self.top_display(pr.pmcid)),
            View::CallTree => {
                let attr = |v: f64, text: &str| self.attr(v, text);
                let style = TopStyle {
                    height: self.height,
                    width: self.width,
                    threshold: self.threshold,
                    skiplink: self.skiplink,
                    attr: &attr,
                };
                s.push_str(&self.tree.borrow().top_display(a, pr.index as usize, &style));
            }
        }
        s
    }

    /// pmcpl_cg_topdisplay.
    fn top_display(&self, pmcid: u32) -> String {
        let a = &self.analysis;
        let g = self.graph.borrow();
        let (tops, total) = g.top_nodes(pmcid);
        if tops.is_empty() {
            return String::new();
        }
        let mut s = format!(
            "{:>5.5} {:<10.10} {:<30.30} {}\n",
            "%SAMP", "IMAGE", "FUNCTION", "CALLERS"
        );
        let pct = |n: u32| f64::from(n) * 100.0 / total as f64;
        for &n in tops.iter().take(self.height.saturating_sub(2)) {
            let node = &g.nodes[n as usize];
            let v = pct(node.count);
            if v < self.threshold {
                break;
            }
            let image = &a.images[node.image as usize];
            let ns = self.function_text(&g, n);
            let iname = image.name.map_or("", |p| a.string(p));
            s.push_str(&self.attr(v, &format!("{:>5.5}", format!("{v:.1}"))));
            s.push_str(&format!(" {iname:<10.10} {:<30.30}", truncate(&ns, 29)));
            let mut callers = g.sorted_children(n);
            callers.retain(|&c| pct(g.nodes[c as usize].count) >= self.threshold);
            let mut budget = self.width as i64 - 40;
            let several = callers.len() > 1;
            for c in callers {
                let cv = pct(g.nodes[c as usize].count);
                let vs = if several {
                    format!(":{cv:.1}")
                } else {
                    String::new()
                };
                let cnode = &g.nodes[c as usize];
                let cimage = &a.images[cnode.image as usize];
                let cname = cimage.symbols.search(cnode.func).map_or_else(
                    || format!("{:#x}", cnode.func),
                    |sym| a.string(sym.name).to_owned(),
                );
                let len = (cname.len() + vs.len() + 1) as i64;
                if budget - len < 0 {
                    s.push_str(" ...");
                    break;
                }
                budget -= len;
                s.push(' ');
                s.push_str(truncate(&cname, 29));
                s.push_str(&self.attr(cv, &vs));
            }
            s.push('\n');
        }
        s
    }

    /// The function column: the name, or with `-I` name+offset, or with
    /// `-A` (or no symbol) the address.
    fn function_text(&self, g: &CallGraph, n: u32) -> String {
        let a = &self.analysis;
        let node = &g.nodes[n as usize];
        let image = &a.images[node.image as usize];
        let addr = format!("{:#x}", image.vaddr.wrapping_add(node.func));
        match image.symbols.search(node.func) {
            None => addr,
            Some(_) if self.cg.skip_top_resolution => addr,
            Some(sym) if self.cg.show_offset => {
                let off = node.func - sym.start;
                if off == 0 {
                    format!("{}+0", a.string(sym.name))
                } else {
                    format!("{}+{off:#x}", a.string(sym.name))
                }
            }
            Some(sym) => a.string(sym.name).to_owned(),
        }
    }

    /// A key (pmcstat_keypress_log); its answer shows until the next
    /// redraw.
    pub fn key(&mut self, c: u8) -> KeyResult {
        if self.choosing_mode {
            self.choosing_mode = false;
            self.delta = c == b'd';
            self.message.push_str(if self.delta {
                "switching to delta mode"
            } else {
                "switching to accumulation mode"
            });
            return KeyResult::Continue;
        }
        self.message = format!("Key: {} => ", c as char);
        match c {
            b'q' => {
                self.message.push_str("exiting...");
                return KeyResult::Quit;
            }
            b' ' => {
                self.paused = !self.paused;
                if self.paused {
                    self.message
                        .push_str("pause => press space again to continue");
                }
            }
            b'c' => {
                self.message.push_str("enter mode 'd' or 'a' => ");
                self.choosing_mode = true;
            }
            // The man page's Ctrl+D and Ctrl+A.
            0x04 | 0x01 => {
                self.delta = c == 0x04;
                self.message.push_str(if self.delta {
                    "switching to delta mode"
                } else {
                    "switching to accumulation mode"
                });
            }
            b'A' => {
                self.cg.skip_top_resolution = !self.cg.skip_top_resolution;
                self.graph.borrow_mut().set_options(self.cg);
            }
            b'I' => {
                self.cg.show_offset = !self.cg.show_offset;
                self.graph.borrow_mut().set_options(self.cg);
            }
            b'm' => {
                self.analysis.opts.merge_pmcs = !self.analysis.opts.merge_pmcs;
                self.reset();
                self.move_to_merge_target();
                self.message.push_str(if self.analysis.opts.merge_pmcs {
                    "merge PMC on"
                } else {
                    "merge PMC off"
                });
            }
            b'p' => {
                let n = self.analysis.pmcs.len() as u32;
                self.filter = if n == 0 { 0 } else { (self.filter + 1) % n };
                self.move_to_merge_target();
                let name = self.shown().map_or("(null)".to_owned(), |i| {
                    self.analysis.string(self.analysis.pmcs[i].name).to_owned()
                });
                self.message
                    .push_str(&format!("switching to PMC {name}.{}", self.filter));
            }
            // The next view starts from no samples, as FreeBSD's plugin
            // does, unless the log has ended.
            b'n' => {
                self.view = self.view.next();
                if !self.ended {
                    self.reset();
                }
                self.message
                    .push_str(&format!("switching to plugin {}", self.view.name()));
            }
            // The plugin's own keys (pmcpl_ct_topkeypress; the call
            // graph has none).
            b'f' if self.view == View::CallTree => {
                self.skiplink = !self.skiplink;
                self.message.push_str(if self.skiplink {
                    "skip empty link on"
                } else {
                    "skip empty link off"
                });
            }
            _ => {}
        }
        KeyResult::Continue
    }

    /// With merging, moves the filter to a record that is its own merge
    /// target.
    fn move_to_merge_target(&mut self) {
        if !self.analysis.opts.merge_pmcs {
            return;
        }
        let n = self.analysis.pmcs.len() as u32;
        for step in 0..n {
            let f = (self.filter + step) % n;
            if let Some(i) = self.analysis.pmcs.iter().position(|p| p.index == f) {
                if self.analysis.pmcs[i].merge == i {
                    self.filter = f;
                    return;
                }
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The terminal's usable size (rows - 1, columns - 1) when `fd` is one.
pub fn terminal_size(fd: RawFd) -> Option<(usize, usize)> {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(fd) } != 1 {
        return None;
    }
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes a struct winsize through the pointer.
    if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } != 0 || ws.ws_row < 2 {
        return Some((24, 79));
    }
    Some((
        usize::from(ws.ws_row) - 1,
        usize::from(ws.ws_col).max(2) - 1,
    ))
}

/// The terminal on standard input in raw mode (no echo, a key at a
/// time) while this lives.
pub struct RawTerminal(Option<libc::termios>);

impl RawTerminal {
    /// Raw mode, when standard input is a terminal.
    pub fn new() -> RawTerminal {
        // SAFETY: termios is plain integers; tcgetattr fills it.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 and a termios to fill.
        if unsafe { libc::tcgetattr(0, &mut t) } != 0 {
            return RawTerminal(None);
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO);
        t.c_cc[libc::VMIN] = 1;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: fd 0 and a termios made from its own.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        RawTerminal(Some(saved))
    }

    /// Whether standard input is a terminal in raw mode.
    pub fn active(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: fd 0 and the termios it had.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// Runs the view over the log on `fd` until `q`, or the log's end (on a
/// terminal with `hold`, the view stays until `q`): redraws every
/// `interval`, reads keys from standard input when it is a terminal.
/// Returns true when `q` ended it.
pub fn run(top: &mut Top, fd: RawFd, interval: Duration, hold: bool) -> std::io::Result<bool> {
    // SAFETY: fcntl on our descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let raw = RawTerminal::new();
    let mut parser = Parser::new(fd);
    let mut ev = PmclogEv::zeroed();
    let mut next = Instant::now() + interval;
    let mut log_open = true;
    let mut fresh = false;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        let mut fds = [
            libc::pollfd {
                fd: if log_open { fd } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if raw.active() { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: two pollfds in a live array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n > 0 && fds[0].revents != 0 {
            fresh = true;
            if !top.read_available(&mut parser, &mut ev) {
                log_open = false;
                top.end_of_log();
            }
        }
        if n > 0 && fds[1].revents != 0 {
            let mut c = 0u8;
            // SAFETY: one byte into a local.
            if unsafe { libc::read(0, (&mut c as *mut u8).cast(), 1) } == 1 {
                let quit = top.key(c) == KeyResult::Quit;
                top.redraw()?;
                if quit {
                    return Ok(true);
                }
            }
        }
        // A redraw follows the log's flush (the driver's buffers come
        // in bursts); with nothing new for a while, the idle view.
        let now = Instant::now();
        if (fresh && now >= next) || now >= next + 4 * interval {
            top.display()?;
            next = now + interval;
            fresh = false;
        }
        if !(log_open || hold && raw.active()) {
            top.display()?;
            return Ok(false);
        }
    }
}
