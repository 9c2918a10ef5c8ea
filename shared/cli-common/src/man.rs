//! Man pages from the clap definitions plus the sections clap does not know about.

use std::fmt::Write as _;

use crate::Tool;

/// roff text of the tool's man page: clap_mangen's NAME, SYNOPSIS, DESCRIPTION, OPTIONS and
/// VERSION, followed by OUTPUT RECORDS, EXIT STATUS and EXAMPLES. No date, so the output is
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
