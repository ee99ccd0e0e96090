//! Interned strings (libpmcstat_string.c): image paths and symbol names
//! are kept once and named by a small handle, so that images, symbols
//! and call graph nodes compare and hash names as integers, as FreeBSD's
//! compare interned pointers.

use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

/// A string of a [`StringPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IStr(u32);

/// The pool of interned strings.
#[derive(Debug, Default)]
pub struct StringPool {
    index: HashMap<Rc<str>, IStr>,
    strings: Vec<Rc<str>>,
}

impl StringPool {
    /// An empty pool.
    pub fn new() -> StringPool {
        StringPool::default()
    }

    /// `pmcstat_string_intern`: the handle of `s`, added if new.
    pub fn intern(&mut self, s: &str) -> IStr {
        if let Some(&h) = self.index.get(s) {
            return h;
        }
        let h = IStr(u32::try_from(self.strings.len()).expect("fewer than 2^32 strings"));
        let rc: Rc<str> = Rc::from(s);
        self.strings.push(rc.clone());
        self.index.insert(rc, h);
        h
    }

    /// `pmcstat_string_lookup`: the handle of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<IStr> {
        self.index.get(s).copied()
    }

    /// `pmcstat_string_unintern`: the text of a handle.
    pub fn get(&self, h: IStr) -> &str {
        &self.strings[h.0 as usize]
    }

    /// Strings in the pool.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when nothing was interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_handle_per_text() {
        let mut p = StringPool::new();
        let a = p.intern("/usr/bin/sort");
        let b = p.intern("main");
        assert_ne!(a, b);
        assert_eq!(p.intern("/usr/bin/sort"), a);
        assert_eq!(p.get(a), "/usr/bin/sort");
        assert_eq!(p.lookup("main"), Some(b));
        assert_eq!(p.lookup("absent"), None);
        assert_eq!(p.len(), 2);
    }
}
