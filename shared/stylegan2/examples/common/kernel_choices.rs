//! What the benchmarks share (stylegan2's `bench` and projector's `bench_project` include this
//! file): library warnings on stderr, and the kernel choices `KERNEL_CHOICES` asks for, as
//! project-one-gpu's `--kernel-choices` (a bad value exits 2).

pub fn set_up(name: &str) -> stylegan2::tune::KernelChoices {
    cli_common::logger::install(name, false);
    match std::env::var("KERNEL_CHOICES").map(|v| v.parse()) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            eprintln!("KERNEL_CHOICES: {e}");
            std::process::exit(2);
        }
        Err(_) => Default::default(),
    }
}
