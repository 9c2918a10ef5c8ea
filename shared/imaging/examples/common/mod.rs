//! What the rate examples share: their `FIRST ROUNDS FILE...` arguments, the files read into
//! memory before any timing.

/// The arguments after the example's name and flags: the first (the example's own), the number
/// of rounds, the files' paths and their bytes; `usage` and exit 2 where they do not fit.
pub struct Args {
    pub first: String,
    pub rounds: usize,
    pub paths: Vec<String>,
    pub files: Vec<Vec<u8>>,
}

impl Args {
    pub fn parse(args: &[String], usage: &str) -> Self {
        let [first, rounds, paths @ ..] = args else {
            eprintln!("usage: {usage}");
            std::process::exit(2);
        };
        let files = paths
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}")))
            .collect();
        Args {
            first: first.clone(),
            rounds: rounds.parse().expect("ROUNDS is a number"),
            paths: paths.to_vec(),
            files,
        }
    }
}
