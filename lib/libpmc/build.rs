//! Gives the shared library FreeBSD's name for it, so programs linked
//! against FreeBSD's libpmc load this one and the other way round.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmc.so.5");
}
