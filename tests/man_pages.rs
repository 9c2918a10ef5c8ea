//! man/ is generated from the clap definitions by scripts/gen-man.sh; this fails when it is stale.

use std::process::Command;

#[test]
fn man_pages_are_up_to_date() {
    let man = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    for tool in testkit::TOOLS {
        let out = Command::new(testkit::bin(tool)).args(["--generate", "man"]).output().unwrap();
        assert!(out.status.success(), "{tool} --generate man failed");
        let page = String::from_utf8(out.stdout).unwrap();
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH \"OUTPUT RECORDS\"", ".SH \"EXIT STATUS\"", ".SH EXAMPLES"] {
            assert!(page.contains(section), "{tool}: no {section}");
        }
        let committed = std::fs::read_to_string(man.join(format!("{tool}.1"))).unwrap_or_default();
        assert!(committed == page, "man/{tool}.1 is stale: run scripts/gen-man.sh");
    }
}
