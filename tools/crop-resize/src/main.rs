fn main() -> std::process::ExitCode {
    cli_common::run_main::<crop_resize::Cli>(crop_resize::run)
}
