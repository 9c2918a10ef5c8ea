fn main() -> std::process::ExitCode {
    cli_common::run_main::<classify::Cli>(classify::run)
}
