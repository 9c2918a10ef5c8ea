fn main() -> std::process::ExitCode {
    cli_common::run_main::<all_reduce_check::Cli>(all_reduce_check::run)
}
