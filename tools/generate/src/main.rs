fn main() -> std::process::ExitCode {
    cli_common::run_main::<generate::Cli>(generate::run)
}
