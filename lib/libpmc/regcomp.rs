//! POSIX extended regular expressions through the C library's regcomp(3),
//! regexec(3), regerror(3) and regfree(3), as FreeBSD's libpmc uses them
//! for the CPU patterns of pmu-events' `mapfile.csv` and pmcstat for its
//! `-t` process-name patterns.

use core::ffi::{c_char, c_int};
use std::ffi::CString;

/// A pattern compiled with `REG_EXTENDED`.
pub struct Regex {
    /// Boxed so that the compiled pattern never moves.
    re: Box<libc::regex_t>,
}

impl core::fmt::Debug for Regex {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Regex").finish_non_exhaustive()
    }
}

/// Why a pattern did not compile: regerror(3)'s text, or that the
/// pattern holds a NUL, which no C string can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexError(pub String);

impl core::fmt::Display for RegexError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A C string of `text` up to its first NUL, as a C caller would pass it.
fn c_text(text: &str) -> CString {
    let end = text.find('\0').unwrap_or(text.len());
    CString::new(&text[..end]).expect("no NUL before `end`")
}

impl Regex {
    /// regcomp(3) with `REG_EXTENDED`.
    pub fn new(pattern: &str) -> Result<Regex, RegexError> {
        let c = CString::new(pattern)
            .map_err(|_| RegexError("the pattern contains a NUL character".into()))?;
        // SAFETY: regex_t is a plain C struct that regcomp initialises; an
        // all-zero value is only storage for it.
        let mut re: Box<libc::regex_t> = Box::new(unsafe { core::mem::zeroed() });
        // SAFETY: `re` is writable storage for a regex_t and `c` a
        // NUL-terminated string that lives through the call.
        let r = unsafe { libc::regcomp(&mut *re, c.as_ptr(), libc::REG_EXTENDED) };
        if r != 0 {
            let message = error_text(r, &re);
            // After a failed regcomp there is nothing to free.
            return Err(RegexError(message));
        }
        Ok(Regex { re })
    }

    /// The leftmost (and longest) match in `text`, as byte offsets
    /// (regexec(3) with one `regmatch_t`); text after a NUL is not seen.
    pub fn find(&self, text: &str) -> Option<(usize, usize)> {
        let c = c_text(text);
        let mut m = libc::regmatch_t {
            rm_so: -1,
            rm_eo: -1,
        };
        // SAFETY: the pattern was compiled by regcomp and is not freed
        // before `self` is dropped; `c` is NUL-terminated; one regmatch_t
        // is writable.
        let r = unsafe { libc::regexec(&*self.re, c.as_ptr(), 1, &mut m, 0) };
        (r == 0).then_some((m.rm_so as usize, m.rm_eo as usize))
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.find(text).is_some()
    }
}

/// regerror(3)'s text for `code`.
fn error_text(code: c_int, re: &libc::regex_t) -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` has `buf.len()` writable bytes; regerror writes a
    // NUL-terminated message, cut to fit.
    unsafe { libc::regerror(code, re, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: regerror left a NUL-terminated string in `buf`.
    unsafe { core::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

impl Drop for Regex {
    fn drop(&mut self) {
        // SAFETY: compiled by a successful regcomp, freed once, here.
        unsafe { libc::regfree(&mut *self.re) };
    }
}

// SAFETY: regexec(3) only reads a compiled pattern, from any thread
// (POSIX); nothing mutates it after regcomp but regfree, in drop.
unsafe impl Send for Regex {}
// SAFETY: as above: shared use is regexec alone.
unsafe impl Sync for Regex {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapfile_patterns() {
        let re = Regex::new("GenuineIntel-6-(3C|45|46)").unwrap();
        assert_eq!(re.find("GenuineIntel-6-45-1"), Some((0, 17)));
        assert!(!re.is_match("GenuineIntel-6-4E"));
        let re = Regex::new("GenuineIntel-6-55-[56789ABCDEF]").unwrap();
        assert!(re.is_match("GenuineIntel-6-55-7"));
        assert!(!re.is_match("GenuineIntel-6-55-4"));
    }

    #[test]
    fn extended_syntax() {
        // Bounds and alternation, which the old matcher lacked.
        let re = Regex::new("^wo(r|x){1,2}k$").unwrap();
        assert!(re.is_match("work"));
        assert!(re.is_match("worxk"));
        assert!(!re.is_match("worrrk"));
        // Leftmost, then longest.
        assert_eq!(Regex::new("a+").unwrap().find("baaac"), Some((1, 4)));
        // A pathological pattern for a backtracking matcher.
        let re = Regex::new("(a*)*b").unwrap();
        assert!(!re.is_match(&"a".repeat(64)));
    }

    #[test]
    fn bad_patterns_are_errors() {
        for bad in ["(make", "[a", "a{2,1}"] {
            let e = Regex::new(bad).map(|_| ()).unwrap_err();
            assert!(!e.0.is_empty(), "{bad}");
        }
        assert_eq!(
            Regex::new("a\0b").unwrap_err().0,
            "the pattern contains a NUL character"
        );
    }
}
