//! The searcher and the scheduler: the configs trials get (made up front, or suggested by TPE
//! or BOHB as trials start) and the scheduler that judges their results. Nothing here runs a
//! process or writes a file.

use super::*;

/// The sweep's search and scheduler.
pub(super) struct Searcher {
    pub(super) scheduler: Scheduler,
    /// TPE's view of the space and its sampler (--search tpe).
    tpe: Option<(TpeSpace, Tpe)>,
    /// BOHB's config generator (--search bohb).
    bohb: Option<Bohb>,
    /// Trials made so far (the scheduler knows them): all but BOHB's at the start.
    pub(super) made: usize,
    mode: search::asha::Mode,
}

/// The scheduler of a sweep's definition (its space parsed).
fn scheduler_of(def: &Definition, space: &Space) -> Result<Scheduler> {
    Ok(match def.scheduler {
        SchedulerKind::Asha => Scheduler::Asha(Box::new(Asha::new(def.asha, def.seed)?)),
        SchedulerKind::Fifo => Scheduler::Fifo {
            max_t: def.asha.max_t,
        },
        SchedulerKind::Hyperband => {
            let s = HyperBandSettings {
                max_t: def.asha.max_t,
                reduction_factor: def.asha.reduction_factor,
                mode: def.asha.mode,
            };
            let h = match def.search {
                SearchKind::Bohb => HyperBand::for_bohb(s)?,
                _ => HyperBand::new(s)?,
            };
            Scheduler::HyperBand(Box::new(h))
        }
        SchedulerKind::Pbt => Scheduler::Pbt {
            pbt: Box::new(Pbt::new(
                def.pbt
                    .context("a pbt sweep's journal without its settings")?,
                pbt::mutations(space),
                def.seed,
            )?),
            max_t: def.asha.max_t,
        },
        SchedulerKind::Median => Scheduler::Median {
            rule: Box::new(Median::new(
                def.median
                    .context("a median sweep's journal without its settings")?,
            )),
            max_t: def.asha.max_t,
        },
    })
}

impl Searcher {
    /// The search and scheduler of `def`, told of the `trials` made up front (all but
    /// BOHB's, which are made one at a time, as Ray makes them).
    pub(super) fn new(def: &Definition, trials: &[Trial]) -> Result<Searcher> {
        let space = Space::parse(&def.space.to_string())?;
        let mut scheduler = scheduler_of(def, &space)?;
        let tpe = match def.search {
            SearchKind::Random | SearchKind::Bohb => None,
            SearchKind::Tpe => {
                let space = space.tpe()?;
                let tpe = Tpe::new(space.dists().to_vec(), def.asha.mode, def.seed);
                Some((space, tpe))
            }
        };
        let bohb = match def.search {
            SearchKind::Bohb => Some(Bohb::new(space.bohb()?, def.seed)),
            _ => None,
        };
        let made = if bohb.is_some() { 0 } else { trials.len() };
        for t in &trials[..made] {
            scheduler.add(t.id, &t.config);
        }
        Ok(Searcher {
            scheduler,
            tpe,
            bohb,
            made,
            mode: def.asha.mode,
        })
    }

    /// Whether trials are made one at a time as the sweep goes (BOHB's).
    pub(super) fn makes_trials(&self) -> bool {
        self.bohb.is_some()
    }

    /// BOHB's trial `i` (the next to make): its config and whether BOHB's model chose it,
    /// checked against the journal's when replayed. The caller journals it and calls
    /// [`Searcher::made`].
    pub(super) fn make(&mut self, i: usize, journalled: Option<&Config>) -> Result<(Config, bool)> {
        let bohb = self
            .bohb
            .as_mut()
            .context("a BOHB trial in a sweep without --search bohb")?;
        if i != self.made {
            return Err(Error::Journal(format!(
                "the journal makes trial {i} where this sweep makes trial {}",
                self.made
            )));
        }
        let (config, model) = bohb.suggest();
        if journalled.is_some_and(|c| *c != config) {
            return Err(Error::Journal(format!(
                "the journal's config for trial {i} differs from this sweep's BOHB suggestion: was it written by another version?"
            )));
        }
        Ok((config, model))
    }

    /// Trial `i` is made with `config`: the scheduler is told.
    pub(super) fn made(&mut self, i: usize, config: &Config) {
        self.scheduler.add(i, config);
        self.made += 1;
    }

    /// TPE's config for trial `i`, from every trial chosen so far: finished ones by their last
    /// metric (an error, no result or a NaN leaves a trial out, as Optuna leaves out failed
    /// trials), the others as running.
    pub(super) fn suggest(&mut self, i: usize, trials: &[Trial]) -> Result<Config> {
        let Some((space, tpe)) = &mut self.tpe else {
            return Err(Error::Journal(format!(
                "trial {i}: a suggestion in a sweep without --search tpe"
            )));
        };
        let mut history = Vec::new();
        for t in trials.iter().filter(|t| t.chosen && t.id != i) {
            let value = match t.status {
                Status::Error => continue,
                Status::Completed | Status::Stopped => match t.last_point() {
                    Some((_, m)) if !m.is_nan() => Some(m),
                    _ => continue,
                },
                Status::Running | Status::Pending | Status::Paused => None,
            };
            let params = space
                .values(&t.config)
                .with_context(|| format!("trial {}'s config is not of this space", t.id))?;
            history.push(Observed { params, value });
        }
        Ok(space.config(&tpe.suggest(&history)))
    }

    /// BOHB's model takes a result of `config` at a milestone (unless the trial stops there):
    /// its loss is the metric, negated when maximised (Ray's TuneBOHB).
    pub(super) fn observe(
        &mut self,
        config: &Config,
        action: Action,
        effects: &Effects,
        metric: f64,
    ) {
        if let (Some(bohb), Some(budget)) = (&mut self.bohb, effects.budget)
            && action != Action::Stop
        {
            let loss = -self.mode.op() * metric;
            bohb.observe(config, budget, loss);
        }
    }
}
