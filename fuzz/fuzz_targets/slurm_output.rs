//! What the sweep's Slurm launcher reads of Slurm's commands: srun's own messages (a step's
//! failure), squeue's step lines (a step's id by its exact name) and job state, scontrol's job
//! (GPUs per node) and SLURM_JOB_CPUS_PER_NODE; any text gives an answer or none, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sweep_engine::launcher::fuzz_slurm_output(&String::from_utf8_lossy(data));
});
