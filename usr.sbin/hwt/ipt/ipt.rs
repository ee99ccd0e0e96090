//! Safe bindings to Intel's libipt (the Intel PT decoder library), for
//! what hwt(8) needs of it: a configuration over a trace buffer with the
//! CPU's errata, a memory image of the traced program (ELF files at their
//! load addresses, or a read callback), the instruction flow decoder with
//! libipt 2's event interface, and the packet decoder for dumps.
//!
//! Written against libipt 2.0 (Debian 12 ships 2.0.5); the declarations
//! come from bindgen over the installed `intel-pt.h` at build time.

use std::ffi::{CStr, CString, c_int, c_void};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/intel_pt.rs"));
}

pub use sys::pt_insn_class as InsnClass;

/// A libipt error (a negative `pt_error_code`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error(pub i32);

impl Error {
    fn check(status: c_int) -> Result<u32, Error> {
        if status < 0 {
            Err(Error(-status))
        } else {
            Ok(status as u32)
        }
    }

    /// The end of the trace (`pte_eos`).
    pub fn is_eos(self) -> bool {
        self.0 == sys::pt_error_code_pte_eos as i32
    }

    /// No synchronisation point (`pte_nosync`).
    pub fn is_nosync(self) -> bool {
        self.0 == sys::pt_error_code_pte_nosync as i32
    }

    /// libipt's text for it.
    pub fn text(self) -> &'static str {
        // SAFETY: pt_errstr returns a static string for any code.
        let p = unsafe { sys::pt_errstr(self.0 as sys::pt_error_code) };
        if p.is_null() {
            return "unknown error";
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?")
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({}: {})", self.0, self.text())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl std::error::Error for Error {}

/// The decoders' status flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub u32);

impl Status {
    /// An event waits for `event()`.
    pub fn event_pending(self) -> bool {
        self.0 & sys::pt_status_flag_pts_event_pending != 0
    }

    /// The trace ends here.
    pub fn eos(self) -> bool {
        self.0 & sys::pt_status_flag_pts_eos != 0
    }
}

/// libipt's version.
pub fn library_version() -> (u8, u8, u32) {
    // SAFETY: no arguments; returns a struct by value.
    let v = unsafe { sys::pt_library_version() };
    (v.major, v.minor, v.patch.into())
}

/// A decoder configuration over a trace buffer.
pub struct Config<'a> {
    raw: sys::pt_config,
    _buf: PhantomData<&'a [u8]>,
}

impl fmt::Debug for Config<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("len", &(self.raw.end as usize - self.raw.begin as usize))
            .finish_non_exhaustive()
    }
}

impl<'a> Config<'a> {
    /// A configuration for the trace in `buf`, with no CPU (no errata).
    pub fn new(buf: &'a [u8]) -> Config<'a> {
        // SAFETY: pt_config is plain data for which zero is valid
        // (pt_config_init, an inline function bindgen cannot bind, is a
        // memset and the size).
        let mut raw: sys::pt_config = unsafe { std::mem::zeroed() };
        raw.size = std::mem::size_of::<sys::pt_config>();
        raw.begin = buf.as_ptr().cast_mut();
        // SAFETY: one past the end of the slice.
        raw.end = unsafe { buf.as_ptr().add(buf.len()) }.cast_mut();
        Config {
            raw,
            _buf: PhantomData,
        }
    }

    /// The Intel CPU the trace was recorded on (family, model, stepping),
    /// with libipt's errata workarounds for it.
    pub fn cpu(mut self, family: u16, model: u8, stepping: u8) -> Result<Config<'a>, Error> {
        self.raw.cpu.vendor = sys::pt_cpu_vendor_pcv_intel;
        self.raw.cpu.family = family;
        self.raw.cpu.model = model;
        self.raw.cpu.stepping = stepping;
        // SAFETY: both point into our own configuration.
        Error::check(unsafe { sys::pt_cpu_errata(&mut self.raw.errata, &self.raw.cpu) })?;
        Ok(self)
    }

    /// [`Config::cpu`] of the CPU whose CPUID leaf 1 EAX is `eax` (the
    /// display family and model, with their extended fields).
    pub fn cpu_signature(self, eax: u32) -> Result<Config<'a>, Error> {
        let base_family = eax >> 8 & 0xF;
        let family = if base_family == 0xF {
            base_family + (eax >> 20 & 0xFF)
        } else {
            base_family
        };
        let model = if base_family == 6 || base_family == 0xF {
            (eax >> 4 & 0xF) | (eax >> 16 & 0xF) << 4
        } else {
            eax >> 4 & 0xF
        };
        self.cpu(family as u16, model as u8, (eax & 0xF) as u8)
    }

    /// The address filter as IA32_RTIT_CTL's ADDRn_CFG fields (bits 35:32
    /// and up, shifted down) and the ADDRn_A/B pairs.
    pub fn addr_filter(mut self, cfg: u64, ranges: &[(u64, u64)]) -> Config<'a> {
        let f = &mut self.raw.addr_filter;
        f.config.addr_cfg = cfg;
        let slots = [
            (&mut f.addr0_a, &mut f.addr0_b),
            (&mut f.addr1_a, &mut f.addr1_b),
            (&mut f.addr2_a, &mut f.addr2_b),
            (&mut f.addr3_a, &mut f.addr3_b),
        ];
        for ((a, b), &(lo, hi)) in slots.into_iter().zip(ranges) {
            *a = lo;
            *b = hi;
        }
        self
    }
}

/// Reads the traced program's memory: fills the buffer from the address
/// and returns the bytes read (0: nothing mapped there).
pub type ReadMemory = Box<dyn FnMut(u64, &mut [u8]) -> usize + Send>;

/// An image section cache: files loaded once and shared by the images of
/// several processes (`pt_image_add_cached`).
pub struct SectionCache {
    raw: NonNull<sys::pt_image_section_cache>,
}

impl fmt::Debug for SectionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectionCache").finish_non_exhaustive()
    }
}

// SAFETY: libipt locks its section cache internally (it is meant to be
// shared between decoder threads).
unsafe impl Send for SectionCache {}
// SAFETY: as Send.
unsafe impl Sync for SectionCache {}

impl SectionCache {
    /// An empty cache.
    pub fn new(name: &str) -> std::sync::Arc<SectionCache> {
        let name = CString::new(name).unwrap_or_default();
        // SAFETY: a valid C string, copied by libipt.
        let raw = unsafe { sys::pt_iscache_alloc(name.as_ptr()) };
        std::sync::Arc::new(SectionCache {
            raw: NonNull::new(raw).expect("pt_iscache_alloc"),
        })
    }

    /// Adds `size` bytes of `file` from `offset`, loaded at `vaddr`;
    /// returns the section's id (the same file section gives the same id).
    pub fn add_file(
        &self,
        file: &std::path::Path,
        offset: u64,
        size: u64,
        vaddr: u64,
    ) -> Result<i32, Error> {
        let path = CString::new(file.as_os_str().as_encoded_bytes())
            .map_err(|_| Error(sys::pt_error_code_pte_invalid as i32))?;
        // SAFETY: our cache, a valid path (copied).
        let r = unsafe {
            sys::pt_iscache_add_file(self.raw.as_ptr(), path.as_ptr(), offset, size, vaddr)
        };
        Error::check(r).map(|isid| isid as i32)
    }
}

impl Drop for SectionCache {
    fn drop(&mut self) {
        // SAFETY: our cache; the images that use it hold an Arc, so none
        // is left.
        unsafe { sys::pt_iscache_free(self.raw.as_ptr()) };
    }
}

/// pt_asid_init's values with an optional CR3 (the function is inline in
/// the header).
fn asid(cr3: Option<u64>) -> sys::pt_asid {
    sys::pt_asid {
        size: std::mem::size_of::<sys::pt_asid>(),
        cr3: cr3.unwrap_or(u64::MAX),
        vmcs: u64::MAX,
    }
}

/// The memory image the decoder reads instructions from.
pub struct Image {
    raw: NonNull<sys::pt_image>,
    callback: Option<Box<ReadMemory>>,
    /// The caches its sections come from, kept alive as long as it.
    caches: Vec<std::sync::Arc<SectionCache>>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Image").finish_non_exhaustive()
    }
}

// SAFETY: the image is used through `&mut self` only, and its callback
// is Send.
unsafe impl Send for Image {}

extern "C" fn read_memory(
    buffer: *mut u8,
    size: usize,
    _asid: *const sys::pt_asid,
    ip: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the context is the Box<ReadMemory> the Image owns, which
    // lives as long as the image that calls this.
    let f = unsafe { &mut *context.cast::<ReadMemory>() };
    // SAFETY: libipt passes a buffer of `size` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buffer, size) };
    match f(ip, buf) {
        0 => -(sys::pt_error_code_pte_nomap as c_int),
        n => n.min(size) as c_int,
    }
}

impl Image {
    /// An empty image.
    pub fn new(name: &str) -> Image {
        let name = CString::new(name).unwrap_or_default();
        // SAFETY: a valid C string, copied by libipt.
        let raw = unsafe { sys::pt_image_alloc(name.as_ptr()) };
        Image {
            raw: NonNull::new(raw).expect("pt_image_alloc"),
            callback: None,
            caches: Vec::new(),
        }
    }

    /// Adds `size` bytes of `file` from `offset`, loaded at `vaddr` in
    /// every address space.
    pub fn add_file(
        &mut self,
        file: &std::path::Path,
        offset: u64,
        size: u64,
        vaddr: u64,
    ) -> Result<(), Error> {
        self.add_file_in(file, offset, size, vaddr, None)
    }

    /// [`Image::add_file`] in the address space of CR3 `cr3` only (None:
    /// any), for traces of several processes told apart by PIP packets.
    pub fn add_file_in(
        &mut self,
        file: &std::path::Path,
        offset: u64,
        size: u64,
        vaddr: u64,
        cr3: Option<u64>,
    ) -> Result<(), Error> {
        let path = CString::new(file.as_os_str().as_encoded_bytes())
            .map_err(|_| Error(sys::pt_error_code_pte_invalid as i32))?;
        let asid = asid(cr3);
        // SAFETY: our image, a valid path and asid, both copied.
        let r = unsafe {
            sys::pt_image_add_file(self.raw.as_ptr(), path.as_ptr(), offset, size, &asid, vaddr)
        };
        Error::check(r).map(drop)
    }

    /// Adds section `isid` of `cache` in the address space of CR3 `cr3`
    /// (None: any).
    pub fn add_cached(
        &mut self,
        cache: &std::sync::Arc<SectionCache>,
        isid: i32,
        cr3: Option<u64>,
    ) -> Result<(), Error> {
        let asid = asid(cr3);
        // SAFETY: our image and a live cache, which self keeps alive.
        let r =
            unsafe { sys::pt_image_add_cached(self.raw.as_ptr(), cache.raw.as_ptr(), isid, &asid) };
        Error::check(r)?;
        if !self.caches.iter().any(|c| std::sync::Arc::ptr_eq(c, cache)) {
            self.caches.push(cache.clone());
        }
        Ok(())
    }

    /// Reads memory the files do not cover through `f`.
    pub fn set_callback(&mut self, f: ReadMemory) {
        let mut boxed = Box::new(f);
        let ctx: *mut ReadMemory = &mut *boxed;
        // SAFETY: our image; `ctx` stays valid while the Box lives in
        // self (it is replaced only after the new one is installed).
        unsafe {
            sys::pt_image_set_callback(self.raw.as_ptr(), Some(read_memory), ctx.cast());
        }
        self.callback = Some(boxed);
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: our image, no decoder uses it any more (decoders borrow
        // it).
        unsafe { sys::pt_image_free(self.raw.as_ptr()) };
    }
}

/// A decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Its address.
    pub ip: u64,
    /// Its size.
    pub size: u8,
    /// Its class (`ptic_*`).
    pub iclass: InsnClass,
}

/// A decoder event (the ones Intel PT produces on this kind of trace;
/// the rest are `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Tracing was enabled at `ip`.
    Enabled {
        /// Where tracing starts.
        ip: u64,
        /// It resumes where it was disabled.
        resumed: bool,
    },
    /// Tracing was disabled after the last instruction (`ip`: where it
    /// went, if known).
    Disabled {
        /// The target, if not suppressed.
        ip: Option<u64>,
    },
    /// Tracing was disabled asynchronously at `at` (not executed).
    AsyncDisabled {
        /// The next instruction that did not run traced.
        at: u64,
    },
    /// An asynchronous branch from `from` to `to`.
    AsyncBranch {
        /// Source.
        from: u64,
        /// Destination.
        to: u64,
    },
    /// CR3 changed.
    Paging {
        /// The new CR3.
        cr3: u64,
    },
    /// CR3 changed at `ip`, asynchronously.
    AsyncPaging {
        /// The new CR3.
        cr3: u64,
        /// Where.
        ip: u64,
    },
    /// The trace overflowed; decoding resumes at `ip` (None: tracing
    /// was off when it resolved).
    Overflow {
        /// Where tracing resumes.
        ip: Option<u64>,
    },
    /// The execution mode (the decoder's status update).
    ExecMode {
        /// Where.
        ip: Option<u64>,
    },
    /// Tracing stopped (TraceStop or a ToPA STOP region).
    Stop,
    /// Another event type (`ptev_*`).
    Other(u32),
}

impl Event {
    fn from_raw(e: &sys::pt_event) -> Event {
        let suppressed = e.ip_suppressed() != 0;
        let opt = |ip: u64| (!suppressed).then_some(ip);
        // SAFETY: each arm reads the union member its type names.
        unsafe {
            match e.type_ {
                sys::pt_event_type_ptev_enabled => Event::Enabled {
                    ip: e.variant.enabled.ip,
                    resumed: e.variant.enabled.resumed() != 0,
                },
                sys::pt_event_type_ptev_disabled => Event::Disabled {
                    ip: opt(e.variant.disabled.ip),
                },
                sys::pt_event_type_ptev_async_disabled => Event::AsyncDisabled {
                    at: e.variant.async_disabled.at,
                },
                sys::pt_event_type_ptev_async_branch => Event::AsyncBranch {
                    from: e.variant.async_branch.from,
                    to: e.variant.async_branch.to,
                },
                sys::pt_event_type_ptev_paging => Event::Paging {
                    cr3: e.variant.paging.cr3,
                },
                sys::pt_event_type_ptev_async_paging => Event::AsyncPaging {
                    cr3: e.variant.async_paging.cr3,
                    ip: e.variant.async_paging.ip,
                },
                sys::pt_event_type_ptev_overflow => Event::Overflow {
                    ip: opt(e.variant.overflow.ip),
                },
                sys::pt_event_type_ptev_exec_mode => Event::ExecMode {
                    ip: opt(e.variant.exec_mode.ip),
                },
                sys::pt_event_type_ptev_stop => Event::Stop,
                t => Event::Other(t),
            }
        }
    }
}

/// The instruction flow decoder over a configuration's buffer and an
/// image.
pub struct InsnDecoder<'a> {
    raw: NonNull<sys::pt_insn_decoder>,
    _life: PhantomData<(&'a [u8], &'a mut Image)>,
}

impl fmt::Debug for InsnDecoder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InsnDecoder").finish_non_exhaustive()
    }
}

impl<'a> InsnDecoder<'a> {
    /// A decoder of `config`'s trace reading code from `image`.
    pub fn new(config: &Config<'a>, image: &'a mut Image) -> Result<InsnDecoder<'a>, Error> {
        // SAFETY: the configuration is copied; the buffer it points to
        // lives for 'a.
        let raw = unsafe { sys::pt_insn_alloc_decoder(&config.raw) };
        let raw = NonNull::new(raw).ok_or(Error(sys::pt_error_code_pte_nomem as i32))?;
        let dec = InsnDecoder {
            raw,
            _life: PhantomData,
        };
        // SAFETY: both live for 'a (the image is borrowed that long).
        Error::check(unsafe { sys::pt_insn_set_image(dec.raw.as_ptr(), image.raw.as_ptr()) })?;
        Ok(dec)
    }

    /// Synchronises onto the next PSB.
    pub fn sync_forward(&mut self) -> Result<Status, Error> {
        // SAFETY: our decoder.
        Error::check(unsafe { sys::pt_insn_sync_forward(self.raw.as_ptr()) }).map(Status)
    }

    /// The next instruction; on error, the instruction if it was decoded
    /// before the error.
    pub fn next_insn(&mut self) -> Result<(Insn, Status), (Error, Option<Insn>)> {
        // SAFETY: pt_insn is plain data; zero is valid.
        let mut insn: sys::pt_insn = unsafe { std::mem::zeroed() };
        // SAFETY: our decoder and a pt_insn of the size we pass.
        let r = unsafe {
            sys::pt_insn_next(self.raw.as_ptr(), &mut insn, std::mem::size_of_val(&insn))
        };
        let got = Insn {
            ip: insn.ip,
            size: insn.size,
            iclass: insn.iclass,
        };
        match Error::check(r) {
            Ok(s) => Ok((got, Status(s))),
            Err(e) => Err((
                e,
                (insn.iclass != sys::pt_insn_class_ptic_error).then_some(got),
            )),
        }
    }

    /// The pending event.
    pub fn event(&mut self) -> Result<(Event, Status), Error> {
        // SAFETY: pt_event is plain data; zero is valid.
        let mut ev: sys::pt_event = unsafe { std::mem::zeroed() };
        // SAFETY: our decoder and a pt_event of the size we pass.
        let r =
            unsafe { sys::pt_insn_event(self.raw.as_ptr(), &mut ev, std::mem::size_of_val(&ev)) };
        let s = Error::check(r)?;
        Ok((Event::from_raw(&ev), Status(s)))
    }

    /// The decoder's position in the trace buffer.
    pub fn offset(&self) -> Option<u64> {
        let mut off = 0u64;
        // SAFETY: our decoder and a u64 to fill.
        let r = unsafe { sys::pt_insn_get_offset(self.raw.as_ptr(), &mut off) };
        (r >= 0).then_some(off)
    }

    /// The offset of the last synchronisation point.
    pub fn sync_offset(&self) -> Option<u64> {
        let mut off = 0u64;
        // SAFETY: as offset.
        let r = unsafe { sys::pt_insn_get_sync_offset(self.raw.as_ptr(), &mut off) };
        (r >= 0).then_some(off)
    }

    /// Decodes the whole trace ([`decode`]).
    pub fn decode_all(&mut self) -> Vec<Item> {
        decode(self)
    }
}

impl Drop for InsnDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: our decoder.
        unsafe { sys::pt_insn_free_decoder(self.raw.as_ptr()) };
    }
}

/// What a decode of a whole trace gives, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// An instruction that executed.
    Insn(Insn),
    /// An event.
    Event(Event),
    /// Decoding failed at trace offset `at` with `error`; it resumed at
    /// the next PSB, at `resync` (None: none followed). The execution in
    /// between is lost.
    Lost {
        /// The error.
        error: Error,
        /// The decoder's offset when it failed.
        at: Option<u64>,
        /// The offset of the PSB it resynchronised at.
        resync: Option<u64>,
    },
}

/// Decodes a trace from its first PSB to its end: instructions and
/// events, and after an error a [`Item::Lost`] and a resynchronisation at
/// the next PSB, as ptxed does.
pub fn decode(dec: &mut InsnDecoder<'_>) -> Vec<Item> {
    let mut out = Vec::new();
    let mut pending_lost: Option<usize> = None;
    loop {
        let mut status = match dec.sync_forward() {
            Ok(s) => s,
            Err(e) if e.is_eos() => break,
            Err(e) => {
                out.push(Item::Lost {
                    error: e,
                    at: dec.offset(),
                    resync: None,
                });
                // sync_forward moves on by itself; an error that does not
                // is the end.
                if pending_lost.is_some() {
                    break;
                }
                pending_lost = Some(out.len() - 1);
                continue;
            }
        };
        if let Some(i) = pending_lost.take() {
            if let Item::Lost { resync, .. } = &mut out[i] {
                *resync = dec.sync_offset();
            }
        }
        let error = 'insns: loop {
            while status.event_pending() {
                match dec.event() {
                    Ok((ev, s)) => {
                        out.push(Item::Event(ev));
                        status = s;
                    }
                    Err(e) => break 'insns if e.is_eos() { None } else { Some(e) },
                }
            }
            if status.eos() {
                break None;
            }
            match dec.next_insn() {
                Ok((insn, s)) => {
                    out.push(Item::Insn(insn));
                    status = s;
                }
                Err((e, insn)) => {
                    if let Some(i) = insn {
                        out.push(Item::Insn(i));
                    }
                    break if e.is_eos() { None } else { Some(e) };
                }
            }
        };
        let Some(e) = error else {
            break;
        };
        out.push(Item::Lost {
            error: e,
            at: dec.offset(),
            resync: None,
        });
        pending_lost = Some(out.len() - 1);
    }
    out
}

/// A packet of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Its offset in the trace.
    pub offset: u64,
    /// Its size in bytes.
    pub size: u8,
    /// What it is, as ptdump names it (`psb`, `tnt.8`, `tip.pge`, ...).
    pub name: &'static str,
    /// Its payload, as a number (an IP, a CR3, a TSC, TNT bits...).
    pub payload: u64,
    /// IP compression (IPBytes) of an IP packet.
    pub ipc: u8,
    /// Bits of a TNT packet.
    pub tnt_bits: u8,
}

/// One line of a dump, as ptdump lays it out: the offset, the packet's
/// name and its payload (IPs with their compression, TNT bits oldest
/// first, `!` taken and `.` not taken).
impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}  {:<10}", self.offset, self.name)?;
        match self.name {
            "fup" | "tip" | "tip.pge" | "tip.pgd" if self.ipc == 0 => {
                write!(f, " {}: ????????????????", self.ipc)
            }
            "fup" | "tip" | "tip.pge" | "tip.pgd" => {
                write!(f, " {}: {:016x}", self.ipc, self.payload)
            }
            "tnt.8" | "tnt.64" => {
                f.write_str(" ")?;
                for i in (0..self.tnt_bits).rev() {
                    f.write_str(if self.payload >> i & 1 != 0 { "!" } else { "." })?;
                }
                Ok(())
            }
            "pip" | "tsc" | "cbr" => write!(f, " {:x}", self.payload),
            _ => Ok(()),
        }
    }
}

/// The packet decoder, for dumps.
pub struct PacketDecoder<'a> {
    raw: NonNull<sys::pt_packet_decoder>,
    _buf: PhantomData<&'a [u8]>,
}

impl fmt::Debug for PacketDecoder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketDecoder").finish_non_exhaustive()
    }
}

impl<'a> PacketDecoder<'a> {
    /// A packet decoder over `config`'s buffer.
    pub fn new(config: &Config<'a>) -> Result<PacketDecoder<'a>, Error> {
        // SAFETY: as InsnDecoder::new.
        let raw = unsafe { sys::pt_pkt_alloc_decoder(&config.raw) };
        let raw = NonNull::new(raw).ok_or(Error(sys::pt_error_code_pte_nomem as i32))?;
        Ok(PacketDecoder {
            raw,
            _buf: PhantomData,
        })
    }

    /// Synchronises onto the next PSB.
    pub fn sync_forward(&mut self) -> Result<(), Error> {
        // SAFETY: our decoder.
        Error::check(unsafe { sys::pt_pkt_sync_forward(self.raw.as_ptr()) }).map(drop)
    }

    /// Synchronises at `offset` (a PSB there, or 0 for the start).
    pub fn sync_set(&mut self, offset: u64) -> Result<(), Error> {
        // SAFETY: our decoder.
        Error::check(unsafe { sys::pt_pkt_sync_set(self.raw.as_ptr(), offset) }).map(drop)
    }

    /// The next packet.
    pub fn next_packet(&mut self) -> Result<Packet, Error> {
        let mut offset = 0u64;
        // SAFETY: our decoder.
        Error::check(unsafe { sys::pt_pkt_get_offset(self.raw.as_ptr(), &mut offset) })?;
        // SAFETY: pt_packet is plain data; zero is valid.
        let mut p: sys::pt_packet = unsafe { std::mem::zeroed() };
        // SAFETY: our decoder and a packet of the size we pass.
        Error::check(unsafe {
            sys::pt_pkt_next(self.raw.as_ptr(), &mut p, std::mem::size_of_val(&p))
        })?;
        let mut out = Packet {
            offset,
            size: p.size,
            name: "?",
            payload: 0,
            ipc: 0,
            tnt_bits: 0,
        };
        // SAFETY: each arm reads the payload member its type names.
        unsafe {
            out.name = match p.type_ {
                sys::pt_packet_type_ppt_pad => "pad",
                sys::pt_packet_type_ppt_psb => "psb",
                sys::pt_packet_type_ppt_psbend => "psbend",
                sys::pt_packet_type_ppt_ovf => "ovf",
                sys::pt_packet_type_ppt_stop => "stop",
                sys::pt_packet_type_ppt_fup
                | sys::pt_packet_type_ppt_tip
                | sys::pt_packet_type_ppt_tip_pge
                | sys::pt_packet_type_ppt_tip_pgd => {
                    out.payload = p.payload.ip.ip;
                    out.ipc = p.payload.ip.ipc as u8;
                    match p.type_ {
                        sys::pt_packet_type_ppt_fup => "fup",
                        sys::pt_packet_type_ppt_tip => "tip",
                        sys::pt_packet_type_ppt_tip_pge => "tip.pge",
                        _ => "tip.pgd",
                    }
                }
                sys::pt_packet_type_ppt_tnt_8 | sys::pt_packet_type_ppt_tnt_64 => {
                    out.payload = p.payload.tnt.payload;
                    out.tnt_bits = p.payload.tnt.bit_size;
                    if p.type_ == sys::pt_packet_type_ppt_tnt_8 {
                        "tnt.8"
                    } else {
                        "tnt.64"
                    }
                }
                sys::pt_packet_type_ppt_mode => "mode",
                sys::pt_packet_type_ppt_pip => {
                    out.payload = p.payload.pip.cr3;
                    "pip"
                }
                sys::pt_packet_type_ppt_tsc => {
                    out.payload = p.payload.tsc.tsc;
                    "tsc"
                }
                sys::pt_packet_type_ppt_cbr => {
                    out.payload = p.payload.cbr.ratio.into();
                    "cbr"
                }
                sys::pt_packet_type_ppt_tma => "tma",
                sys::pt_packet_type_ppt_mtc => "mtc",
                sys::pt_packet_type_ppt_cyc => "cyc",
                sys::pt_packet_type_ppt_vmcs => "vmcs",
                sys::pt_packet_type_ppt_mnt => "mnt",
                _ => "other",
            };
        }
        Ok(out)
    }

    /// Every packet from the first PSB to the end (or the first error,
    /// returned with what came before it).
    pub fn dump(&mut self) -> (Vec<Packet>, Option<Error>) {
        let mut v = Vec::new();
        if let Err(e) = self.sync_forward() {
            return (v, (!e.is_eos()).then_some(e));
        }
        loop {
            match self.next_packet() {
                Ok(p) => v.push(p),
                Err(e) if e.is_eos() => return (v, None),
                Err(e) => return (v, Some(e)),
            }
        }
    }
}

impl Drop for PacketDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: our decoder.
        unsafe { sys::pt_pkt_free_decoder(self.raw.as_ptr()) };
    }
}

/// The instruction classes, by name.
pub mod iclass {
    pub use super::sys::pt_insn_class_ptic_call as CALL;
    pub use super::sys::pt_insn_class_ptic_cond_jump as COND_JUMP;
    pub use super::sys::pt_insn_class_ptic_error as ERROR;
    pub use super::sys::pt_insn_class_ptic_far_call as FAR_CALL;
    pub use super::sys::pt_insn_class_ptic_jump as JUMP;
    pub use super::sys::pt_insn_class_ptic_other as OTHER;
    pub use super::sys::pt_insn_class_ptic_return as RETURN;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_packets() {
        let (major, _, _) = library_version();
        assert!(major >= 2);
        // PSB, PSBEND, TNT (T N T), PAD.
        let mut buf = [0x02u8, 0x82].repeat(8);
        buf.extend_from_slice(&[0x02, 0x23, 0b0001_1010, 0x00]);
        let cfg = Config::new(&buf).cpu(6, 0x5E, 3).expect("Skylake is known");
        let by_signature = Config::new(&buf).cpu_signature(0x000506E3).unwrap();
        assert_eq!(
            (
                by_signature.raw.cpu.family,
                by_signature.raw.cpu.model,
                by_signature.raw.cpu.stepping
            ),
            (6, 0x5E, 3)
        );
        let mut d = PacketDecoder::new(&cfg).unwrap();
        let (p, err) = d.dump();
        assert_eq!(err, None);
        let names: Vec<&str> = p.iter().map(|p| p.name).collect();
        assert_eq!(names, ["psb", "psbend", "tnt.8", "pad"]);
        assert_eq!((p[2].tnt_bits, p[2].payload), (3, 0b101));
        assert_eq!(p[2].to_string(), "0000000000000012  tnt.8      !.!");
        assert_eq!(p[0].to_string(), "0000000000000000  psb       ");
    }

    #[test]
    fn empty_trace_decodes_to_nothing() {
        let buf = [0u8; 16];
        let cfg = Config::new(&buf);
        let mut img = Image::new("none");
        let mut d = InsnDecoder::new(&cfg, &mut img).unwrap();
        assert!(d.decode_all().is_empty());
    }
}
