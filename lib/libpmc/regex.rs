//! A small POSIX extended regular expression matcher: enough for
//! mapfile.csv CPU patterns (`GenuineIntel-6-(3C|45|46)`,
//! `GenuineIntel-6-55-[56789ABCDEF]`) and pmcstat's `-t` process-name
//! patterns, without a dependency.
//!
//! Supported: literals, `.`, bracket expressions with ranges and `^`
//! negation, groups with `|`, the quantifiers `*`, `+`, `?`, anchors `^`
//! and `$`, and `\` escapes. Matching is by backtracking over a parsed
//! tree; patterns here are short.

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Regex {
    alternatives: Vec<Vec<Piece>>,
}

#[derive(Debug, Clone)]
enum Atom {
    Literal(char),
    Any,
    Class {
        negated: bool,
        items: Vec<(char, char)>,
    },
    Group(Vec<Vec<Piece>>),
    Start,
    End,
}

#[derive(Debug, Clone)]
struct Piece {
    atom: Atom,
    min: usize,
    max: Option<usize>,
}

/// The text being matched and the work done on it: backtracking is
/// exponential on some patterns, so a match gives up (as "no match")
/// after [`STEP_LIMIT`] steps rather than hang.
struct Subject<'t> {
    text: &'t [char],
    steps: core::cell::Cell<u32>,
}

/// Atom matches one match attempt may make.
pub const STEP_LIMIT: u32 = 1_000_000;

/// Why a pattern did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexError {
    /// Character offset of the problem.
    pub at: usize,
    /// What is wrong there.
    pub what: &'static str,
}

impl core::fmt::Display for RegexError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} at offset {}", self.what, self.at)
    }
}

impl Regex {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Regex, RegexError> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut pos = 0;
        let alternatives = parse_alternatives(&chars, &mut pos, 0)?;
        if pos != chars.len() {
            return Err(RegexError {
                at: pos,
                what: "unmatched )",
            });
        }
        Ok(Regex { alternatives })
    }

    /// Whether the pattern matches somewhere in `text` (regexec(3)).
    pub fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        (0..=chars.len()).any(|start| self.match_at(&chars, start, false))
    }

    /// Whether the pattern matches all of `text`.
    pub fn is_full_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        self.match_at(&chars, 0, true)
    }

    /// Whether the pattern matches a prefix of `text` after which
    /// `accept_rest` accepts what is left (FreeBSD's mapfile rule: the
    /// match starts at the key's start and ends at its end or a `-`).
    pub fn matches_prefix(&self, text: &str, accept_rest: impl Fn(&str) -> bool) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let mut done = |end: usize| accept_rest(&chars[end..].iter().collect::<String>());
        let subject = Subject {
            text: &chars,
            steps: core::cell::Cell::new(0),
        };
        match_alternatives(&self.alternatives, &subject, 0, &mut done)
    }

    fn match_at(&self, text: &[char], start: usize, whole: bool) -> bool {
        let mut done = |end: usize| !whole || end == text.len();
        let subject = Subject {
            text,
            steps: core::cell::Cell::new(0),
        };
        match_alternatives(&self.alternatives, &subject, start, &mut done)
    }
}

fn parse_alternatives(
    p: &[char],
    pos: &mut usize,
    depth: usize,
) -> Result<Vec<Vec<Piece>>, RegexError> {
    if depth > 32 {
        return Err(RegexError {
            at: *pos,
            what: "groups nested too deeply",
        });
    }
    let mut alternatives = vec![Vec::new()];
    while *pos < p.len() {
        let c = p[*pos];
        let atom = match c {
            '|' => {
                *pos += 1;
                alternatives.push(Vec::new());
                continue;
            }
            ')' if depth > 0 => break,
            ')' => {
                return Err(RegexError {
                    at: *pos,
                    what: "unmatched )",
                });
            }
            '(' => {
                *pos += 1;
                let inner = parse_alternatives(p, pos, depth + 1)?;
                if p.get(*pos) != Some(&')') {
                    return Err(RegexError {
                        at: *pos,
                        what: "unmatched (",
                    });
                }
                *pos += 1;
                Atom::Group(inner)
            }
            '[' => parse_class(p, pos)?,
            '.' => {
                *pos += 1;
                Atom::Any
            }
            '^' => {
                *pos += 1;
                Atom::Start
            }
            '$' => {
                *pos += 1;
                Atom::End
            }
            '\\' => {
                let escaped = *p.get(*pos + 1).ok_or(RegexError {
                    at: *pos,
                    what: "trailing backslash",
                })?;
                *pos += 2;
                Atom::Literal(escaped)
            }
            '*' | '+' | '?' => {
                return Err(RegexError {
                    at: *pos,
                    what: "repetition operator without operand",
                });
            }
            _ => {
                *pos += 1;
                Atom::Literal(c)
            }
        };
        let (min, max) = match p.get(*pos) {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            _ => (1, Some(1)),
        };
        if (min, max) != (1, Some(1)) {
            *pos += 1;
        }
        alternatives
            .last_mut()
            .expect("never empty")
            .push(Piece { atom, min, max });
    }
    Ok(alternatives)
}

fn parse_class(p: &[char], pos: &mut usize) -> Result<Atom, RegexError> {
    let open = *pos;
    *pos += 1;
    let negated = p.get(*pos) == Some(&'^');
    if negated {
        *pos += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *p.get(*pos).ok_or(RegexError {
            at: open,
            what: "unmatched [",
        })?;
        if c == ']' && !first {
            *pos += 1;
            break;
        }
        first = false;
        if c == '[' && p.get(*pos + 1) == Some(&':') {
            let rest: String = p[*pos + 2..].iter().collect();
            let Some(end) = rest.find(":]") else {
                return Err(RegexError {
                    at: *pos,
                    what: "unterminated character class",
                });
            };
            let ranges: &[(char, char)] = match &rest[..end] {
                "digit" => &[('0', '9')],
                "xdigit" => &[('0', '9'), ('A', 'F'), ('a', 'f')],
                "alpha" => &[('A', 'Z'), ('a', 'z')],
                "alnum" => &[('0', '9'), ('A', 'Z'), ('a', 'z')],
                "upper" => &[('A', 'Z')],
                "lower" => &[('a', 'z')],
                "space" => &[(' ', ' '), ('\t', '\r')],
                _ => {
                    return Err(RegexError {
                        at: *pos,
                        what: "unknown character class",
                    });
                }
            };
            items.extend_from_slice(ranges);
            *pos += 2 + rest[..end].chars().count() + 2;
            continue;
        }
        if p.get(*pos + 1) == Some(&'-') && p.get(*pos + 2).is_some_and(|&e| e != ']') {
            let end = p[*pos + 2];
            if end < c {
                return Err(RegexError {
                    at: *pos,
                    what: "invalid range",
                });
            }
            items.push((c, end));
            *pos += 3;
        } else {
            items.push((c, c));
            *pos += 1;
        }
    }
    Ok(Atom::Class { negated, items })
}

fn match_alternatives(
    alts: &[Vec<Piece>],
    text: &Subject<'_>,
    at: usize,
    done: &mut dyn FnMut(usize) -> bool,
) -> bool {
    alts.iter().any(|seq| match_seq(seq, text, at, done))
}

fn match_seq(
    seq: &[Piece],
    text: &Subject<'_>,
    at: usize,
    done: &mut dyn FnMut(usize) -> bool,
) -> bool {
    let Some((piece, rest)) = seq.split_first() else {
        return done(at);
    };
    match_repeat(piece, 0, rest, text, at, done)
}

/// Matches `piece` `count` or more further times, greedily, then `rest`.
fn match_repeat(
    piece: &Piece,
    count: usize,
    rest: &[Piece],
    text: &Subject<'_>,
    at: usize,
    done: &mut dyn FnMut(usize) -> bool,
) -> bool {
    let may_more = piece.max.is_none_or(|m| count < m);
    if may_more {
        let mut after_one = |end: usize| {
            // An empty iteration makes no progress: allowed only to reach
            // the minimum (anchors), never to repeat forever.
            (end != at || count < piece.min)
                && match_repeat(piece, count + 1, rest, text, end, done)
        };
        if match_atom(&piece.atom, text, at, &mut after_one) {
            return true;
        }
    }
    count >= piece.min && match_seq(rest, text, at, done)
}

fn match_atom(
    atom: &Atom,
    subject: &Subject<'_>,
    at: usize,
    next: &mut dyn FnMut(usize) -> bool,
) -> bool {
    let steps = subject.steps.get() + 1;
    subject.steps.set(steps);
    if steps > STEP_LIMIT {
        return false;
    }
    let text = subject.text;
    match atom {
        Atom::Literal(c) => text.get(at) == Some(c) && next(at + 1),
        Atom::Any => at < text.len() && next(at + 1),
        Atom::Class { negated, items } => {
            text.get(at)
                .is_some_and(|c| items.iter().any(|&(lo, hi)| (lo..=hi).contains(c)) != *negated)
                && next(at + 1)
        }
        Atom::Group(alts) => match_alternatives(alts, subject, at, next),
        Atom::Start => at == 0 && next(at),
        Atom::End => at == text.len() && next(at),
    }
}

#[cfg(test)]
mod tests {
    use super::Regex;

    #[test]
    fn mapfile_patterns() {
        let r = Regex::new("GenuineIntel-6-(3C|45|46)").unwrap();
        assert!(r.is_full_match("GenuineIntel-6-45"));
        assert!(!r.is_full_match("GenuineIntel-6-47"));
        let r = Regex::new("GenuineIntel-6-55-[56789ABCDEF]").unwrap();
        assert!(r.is_full_match("GenuineIntel-6-55-7"));
        assert!(!r.is_full_match("GenuineIntel-6-55-4"));
        assert!(r.is_match("xGenuineIntel-6-55-Ay"));
    }

    #[test]
    fn operators() {
        assert!(Regex::new("^ab*c$").unwrap().is_match("abbbc"));
        assert!(!Regex::new("^ab*c$").unwrap().is_match("abbbcd"));
        assert!(Regex::new("a(b|cd)+e").unwrap().is_full_match("abcdbe"));
        assert!(Regex::new("x?y").unwrap().is_full_match("y"));
        assert!(Regex::new("[^0-9]+").unwrap().is_full_match("work"));
        assert!(!Regex::new("[^0-9]+").unwrap().is_full_match("w0rk"));
        assert!(Regex::new("w.rk").unwrap().is_match("a work b"));
        assert!(Regex::new("(a*)*b").unwrap().is_match("aaab"));
        assert!(Regex::new("a\\.b").unwrap().is_full_match("a.b"));
        assert!(!Regex::new("a\\.b").unwrap().is_full_match("axb"));
    }

    #[test]
    fn posix_classes_and_prefixes() {
        let r = Regex::new("AuthenticAMD-23-[[:xdigit:]]+").unwrap();
        assert!(r.is_full_match("AuthenticAMD-23-31"));
        assert!(!r.is_full_match("AuthenticAMD-23-3G"));
        let dash = |rest: &str| rest.is_empty() || rest.starts_with('-');
        let r = Regex::new("GenuineIntel-6-5E").unwrap();
        assert!(r.matches_prefix("GenuineIntel-6-5E-3", dash));
        assert!(r.matches_prefix("GenuineIntel-6-5E", dash));
        assert!(!r.matches_prefix("GenuineIntel-6-5E3", dash));
        assert!(!r.matches_prefix("xGenuineIntel-6-5E", dash));
    }

    #[test]
    fn pathological_patterns_give_up_instead_of_hanging() {
        let r = Regex::new("(a*)*(a*)*(a*)*(a*)*b").unwrap();
        assert!(!r.is_match("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
        assert!(r.is_match("aab"));
    }

    #[test]
    fn bad_patterns_are_errors() {
        for bad in [
            "(ab",
            "ab)",
            "[ab",
            "*a",
            "a\\",
            "[z-a]",
            "[[:nope:]]",
            "[[:digit]",
        ] {
            assert!(Regex::new(bad).is_err(), "{bad}");
        }
    }
}
