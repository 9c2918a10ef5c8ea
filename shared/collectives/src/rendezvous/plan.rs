//! Resolving a [`Plan`] from the flags and the launcher's environment (pure, so it is unit
//! tested).

use super::{DEFAULT_PORT, InitMethod, Options, Plan, StoreAt};
use crate::{Error, Result};

impl Options {
    /// Resolves against this process's environment.
    pub fn plan(&self) -> Result<Plan> {
        self.plan_with(&|k| std::env::var(k).ok())
    }

    /// Resolves against `env` (a lookup, so tests need no process environment).
    ///
    /// Kept in one piece: the launchers' variables in their order of precedence (flags, torchrun,
    /// Slurm, defaults), which is what a reader checks against the documentation; split, that
    /// order would be spread over functions.
    pub fn plan_with(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Plan> {
        let num = |k: &str| -> Result<Option<usize>> {
            env(k)
                .map(|v| {
                    v.trim()
                        .parse()
                        .map_err(|_| Error::Usage(format!("{k}={v} is not a number")))
                })
                .transpose()
        };
        let torchrun = env("RANK").is_some() || env("TORCHELASTIC_RUN_ID").is_some();
        let slurm = !torchrun && env("SLURM_PROCID").is_some();
        let launcher = if torchrun {
            "torchrun/env"
        } else if slurm {
            "slurm"
        } else {
            "flags"
        };
        // A batch script (sbatch) has SLURM_PROCID=0 and the job's SLURM_NTASKS, but it is one
        // process, not the job's tasks: only srun starts those (each with its step's
        // SLURM_STEP_ID; the batch step's id is 0xfffffffb where Slurm sets one). Waiting for
        // ranks that never come would take the whole timeout.
        let batch_step = env("SLURM_STEP_ID").is_none_or(|s| s.trim() == "4294967291");
        let step = if batch_step {
            None
        } else {
            num("SLURM_STEP_ID")?
        };
        if slurm && batch_step && self.rank.is_none() && self.world_size.is_none() {
            let ntasks = num("SLURM_NTASKS")?.unwrap_or(1);
            if ntasks > 1 {
                return Err(Error::Usage(format!(
                    "this is the job's batch script (no SLURM_STEP_ID), not one of its \
                     SLURM_NTASKS={ntasks} tasks: launch the ranks with srun (`srun` in front of this command), \
                     or pass --world-size 1 to run one process here"
                )));
            }
        }
        let rank = match self.rank {
            Some(r) => Some(r),
            None if slurm => num("SLURM_PROCID")?,
            None => num("RANK")?,
        };
        let world_size = match self.world_size {
            Some(w) => Some(w),
            None if slurm => num("SLURM_NTASKS")?,
            None => num("WORLD_SIZE")?,
        };
        let local_rank = if slurm {
            num("SLURM_LOCALID")?
        } else {
            num("LOCAL_RANK")?
        };
        let world_size = world_size.unwrap_or(1);
        let rank = match rank {
            Some(r) => r,
            None if world_size == 1 => 0,
            None => {
                return Err(Error::Usage(format!(
                    "world size {world_size} but no rank: pass --rank or set RANK"
                )));
            }
        };
        if world_size == 0 || rank >= world_size {
            return Err(Error::Usage(format!(
                "rank {rank} is outside a world of {world_size}"
            )));
        }
        let agent = env("TORCHELASTIC_USE_AGENT_STORE")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("SHARDKIT_AGENT_STORE").is_some_and(|v| v == "1");
        let store = match &self.init_method {
            InitMethod::File(p) => StoreAt::File(p.clone()),
            method => {
                let (host, port, port_from) = match method {
                    InitMethod::Tcp { host, port } => (host.clone(), *port, "the tcp:// address"),
                    _ => {
                        let host = self.master_addr.clone().or_else(|| env("MASTER_ADDR"));
                        let host = host.or_else(|| {
                            if slurm {
                                // The step's first node runs its task 0: a step on a part of
                                // the job's nodes (srun --exact -N2 in a 4-node job, a sweep's
                                // trial) does not start on the job's first node.
                                first_host(
                                    &env("SLURM_STEP_NODELIST")
                                        .or_else(|| env("SLURM_JOB_NODELIST"))
                                        .or_else(|| env("SLURM_NODELIST"))?,
                                )
                            } else {
                                None
                            }
                        });
                        let (port, port_from) = match (self.master_port, env("MASTER_PORT")) {
                            (Some(p), _) => (p, "--master-port"),
                            (None, Some(p)) => (
                                p.trim().parse().map_err(|_| {
                                    Error::Usage(format!("MASTER_PORT={p} is not a port"))
                                })?,
                                "MASTER_PORT",
                            ),
                            (None, None) => match num("SLURM_JOB_ID")? {
                                // Two steps of one job (two sruns at once) get two ports.
                                Some(id) if slurm => (
                                    20000 + ((id + 1009 * step.unwrap_or(0)) % 20000) as u16,
                                    "SLURM_JOB_ID and SLURM_STEP_ID (20000 + (job + 1009 step) mod 20000)",
                                ),
                                _ => (DEFAULT_PORT, "the default"),
                            },
                        };
                        (
                            host.unwrap_or_else(|| "127.0.0.1".to_string()),
                            port,
                            port_from,
                        )
                    }
                };
                StoreAt::Tcp {
                    host,
                    port,
                    serve: rank == 0 && !agent,
                    port_from,
                }
            }
        };
        let prefix = match (agent, env("TORCHELASTIC_RUN_ID")) {
            (true, Some(id)) => format!(
                "shardkit/{id}/{}/",
                env("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".to_string())
            ),
            _ => "shardkit/".to_string(),
        };
        // The run's identity whichever variables name the rank: a job script that exports
        // RANK/WORLD_SIZE under Slurm is still its job's step (torchrun's default rendezvous id
        // is the word "none", which names no run).
        let run_id = self.run_id.clone().or_else(|| {
            env("TORCHELASTIC_RUN_ID")
                .filter(|id| id.trim() != "none")
                .or_else(|| {
                    Some(format!(
                        "slurm:{}.{}",
                        env("SLURM_JOB_ID")?.trim(),
                        step.map_or("batch".to_string(), |s| s.to_string())
                    ))
                })
        });
        Ok(Plan {
            run_id,
            rank,
            world_size,
            local_rank,
            store,
            prefix,
            launcher,
        })
    }
}

/// The first host name of a Slurm node list: `gpu[03-04,07],cpu1` → `gpu03`.
pub fn first_host(nodelist: &str) -> Option<String> {
    let nodelist = nodelist.trim();
    let end = nodelist.find([',', '[']).unwrap_or(nodelist.len());
    let prefix = &nodelist[..end];
    if nodelist[end..].starts_with('[') {
        let inner = &nodelist[end + 1..];
        let first = inner.split([',', '-', ']']).next()?;
        Some(format!("{prefix}{first}"))
    } else if prefix.is_empty() {
        None
    } else {
        Some(prefix.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan(opts: &Options, vars: &[(&str, &str)]) -> Result<Plan> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        opts.plan_with(&|k| m.get(k).cloned())
    }

    #[test]
    fn init_methods_parse() {
        assert_eq!("env://".parse::<InitMethod>().unwrap(), InitMethod::Env);
        assert_eq!(
            "tcp://node1:1234".parse::<InitMethod>().unwrap(),
            InitMethod::Tcp {
                host: "node1".into(),
                port: 1234
            }
        );
        assert_eq!(
            "file:///tmp/x".parse::<InitMethod>().unwrap(),
            InitMethod::File("/tmp/x".into())
        );
        for bad in ["tcp://node1", "tcp://h:notaport", "file://", "nccl://x"] {
            assert!(bad.parse::<InitMethod>().is_err(), "{bad}");
        }
    }

    #[test]
    fn torchrun_env_joins_the_agent_store_on_every_rank() {
        let vars = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert_eq!((p.rank, p.world_size, p.local_rank), (0, 2, Some(0)));
        assert_eq!(
            p.store,
            StoreAt::Tcp {
                host: "10.0.0.1".into(),
                port: 29400,
                serve: false,
                port_from: "MASTER_PORT"
            }
        );
        assert_eq!(p.prefix, "shardkit/abc/1/");
    }

    #[test]
    fn plain_env_makes_rank_0_serve_and_flags_override() {
        let vars = [
            ("RANK", "1"),
            ("WORLD_SIZE", "3"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "5000"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert!(matches!(
            p.store,
            StoreAt::Tcp {
                serve: false,
                port: 5000,
                ..
            }
        ));
        let opts = Options {
            rank: Some(0),
            master_port: Some(6000),
            ..Options::default()
        };
        let p = plan(&opts, &vars).unwrap();
        assert_eq!(
            p.store,
            StoreAt::Tcp {
                host: "h".into(),
                port: 6000,
                serve: true,
                port_from: "--master-port"
            }
        );
    }

    #[test]
    fn slurm_env_gives_rank_world_master_host_and_a_per_job_port() {
        let vars = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_NODELIST", "gpu[03-04,07]"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "0"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert_eq!(
            (p.rank, p.world_size, p.local_rank, p.launcher),
            (5, 8, Some(1), "slurm")
        );
        assert!(
            matches!(&p.store, StoreAt::Tcp { host, port: 23456, serve: false, .. } if host == "gpu03")
        );
        assert_eq!(p.run_id.as_deref(), Some("slurm:123456.0"));
    }

    #[test]
    fn a_step_on_part_of_the_jobs_nodes_meets_on_its_own_first_node() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "gpu[03-04,07]"),
            ("SLURM_STEP_NODELIST", "gpu[04,07]"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "3"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert!(
            matches!(&p.store, StoreAt::Tcp { host, serve: true, .. } if host == "gpu04"),
            "{:?}",
            p.store
        );
    }

    #[test]
    fn runs_have_an_identity_and_slurm_steps_their_own_ports() {
        let slurm = |step: &'static str| {
            vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", "123456"),
                ("SLURM_STEP_ID", step),
            ]
        };
        let p = plan(&Options::default(), &slurm("2")).unwrap();
        assert!(
            matches!(p.store, StoreAt::Tcp { port: 25474, .. }),
            "{:?}",
            p.store
        );
        assert_eq!(p.run_id.as_deref(), Some("slurm:123456.2"));
        let torchrun = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "job-7"),
        ];
        assert_eq!(
            plan(&Options::default(), &torchrun)
                .unwrap()
                .run_id
                .as_deref(),
            Some("job-7")
        );
        let flag = Options {
            run_id: Some("mine".into()),
            ..Options::default()
        };
        assert_eq!(
            plan(&flag, &slurm("0")).unwrap().run_id.as_deref(),
            Some("mine")
        );
        assert_eq!(plan(&Options::default(), &[]).unwrap().run_id, None);
    }

    #[test]
    fn a_slurm_job_that_exports_rank_and_world_size_keeps_its_job_as_its_run() {
        // `export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS` in the script srun starts: two
        // jobs on one MASTER_PORT must not take each other's ranks.
        let job = |id: &'static str| {
            vec![
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", id),
                ("SLURM_STEP_ID", "0"),
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_PORT", "29500"),
            ]
        };
        let (a, b) = (
            plan(&Options::default(), &job("100")).unwrap(),
            plan(&Options::default(), &job("200")).unwrap(),
        );
        assert_eq!(a.run_id.as_deref(), Some("slurm:100.0"));
        assert_eq!(b.run_id.as_deref(), Some("slurm:200.0"));
        // torchrun's default id names no run: the job does.
        let mut torchrun = job("300");
        torchrun.push(("TORCHELASTIC_RUN_ID", "none"));
        assert_eq!(
            plan(&Options::default(), &torchrun)
                .unwrap()
                .run_id
                .as_deref(),
            Some("slurm:300.0")
        );
    }

    #[test]
    fn a_batch_script_of_several_tasks_is_told_to_use_srun_at_once() {
        let batch = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "node1"),
            ("SLURM_JOB_ID", "77"),
        ];
        for step in [None, Some("4294967291")] {
            let mut vars = batch.to_vec();
            vars.extend(step.map(|s| ("SLURM_STEP_ID", s)));
            let e = plan(&Options::default(), &vars).unwrap_err().to_string();
            assert!(e.contains("launch the ranks with srun"), "{e}");
        }
        // One task, an srun step, or ranks given by flags: no complaint.
        let one = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")];
        assert_eq!(plan(&Options::default(), &one).unwrap().world_size, 1);
        let mut step = batch.to_vec();
        step.push(("SLURM_STEP_ID", "0"));
        assert_eq!(plan(&Options::default(), &step).unwrap().world_size, 2);
        let flags = Options {
            world_size: Some(1),
            ..Options::default()
        };
        assert_eq!(plan(&flags, &batch).unwrap().world_size, 1);
    }

    #[test]
    fn missing_or_bad_ranks_are_usage_errors() {
        assert!(plan(&Options::default(), &[("WORLD_SIZE", "2")]).is_err());
        assert!(plan(&Options::default(), &[("RANK", "2"), ("WORLD_SIZE", "2")]).is_err());
        assert!(plan(&Options::default(), &[("RANK", "x"), ("WORLD_SIZE", "2")]).is_err());
        let p = plan(&Options::default(), &[]).unwrap();
        assert_eq!((p.rank, p.world_size), (0, 1));
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_host("gpu[03-04,07],cpu1").as_deref(), Some("gpu03"));
        assert_eq!(first_host("node7").as_deref(), Some("node7"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("").as_deref(), None);
    }
}
