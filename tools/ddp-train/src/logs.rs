//! What rank 0 writes besides its records: TensorBoard event files (`--tensorboard DIR`) and a
//! CSV of the epochs (`--csv FILE`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value};
use tensorboard::{EventWriter, SessionStatus};
use train::trainer::{EpochStats, StepInfo};

/// The CSV's columns, one row per epoch.
const COLUMNS: &[&str] = &[
    "epoch",
    "global_step",
    "train_loss",
    "train_top1",
    "val_loss",
    "val_top1",
    "lr",
    "loss_scale",
    "images_per_s",
    "train_images_per_s",
    "seconds",
    "step_ms",
    "skipped_steps",
    "bad_inputs",
    "best",
    "left_out",
    "val_images",
];

/// The open logs of a run (none on ranks other than 0).
#[derive(Debug, Default)]
pub struct Logs {
    events: Option<EventWriter>,
    csv: Option<EpochCsv>,
}

impl Logs {
    /// Opens `--tensorboard`'s event file, its hparams session holding `flags` (name without
    /// dashes, value), and reads what `--csv` holds already.
    pub fn open(
        tensorboard: Option<&Path>,
        csv: Option<&Path>,
        flags: &[(&str, String)],
    ) -> Result<Logs> {
        let events = match tensorboard {
            Some(dir) => {
                let mut w = EventWriter::create(dir, "ddp-train")?;
                w.session_start(&hparams(flags))?;
                Some(w)
            }
            None => None,
        };
        let csv = csv.map(EpochCsv::open).transpose()?;
        Ok(Logs { events, csv })
    }

    /// A step's figures, where it has them: `step/*` scalars at the run's step.
    pub fn step(&mut self, s: &StepInfo) -> Result<()> {
        let (Some(w), Some(f)) = (&mut self.events, &s.figures) else {
            return Ok(());
        };
        let mut values = vec![
            ("step/loss", f.loss),
            ("step/top1", f.top1),
            ("step/lr", s.lr),
            ("step/images_per_s", f.images_per_s),
            (
                "step/epoch",
                s.epoch as f64 - 1.0 + s.step as f64 / s.steps as f64,
            ),
        ];
        if let Some(scale) = f.loss_scale {
            values.push(("step/loss_scale", scale));
        }
        Ok(w.numbers(s.global_step as i64, values)?)
    }

    /// An epoch's figures: `epoch/*` scalars at the epoch's number, and its CSV row.
    pub fn epoch(&mut self, e: &EpochStats) -> Result<()> {
        if let Some(w) = &mut self.events {
            let mut values = vec![
                ("epoch/train_loss", e.train_loss),
                ("epoch/train_top1", e.train_top1),
                ("epoch/val_loss", e.val_loss),
                ("epoch/val_top1", e.val_top1),
                ("epoch/lr", e.lr),
                ("epoch/images_per_s", e.images_per_s),
                ("epoch/seconds", e.seconds),
            ];
            if let Some(scale) = e.loss_scale {
                values.push(("epoch/loss_scale", scale));
            }
            w.numbers(e.epoch as i64, values)?;
        }
        if let Some(csv) = &mut self.csv {
            csv.push(e)?;
        }
        Ok(())
    }

    /// The run's end in the hparams session (a run stopped to be resumed has none yet).
    pub fn end(&mut self, status: SessionStatus) {
        if let Some(w) = &mut self.events
            && let Err(e) = w.session_end(status)
        {
            eprintln!("ddp-train: warning: {e:#}");
        }
    }
}

/// The hparams session's values: numbers and booleans as such (the dashboard plots them on
/// axes), `Some(x)` as x, the rest as text.
fn hparams(flags: &[(&str, String)]) -> Map<String, Value> {
    flags
        .iter()
        .map(|(name, v)| {
            let v = v
                .strip_prefix("Some(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or(v);
            let value = match v {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "None" => Value::String("(none)".into()),
                _ => match v.parse::<f64>() {
                    Ok(x) if x.is_finite() => serde_json::json!(x),
                    _ => Value::String(v.trim_matches('"').to_string()),
                },
            };
            (name.trim_start_matches('-').to_string(), value)
        })
        .collect()
}

/// `--csv FILE`: a header and a row per epoch, the file rewritten whole after each epoch; rows of
/// epochs before this run's first one (a resumed run) are kept.
#[derive(Debug)]
struct EpochCsv {
    path: PathBuf,
    /// (epoch, line) in order.
    rows: Vec<(usize, String)>,
}

impl EpochCsv {
    fn open(path: &Path) -> Result<EpochCsv> {
        // A regular file only (a FIFO would block the open); a CSV of epochs is small.
        let text = match input_file::read(path, 1 << 30) {
            Ok(t) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).context("reading --csv"),
        };
        let mut lines = text.lines();
        // The columns before left_out and val_images came: their cells stay empty.
        let before = COLUMNS[..COLUMNS.len() - 2].join(",");
        let rows = match lines.next() {
            None => Vec::new(),
            Some(h) if h == COLUMNS.join(",") || h == before => {
                let pad = if h == before { ",," } else { "" };
                (lines.filter_map(|l| {
                    Some((l.split(',').next()?.parse().ok()?, format!("{l}{pad}")))
                }))
                .collect()
            }
            Some(_) => {
                return cli_common::usage(format!(
                    "--csv {} holds something else than ddp-train's epochs (its first line is not \"{}\"): give another file",
                    path.display(),
                    COLUMNS.join(",")
                ));
            }
        };
        Ok(EpochCsv {
            path: path.to_path_buf(),
            rows,
        })
    }

    fn push(&mut self, e: &EpochStats) -> Result<()> {
        let number = |x: f64| x.to_string();
        let row = [
            e.epoch.to_string(),
            (e.epoch * e.steps).to_string(),
            number(e.train_loss),
            number(e.train_top1),
            number(e.val_loss),
            number(e.val_top1),
            number(e.lr),
            e.loss_scale.map(number).unwrap_or_default(),
            number(e.images_per_s),
            number(e.train_images_per_s),
            number(e.seconds),
            number(e.step_seconds * 1e3),
            e.skipped_steps.to_string(),
            e.bad_inputs.to_string(),
            e.best.to_string(),
            e.left_out.to_string(),
            e.val_images.to_string(),
        ]
        .join(",");
        self.rows.retain(|(epoch, _)| *epoch < e.epoch);
        self.rows.push((e.epoch, row));
        let mut text = COLUMNS.join(",");
        text.push('\n');
        for (_, line) in &self.rows {
            text.push_str(line);
            text.push('\n');
        }
        cli_common::atomic::write_atomic(&self.path, |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })
        .map_err(|e| anyhow::anyhow!("--csv: {}", e.describe()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(epoch: usize) -> EpochStats {
        EpochStats {
            epoch,
            train_loss: 1.5,
            train_top1: 40.0,
            val_loss: 1.25,
            val_top1: 50.0,
            images_per_s: 100.0,
            train_images_per_s: 120.0,
            seconds: 2.0,
            step_seconds: 0.01,
            stages: Vec::new(),
            lr: 0.1,
            loss_scale: None,
            steps: 10,
            skipped_steps: 0,
            checkpoint: None,
            best: epoch == 1,
            bad_inputs: 0,
            left_out: 0,
            val_images: 100,
            classes: Vec::new(),
        }
    }

    #[test]
    fn csv_keeps_the_epochs_before_a_resumed_run_and_replaces_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        let mut csv = EpochCsv::open(&path).unwrap();
        for e in 1..=3 {
            csv.push(&stats(e)).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert_eq!(
            text.lines().nth(1).unwrap(),
            "1,10,1.5,40,1.25,50,0.1,,100,120,2,10,0,0,true,0,100"
        );
        // A run resumed after epoch 1 writes epoch 2 again: epochs 2 and 3 of the first run go.
        let mut csv = EpochCsv::open(&path).unwrap();
        csv.push(&stats(2)).unwrap();
        let epochs: Vec<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().to_string())
            .collect();
        assert_eq!(epochs, ["1", "2"]);
        // A file from before left_out and val_images: resumed with those cells empty.
        let old = COLUMNS[..COLUMNS.len() - 2].join(",");
        std::fs::write(
            &path,
            format!("{old}\n1,10,1.5,40,1.25,50,0.1,,100,120,2,10,0,0,true\n"),
        )
        .unwrap();
        let mut csv = EpochCsv::open(&path).unwrap();
        csv.push(&stats(2)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], COLUMNS.join(","));
        assert_eq!(lines[1], "1,10,1.5,40,1.25,50,0.1,,100,120,2,10,0,0,true,,");
        assert_eq!(
            lines[2],
            "2,20,1.5,40,1.25,50,0.1,,100,120,2,10,0,0,false,0,100"
        );
        // A file of something else is not overwritten.
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        let e = EpochCsv::open(&path).unwrap_err();
        assert!(e.is::<cli_common::UsageError>(), "{e:#}");
    }

    #[test]
    fn hparams_are_numbers_booleans_and_text() {
        let h = hparams(&[
            ("--lr", "0.1".into()),
            ("--sync-bn", "false".into()),
            ("--image-size", "Some(224)".into()),
            ("--checkpoint-every", "None".into()),
            ("--model", "resnet18".into()),
        ]);
        assert_eq!(
            Value::Object(h),
            serde_json::json!({"lr": 0.1, "sync-bn": false, "image-size": 224.0,
                "checkpoint-every": "(none)", "model": "resnet18"})
        );
    }
}
