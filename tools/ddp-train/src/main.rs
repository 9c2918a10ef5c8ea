fn main() -> std::process::ExitCode {
    cli_common::run_main::<ddp_train::Cli>(ddp_train::run)
}
