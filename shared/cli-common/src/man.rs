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
        let _ = write!(page, ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n", roff(what), roff(cmdline));
    }
    Ok(page)
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
        .map(|l| if l.starts_with('.') || l.starts_with('\'') { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}
