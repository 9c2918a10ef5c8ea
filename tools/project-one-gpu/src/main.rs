fn main() -> std::process::ExitCode {
    cli_common::run_main::<project_one_gpu::Cli>(project_one_gpu::run)
}
