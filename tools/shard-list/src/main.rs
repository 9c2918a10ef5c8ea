fn main() -> std::process::ExitCode {
    cli_common::run_main::<shard_list::Cli>(shard_list::run)
}
