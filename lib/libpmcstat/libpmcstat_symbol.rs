//! Function symbols of an image (libpmcstat_symbol.c): a table sorted by
//! address, searched by address and by name.

use crate::libpmcstat_string::IStr;

/// `struct pmcstat_symbol`: a function, as offsets from the image's load
/// address (`pi_vaddr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol {
    /// Its name.
    pub name: IStr,
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// A sorted table of function symbols.
#[derive(Debug, Default, Clone)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    /// The table of `symbols`, sorted: of symbols at the same address the
    /// first is kept (FreeBSD's keeps every alias and its binary search
    /// returns any of them, so the name it prints for an aliased address
    /// is unspecified; this one is the static table's), and a symbol of
    /// size zero (usually assembly) reaches to the next one, as
    /// FreeBSD's.
    pub fn new(mut symbols: Vec<Symbol>) -> SymbolTable {
        // A stable sort: among symbols at one address, the first seen
        // (the static table's before the dynamic one's) stays.
        symbols.sort_by_key(|s| s.start);
        symbols.dedup_by_key(|s| s.start);
        for i in 1..symbols.len() {
            if symbols[i - 1].start == symbols[i - 1].end {
                symbols[i - 1].end = symbols[i].start;
            }
        }
        SymbolTable { symbols }
    }

    /// `pmcstat_symbol_search`: the function whose range holds `addr`.
    pub fn search(&self, addr: u64) -> Option<&Symbol> {
        // Ranges are sorted by start; a symbol that contains `addr` is the
        // last starting at or below it, or (for nested ranges) one before.
        let i = self.symbols.partition_point(|s| s.start <= addr);
        let candidate = &self.symbols[i.checked_sub(1)?];
        if addr < candidate.end {
            return Some(candidate);
        }
        // An enclosing symbol further down (a sized function that holds
        // a smaller one): rare, looked for over a short distance only.
        self.symbols[..i - 1]
            .iter()
            .rev()
            .take(8)
            .find(|s| addr < s.end)
    }

    /// The symbol called `name`, with `names` resolving the handles.
    pub fn by_name(&self, name: IStr) -> Option<&Symbol> {
        self.symbols.iter().find(|s| s.name == name)
    }

    /// Every symbol, in address order.
    pub fn iter(&self) -> impl Iterator<Item = &Symbol> {
        self.symbols.iter()
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libpmcstat_string::StringPool;

    #[test]
    fn search_finds_the_containing_function() {
        let mut p = StringPool::new();
        let (a, b, c) = (p.intern("a"), p.intern("b"), p.intern("c"));
        let t = SymbolTable::new(vec![
            Symbol {
                name: b,
                start: 0x200,
                end: 0x280,
            },
            Symbol {
                name: a,
                start: 0x100,
                end: 0x100,
            },
            Symbol {
                name: c,
                start: 0x300,
                end: 0x340,
            },
        ]);
        // `a` has size zero: it reaches to `b`.
        assert_eq!(t.search(0x1ff).map(|s| s.name), Some(a));
        assert_eq!(t.search(0x200).map(|s| s.name), Some(b));
        assert_eq!(t.search(0x27f).map(|s| s.name), Some(b));
        assert_eq!(t.search(0x280), None);
        assert_eq!(t.search(0xff), None);
        assert_eq!(t.search(0x33f).map(|s| s.name), Some(c));
        assert_eq!(t.search(0x340), None);
        assert_eq!(t.by_name(c).map(|s| s.start), Some(0x300));
    }

    #[test]
    fn the_first_of_aliases_stays() {
        let mut p = StringPool::new();
        let (x, y) = (p.intern("x"), p.intern("y"));
        let t = SymbolTable::new(vec![
            Symbol {
                name: x,
                start: 0x10,
                end: 0x20,
            },
            Symbol {
                name: y,
                start: 0x10,
                end: 0x20,
            },
        ]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.search(0x18).map(|s| s.name), Some(x));
    }
}
