//! Man pages from the clap definitions plus the sections clap does not know about.

use std::fmt::Write as _;

use crate::Tool;

/// roff text of the tool's man page: clap_mangen's NAME, SYNOPSIS, DESCRIPTION, OPTIONS and
/// VERSION, followed by OUTPUT RECORDS, EXIT STATUS, ENVIRONMENT (when the tool reads any) and
/// EXAMPLES. No date, so the output is
/// deterministic and `man/` can be checked for staleness.
pub fn render_man<C: Tool>() -> anyhow::Result<String> {
    let cmd = <C as clap::CommandFactory>::command();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf)?;
    let mut page = String::from_utf8(buf)?;
    page.push_str(".SH \"OUTPUT RECORDS\"\n");
    page.push_str(C::RECORDS.trim());
    page.push('\n');
    page.push_str(EXIT_STATUS);
    let env = C::ENVIRONMENT.concat();
    if !env.is_empty() {
        page.push_str(".SH ENVIRONMENT\n");
        for (name, what) in &env {
            let _ = write!(page, ".TP\n\\fB{}\\fR\n{}\n", roff(name), roff(what));
        }
    }
    page.push_str(".SH EXAMPLES\n");
    for (what, cmdline) in C::EXAMPLES {
        let _ = write!(
            page,
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
            roff(what),
            roff(cmdline)
        );
    }
    Ok(page)
}

/// The same three sections as plain text, for the end of `--help`.
pub fn help_tail<C: Tool>() -> String {
    let mut s = String::from("Records:\n");
    let mut literal = false;
    for line in C::RECORDS.trim().lines() {
        match line {
            ".PP" => s.push('\n'),
            ".nf" => literal = true,
            ".fi" => literal = false,
            l => {
                let l = l
                    .replace("\\&", "")
                    .replace("\\-", "-")
                    .replace("\\e", "\\");
                // Records stay on their lines (copyable); prose is wrapped.
                if literal {
                    s.push_str(&format!("  {l}\n"))
                } else {
                    s.push_str(&wrap(&l, "  ", 100))
                }
            }
        }
    }
    s.push_str("\nExit status:\n");
    for pair in EXIT_STATUS
        .lines()
        .skip(1)
        .collect::<Vec<_>>()
        .split(|l| *l == ".TP")
        .filter(|p| !p.is_empty())
    {
        // "  130  Interrupted ...", continuation lines under the description.
        let body = wrap(&pair[1..].join(" "), "       ", 100);
        s.push_str(&format!("  {:<5}{}", pair[0], &body[7..]));
    }
    let env = C::ENVIRONMENT.concat();
    if !env.is_empty() {
        s.push_str("\nEnvironment:\n");
        for (name, what) in &env {
            s.push_str(&format!("  {name}\n"));
            s.push_str(&wrap(what, "      ", 100));
        }
    }
    s.push_str("\nExamples:\n");
    for (what, cmdline) in C::EXAMPLES {
        let _ = writeln!(s, "  {what}\n    $ {cmdline}");
    }
    s
}

/// `text` word-wrapped to `width` columns, each line starting with `indent`.
fn wrap(text: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from(indent);
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = String::from(indent);
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if line.len() > indent.len() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

const EXIT_STATUS: &str = ".SH \"EXIT STATUS\"
.TP
0
Success.
.TP
1
Fatal error: nothing or not everything was done (the message says why).
.TP
2
Usage error.
.TP
3
Finished, but some inputs failed (see the error records) or a check failed.
.TP
130
Interrupted by SIGINT or SIGTERM; finished outputs are complete, unfinished ones were not written.
.TP
141
Stdout was a pipe whose reader went away (`| head`): the run stopped at once, quietly, as a producer killed by SIGPIPE does; outputs it finished are complete.
";

fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e");
    s.lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CommonArgs;

    /// A tool whose page has an ENVIRONMENT section.
    #[derive(clap::Parser)]
    #[command(name = "t")]
    struct WithEnv {
        #[command(flatten)]
        common: CommonArgs,
    }

    impl Tool for WithEnv {
        const RECORDS: &'static str = "none";
        const EXAMPLES: &'static [(&'static str, &'static str)] = &[];
        const ENVIRONMENT: &'static [crate::EnvVars] = &[&[("SOME_VAR", "what it does")]];
    }

    #[test]
    fn environment_is_a_man_section_and_a_help_section() {
        let page = render_man::<WithEnv>().unwrap();
        let at = page
            .find(".SH ENVIRONMENT")
            .expect("an ENVIRONMENT section");
        assert!(
            page[at..].contains("\\fBSOME_VAR\\fR\nwhat it does"),
            "{page}"
        );
        assert!(at < page.find(".SH EXAMPLES").unwrap());
        let help = help_tail::<WithEnv>();
        assert!(
            help.contains("Environment:\n  SOME_VAR\n      what it does"),
            "{help}"
        );
    }
}
