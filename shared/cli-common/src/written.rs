//! A flag's value parsed once by clap, kept with the text it was given as: records, the ranks'
//! flag comparison and TensorBoard's hparams show what the user wrote (`cosine:1`, `layer3`),
//! the code uses the value.

/// A parsed flag value and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Written<T> {
    pub text: String,
    pub value: T,
}

/// A clap value parser: `parse` on the text, the text kept beside its value.
///
/// ```
/// # use cli_common::written::{written, Written};
/// #[derive(clap::Parser)]
/// struct Cli {
///     #[arg(long, default_value = "3", value_parser = written(|s| s.parse::<u8>().map_err(|e| e.to_string())))]
///     n: Written<u8>,
/// }
/// let cli: Cli = clap::Parser::parse_from(["x", "--n", "7"]);
/// assert_eq!((cli.n.text.as_str(), cli.n.value), ("7", 7));
/// ```
pub fn written<T, E>(
    parse: impl Fn(&str) -> Result<T, E> + Clone + Send + Sync + 'static,
) -> impl Fn(&str) -> Result<Written<T>, E> + Clone + Send + Sync + 'static {
    move |s| {
        Ok(Written {
            text: s.to_string(),
            value: parse(s)?,
        })
    }
}
