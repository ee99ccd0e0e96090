//! The `PMC_VERSION` of a FreeBSD tree's `sys/sys/pmc.h`.  libpmc sends
//! its own version in PMC_OP_GETMODULEVERSION, and FreeBSD's driver refuses
//! a client newer than itself, so libpmc built in a tree must send that
//! tree's version, as the driver built there reports it.  Shared by the
//! build script and the tests.

/// `PMC_VERSION_MAJOR << 24 | PMC_VERSION_MINOR << 16 | PMC_VERSION_PATCH`
/// from the header's text, or `None` when a part is missing.
pub fn parse(header: &str) -> Option<u32> {
    let part = |name: &str| -> Option<u32> {
        header.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "#define" || words.next()? != name {
                return None;
            }
            let value = words.next()?;
            match value
                .strip_prefix("0x")
                .or_else(|| value.strip_prefix("0X"))
            {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => value.parse().ok(),
            }
        })
    };
    let (major, minor, patch) = (
        part("PMC_VERSION_MAJOR")?,
        part("PMC_VERSION_MINOR")?,
        part("PMC_VERSION_PATCH")?,
    );
    (major <= 0xFF && minor <= 0xFF && patch <= 0xFFFF).then_some(major << 24 | minor << 16 | patch)
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::path::PathBuf;

    #[test]
    fn the_version_is_composed_from_its_three_parts() {
        let main = "#define\tPMC_VERSION_MAJOR\t0x0A\n#define\tPMC_VERSION_MINOR\t0x03\n\
                    #define\tPMC_VERSION_PATCH\t0x0000\n";
        assert_eq!(parse(main), Some(0x0A03_0000));
        assert_eq!(
            parse("#define PMC_VERSION_MAJOR 0x0A\n#define PMC_VERSION_MINOR 0x00\n"),
            None
        );
        let too_big = main.replace("0x03", "0x100");
        assert_eq!(parse(&too_big), None);
    }

    #[test]
    fn freebsd_15_headers_give_15s_version() {
        let explicit = std::env::var_os("FREEBSD_SRC").map(PathBuf::from);
        let tree = explicit.clone().unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/freebsd-15.0")
        });
        let header = tree.join("sys/sys/pmc.h");
        let Ok(text) = std::fs::read_to_string(&header) else {
            assert!(
                explicit.is_none(),
                "FREEBSD_SRC is set, but {} is missing",
                header.display()
            );
            eprintln!("NOT RUN: no FreeBSD tree at {}", tree.display());
            return;
        };
        let version = parse(&text).expect("15.0's pmc.h has the three parts");
        // 15.0 is the tree of record: its pmc.h says __FreeBSD_version 15's ABI 0x0A000000.
        if text.contains("#define\tPMC_VERSION_MINOR\t0x00") {
            assert_eq!(version, 0x0A00_0000);
        }
        assert_eq!(version >> 24, 0x0A);
    }
}
