//! The memory allocator's settings: which ones poolguard starts with (the binary restarts itself
//! with them, see `main.rs`) and what is in force, for the start-up log.

/// mimalloc's settings, read from the environment when the process starts: commit arena memory
/// as it is used and give freed pages back at once. With mimalloc's defaults a busy server held
/// about twice the resident memory of the C library's allocator (61 against 33 MiB after 8 s of
/// all-distinct /validate load, 10,000 namespaces), half of the chart's 128 MiB limit; with
/// these and `no_thp` it holds what the C library's does.
pub const SETTINGS: [(&str, &str); 2] = [
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
    ("MIMALLOC_PURGE_DELAY", "0"),
];

/// Whether the environment sets any of mimalloc's settings (then the operator's choice stands).
pub fn set_by_environment() -> bool {
    std::env::vars_os().any(|(name, _)| name.to_string_lossy().starts_with("MIMALLOC_"))
}

/// The allocator and the settings in force, in one line: `mimalloc 3.3.2, MIMALLOC_X=…`
/// (mimalloc's defaults for those not set).
pub fn in_force() -> String {
    let mut line = format!("mimalloc {}", version_text(mimalloc::MiMalloc.version()));
    let mut set: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| name.starts_with("MIMALLOC_"))
        .collect();
    set.sort();
    if set.is_empty() {
        line.push_str(", mimalloc's defaults");
    }
    for (name, value) in set {
        line.push_str(&format!(", {name}={value}"));
    }
    line
}

/// mimalloc's version number as text: the major version, then two digits each of minor and
/// patch (30302 is 3.3.2; mimalloc 1 used one digit each, 186 for 1.8.6).
fn version_text(version: u32) -> String {
    if version < 1000 {
        format!("{}.{}.{}", version / 100, version / 10 % 10, version % 10)
    } else {
        format!(
            "{}.{}.{}",
            version / 10000,
            version / 100 % 100,
            version % 100
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_numbers_read_as_mimalloc_writes_them() {
        assert_eq!(super::version_text(30302), "3.3.2");
        assert_eq!(super::version_text(20117), "2.1.17");
        assert_eq!(super::version_text(186), "1.8.6");
    }

    #[test]
    fn the_line_names_mimalloc_and_its_version() {
        let line = super::in_force();
        assert!(line.starts_with("mimalloc "), "{line}");
        let version = line["mimalloc ".len()..].split(',').next().unwrap();
        assert_eq!(version.split('.').count(), 3, "{line}");
        assert_ne!(version, "0.0.0", "{line}");
    }
}
