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
# Cargo runs its subcommands (cargo-clippy, cargo-fmt) from $CARGO_HOME/bin
# ahead of PATH when that directory is not in PATH (as in .ci/run, which
# takes rustup out of PATH), so rustup's proxies there would lint and
# format with rustup's toolchain, not Debian's. Where that directory has
# any, cargo gets a home of its own under target/, without bin/, that
# shares the real home's downloads and configuration.
_pmc_home=${CARGO_HOME:-$HOME/.cargo}
if [ -e "$_pmc_home/bin/rustup" ] || [ -e "$_pmc_home/bin/cargo-clippy" ] ||
	[ -e "$_pmc_home/bin/cargo-fmt" ]; then
	mkdir -p "$_pmc_home/registry" "$_pmc_home/git" "$_pmc_top/target/cargo-home"
	for _pmc_f in registry git config.toml config credentials.toml credentials; do
		if [ -e "$_pmc_home/$_pmc_f" ] && [ ! -e "$_pmc_top/target/cargo-home/$_pmc_f" ]; then
			ln -s "$_pmc_home/$_pmc_f" "$_pmc_top/target/cargo-home/$_pmc_f"
		fi
	done
	CARGO_HOME=$_pmc_top/target/cargo-home
	export CARGO_HOME
	unset _pmc_f
fi
unset _pmc_top _pmc_home
