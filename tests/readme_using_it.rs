//! The README's "Using it" section calls the tool bare (`uroce perf ...`), so it must say how
//! to get `uroce` (issue 12, point 7): `cargo install --path .` (which installs the package's
//! `uroce` binary into `~/.cargo/bin`) or the built `target/release/uroce`.

#[test]
fn using_it_says_where_uroce_comes_from() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme.find("\n## Using it\n").expect("a \"Using it\" section");
    let rest = &readme[start + 1..];
    let section = &rest[..rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3)];
    assert!(section.contains("\nuroce "), "the section runs `uroce` bare:\n{section}");
    for needed in ["cargo install --path .", "~/.cargo/bin", "target/release/uroce"] {
        assert!(section.contains(needed), "the section does not say {needed:?}:\n{section}");
    }
    // What it promises is true: the binary this package builds (and installs) is `uroce`, and
    // `cargo build --release` puts it at target/release/uroce.
    assert!(env!("CARGO_BIN_EXE_uroce").ends_with("/uroce"));
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"uroce\"") && manifest.contains("default-run = \"uroce\""));
}
