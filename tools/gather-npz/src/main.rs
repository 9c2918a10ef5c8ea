fn main() -> std::process::ExitCode {
    cli_common::run_main::<gather_npz::Cli>(gather_npz::run)
}
