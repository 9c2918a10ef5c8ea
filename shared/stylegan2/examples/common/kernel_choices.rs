//! What the benchmarks share (stylegan2's `bench` and projector's `bench_project` include this
//! file): library warnings on stderr, and `KERNEL_CHOICES` set as project-one-gpu's
//! `--kernel-choices` sets them (a bad value exits 2).

pub fn set_up(name: &str) {
    cli_common::logger::install(name, false);
    if let Ok(v) = std::env::var("KERNEL_CHOICES") {
        match v.parse() {
            Ok(c) => stylegan2::tune::set_kernel_choices(c),
            Err(e) => {
                eprintln!("KERNEL_CHOICES: {e}");
                std::process::exit(2);
            }
        }
    }
}
