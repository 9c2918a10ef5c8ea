fn main() -> std::process::ExitCode {
    cli_common::run_main::<pack::Cli>(pack::run)
}
