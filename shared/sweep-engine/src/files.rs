//! A trial's files, as Ray Tune writes them into a trial's directory: `params.json` (the config),
//! `result.json` (one JSON line per result, with the config), `progress.csv` (the results
//! flattened, columns fixed by the first result) and TensorBoard event files; plus
//! `stdout.log` and `stderr.log` (the command's output, every attempt appended) and, under
//! Slurm, `srun.log`
//! (srun's own messages). Non-finite values are spelled as in the records: "NaN", "Infinity",
//! "-Infinity".

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use serde_json::{Map, Value};

use tensorboard::{EventWriter, SessionStatus};

use search::asha::Mode;

/// `{"a": {"b": 1}}` → `[("a/b", 1)]`, keys in the map's order (Ray's `flatten_dict`).
pub fn flatten(record: &Map<String, Value>) -> Vec<(String, Value)> {
    fn walk(prefix: &str, m: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
        for (k, v) in m {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}/{k}")
            };
            match v {
                Value::Object(inner) => walk(&key, inner, out),
                other => out.push((key, other.clone())),
            }
        }
    }
    let mut out = Vec::new();
    walk("", record, &mut out);
    out
}

fn csv_field(v: Option<&Value>) -> String {
    let s = match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The open files of one running trial.
#[derive(Debug)]
pub struct TrialFiles {
    dir: PathBuf,
    result: File,
    progress: File,
    columns: Option<Vec<String>>,
    events: EventWriter,
}

impl TrialFiles {
    /// Creates the directory and `params.json`, opens the result files for appending (a
    /// restarted trial goes on where it was) and starts a new event file: in the trial's
    /// directory, or after population-based training's `copies`-th copy in its
    /// `pbt-copy-K` subdirectory, a TensorBoard run of its own whose hparams session holds the
    /// config explored (TensorBoard keeps a run's first session).
    pub fn open(
        dir: &Path,
        trial: usize,
        attempt: usize,
        config: &Map<String, Value>,
        copies: usize,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let params = serde_json::to_vec_pretty(config)?;
        let mut params_file = open_regular(&dir.join("params.json"), false)?;
        params_file
            .set_len(0)
            .and_then(|()| params_file.write_all(&params))
            .with_context(|| format!("writing {}", dir.join("params.json").display()))?;
        let result = open_regular(&dir.join("result.json"), true)?;
        // A restarted trial keeps the columns its progress.csv already has.
        let mut progress = open_regular(&dir.join("progress.csv"), true)?;
        let columns = header_record(&mut progress).map(|h| split_csv_header(&h));
        let events_dir = match copies {
            0 => dir.to_path_buf(),
            k => dir.join(format!("{COPY_RUN}{k}")),
        };
        let mut events = EventWriter::create(&events_dir, &format!("trial-{trial}.{attempt}"))?;
        events.session_start(config)?;
        Ok(TrialFiles {
            dir: dir.to_path_buf(),
            result,
            progress,
            columns,
            events,
        })
    }

    /// Appends one result (already holding the trial's bookkeeping fields) to every file; its
    /// non-finite values, spelled "NaN", "Infinity" and "-Infinity" in it, are given by their
    /// flattened path in `non_finite` (they are TensorBoard scalars as the numbers are).
    pub fn result(
        &mut self,
        result: &Map<String, Value>,
        step: i64,
        non_finite: &[(String, f64)],
    ) -> Result<()> {
        let mut line = serde_json::to_vec(result)?;
        line.push(b'\n');
        self.result
            .write_all(&line)
            .with_context(|| format!("writing {}", self.dir.join("result.json").display()))?;
        let flat = flatten(result);
        let mut text = String::new();
        let columns = match &self.columns {
            Some(c) => c,
            None => {
                let c: Vec<String> = flat.iter().map(|(k, _)| k.clone()).collect();
                text.push_str(
                    &c.iter()
                        .map(|k| csv_field(Some(&Value::String(k.clone()))))
                        .collect::<Vec<_>>()
                        .join(","),
                );
                text.push('\n');
                self.columns.insert(c)
            }
        };
        let by_key: std::collections::HashMap<&str, &Value> =
            flat.iter().map(|(k, v)| (k.as_str(), v)).collect();
        text.push_str(
            &columns
                .iter()
                .map(|k| csv_field(by_key.get(k.as_str()).copied()))
                .collect::<Vec<_>>()
                .join(","),
        );
        text.push('\n');
        self.progress
            .write_all(text.as_bytes())
            .with_context(|| format!("writing {}", self.dir.join("progress.csv").display()))?;
        // The config is in the hparams session, not a scalar. A value the record spells as a
        // non-finite one is a number only where the trial wrote that number (its own string
        // "NaN" is a string).
        let scalars = flat
            .iter()
            .filter(|(k, _)| k != "config" && !k.starts_with("config/"))
            .filter_map(|(k, v)| {
                let x = match v {
                    Value::String(s) => non_finite
                        .iter()
                        .find(|(p, x)| p == k && crate::pyjson::spelling(*x) == s)
                        .map(|(_, x)| *x)?,
                    v => v.as_f64()?,
                };
                Some((k.as_str(), x))
            });
        Ok(self.events.numbers(step, scalars)?)
    }

    /// Marks the trial's end in its event file: the `stopped_early` metric (1 when the
    /// scheduler stopped it, 0 when it ran to its end) at `step`, then the hparams session's end.
    pub fn end(&mut self, status: SessionStatus, stopped: bool, step: i64) -> Result<()> {
        self.events
            .numbers(step, [(STOPPED_EARLY, if stopped { 1.0 } else { 0.0 })])?;
        Ok(self.events.session_end(status)?)
    }
}

/// Opens one of the trial's own files for writing (created if need be; appended to, or else
/// written from the start by the caller): a regular file only, so that a FIFO or device put in
/// its place is an error, not a wait (the open does not block) or an endless write.
pub fn open_regular(path: &Path, append: bool) -> Result<File> {
    open_own(path, append, 0)
}

/// A trial's stdout.log, opened for reading and appending as [`open_regular`] opens the
/// sweep's files, but never through a symbolic link: a trial's lines are read from its own file
/// only (through a link to another trial's, that trial's lines would be judged as this one's),
/// nor a file with other names (a hard link to the journal or another trial's stdout.log).
pub fn open_stdout_log(path: &Path) -> Result<File> {
    use std::os::unix::fs::MetadataExt;
    let f = open_own(path, true, libc::O_NOFOLLOW)?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if meta.nlink() > 1 {
        return Err(Error::Linked {
            path: path.to_path_buf(),
        });
    }
    Ok(f)
}

/// [`open_regular`] with `flags` added to the open's.
fn open_own(path: &Path, append: bool, flags: i32) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .append(append)
        .create(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path);
    // O_NOFOLLOW's refusal of a link.
    if let Err(e) = &f
        && e.raw_os_error() == Some(libc::ELOOP)
        && flags & libc::O_NOFOLLOW != 0
    {
        return Err(Error::NotRegular {
            path: path.to_path_buf(),
            kind: "a symbolic link",
        });
    }
    let f = f.with_context(|| format!("opening {}", path.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if let Some(kind) = input_file::not_regular(&meta) {
        return Err(Error::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    Ok(f)
}

/// The most of progress.csv's header that is read back.
const MAX_HEADER: u64 = 1 << 20;

/// The first record of a CSV file (its header, whose quoted names may hold newlines), read
/// from the start; None when the file has no whole one.
fn header_record(f: &mut File) -> Option<String> {
    use std::io::{Read, Seek};
    f.seek(std::io::SeekFrom::Start(0)).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_HEADER).read_to_end(&mut bytes).ok()?;
    let mut quoted = false;
    let end = bytes.iter().position(|&b| {
        if b == b'"' {
            quoted = !quoted;
        }
        b == b'\n' && !quoted
    })?;
    let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (!text.is_empty()).then_some(text)
}

/// The TensorBoard run of a trial's segment after a copy: `pbt-copy-K` in its directory.
const COPY_RUN: &str = "pbt-copy-";

/// Whether `name` is one of the files sweep keeps in a trial's directory (the trial's own
/// history, which a copy of another trial's checkpoint leaves alone).
pub fn sweep_owned(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    matches!(
        name.as_ref(),
        "params.json" | "result.json" | "progress.csv" | "stdout.log" | "stderr.log" | "srun.log"
    ) || name.starts_with("events.out.tfevents.")
        || name.starts_with(COPY_RUN)
}

/// Whether trial directory `dir` holds anything of its command's (sweep's own files left out):
/// state a restarted command can go on from. A directory that cannot be read holds nothing.
pub fn holds_state(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(|e| e.ok())
            .any(|e| !sweep_owned(&e.file_name()))
    })
}

/// Copies what `from` holds, sweep's own files left out, into `to` (created if need be).
/// Symbolic links are copied as links; with `link`, files are hard links (for a save, whose files
/// are never written again).
fn copy_contents(from: &Path, to: &Path, link: bool) -> Result<()> {
    fn copy_tree(from: &Path, to: &Path, link: bool) -> Result<()> {
        let meta = std::fs::symlink_metadata(from)
            .with_context(|| format!("reading {}", from.display()))?;
        if meta.is_symlink() {
            let target = std::fs::read_link(from)?;
            std::os::unix::fs::symlink(&target, to)
                .with_context(|| format!("linking {}", to.display()))?;
        } else if meta.is_dir() {
            std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
            for entry in std::fs::read_dir(from)? {
                let entry = entry?;
                copy_tree(&entry.path(), &to.join(entry.file_name()), link)?;
            }
        } else if !meta.is_file() {
            // A FIFO, socket or device holds no state to copy, and opening a FIFO to copy it
            // would wait for a writer for ever: left out.
        } else if !(link && std::fs::hard_link(from, to).is_ok()) {
            std::fs::copy(from, to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
        Ok(())
    }
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        if !sweep_owned(&entry.file_name()) {
            copy_tree(&entry.path(), &to.join(entry.file_name()), link)?;
        }
    }
    Ok(())
}

/// Population-based training's save: `to` becomes a copy of what trial directory `from` holds
/// (its command's checkpoint), sweep's own files left out; written beside, then renamed over
/// the previous save.
pub fn save_checkpoint(from: &Path, to: &Path) -> Result<()> {
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    remove(&tmp)?;
    copy_contents(from, &tmp, false)?;
    remove(to)?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming {}", tmp.display()))
}

/// Population-based training's decision to copy: `to` becomes a copy of save `from` as it is
/// now (hard links), for the copying trial to take when it runs again (the copied trial may be
/// saved anew before then).
pub fn keep_save(from: &Path, to: &Path) -> Result<()> {
    remove(to)?;
    copy_contents(from, to, true)
}

/// Removes a file or a directory tree, if there is one.
pub fn remove(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.with_context(|| format!("removing {}", path.display()))
}

/// Population-based training's copy: everything in trial directory `to` but sweep's own files
/// is replaced by a copy of `from` (a saved checkpoint, or another trial's directory, whose
/// sweep files are left out).
pub fn copy_checkpoint(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(to).with_context(|| format!("reading {}", to.display()))? {
        let entry = entry?;
        if !sweep_owned(&entry.file_name()) {
            remove(&entry.path())?;
        }
    }
    copy_contents(from, to, false)
}

/// The metric each trial's event file gets at its end: 1 when the scheduler stopped it early.
pub const STOPPED_EARLY: &str = "stopped_early";

/// One trial, as a row of `results.csv`.
#[derive(Debug)]
pub struct ResultRow<'a> {
    pub trial: usize,
    pub status: &'a str,
    pub config: &'a Map<String, Value>,
    /// (time, metric) of every result.
    pub history: &'a [(f64, f64)],
    pub stopped_at: Option<f64>,
    pub attempts: usize,
    pub dir: &'a Path,
    pub message: Option<&'a str>,
}

/// `results.csv`: a row per trial (its status, config, results, the time attribute and the
/// metric at its last result, the best metric it reached, where it was stopped, its directory);
/// config columns from every trial's keys, in first-seen order.
pub fn results_csv(rows: &[ResultRow<'_>], time_attr: &str, metric: &str, mode: Mode) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for r in rows {
        for k in r.config.keys() {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let text = |s: &str| csv_field(Some(&Value::String(s.to_string())));
    // Non-finite values as the records spell them.
    let number = |x: Option<f64>| match x {
        Some(x) if x.is_finite() => x.to_string(),
        Some(x) => crate::pyjson::spelling(x).to_string(),
        None => String::new(),
    };
    let mut header = vec!["trial".to_string(), "status".into()];
    header.extend(keys.iter().map(|k| format!("config/{k}")));
    header.extend([
        "results".into(),
        time_attr.into(),
        format!("last_{metric}"),
        format!("best_{metric}"),
        "stopped_at".into(),
        "attempts".into(),
        "dir".into(),
        "message".into(),
    ]);
    let mut out = header.iter().map(|h| text(h)).collect::<Vec<_>>().join(",");
    out.push('\n');
    for r in rows {
        let last = r.history.last();
        let best = r
            .history
            .iter()
            .map(|&(_, m)| m)
            .filter(|m| m.is_finite())
            .reduce(|a, b| if mode.better(b, a) { b } else { a });
        let mut row = vec![r.trial.to_string(), text(r.status)];
        row.extend(keys.iter().map(|k| csv_field(r.config.get(*k))));
        row.extend([
            r.history.len().to_string(),
            number(last.map(|p| p.0)),
            number(last.map(|p| p.1)),
            number(best),
            number(r.stopped_at),
            r.attempts.to_string(),
            text(&r.dir.display().to_string()),
            text(r.message.unwrap_or("")),
        ]);
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

fn split_csv_header(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_replaces_the_checkpoint_and_keeps_the_trials_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        for d in [&from, &to] {
            std::fs::create_dir_all(d.join("ckpt")).unwrap();
            std::fs::write(d.join("params.json"), d.display().to_string()).unwrap();
            std::fs::write(
                d.join("events.out.tfevents.1.h.2.x"),
                d.display().to_string(),
            )
            .unwrap();
        }
        std::fs::write(from.join("ckpt/model.pt"), "better").unwrap();
        std::os::unix::fs::symlink("ckpt/model.pt", from.join("latest")).unwrap();
        std::fs::write(to.join("ckpt/model.pt"), "worse").unwrap();
        std::fs::write(to.join("ckpt/stale.pt"), "stale").unwrap();
        std::fs::write(to.join("notes"), "gone").unwrap();
        // Saved (sweep's files left out), then changed: the copy takes the saved state.
        let saved = dir.path().join("saved");
        save_checkpoint(&from, &saved).unwrap();
        save_checkpoint(&from, &saved).unwrap();
        assert!(!saved.join("params.json").exists());
        // The copy is decided: the save is kept; the copied trial is then saved anew.
        let kept = dir.path().join("kept");
        keep_save(&saved, &kept).unwrap();
        std::fs::write(from.join("ckpt/model.pt"), "later").unwrap();
        save_checkpoint(&from, &saved).unwrap();
        copy_checkpoint(&kept, &to).unwrap();
        let read = |p: &str| std::fs::read_to_string(to.join(p)).unwrap();
        assert_eq!(read("ckpt/model.pt"), "better");
        assert_eq!(read("latest"), "better", "the link copied as a link");
        assert!(!to.join("ckpt/stale.pt").exists() && !to.join("notes").exists());
        assert_eq!(read("params.json"), to.display().to_string());
        assert_eq!(
            read("events.out.tfevents.1.h.2.x"),
            to.display().to_string()
        );
    }

    #[test]
    fn a_fifo_in_a_trial_directory_is_left_out_not_waited_on() {
        // Copying a FIFO opened it for reading: a save waited for a writer for ever.
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("ckpt")).unwrap();
        std::fs::write(from.join("ckpt/model.pt"), "state").unwrap();
        testkit::mkfifo(&from.join("ckpt/pipe"));
        let saved = dir.path().join("saved");
        let (f, s) = (from.clone(), saved.clone());
        crate::testing::within("the save ends", move || {
            save_checkpoint(&f, &s).map_err(|e| e.to_string())
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(saved.join("ckpt/model.pt")).unwrap(),
            "state"
        );
        assert!(!saved.join("ckpt/pipe").exists());
    }

    #[test]
    fn flatten_nests_with_slashes() {
        let m = json!({"a": 1, "config": {"lr": 0.1, "opt": {"name": "sgd"}}})
            .as_object()
            .unwrap()
            .clone();
        let keys: Vec<String> = flatten(&m).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "config/lr", "config/opt/name"]);
    }

    #[test]
    fn progress_csv_keeps_its_first_columns_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({"lr": 0.1}).as_object().unwrap().clone();
        let r = |e: i64, extra: bool| {
            let mut v = json!({"epoch": e, "note": "a,\"b\"", "config": {"lr": 0.1}});
            if extra {
                v["late"] = json!(1);
            }
            v.as_object().unwrap().clone()
        };
        let mut f = TrialFiles::open(dir.path(), 0, 1, &config, 0).unwrap();
        f.result(&r(1, false), 1, &[]).unwrap();
        drop(f);
        let mut f = TrialFiles::open(dir.path(), 0, 2, &config, 0).unwrap();
        f.result(&r(2, true), 2, &[]).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(
            csv,
            "config/lr,epoch,note\n0.1,1,\"a,\"\"b\"\"\"\n0.1,2,\"a,\"\"b\"\"\"\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("result.json"))
                .unwrap()
                .lines()
                .count(),
            2
        );
        assert_eq!(split_csv_header("a,\"b,c\",d"), ["a", "b,c", "d"]);
    }

    #[test]
    fn progress_csv_columns_with_newlines_survive_a_restart() {
        // The header was read back as its first line: a quoted key holding a newline was cut,
        // and the restarted trial's rows lost their columns.
        let dir = tempfile::tempdir().unwrap();
        let config = json!({}).as_object().unwrap().clone();
        let r = |a: i64| {
            json!({"a\nb": a, "x,y": a + 1})
                .as_object()
                .unwrap()
                .clone()
        };
        let mut f = TrialFiles::open(dir.path(), 0, 1, &config, 0).unwrap();
        f.result(&r(1), 1, &[]).unwrap();
        drop(f);
        let mut f = TrialFiles::open(dir.path(), 0, 2, &config, 0).unwrap();
        f.result(&r(3), 2, &[]).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("progress.csv")).unwrap();
        assert_eq!(csv, "\"a\nb\",\"x,y\"\n1,2\n3,4\n");
    }

    #[test]
    fn a_fifo_in_place_of_a_trials_file_is_an_error_not_a_wait() {
        for name in ["progress.csv", "result.json"] {
            let dir = tempfile::tempdir().unwrap();
            testkit::mkfifo(&dir.path().join(name));
            let d = dir.path().to_path_buf();
            let opened = crate::testing::within("opening the trial's files ends", move || {
                let config = Map::new();
                (TrialFiles::open(&d, 0, 1, &config, 0))
                    .map(drop)
                    .map_err(|e| e.describe())
            });
            let e = opened.unwrap_err();
            assert!(e.contains(name) && e.contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn results_have_a_row_per_trial_with_last_and_best() {
        let a = json!({"lr": 0.1, "opt": "sgd"})
            .as_object()
            .unwrap()
            .clone();
        let b = json!({"lr": 0.01, "wd": 1e-4}).as_object().unwrap().clone();
        let dir = Path::new("/o/trial-0000");
        let rows = [
            ResultRow {
                trial: 0,
                status: "completed",
                config: &a,
                history: &[(1.0, 0.5), (2.0, 0.9), (3.0, 0.8)],
                stopped_at: None,
                attempts: 1,
                dir,
                message: None,
            },
            ResultRow {
                trial: 1,
                status: "error",
                config: &b,
                history: &[],
                stopped_at: None,
                attempts: 2,
                dir,
                message: Some("exit 1, \"bad\""),
            },
        ];
        let csv = results_csv(&rows, "epoch", "acc", Mode::Max);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "trial,status,config/lr,config/opt,config/wd,results,epoch,last_acc,best_acc,stopped_at,attempts,dir,message"
        );
        assert_eq!(
            lines[1],
            "0,completed,0.1,sgd,,3,3,0.8,0.9,,1,/o/trial-0000,"
        );
        assert_eq!(
            lines[2],
            "1,error,0.01,,0.0001,0,,,,,2,/o/trial-0000,\"exit 1, \"\"bad\"\"\""
        );
        // Minimising, the best is the least.
        let csv = results_csv(&rows[..1], "epoch", "acc", Mode::Min);
        assert!(csv.lines().nth(1).unwrap().contains(",0.8,0.5,"), "{csv}");
    }
}
