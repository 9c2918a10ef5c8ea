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

/// Checks a tool's command line (its unit test, through [`verify_cli!`](crate::verify_cli)).
/// Release builds skip clap's own checks (`Command::debug_assert` does nothing without debug
/// assertions), so these are made here.
///
/// Panics naming the first problem: an argument without help text (every flag and input is
/// documented: `--help` and the man page are made from it), or a flag name (long, short or
/// alias) that two arguments share. Renders the man page.
pub fn check_cli<C: Tool>() {
    let mut cmd = <C as clap::CommandFactory>::command();
    cmd.build();
    let tool = cmd.get_name().to_string();
    let mut names: std::collections::BTreeMap<String, &str> = Default::default();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let flag = match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => id.to_string(),
        };
        if !arg.is_hide_set() && arg.get_help().is_none() && arg.get_long_help().is_none() {
            panic!("{tool}: {flag} has no help text");
        }
        let longs = arg
            .get_long()
            .into_iter()
            .chain(arg.get_all_aliases().unwrap_or_default());
        let shorts = arg
            .get_short()
            .into_iter()
            .chain(arg.get_all_short_aliases().unwrap_or_default());
        for name in longs
            .map(|l| format!("--{l}"))
            .chain(shorts.map(|s| format!("-{s}")))
        {
            if let Some(first) = names.insert(name.clone(), id) {
                panic!("{tool}: {name} names two arguments ({first}, {id})");
            }
        }
    }
    if let Err(e) = render_man::<C>() {
        panic!("{tool}: its man page cannot be made: {e:#}");
    }
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

    /// A tool with no records or examples of its own.
    macro_rules! bare_tool {
        ($t:ty) => {
            impl Tool for $t {
                const RECORDS: &'static str = "none";
                const EXAMPLES: &'static [(&'static str, &'static str)] = &[];
            }
        };
    }

    #[derive(clap::Parser)]
    #[command(name = "t")]
    struct Undocumented {
        /// Documented.
        #[arg(long)]
        fine: bool,
        #[arg(long)]
        bare: bool,
        #[command(flatten)]
        common: CommonArgs,
    }
    bare_tool!(Undocumented);

    #[test]
    #[should_panic(expected = "t: --bare has no help text")]
    fn an_argument_without_help_fails_the_check() {
        check_cli::<Undocumented>();
    }

    #[derive(clap::Parser)]
    #[command(name = "t")]
    struct TwiceNamed {
        /// One.
        #[arg(long = "same")]
        one: bool,
        /// The other.
        #[arg(long = "same")]
        other: bool,
    }
    bare_tool!(TwiceNamed);

    #[test]
    #[should_panic(expected = "t: --same names two arguments (one, other)")]
    fn a_flag_name_given_twice_fails_the_check() {
        check_cli::<TwiceNamed>();
    }

    #[derive(clap::Parser)]
    #[command(name = "t")]
    struct ShortTwice {
        /// One.
        #[arg(short = 'q', long)]
        one: bool,
        #[command(flatten)]
        common: CommonArgs,
    }
    bare_tool!(ShortTwice);

    #[test]
    #[should_panic(expected = "t: -q names two arguments (one, quiet)")]
    fn a_short_flag_given_twice_fails_the_check() {
        check_cli::<ShortTwice>();
    }

    #[test]
    fn a_documented_command_line_passes_the_check() {
        check_cli::<WithEnv>();
    }
}
