//! man/ is generated from the clap definitions by scripts/gen-man.sh; this fails when it is stale.

use std::process::Command;

/// What `tool args...` prints on stdout; it must succeed.
fn stdout_of(tool: &str, args: &[&str]) -> String {
    let out = Command::new(testkit::bin(tool))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool} {} failed", args.join(" "));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn man_pages_are_up_to_date() {
    let man = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    for tool in testkit::TOOLS {
        let page = stdout_of(tool, &["--generate", "man"]);
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH \"OUTPUT RECORDS\"",
            ".SH \"EXIT STATUS\"",
            ".SH EXAMPLES",
        ] {
            assert!(page.contains(section), "{tool}: no {section}");
        }
        let committed = std::fs::read_to_string(man.join(format!("{tool}.1"))).unwrap_or_default();
        assert!(
            committed == page,
            "man/{tool}.1 is stale: run scripts/gen-man.sh"
        );
    }
}

#[test]
fn help_has_synopsis_records_exit_status_and_examples() {
    for tool in testkit::TOOLS {
        let help = stdout_of(tool, &["--help"]);
        for section in [
            "Usage: ",
            "\nRecords:\n",
            "\nExit status:\n  0    Success.",
            "\nExamples:\n",
        ] {
            assert!(help.contains(section), "{tool} --help: no {section:?}");
        }
        let examples = help.split("\nExamples:\n").nth(1).unwrap();
        assert!(
            examples.matches("\n    $ ").count() + usize::from(examples.starts_with("    $ ")) >= 2,
            "{tool}: fewer than two examples"
        );
        // The one-line summary opens the help once (a doc comment that lost its blank line
        // runs into the next paragraph).
        let summary = help.split("\n\n").next().unwrap();
        assert!(
            help.split("\n\n").skip(1).all(|p| p != summary) && !summary.contains(". "),
            "{tool} --help: its summary is not one sentence on its own: {summary:?}"
        );
        // Plain text: no roff left over.
        assert!(
            !help.contains("\\-") && !help.contains("\n.PP") && !help.contains("\\&"),
            "{tool} --help has roff in it"
        );
        // Every example that runs project-one-gpu gives it the required --vgg.
        for line in examples
            .lines()
            .filter(|l| l.starts_with("    $ ") && l.contains("project-one-gpu "))
        {
            assert!(
                line.contains("--vgg"),
                "{tool}: example without --vgg: {line}"
            );
        }
    }
}
