//! The extended error of a failed hwpmc request, as FreeBSD's libc gives
//! it (uexterr_gettext(3), and err(3) after the errno's text).
//!
//! On FreeBSD the kernel copies the extended error of a failing system
//! call into a `struct uexterror` that libc registers for every thread,
//! and libc's `uexterr_gettext` formats it: [`gettext`] asks libc. The
//! simulator transport does the same with the simulated kernel: its
//! program's thread registers a `struct uexterror` in the machine's
//! memory, and after every failed request the transport keeps what the
//! kernel copied out, for the calling thread; [`gettext`] formats that as
//! libc does, and on hosts whose C library has no `uexterr_gettext` this
//! library provides the C function itself. The record changes only on
//! failed hwpmc requests (on FreeBSD, any failed system call replaces it).

#[cfg(feature = "sim")]
use core::cell::Cell;
use core::fmt::Write as _;

use uapi::exterr::{UEXTERROR_MAXLEN, Uexterror, category_file};

#[cfg(feature = "sim")]
thread_local! {
    /// The calling thread's `struct uexterror`, as the simulated kernel
    /// last copied it out.
    static SIMULATED: Cell<Option<Uexterror>> = const { Cell::new(None) };
}

/// Keeps what the simulated kernel copied out after a failed request.
#[cfg(feature = "sim")]
pub(crate) fn record(ue: Uexterror) {
    SIMULATED.with(|c| c.set(Some(ue)));
}

/// The calling thread's last extended error as text, empty when the last
/// failed request (system call) recorded none: `uexterr_gettext`.
pub fn gettext() -> String {
    #[cfg(feature = "sim")]
    if let Some(ue) = SIMULATED.with(Cell::get) {
        return format(&ue, verbosity());
    }
    libc_gettext()
}

#[cfg(target_os = "freebsd")]
fn libc_gettext() -> String {
    // SAFETY: uexterr_gettext(3) of FreeBSD's libc (15.0 and later), with
    // its C signature.
    unsafe extern "C" {
        fn uexterr_gettext(buf: *mut core::ffi::c_char, bufsz: usize) -> core::ffi::c_int;
    }
    let mut buf = [0u8; UEXTERROR_MAXLEN];
    // SAFETY: `buf` has `buf.len()` writable bytes, which libc fills with
    // a NUL-terminated string.
    if unsafe { uexterr_gettext(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Elsewhere there is no kernel to ask.
#[cfg(not(target_os = "freebsd"))]
fn libc_gettext() -> String {
    String::new()
}

/// How much `EXTERROR_VERBOSE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// The message only (the source too when there is no message).
    Default,
    /// `EXTERROR_VERBOSE=brief`: the message and its source line.
    Brief,
    /// `EXTERROR_VERBOSE` set otherwise: every field.
    Full,
}

/// What `EXTERROR_VERBOSE` asks for, as libc reads it (not in set-id
/// programs).
pub fn verbosity() -> Verbosity {
    // SAFETY: issetugid(2) has no arguments and cannot fail.
    #[cfg(target_os = "freebsd")]
    if unsafe { libc::issetugid() } != 0 {
        return Verbosity::Default;
    }
    match std::env::var_os("EXTERROR_VERBOSE") {
        None => Verbosity::Default,
        Some(v) if v == "brief" => Verbosity::Brief,
        Some(_) => Verbosity::Full,
    }
}

/// One printf(3) conversion of the kernel's message, with the numbers
/// `p1` and `p2` as its arguments in turn. Only integer conversions take
/// them (as `uintmax_t`); anything else is shown as it is.
fn conversion(out: &mut String, spec: &str, args: &mut impl Iterator<Item = u64>) {
    let conv = spec.chars().last().unwrap_or('%');
    let body = &spec[1..spec.len() - conv.len_utf8()];
    let flags_end = body
        .find(|c: char| !matches!(c, '#' | '-' | '0' | '+' | ' '))
        .unwrap_or(body.len());
    let flags = &body[..flags_end];
    let alt = flags.contains('#');
    let left = flags.contains('-');
    let zero = flags.contains('0') && !left;
    let width: usize = body[flags_end..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    let v = args.next().unwrap_or(0);
    let text = match conv {
        'd' | 'i' => (v as i64).to_string(),
        'u' => v.to_string(),
        'x' if alt && v != 0 => format!("{v:#x}"),
        'x' => format!("{v:x}"),
        'X' if alt && v != 0 => format!("0X{v:X}"),
        'X' => format!("{v:X}"),
        'o' if alt && v != 0 => format!("0{v:o}"),
        'o' => format!("{v:o}"),
        _ => {
            out.push_str(spec);
            return;
        }
    };
    let pad = width.saturating_sub(text.len());
    if left {
        out.push_str(&text);
        out.extend(core::iter::repeat_n(' ', pad));
    } else if zero {
        let (sign, digits) = if let Some(rest) = text.strip_prefix('-') {
            ("-", rest)
        } else if let Some(rest) = text.strip_prefix("0x").or(text.strip_prefix("0X")) {
            (&text[..2], rest)
        } else {
            ("", text.as_str())
        };
        out.push_str(sign);
        out.extend(core::iter::repeat_n('0', pad));
        out.push_str(digits);
    } else {
        out.extend(core::iter::repeat_n(' ', pad));
        out.push_str(&text);
    }
}

/// The kernel's message with its numbers put in.
fn message(msg: &str, p1: u64, p2: u64) -> String {
    let mut out = String::new();
    let mut args = [p1, p2].into_iter();
    let mut rest = msg;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("%%") {
            out.push('%');
            rest = after;
            continue;
        }
        // Flags, width, precision and length modifiers, then the letter.
        let end = tail[1..]
            .find(|c: char| {
                !matches!(
                    c,
                    '#' | '-' | '0'..='9' | '+' | ' ' | '.' | 'j' | 'l' | 'h' | 'z' | 't' | 'q'
                )
            })
            .map_or(tail.len(), |i| {
                1 + i + tail[1 + i..].chars().next().map_or(0, char::len_utf8)
            });
        conversion(&mut out, &tail[..end], &mut args);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `__uexterr_format` of FreeBSD 15.0's libc: the message with its
/// numbers; without a message, or when `EXTERROR_VERBOSE` asks, where it
/// comes from; empty for no error. At most `UEXTERROR_MAXLEN - 1` bytes.
pub fn format(ue: &Uexterror, verbosity: Verbosity) -> String {
    if ue.error == 0 {
        return String::new();
    }
    let end = ue.msg.iter().position(|&b| b == 0).unwrap_or(ue.msg.len());
    let msg = String::from_utf8_lossy(&ue.msg[..end]);
    let has_msg = !msg.is_empty();
    let mut text = if has_msg {
        message(&msg, ue.p1, ue.p2)
    } else {
        String::new()
    };
    if verbosity != Verbosity::Default || !has_msg {
        let file = category_file(ue.cat).unwrap_or("unknown");
        let hex = |v: u64| {
            if v == 0 {
                "0".to_owned()
            } else {
                format!("{v:#x}")
            }
        };
        let mut source = String::new();
        if verbosity == Verbosity::Brief {
            let _ = write!(source, "(src sys/{file}:{})", ue.src_line);
        } else {
            let _ = write!(
                source,
                "errno {} category {} (src sys/{file}:{}) p1 {} p2 {}",
                ue.error as i32,
                ue.cat,
                ue.src_line,
                hex(ue.p1),
                hex(ue.p2)
            );
        }
        if has_msg {
            text.push(' ');
        }
        text.push_str(&source);
    }
    let mut cut = text.len().min(UEXTERROR_MAXLEN - 1);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

/// `uexterr_gettext(3)` for C programs on hosts whose C library lacks it
/// (FreeBSD's libc has its own): the extended error of the calling
/// thread's last failed hwpmc request on the simulated machine, cut to
/// `bufsz` bytes with its NUL as strlcpy(3) does; returns 0, or -1 with
/// `errno` EFAULT for a NULL buffer.
///
/// # Safety
/// `buf` is NULL or has `bufsz` writable bytes.
#[cfg(all(feature = "sim", not(target_os = "freebsd")))]
// SAFETY: FreeBSD's libc name; the host's C library has no such symbol.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn uexterr_gettext(
    buf: *mut core::ffi::c_char,
    bufsz: usize,
) -> core::ffi::c_int {
    if bufsz == 0 {
        return 0;
    }
    if buf.is_null() {
        crate::set_errno(libc::EFAULT);
        return -1;
    }
    let text = gettext();
    let n = text.len().min(bufsz.min(UEXTERROR_MAXLEN) - 1);
    // SAFETY: `buf` has `bufsz` writable bytes and n < bufsz.
    unsafe {
        core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ue(error: u32, msg: &str, p1: u64, p2: u64) -> Uexterror {
        let mut ue = Uexterror {
            error,
            cat: uapi::exterr::EXTERR_CAT_HWPMC_MOD,
            src_line: 1234,
            p1,
            p2,
            ..Uexterror::default()
        };
        ue.msg[..msg.len()].copy_from_slice(msg.as_bytes());
        ue
    }

    #[test]
    fn no_error_is_no_text() {
        assert_eq!(format(&ue(0, "stale", 0, 0), Verbosity::Full), "");
    }

    #[test]
    fn the_message_alone_by_default() {
        let e = ue(22, "Invalid PMC mode", 0, 0);
        assert_eq!(format(&e, Verbosity::Default), "Invalid PMC mode");
    }

    #[test]
    fn the_source_when_asked_or_when_there_is_no_message() {
        let e = ue(22, "Invalid PMC mode", 0, 0x10);
        assert_eq!(
            format(&e, Verbosity::Brief),
            "Invalid PMC mode (src sys/dev/hwpmc/hwpmc_mod.c:1234)"
        );
        assert_eq!(
            format(&e, Verbosity::Full),
            "Invalid PMC mode errno 22 category 21 (src sys/dev/hwpmc/hwpmc_mod.c:1234) p1 0 p2 0x10"
        );
        let mut bare = ue(16, "", 1, 2);
        bare.cat = 99;
        assert_eq!(
            format(&bare, Verbosity::Default),
            "errno 16 category 99 (src sys/unknown:1234) p1 0x1 p2 0x2"
        );
    }

    #[test]
    fn numbers_go_into_the_message_as_printf_puts_them() {
        let e = ue(22, "bad %ju of %#jx, %5jd|%-4ju|%04jx %% %s", 7, 255);
        // The third conversion has no number left: 0, as the kernel's
        // unused arguments are.
        assert_eq!(
            format(&e, Verbosity::Default),
            "bad 7 of 0xff,     0|0   |0000 % %s"
        );
    }

    #[test]
    fn the_text_is_cut_as_libc_cuts_it() {
        // A message whose number widens it to 200 bytes, and the source.
        let e = ue(22, "%0200ju", 7, 0);
        let full = format(&e, Verbosity::Full);
        assert_eq!(full.len(), UEXTERROR_MAXLEN - 1);
        assert_eq!(&full[..200], format!("{}7", "0".repeat(199)));
        assert_eq!(
            &full[200..],
            " errno 22 category 21 (src sys/dev/hwpmc/hwpmc_mod.c:1234) p1 0x7"[..55].to_string()
        );
    }
}
