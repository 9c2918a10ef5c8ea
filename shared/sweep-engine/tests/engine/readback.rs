//! `--resume` reading back what a dead sweep's trials wrote to their stdout.log and it had not
//! read: taken as then, after the leftovers are ended; a cut file read again; and never another
//! file in its place (a link, FIFO, another trial's, a replaced or hard-linked one), nor a start
//! entry no sweep writes.

use super::*;

/// A FIFO sweep in `dir` of one trial to epoch 4 that dies (as with kill -9) having read
/// epoch 1 of its trial, with epochs 2 and 3 written.
fn died_with_two_results_unread(dir: &Path) -> Collect {
    let def = definition(&[1], SchedulerKind::Fifo, 4.0, 0);
    let fake = Fake::new(|_, _| (curve(1, 1), Exit::Died(curve(1, 3)[1..].to_vec())));
    died(dir, def, fake)
}

/// A trial that keeps its state wrote results the sweep had not read when it died (kill -9
/// with lines in the trial's pipe): its next attempt goes on after them, so they are taken
/// from its stdout.log on --resume, not lost.
#[test]
fn results_written_but_unread_when_the_sweep_died_are_taken_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let out = died_with_two_results_unread(&dir);
    assert_eq!(out.of_type("result").count(), 1);
    // Resumed: epochs 2 and 3 are this run's results before the trial runs again (from its
    // state: epoch 4).
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
    assert_eq!(starts(&log), [(0, 2)]);
    assert_eq!(
        journal_results(&dir),
        [(0, 1.0), (0, 2.0), (0, 3.0), (0, 4.0)]
    );
    let rows = std::fs::read_to_string(dir.join("trial-0000/result.json")).unwrap();
    assert_eq!(rows.lines().count(), 4, "{rows}");
    assert_eq!(out.summary()["best"]["metric"], 4.0);
}

/// A dead sweep's processes of a trial, left running, are ended before its stdout.log is read
/// back at --resume (what they wrote until then is the dead attempt's output), so no line of
/// theirs is taken as the next attempt's.
#[test]
fn a_dead_sweeps_leftover_processes_are_ended_before_its_output_is_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    // Left running: it would write epoch 9 as the trial starts again.
    let mut fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    fake.leftovers.insert(0, curve(1, 9)[8..].to_vec());
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
    let log = log.lock().unwrap();
    let ended_at = log.iter().position(|l| l["ended_leftovers"] == 0);
    let started_at = log.iter().position(|l| l["start"] == 0);
    assert!(
        ended_at.is_some() && ended_at < started_at,
        "leftovers ended before the trial starts again: {log:?}"
    );
}

/// A result taken from a dead sweep's trial output is judged as if it had been read: ASHA
/// stops the trial on it, and it does not run again.
#[test]
fn an_unread_result_that_stops_its_trial_is_acted_on_at_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2], SchedulerKind::Asha, 4.0, 0);
    // Trial 0 is good; trial 1 writes a poor epoch 1 and the sweep dies before reading it.
    let fake = first_and_others(
        (curve(10, 4), Exit::Code(0)),
        (Vec::new(), Exit::Died(curve(1, 1))),
    );
    died(&dir, def, fake);
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(starts(&log), [], "trial 1 was stopped at epoch 1");
    let stops: Vec<&Value> = (out.of_type("decision"))
        .filter(|d| d["action"] == "stop")
        .collect();
    assert_eq!(stops.len(), 1, "{:?}", out.records);
    assert_eq!(out.events("end"), [(1, json!("stopped"))]);
    assert_eq!(journal_results(&dir).last(), Some(&(1, 1.0)));
}

/// `dir`'s journal with `edit` applied to each start entry.
fn edit_starts(dir: &Path, edit: impl Fn(&mut Value)) {
    edit_journal(dir, |v| {
        if v["event"] == "start" {
            edit(v);
        }
    });
}

/// [`died_with_two_results_unread`], then its trial's stdout.log removed: its path.
fn died_and_stdout_log_removed(dir: &Path) -> PathBuf {
    died_with_two_results_unread(dir);
    let stdout = dir.join("trial-0000/stdout.log");
    std::fs::remove_file(&stdout).unwrap();
    stdout
}

/// A FIFO put in place of a dead sweep's trial's stdout.log (through a link, which has a
/// length of its own) is not read at --resume, nor does it stop the resume; the trial's next
/// launch fails on it, naming it.
#[test]
fn a_fifo_in_place_of_a_trials_stdout_log_at_resume_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let stdout = died_and_stdout_log_removed(&dir);
    let fifo = tmp.path().join("fifo");
    testkit::mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let (out, ended) = run_within(sweep_engine::resume(&dir).unwrap(), fake, options(1));
    assert_eq!(ended.unwrap().failed, 1);
    let why = the_error(&out);
    testkit::assert_mentions(why, &["stdout.log", "not a regular file"]);
}

/// The message of the one trial end among `out`'s records, an error.
fn the_error(out: &Collect) -> &str {
    let ends: Vec<&Value> = out.trial_records("end").collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["status"], "error");
    ends[0]["message"].as_str().unwrap()
}

/// A sweep of two trials (FIFO, to 4) that dies in trial 1, after its epoch 1 was read and with
/// epochs 2 and 3 unread (m = epoch); trial 0 ran to its end first, m = `slope` · epoch.
fn second_died_with_two_results_unread(dir: &Path, slope: i64) {
    let def = definition(&[1, 2], SchedulerKind::Fifo, 4.0, 0);
    let fake = first_and_others(
        (curve(slope, 4), Exit::Code(0)),
        (curve(1, 1), Exit::Died(curve(1, 3)[1..].to_vec())),
    );
    died(dir, def, fake);
}

/// A trial's stdout.log replaced by a link to another trial's at --resume: the other trial's
/// lines are not judged as this one's; its launch fails on the link, naming it.
#[test]
fn a_link_to_another_trials_stdout_log_is_not_read_as_this_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Trial 0 completes (m = 10 · epoch); trial 1 reads epoch 1 and the sweep dies.
    second_died_with_two_results_unread(&dir, 10);
    let stdout = dir.join("trial-0001/stdout.log");
    std::fs::remove_file(&stdout).unwrap();
    std::os::unix::fs::symlink("../trial-0000/stdout.log", &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    let metrics: Vec<&Value> = out.of_type("result").map(|r| &r["metric"]).collect();
    assert_eq!(
        metrics,
        [] as [&Value; 0],
        "trial 0's lines taken as trial 1's"
    );
    let why = the_error(&out);
    testkit::assert_mentions(why, &["trial-0001/stdout.log", "a symbolic link"]);
}

/// A dead sweep's trial whose stdout.log was cut (as logrotate's copytruncate does) after its
/// attempt started, then written to: what it wrote since is read from the file's start, not
/// lost because the file is now shorter than where the attempt started.
#[test]
fn results_written_after_the_stdout_log_was_cut_are_taken_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1], SchedulerKind::Fifo, 4.0, 1);
    // The first attempt prints a long banner and fails; the second reads epoch 1, then the
    // sweep dies.
    let fake = Fake::new(|_, attempt| match attempt {
        1 => (vec!["x".repeat(300)], Exit::Code(3)),
        _ => (curve(1, 1), Exit::Died(Vec::new())),
    });
    died(&dir, def, fake);
    // Cut, then epochs 2 and 3 written.
    let unread = curve(1, 3)[1..].join("\n") + "\n";
    std::fs::write(dir.join("trial-0000/stdout.log"), unread).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
}

/// The sweep in `dir` resumed with `launcher` (one slot) to its end, no trial in error, with a
/// warning about trial 0 that holds each of `warning`'s parts: its results as (time, metric).
fn resumed_to_its_end(dir: &Path, launcher: Fake, warning: &[&str]) -> Vec<(Value, Value)> {
    warnings();
    let (out, ended) = run(sweep_engine::resume(dir).unwrap(), launcher, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 0, "{warned:?}");
    let said = |w: &String| w.starts_with("trial 0: ") && warning.iter().all(|p| w.contains(p));
    assert!(warned.iter().any(said), "{warning:?}: {warned:?}");
    out.results()
}

/// A FIFO sweep of one trial to 4 whose results carry no time (a counted training_iteration),
/// with `max_failures`.
fn counted_sweep(max_failures: usize) -> Definition {
    let mut def = definition(&[1], SchedulerKind::Fifo, 4.0, max_failures);
    def.time_attr = "training_iteration".into();
    def
}

/// A dead sweep's trial whose stdout.log was cut to a length below where its last attempt
/// started, not to nothing: what is left is an earlier attempt's, so a result without a time
/// (counted) read back from the file's start would count that attempt's results again as this
/// one's. Such results are not taken (where they stand in the count is unknown), with a
/// warning; the trial runs again from its checkpoint.
#[test]
fn counted_results_after_a_cut_to_a_non_zero_length_are_not_counted_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = counted_sweep(1);
    // The first attempt keeps its state, prints 2 results and fails; the second dies before
    // its 2 results are read.
    let state = dir.join("trial-0000/state");
    let fake = Fake::new(move |_, attempt| match attempt {
        1 => {
            std::fs::write(&state, "2 done").unwrap();
            (vec![m(1), m(2)], Exit::Code(3))
        }
        _ => (Vec::new(), Exit::Died(vec![m(3), m(4)])),
    });
    died(&dir, def, fake);
    // Cut to its first line, the first attempt's result 1.
    let stdout = dir.join("trial-0000/stdout.log");
    std::fs::write(&stdout, m(1) + "\n").unwrap();
    let fake = Fake::new(move |_, _| (vec![m(3), m(4)], Exit::Code(0)));
    let warning = [
        "1 result(s) without \"training_iteration\"",
        "not taken: the file was cut",
    ];
    let results = resumed_to_its_end(&dir, fake, &warning);
    assert_eq!(
        results,
        [(json!(3.0), json!(3.0)), (json!(4.0), json!(4.0))]
    );
}

/// Another regular file put in place of a dead sweep's trial's stdout.log (renamed over it, as
/// logrotate's default `create` leaves a new file where the trial's was) is not read back as the
/// trial's output at --resume: the file is not the one the attempt started with (its device and
/// inode), a warning says so, and the trial runs again.
#[test]
fn another_file_in_place_of_a_trials_stdout_log_is_not_read_as_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    // As long as the trial's file, with other results after where its attempt started.
    let stdout = dir.join("trial-0000/stdout.log");
    let kept = std::fs::read(&stdout).unwrap().len() - (curve(1, 3)[1..].join("\n").len() + 1);
    let other = dir.join("trial-0000/other.log");
    let text = "x".repeat(kept - 1) + "\n" + &curve(25, 3)[1..].join("\n") + "\n";
    std::fs::write(&other, text).unwrap();
    std::fs::rename(&other, &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let results = resumed_to_its_end(&dir, fake, &["trial-0000/stdout.log is not the file"]);
    assert_eq!(results, [(json!(4.0), json!(4.0))]);
}

/// A dead sweep's directory copied elsewhere (to resume on another machine) holds the same
/// files under other inodes: its trials' unread results are read back all the same.
#[test]
fn a_copied_sweep_directory_reads_back_its_unread_results() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = died_and_copied(&tmp);
    assert_eq!(resumed_times(&copy), [json!(2.0), json!(3.0), json!(4.0)]);
}

/// [`died_with_two_results_unread`] in `tmp`, its directory then copied: the copy's path.
fn died_and_copied(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = out_dir(tmp);
    died_with_two_results_unread(&dir);
    let copy = tmp.path().join("copy");
    copy_tree(&dir, &copy);
    copy
}

/// The times of the results of the sweep in `dir` resumed to its end, its trial going on to
/// epoch 4 from its state.
fn resumed_times(dir: &Path) -> Vec<Value> {
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    out.results().into_iter().map(|r| r.0).collect()
}

/// Copies directory `from` to `to` (as `cp -r`: new files, new inodes).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (f, t) = (e.path(), to.join(e.file_name()));
        match e.file_type().unwrap().is_dir() {
            true => copy_tree(&f, &t),
            false => drop(std::fs::copy(&f, &t).unwrap()),
        }
    }
}

/// A dead sweep's directory copied (or put back from a tar archive), whose copied trial
/// directory was given the inode number of the original's (numbers of deleted files are used
/// again): it is still a copy, made later than the original (its birth time, where the
/// filesystem keeps one), so its stdout.log, another inode, is read back all the same.
#[test]
fn a_copy_whose_trial_directory_got_the_originals_inode_number_reads_back_its_results() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let copy = died_and_copied(&tmp);
    let m = std::fs::metadata(copy.join("trial-0000")).unwrap();
    assert!(
        m.created().is_ok(),
        "this test needs a filesystem with birth times"
    );
    // The original's directory had the number the copy's has now.
    edit_starts(&copy, |v| {
        v["stdout_file"]["dir"] = json!([m.dev(), m.ino()])
    });
    assert_eq!(resumed_times(&copy), [json!(2.0), json!(3.0), json!(4.0)]);
}

/// A journal written before stdout.log (its start entries without `stdout_from`,
/// `counted_from` and `stdout_file`) resumes as it did: the unfinished trial runs again,
/// nothing is read back.
#[test]
fn a_journal_without_stdout_offsets_resumes_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    edit_starts(&dir, |v| {
        let e = v.as_object_mut().unwrap();
        assert!(e.remove("stdout_from").is_some() && e.remove("counted_from").is_some());
        assert!(e.remove("stdout_file").is_some());
        assert_eq!(e.len(), 4, "event, trial, attempt, slot: {e:?}");
    });
    // Run again without state: its epochs 2 to 4 (m = 2 · epoch) are this run's results.
    let fake = Fake::new(|_, _| (curve(2, 4), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(starts(&log), [(0, 2)]);
    assert_eq!(
        out.results(),
        [
            (json!(2.0), json!(4.0)),
            (json!(3.0), json!(6.0)),
            (json!(4.0), json!(8.0))
        ]
    );
    assert_eq!(out.summary()["completed"], 1);
}

/// A start entry whose `counted_from` was edited below zero is refused at --resume, as any
/// journalled step this sweep would not have taken (its unread counted results would get
/// negative times).
#[test]
fn resume_refuses_a_start_counted_from_below_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = counted_sweep(0);
    let fake = Fake::new(move |_, _| (vec![m(1)], Exit::Died(vec![m(2), m(3)])));
    died(&dir, def, fake);
    edit_starts(&dir, |v| v["counted_from"] = json!(-10.0));
    let e = resume_refused(&dir);
    assert!(matches!(e, Error::Journal(_)), "{e:?}");
    assert!(e.describe().contains("counted_from"), "{e}");
}

/// A dead sweep's trial directories swapped (renamed into each other's places) before
/// --resume: the unfinished trial's stdout.log is now another trial's file, the journal's by
/// its device and inode, so it is not read back as the unfinished trial's output (that would
/// judge trial 1 by trial 0's curve); a warning names the trial and the file, and the trial
/// runs again.
#[test]
fn another_trials_stdout_log_in_place_of_a_trials_is_not_read_as_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Trial 0 runs to its end (m = 5 · epoch); trial 1 dies with two results unread.
    second_died_with_two_results_unread(&dir, 5);
    let (a, b, swap) = (
        dir.join("trial-0000"),
        dir.join("trial-0001"),
        dir.join("swap"),
    );
    std::fs::rename(&a, &swap).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&swap, &b).unwrap();
    warnings();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 0, "{warned:?}");
    assert_eq!(out.results(), [(json!(4.0), json!(4.0))], "{warned:?}");
    let said = |w: &String| w.starts_with("trial 1: ") && w.contains("trial-0001/stdout.log");
    assert!(warned.iter().any(said), "{warned:?}");
}

/// A dead sweep's trial whose stdout.log was made another name of the sweep's journal (a hard
/// link: the same file) before --resume: nothing of the journal is read back as the trial's
/// output, and the trial's next attempt does not write into the journal through it (a resume
/// after it found lines there that are no journal entries); the attempt fails, naming the file.
#[test]
fn a_trials_stdout_log_linked_to_the_journal_is_neither_read_nor_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let stdout = died_and_stdout_log_removed(&dir);
    std::fs::hard_link(dir.join("journal.jsonl"), &stdout).unwrap();
    warnings();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 1, "{warned:?}");
    assert!(out.results().is_empty(), "{:?}", out.results());
    let message = the_error(&out);
    testkit::assert_mentions(message, &["trial-0000/stdout.log", "other names"]);
    let said = |w: &String| w.starts_with("trial 0: ") && w.contains("trial-0000/stdout.log");
    assert!(warned.iter().any(said), "{warned:?}");
    sweep_engine::resume(&dir).unwrap();
}

/// A start entry whose attempt was edited to more than the journal has entries (the largest
/// number there is, so that the next attempt's number wrapped round to 0) is refused at
/// --resume: no sweep writes it.
#[test]
fn resume_refuses_a_start_of_an_attempt_no_sweep_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    edit_starts(&dir, |v| v["attempt"] = json!(u64::MAX));
    let e = resume_refused(&dir);
    assert!(matches!(e, Error::Journal(_)), "{e:?}");
    assert!(e.describe().contains("attempt"), "{e}");
}
