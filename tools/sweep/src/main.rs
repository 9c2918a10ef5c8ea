fn main() -> std::process::ExitCode {
    cli_common::run_main::<sweep::Cli>(sweep::run)
}
