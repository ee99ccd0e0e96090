#!/usr/bin/env python3
"""Generate sys/rust/uapi/pmc_events.rs from FreeBSD's dev/hwpmc/pmc_events.h.

Usage: gen-pmc-events.py [HEADER [OUTPUT]]

HEADER defaults to the FreeBSD libc headers shipped with the `ziglang` Python
package; OUTPUT defaults to sys/rust/uapi/pmc_events.rs in this repository.

The header is an X-macro table: `__PMC_EVENTS()` lists
`__PMC_EV_BLOCK(CLASS, START)` markers, each followed by event-list macros
that expand to `__PMC_EV(CLASS, NAME)` entries.  In C they become enumerators
of `enum pmc_event`, where BLOCK_START is START - 1, so the first event of a
block gets START and the rest count up from there.

The header is interpreted, not compiled: only the constructs listed below are
accepted, and anything else aborts the generator.  A silently skipped entry
would shift every following code in its block, i.e. break the ABI.

The emitted Rust is laid out exactly as rustfmt (default config, edition 2024)
would lay it out, so the output passes `cargo fmt --check` without running
rustfmt here.
"""

import hashlib
import os
import re
import subprocess
import sys

HEADER_REL = "lib/libc/include/generic-freebsd/dev/hwpmc/pmc_events.h"
OUTPUT_REL = os.path.join("sys", "rust", "uapi", "pmc_events.rs")
SCRIPT_REL = "tools/gen-pmc-events.py"

# Object-like defines with fixed names (besides PMC_EV_<X>_FIRST/_LAST).
MISC_DEFINES = [
    "PMC_EV_DYN_COUNT",
    "PMC_EV_SOFT_FIRST",
    "PMC_EV_SOFT_LAST",
    "PMC_EVENT_FIRST",
    "PMC_EVENT_LAST",
]

# Defines the header itself leaves dangling: they name enumerators that exist
# nowhere (leftovers of an older ARMv7 event list), so C code cannot use them
# either.  They are omitted; any *other* unresolvable name is an error.
KNOWN_DANGLING = {
    "PMC_EV_ARMV7_CORTEX_A8_FIRST",
    "PMC_EV_ARMV7_CORTEX_A8_LAST",
}

MAX_WIDTH = 100  # rustfmt max_width
ARRAY_WIDTH = 60  # rustfmt array_width (60% of max_width)
SHORT_ITEM = 10  # rustfmt short_array_element_width_threshold

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


class GenError(Exception):
    pass


class Unresolved(Exception):
    """A define names an identifier the header never defines."""


def fail(msg):
    raise GenError(msg)


# ---------------------------------------------------------------------------
# Preprocessing


def strip_comments(text):
    # String literals are matched first so that "//" inside one survives.
    def repl(m):
        s = m.group(0)
        if s.startswith('"'):
            return s
        if s == "/*":
            fail("unterminated /* comment")
        # A comment is one space; keep newlines so the lines stay aligned.
        return " " + "\n" * s.count("\n")

    tok = re.compile(r'"(?:\\.|[^"\\\n])*"|/\*.*?\*/|//[^\n]*|/\*', re.S)
    return tok.sub(repl, text)


def logical_lines(text):
    """Yield (first physical line number, logical line) after C phases 1-3."""
    text = text.replace("\r\n", "\n")
    # Splice continuations, recording where each logical line started.  Some
    # header lines carry blanks after the backslash; GCC accepts that too.
    lines = []
    buf, start = "", None
    for no, phys in enumerate(text.split("\n"), 1):
        if start is None:
            start = no
        m = re.search(r"\\[ \t]*$", phys)
        if m:
            buf += phys[: m.start()]
            continue
        lines.append((start, buf + phys))
        buf, start = "", None
    if buf:
        fail("backslash continuation at end of file")
    # Comments may span logical lines, so strip them on the joined text and
    # split again; the per-line start numbers are only used in messages.
    joined = "\n".join(body for _, body in lines)
    stripped = strip_comments(joined).split("\n")
    return [(no, body) for (no, _), body in zip(lines, stripped)]


def parse_directives(text):
    """Return (function-like macros, object-like defines), both name -> body."""
    funcs, objs = {}, {}
    guard = None
    conds = []
    for no, line in logical_lines(text):
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            fail(f"line {no}: unexpected text outside a directive: {s[:60]!r}")
        d = s[1:].strip()
        m = re.match(r"(\w+)\s*(.*)$", d, re.S)
        if not m:
            fail(f"line {no}: malformed directive {s!r}")
        kind, rest = m.group(1), m.group(2)
        if kind == "ifndef" and guard is None and not funcs and not objs:
            if not re.fullmatch(IDENT, rest):
                fail(f"line {no}: unexpected #ifndef {rest!r}")
            guard = rest
            conds.append(no)
        elif kind == "endif":
            if not conds:
                fail(f"line {no}: #endif without #if")
            conds.pop()
        elif kind == "define":
            # A function-like macro has its '(' directly after the name.
            m = re.match(rf"({IDENT})(\((.*?)\))?(.*)$", rest, re.S)
            if not m:
                fail(f"line {no}: cannot parse #define {rest[:60]!r}")
            name, params, body = m.group(1), m.group(3), m.group(4).strip()
            if name in funcs or name in objs:
                fail(f"line {no}: {name} defined twice")
            if m.group(2) is not None:
                if params.strip():
                    fail(f"line {no}: macro {name} has parameters ({params})")
                funcs[name] = (no, body)
            else:
                objs[name] = (no, body)
        else:
            fail(f"line {no}: unsupported directive #{kind}")
    if conds:
        fail("unterminated #ifndef")
    if guard is None or objs.get(guard, (0, None))[1] != "":
        fail("missing include guard")
    del objs[guard]
    return funcs, objs


# ---------------------------------------------------------------------------
# Macro expansion

CALL = re.compile(rf"\s*({IDENT})\s*\(([^()]*)\)\s*")


def split_calls(name, body):
    """Split a macro body into (callee, [args]); the body must be only calls."""
    calls, pos = [], 0
    while pos < len(body):
        m = CALL.match(body, pos)
        if not m:
            fail(f"macro {name}: cannot parse {body[pos:pos + 60]!r}")
        args = [a.strip() for a in m.group(2).split(",")] if m.group(2).strip() else []
        calls.append((m.group(1), args))
        pos = m.end()
    return calls


def expand(name, funcs, seen, stack=()):
    """Fully expand macro `name` into primitive (kind, args, origin) items.

    Every macro visited on the way is added to `seen`.
    """
    if name in stack:
        fail("recursive macro: " + " -> ".join(stack + (name,)))
    if name not in funcs:
        fail(f"use of undefined macro {name}()")
    seen.add(name)
    items = []
    for callee, args in split_calls(name, funcs[name][1]):
        if callee == "__PMC_EV":
            if len(args) != 2 or not all(re.fullmatch(IDENT, a) for a in args):
                fail(f"macro {name}: bad __PMC_EV({', '.join(args)})")
            items.append(("ev", tuple(args), name))
        elif callee == "__PMC_EV_BLOCK":
            if len(args) != 2 or not re.fullmatch(IDENT, args[0]):
                fail(f"macro {name}: bad __PMC_EV_BLOCK({', '.join(args)})")
            items.append(("block", tuple(args), name))
        elif callee == "__PMC_EV_ALIAS":
            if (
                len(args) != 2
                or not re.fullmatch(r'"[^"\\]*"', args[0])
                or not re.fullmatch(IDENT, args[1])
            ):
                fail(f"macro {name}: bad __PMC_EV_ALIAS({', '.join(args)})")
            items.append(("alias", (args[0][1:-1], args[1]), name))
        elif callee in funcs:
            if args:
                fail(f"macro {name}: {callee}() called with arguments")
            items += expand(callee, funcs, seen, stack + (name,))
        else:
            fail(f"macro {name}: unknown macro {callee}()")
    return items


# ---------------------------------------------------------------------------
# Constant expressions (object-like defines, block starts)


def c_int(tok):
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([uU]?[lL]{0,2}|[lL]{1,2}[uU])", tok)
    if not m:
        fail(f"bad integer literal {tok!r}")
    digits = m.group(1)
    if digits[:2] in ("0x", "0X"):
        return int(digits, 16)
    if digits.startswith("0"):
        return int(digits, 8)
    return int(digits)


def evaluate(expr, lookup, what):
    """Evaluate + / - / parentheses over integer literals and identifiers."""
    toks = re.findall(r"\s*(0[xX][0-9a-fA-F]+\w*|\d\w*|" + IDENT + r"|[()+-]|\S)", expr)
    if not toks:
        fail(f"{what}: empty expression")
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def primary():
        t = peek()
        if t is None:
            fail(f"{what}: truncated expression {expr!r}")
        take()
        if t == "(":
            v = additive()
            if peek() != ")":
                fail(f"{what}: unsupported expression {expr!r}")
            take()
            return v
        if t in ("+", "-"):
            v = primary()
            return v if t == "+" else -v
        if t[0].isdigit():
            return c_int(t)
        if re.fullmatch(IDENT, t):
            return lookup(t)
        fail(f"{what}: unsupported token {t!r} in {expr!r}")

    def additive():
        v = primary()
        while peek() in ("+", "-"):
            sign = 1 if take() == "+" else -1
            v += sign * primary()
        return v

    v = additive()
    if pos != len(toks):
        fail(f"{what}: unsupported expression {expr!r}")
    if not 0 <= v <= 0xFFFFFFFF:
        fail(f"{what}: value {v:#x} does not fit u32")
    return v


# ---------------------------------------------------------------------------
# Interpretation of the header


def interpret(text):
    funcs, objs = parse_directives(text)

    if "__PMC_EVENTS" not in funcs:
        fail("__PMC_EVENTS() is not defined")
    unknown = [
        n for n in funcs if n != "__PMC_EVENTS" and not n.startswith("__PMC_EV_")
    ]
    if unknown:
        fail("unknown function-like macros: " + ", ".join(unknown))
    alias_macros = [n for n in funcs if n.startswith("__PMC_EV_ALIAS_")]

    # Events, numbered the way the C enum numbers them.
    blocks = []  # [class, start, [names]]
    used = set()
    for kind, args, origin in expand("__PMC_EVENTS", funcs, used):
        if kind == "block":
            cls = args[0]
            if any(b[0] == cls for b in blocks):
                fail(f"block {cls} listed twice")
            blocks.append([cls, evaluate(args[1], no_idents, f"block {cls}"), []])
        elif kind == "ev":
            if not blocks:
                fail(f"event {args} precedes the first __PMC_EV_BLOCK")
            # The enum counts on regardless of CLASS, so a foreign class here
            # would be numbered inside the wrong block: refuse it.
            if args[0] != blocks[-1][0]:
                fail(
                    f"{origin}: __PMC_EV({args[0]}, {args[1]}) inside block "
                    f"{blocks[-1][0]}"
                )
            blocks[-1][2].append(args[1])
        else:
            fail(f"{origin}: __PMC_EV_ALIAS inside __PMC_EVENTS()")

    # An event-list macro that __PMC_EVENTS() never reaches has no numbers.
    lists = [n for n in funcs if n not in alias_macros and n != "__PMC_EVENTS"]
    orphans = [n for n in lists if n not in used]
    if orphans:
        fail("event macros not reachable from __PMC_EVENTS(): " + ", ".join(orphans))

    events = {}  # C name -> code
    for i, (cls, start, names) in enumerate(blocks):
        if not names:
            fail(f"block {cls} has no events")
        end = start + len(names)
        # Ascending order keeps PMC_EVENT_CODES sorted, which the tests use.
        if i + 1 < len(blocks) and start >= blocks[i + 1][1]:
            fail(f"block {blocks[i + 1][0]} starts below block {cls}")
        if i + 1 < len(blocks) and end > blocks[i + 1][1]:
            fail(f"block {cls} ({len(names)} events) runs into {blocks[i + 1][0]}")
        for k, n in enumerate(names):
            full = f"PMC_EV_{cls}_{n}"
            if full in events:
                fail(f"{full} defined twice")
            events[full] = start + k

    # Object-like defines, resolved to numbers.
    resolving = []
    values = {}

    def lookup(ident):
        if ident in events:
            return events[ident]
        if ident in values:
            return values[ident]
        if ident not in objs:
            raise Unresolved(ident)
        if ident in resolving:
            fail("recursive define: " + " -> ".join(resolving + [ident]))
        resolving.append(ident)
        try:
            values[ident] = evaluate(objs[ident][1], lookup, ident)
        finally:
            resolving.pop()
        return values[ident]

    firstlast, dangling = [], []
    for name, (no, body) in objs.items():
        if name not in MISC_DEFINES and not re.fullmatch(rf"PMC_EV_{IDENT}_(FIRST|LAST)", name):
            fail(f"line {no}: unexpected define {name}")
        try:
            v = lookup(name)
        except Unresolved as e:
            if name in KNOWN_DANGLING:
                dangling.append(name)
                continue
            fail(f"line {no}: {name} refers to undefined {e.args[0]}")
        if name not in MISC_DEFINES:
            firstlast.append((name, v))
    missing = [n for n in MISC_DEFINES if n not in values]
    if missing:
        fail("header lacks " + ", ".join(missing))

    soft_first, soft_last = values["PMC_EV_SOFT_FIRST"], values["PMC_EV_SOFT_LAST"]
    if soft_last - soft_first + 1 != values["PMC_EV_DYN_COUNT"]:
        fail("soft event range does not match PMC_EV_DYN_COUNT")
    for name, code in events.items():
        if soft_first <= code <= soft_last:
            fail(f"{name} ({code:#x}) lies in the soft event range")

    # Alias tables, flattened, each entry resolved to an event constant.
    aliases = []
    for m in alias_macros:
        entries = []
        for kind, args, origin in expand(m, funcs, set()):
            if kind != "alias":
                fail(f"{origin}: alias macro contains {kind} entries")
            target = "PMC_EV_" + args[1]
            if target not in events:
                fail(f"{origin}: alias {args[0]!r} names unknown event {target}")
            entries.append((args[0], target))
        aliases.append((m[2:], entries))

    return {
        "blocks": blocks,
        "events": events,
        "firstlast": firstlast,
        "dangling": dangling,
        "misc": [(n, values[n]) for n in MISC_DEFINES],
        "aliases": aliases,
    }


def no_idents(ident):
    fail(f"identifier {ident} in a block start")


# ---------------------------------------------------------------------------
# Rust emission, laid out the way rustfmt would


def hexlit(v):
    return f"0x{v:X}"


def const_line(decl, value):
    one = f"{decl} = {value};"
    if len(one) <= MAX_WIDTH:
        return [one]
    return [f"{decl} =", f"    {value};"]


def item_lines(item, indent, suffix):
    """One array element; a tuple is given as a Python tuple of its fields."""
    pad = " " * indent
    if isinstance(item, str):
        return [f"{pad}{item}{suffix}"]
    inner = ", ".join(item)
    one = f"{pad}({inner}){suffix}"
    # rustfmt treats tuples like calls: fn_call_width is 60.
    if len(inner) <= ARRAY_WIDTH and len(one) <= MAX_WIDTH:
        return [one]
    return [f"{pad}("] + [f"{pad}    {f}," for f in item] + [f"{pad}){suffix}"]


def flat(item):
    return item if isinstance(item, str) else "(" + ", ".join(item) + ")"


def array_lines(head, items, tail, indent):
    """`head[items]tail`, horizontal if rustfmt would keep it on one line."""
    pad = " " * indent
    inner = ", ".join(flat(i) for i in items)
    one = f"{pad}{head}[{inner}]{tail}"
    if len(inner) <= ARRAY_WIDTH and len(one) <= MAX_WIDTH:
        return [one]
    ipad = pad + "    "
    if all(isinstance(i, str) and len(i) <= SHORT_ITEM for i in items):
        # Short literals are packed several to a line.
        rows, row = [], ""
        for it in items:
            cand = f"{row} {it}," if row else f"{it},"
            if row and len(ipad) + len(cand) > MAX_WIDTH:
                rows.append(row)
                cand = f"{it},"
            row = cand
        rows.append(row)
        body = [ipad + r for r in rows]
    else:
        body = [line for it in items for line in item_lines(it, indent + 4, ",")]
    return [f"{pad}{head}["] + body + [f"{pad}]{tail}"]


def rs_str(s):
    if not re.fullmatch(r"[\x20-\x7e]*", s) or '"' in s or "\\" in s:
        fail(f"string {s!r} needs escaping; not supported")
    return f'"{s}"'


def emit(model, header_bytes):
    blocks, events = model["blocks"], model["events"]
    out = []
    w = out.append
    w("//! Event numbering of FreeBSD's dev/hwpmc/pmc_events.h.")
    w("//!")
    w("//! Generated by tools/gen-pmc-events.py from that header; do not edit by hand.")
    w("//! Regenerate from the repository root with")
    w("//! `python3 tools/gen-pmc-events.py [HEADER [OUTPUT]]`.")
    w(f"//! Input header SHA-256: {hashlib.sha256(header_bytes).hexdigest()}.")
    w("")
    w("// Some C event names are lower case; they keep their C spelling.")
    w("#![allow(non_upper_case_globals)]")
    w("")
    w("/// Static event codes, one per `__PMC_EV(CLASS, NAME)` entry, named")
    w("/// `PMC_EV_<CLASS>_<NAME>`. Each class block starts at its")
    w("/// `__PMC_EV_BLOCK` code and counts up in header order.")
    first_block = True
    for cls, start, names in blocks:
        if not first_block:
            w("")
        plural = "" if len(names) == 1 else "s"
        w(f"// {cls}: {len(names)} event{plural} from {hexlit(start)}.")
        first_block = False
        for k, n in enumerate(names):
            out.extend(const_line(f"pub const PMC_EV_{cls}_{n}: u32", hexlit(start + k)))

    w("")
    w("/// First and last event code of a class (or of a CPU model's subset).")
    for name, v in model["firstlast"]:
        out.extend(const_line(f"pub const {name}: u32", hexlit(v)))
    if model["dangling"]:
        w("// Omitted because the header defines them in terms of names that")
        w("// do not exist: " + ", ".join(model["dangling"]) + ".")

    docs = {
        "PMC_EV_DYN_COUNT": "Number of dynamically allocated (software) event codes.",
        "PMC_EV_SOFT_FIRST": "First software event code.",
        "PMC_EV_SOFT_LAST": "Last software event code.",
        "PMC_EVENT_FIRST": "Lowest event code of any kind.",
        "PMC_EVENT_LAST": "Highest event code of any kind.",
    }
    for name, v in model["misc"]:
        w("")
        w(f"/// {docs[name]}")
        out.extend(const_line(f"pub const {name}: u32", hexlit(v)))

    w("")
    w("/// One class's contiguous block of event codes.")
    w("#[derive(Debug, Clone, Copy, PartialEq, Eq)]")
    w("pub struct PmcEventBlock {")
    w("    /// The class suffix used in the C names (`K8`, `IAF`, ...).")
    w("    pub class: &'static str,")
    w("    /// Code of the first event of the block.")
    w("    pub first: u32,")
    w("    /// Event names in code order, without the `PMC_EV_<CLASS>_` prefix.")
    w("    pub names: &'static [&'static str],")
    w("}")
    w("")
    w("/// All static event blocks, in ascending code order.")
    w("pub const PMC_EVENT_BLOCKS: &[PmcEventBlock] = &[")
    for cls, start, names in blocks:
        w("    PmcEventBlock {")
        w(f"        class: {rs_str(cls)},")
        w(f"        first: {hexlit(start)},")
        out.extend(array_lines("names: &", [rs_str(n) for n in names], ",", 8))
        w("    },")
    w("];")

    w("")
    w("/// Every static event as (C name, code), in ascending code order.")
    # The table is a const on purpose (usable in const contexts for ABI
    # checks); clippy's default lint would rather see a static.
    w("#[allow(clippy::large_const_arrays)]")
    w(f"pub const PMC_EVENT_CODES: [(&str, u32); {len(events)}] = [")
    for name, code in events.items():
        out.extend(item_lines((rs_str(name), hexlit(code)), 4, ","))
    w("];")

    for name, entries in model["aliases"]:
        w("")
        w(f"/// Entries of `__{name}()`: (alias, event code).")
        items = [(rs_str(a), t) for a, t in entries]
        out.extend(array_lines(f"pub const {name}: &[(&str, u32)] = &", items, ";", 0))

    out.append(TEMPLATE)
    return "\n".join(out)


# Hand-written helpers and tests, appended verbatim.
TEMPLATE = r"""
/// Class and name of a static event code, e.g. `("IAF", "INSTR_RETIRED_ANY")`.
#[must_use]
pub fn event_name(code: u32) -> Option<(&'static str, &'static str)> {
    PMC_EVENT_BLOCKS.iter().find_map(|b| {
        let idx = code.checked_sub(b.first)? as usize;
        b.names.get(idx).map(|n| (b.class, *n))
    })
}

/// Code of the static event `PMC_EV_<class>_<name>` (exact match).
#[must_use]
pub fn event_code(class: &str, name: &str) -> Option<u32> {
    let b = PMC_EVENT_BLOCKS.iter().find(|b| b.class == class)?;
    let idx = b.names.iter().position(|n| *n == name)?;
    b.first.checked_add(u32::try_from(idx).ok()?)
}

/// Whether `code` lies in the dynamically allocated software event range.
#[must_use]
pub const fn is_soft_event(code: u32) -> bool {
    code >= PMC_EV_SOFT_FIRST && code <= PMC_EV_SOFT_LAST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes() {
        assert_eq!(PMC_EV_TSC_TSC, 0x1000);
        assert_eq!(PMC_EV_IAF_INSTR_RETIRED_ANY, 0x10000);
        assert_eq!(PMC_EV_IAF_CPU_CLK_UNHALTED_REF, 0x10002);
        assert_eq!(PMC_EV_K8_FIRST, 0x2080);
        assert_eq!(PMC_EV_K8_FP_DISPATCHED_FPU_OPS, 0x2080);
        assert_eq!(event_code("K8", "FP_DISPATCHED_FPU_OPS"), Some(0x2080));
        assert_eq!(PMC_EV_ARMV7_FIRST, 0x14000);
        assert_eq!(PMC_EV_ARMV7_LAST, 0x140FF);
        assert_eq!(PMC_EV_ARMV7_EVENT_00H, 0x14000);
        assert_eq!(PMC_EV_SOFT_LAST, 0x20FFF);
        assert_eq!(PMC_EVENT_FIRST, PMC_EV_TSC_TSC);
        assert_eq!(PMC_EVENT_LAST, PMC_EV_SOFT_LAST);
    }

    #[test]
    fn name_code_round_trip() {
        for (full, code) in PMC_EVENT_CODES {
            let (class, name) = event_name(code).expect(full);
            let rest = full
                .strip_prefix("PMC_EV_")
                .and_then(|r| r.strip_prefix(class));
            assert_eq!(rest.and_then(|r| r.strip_prefix('_')), Some(name), "{full}");
            assert_eq!(event_code(class, name), Some(code), "{full}");
        }
    }

    #[test]
    fn codes_unique() {
        // Codes are listed in ascending order, so strictly increasing means
        // unique.
        for w in PMC_EVENT_CODES.windows(2) {
            assert!(w[0].1 < w[1].1, "{} / {}", w[0].0, w[1].0);
        }
        let total: usize = PMC_EVENT_BLOCKS.iter().map(|b| b.names.len()).sum();
        assert_eq!(total, PMC_EVENT_CODES.len());
    }

    #[test]
    fn blocks_do_not_overlap() {
        for w in PMC_EVENT_BLOCKS.windows(2) {
            let end = w[0].first + w[0].names.len() as u32;
            assert!(end <= w[1].first, "{}", w[0].class);
        }
        let last = PMC_EVENT_BLOCKS.last().unwrap();
        assert!(last.first + last.names.len() as u32 <= PMC_EV_SOFT_FIRST);
    }

    #[test]
    fn soft_range() {
        assert!(is_soft_event(PMC_EV_SOFT_FIRST));
        assert!(is_soft_event(PMC_EV_SOFT_FIRST + PMC_EV_DYN_COUNT - 1));
        assert!(!is_soft_event(PMC_EV_SOFT_FIRST - 1));
        assert!(!is_soft_event(PMC_EV_SOFT_LAST + 1));
        assert_eq!(event_name(PMC_EV_SOFT_FIRST), None);
        assert_eq!(event_name(0), None);
    }

    #[test]
    fn aliases_resolve() {
        assert_eq!(PMC_EV_ALIAS_TSC, &[("cycles", PMC_EV_TSC_TSC)]);
        for (alias, code) in PMC_EV_ALIAS_ARMV8_CORTEX_A76 {
            assert!(event_name(*code).is_some(), "{alias}");
        }
    }
}
"""


# ---------------------------------------------------------------------------


def default_header():
    try:
        import ziglang  # noqa: F401 -- only used to locate its data files

        base = os.path.dirname(ziglang.__file__)
    except ImportError:
        # This interpreter may lack it while the one on PATH has it.
        r = subprocess.run(
            ["python3", "-c", "import ziglang,os;print(os.path.dirname(ziglang.__file__))"],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            fail("cannot locate the ziglang package; pass the header path explicitly")
        base = r.stdout.strip()
    return os.path.join(base, HEADER_REL)


def main(argv):
    if len(argv) > 3 or (len(argv) > 1 and argv[1] in ("-h", "--help")):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    header = argv[1] if len(argv) > 1 else default_header()
    output = argv[2] if len(argv) > 2 else os.path.join(root, OUTPUT_REL)
    with open(header, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        fail(f"{header}: not ASCII")
    model = interpret(text)
    rust = emit(model, raw)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", newline="\n") as f:
        f.write(rust)
    n = len(model["events"])
    print(f"{output}: {n} events in {len(model['blocks'])} blocks, "
          f"{len(model['aliases'])} alias tables", file=sys.stderr)
    for name in model["dangling"]:
        print(f"note: omitted dangling define {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (GenError, OSError) as e:
        print(f"gen-pmc-events: error: {e}", file=sys.stderr)
        sys.exit(1)
