# shellcheck shell=bash
# Sourced by tools/test and tools/demo: runs tools/setup, then puts the
# Python environment it made and Debian's Rust toolchain (/usr/bin) first
# in PATH, so that every cargo, rustc, rustfmt, clippy and python3 of the
# tests is the one tools/setup installed, whatever else the machine has
# (a rustup toolchain in ~/.cargo/bin is not used).
_pmc_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$_pmc_top/tools/setup"
PATH="$_pmc_top/target/venv/bin:/usr/bin:$PATH"
export PATH
unset _pmc_top
