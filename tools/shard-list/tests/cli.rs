use assert_cmd::Command;
use records::{ErrorRecord, Shard};
use std::path::Path;

/// What a run printed: its shard and error records, decoded, and every record's type in order.
struct Out {
    shards: Vec<Shard>,
    errors: Vec<ErrorRecord>,
    types: Vec<String>,
}

fn run(args: &[&str], stdin: &str) -> (i32, Out) {
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap();
    let types = testkit::records(&out.stdout)
        .iter()
        .map(|r| r["type"].as_str().unwrap().to_string())
        .collect();
    let decoded = Out {
        shards: testkit::typed(&out.stdout),
        errors: testkit::typed(&out.stdout),
        types,
    };
    (out.status.code().unwrap(), decoded)
}

fn paths(r: &Shard) -> Vec<&str> {
    r.paths.iter().map(|p| p.to_str().unwrap()).collect()
}

#[test]
fn round_robin_matches_python_slices() {
    let (code, out) = run(&["-n", "3"], "p0\np1\np2\np3\np4\n");
    assert_eq!(code, 0);
    assert_eq!(out.types, ["shard"; 3]);
    let recs = &out.shards;
    assert_eq!(paths(&recs[0]), ["p0", "p3"]);
    assert_eq!(paths(&recs[2]), ["p2"]);
    assert_eq!((recs[1].shard, recs[1].shards, recs[1].bytes), (1, 3, None));
}

#[test]
fn empty_input_gives_zero_shards() {
    let (code, out) = run(&["-n", "4"], "");
    assert_eq!((code, out.types.len()), (0, 0));
}

#[test]
fn more_shards_than_paths_prints_only_non_empty_ones() {
    let (code, out) = run(&["-n", "4"], "a\nb\n");
    assert_eq!(code, 0);
    assert_eq!(
        out.shards.iter().map(|r| r.shard).collect::<Vec<_>>(),
        [0, 1]
    );
}

#[test]
fn sizes_reproduce_data_partitioner() {
    let input: String = (0..10).map(|i| format!("{i}\n")).collect();
    let (code, out) = run(&["--sizes", "0.7,0.2,0.1", "--seed", "1234"], &input);
    let recs = &out.shards;
    assert_eq!(code, 0);
    // random.Random(1234).shuffle(list(range(10))) == [2, 8, 3, 5, 6, 4, 9, 0, 1, 7]
    assert_eq!(paths(&recs[0]), ["2", "8", "3", "5", "6", "4", "9"]);
    assert_eq!(paths(&recs[1]), ["0", "1"]);
    assert_eq!(paths(&recs[2]), ["7"]);
}

#[test]
fn json_records_and_list_files_are_inputs() {
    let (_dir, list) = testkit::temp_file("list.txt", "x\n{\"path\":\"y\"}\n");
    let (code, out) = run(
        &["-n", "1", list.to_str().unwrap(), "-"],
        "{\"type\":\"shard\",\"paths\":[\"z\"]}\n",
    );
    assert_eq!(code, 0);
    assert_eq!(paths(&out.shards[0]), ["x", "y", "z"]);
}

#[test]
fn balance_by_size_reports_missing_files_and_shards_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = String::new();
    for (name, size) in [("big", 1000), ("s1", 300), ("s2", 300), ("s3", 400)] {
        let p = dir.path().join(name);
        std::fs::write(&p, vec![0u8; size]).unwrap();
        input.push_str(&format!("{}\n", p.display()));
    }
    input.push_str("/no/such/file\n");
    let (code, out) = run(&["-n", "2", "--balance", "size"], &input);
    assert_eq!(code, 3, "a missing file is an item failure");
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].input, "/no/such/file");
    assert_eq!(
        out.shards.iter().map(|r| r.bytes).collect::<Vec<_>>(),
        [Some(1000), Some(1000)]
    );
}

#[test]
fn bad_record_lines_are_errors_and_the_rest_continue() {
    let (code, out) = run(&["-n", "2"], "a\n{broken json\nb\n");
    assert_eq!(code, 3);
    assert_eq!(out.types, ["error", "shard", "shard"]);
    assert_eq!(out.errors[0].input, "{broken json");
}

#[test]
fn usage_errors_exit_2() {
    let (code, _) = run(&[], "a\n");
    assert_eq!(code, 2, "-n or --sizes is required");
    let (code, _) = run(&["-n", "0"], "a\n");
    assert_eq!(code, 2);
    // Fractions that cannot be a partition are a usage error too (was exit 1).
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(["--sizes", "0.7,0.5"])
        .write_stdin("a\n")
        .output()
        .unwrap();
    assert!(testkit::exit_stderr(&out, 2).starts_with("shard-list: error: --sizes"));
}

#[test]
fn a_reader_that_goes_away_is_a_quiet_exit_141() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command as Std, Stdio};
    let mut child = Std::new(assert_cmd::cargo::cargo_bin("shard-list"))
        .args(["-n", "100000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..100_000 {
            if writeln!(stdin, "path/{i}.jpg").is_err() {
                break;
            }
        }
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // then dropped: the pipe closes
    feeder.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with("{\"type\":\"shard\""));
    // SIGPIPE's status, as `head` expects of a producer (it was 0, as if all was printed).
    assert_eq!(
        out.status.code(),
        Some(141),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn stdin_that_is_a_directory_is_one_fatal_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("shard-list"))
        .args(["-n", "2"])
        .stdin(std::fs::File::open(dir.path()).unwrap())
        .output()
        .unwrap();
    // It looped on EISDIR before (952 MB of error records in 8 s).
    testkit::exits_saying(&out, 1, "Is a directory");
    assert!(out.stdout.is_empty());
}

#[test]
fn nul_separated_lists_keep_newlines_in_names() {
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(["-0", "-n", "2"])
        .write_stdin(&b"a\nb\0c\0\0{\"path\":\"d\"}\0"[..])
        .output()
        .unwrap();
    testkit::ok(&out);
    let shards: Vec<Shard> = testkit::typed(&out.stdout);
    assert_eq!(paths(&shards[0]), ["a\nb", "{\"path\":\"d\"}"]);
    assert_eq!(paths(&shards[1]), ["c"]);
}

#[test]
fn one_shard_for_one_job_array_task() {
    // Shard K counts the empty shards too (`sed -n "$((K+1))p"` on the full output does not).
    let list = "p0\np1\np2\np3\np4\n";
    let (code, out) = run(&["-n", "3", "--shard", "1"], list);
    assert_eq!(code, 0);
    assert_eq!(out.shards.len(), 1);
    assert_eq!(
        (out.shards[0].shard, paths(&out.shards[0])),
        (1, vec!["p1", "p4"])
    );
    let (code, out) = run(&["-n", "8", "--shard", "6"], list);
    assert_eq!(
        (code, out.types.len()),
        (0, 0),
        "an empty shard prints nothing"
    );
    let (code, out) = run(&["--sizes", "0.5,0.5", "--shard", "1"], "a\nb\nc\nd\n");
    assert_eq!((code, out.shards.len(), out.shards[0].shard), (0, 1, 1));
    let slurm = |id: Option<&str>, n: &str| {
        let mut c = Command::cargo_bin("shard-list").unwrap();
        c.args(["-n", n, "--shard", "slurm"])
            .env_remove("SLURM_ARRAY_TASK_ID");
        if let Some(id) = id {
            c.env("SLURM_ARRAY_TASK_ID", id);
        }
        c.write_stdin(list).output().unwrap()
    };
    let o = slurm(Some("2"), "3");
    testkit::ok(&o);
    let recs: Vec<Shard> = testkit::typed(&o.stdout);
    assert_eq!((recs.len(), paths(&recs[0])), (1, vec!["p2"]));
    for (id, says) in [
        (None, "SLURM_ARRAY_TASK_ID is not set"),
        (
            Some("3"),
            "--shard 3 (SLURM_ARRAY_TASK_ID): there are 3 shards, 0 to 2",
        ),
    ] {
        let o = slurm(id, "3");
        testkit::exits_saying(&o, 2, says);
    }
    let (code, _) = run(&["-n", "3", "--shard", "3"], list);
    assert_eq!(code, 2);
}

#[test]
fn sizes_summing_to_one_leave_no_path_out_unless_asked_to_as_data_partitioner() {
    let input: String = (0..30).map(|i| format!("p{i}\n")).collect();
    let lens = |args: &[&str]| -> Vec<usize> {
        let (code, out) = run(args, &input);
        assert_eq!(code, 0);
        out.shards.iter().map(|s| s.paths.len()).collect()
    };
    assert_eq!(lens(&["--sizes", "0.75,0.25"]), [22, 8]);
    assert_eq!(
        lens(&["--sizes", "0.75,0.25", "--data-partitioner"]),
        [22, 7]
    );
    assert_eq!(
        lens(&["--sizes", "0.5,0.25"]),
        [15, 7],
        "a subset asked for"
    );
}

#[test]
fn shard_slurm_without_n_takes_the_arrays_size_and_the_tasks_place_in_it() {
    let list: String = (0..8).map(|i| format!("p{i}\n")).collect();
    // The variables of `sbatch --array=1-4`'s task 4.
    let task = |args: &[&str], id: &str| {
        let mut c = Command::cargo_bin("shard-list").unwrap();
        c.args(args).args(["--shard", "slurm"]);
        for (k, v) in [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "4"),
            ("SLURM_ARRAY_TASK_STEP", "1"),
        ] {
            c.env(k, v);
        }
        c.write_stdin(list.clone()).output().unwrap()
    };
    for id in 1..=4 {
        let o = task(&[], &id.to_string());
        testkit::exits(&o, 0);
        let recs: Vec<Shard> = testkit::typed(&o.stdout);
        assert_eq!((recs[0].shard, recs[0].shards), (id - 1, 4));
        assert_eq!(
            paths(&recs[0]),
            [format!("p{}", id - 1), format!("p{}", id + 3)]
        );
    }
    // With -n the ids are shard numbers: id 4 of -n 4 is none, and the message says why.
    let o = task(&["-n", "4"], "4");
    testkit::exits_saying(
        &o,
        2,
        "there are 4 shards, 0 to 3 (with -n the task ids are shard numbers",
    );
    let o = task(&["-n", "4"], "2");
    let recs: Vec<Shard> = testkit::typed(&o.stdout);
    assert_eq!(recs[0].shard, 2);
}

/// shard-list run under a 512 MiB address-space limit (`ulimit -v`): its memory must follow the
/// paths, not the shard count.
fn run_small(args: &[&str], env: &[(&str, &str)], stdin: &str) -> std::process::Output {
    let bin = assert_cmd::cargo::cargo_bin("shard-list");
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg("ulimit -v 524288 && exec \"$0\" \"$@\"")
        .arg(bin)
        .args(args);
    for k in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_STEP",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.write_stdin(stdin.to_string()).output().unwrap()
}

#[test]
fn huge_shard_counts_take_memory_in_proportion_to_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    let list: String = (0..30)
        .map(|i| {
            let p = dir.path().join(format!("p{i}"));
            std::fs::write(&p, vec![0u8; i]).unwrap();
            format!("{}\n", p.display())
        })
        .collect();
    let name = |r: &Shard| -> Vec<String> {
        (r.paths.iter())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    for balance in ["count", "size"] {
        let o = run_small(&["-n", "4000000000", "--balance", balance], &[], &list);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{balance}: {stderr}");
        let recs: Vec<Shard> = testkit::typed(&o.stdout);
        // By count, path j is shard j; by size, the largest first: p29 in shard 0, and the
        // empty p0 in shard 29.
        assert_eq!(recs.len(), 30, "{balance}");
        assert_eq!((recs[29].shard, recs[29].shards), (29, 4_000_000_000));
        let last = if balance == "count" { "p29" } else { "p0" };
        assert_eq!(name(&recs[29]), [last]);
    }
    let o = run_small(&["-n", "4000000000", "--shard", "3999999999"], &[], &list);
    testkit::exits(&o, 0);
    assert!(o.stdout.is_empty(), "an empty shard prints nothing");
    // An array of 4 * 10^9 tasks: the task's place is its shard; this one holds p7.
    let big = [
        ("SLURM_ARRAY_TASK_ID", "7"),
        ("SLURM_ARRAY_TASK_COUNT", "4000000000"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "3999999999"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
    ];
    let o = run_small(&["--shard", "slurm"], &big, &list);
    testkit::ok(&o);
    let recs: Vec<Shard> = testkit::typed(&o.stdout);
    assert_eq!(
        (recs.len(), recs[0].shard, name(&recs[0])),
        (1, 7, vec!["p7".to_string()])
    );
    // Counts past the most shards -n takes (2^32 - 1; Slurm's arrays are far smaller), 2^64 - 1
    // among them, are usage errors, not an abort or a panic.
    for count in ["1000000000000", "18446744073709551615"] {
        let mut env = big;
        env[1].1 = count;
        let o = run_small(&["--shard", "slurm"], &env, &list);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{count}: {stderr}");
        assert!(stderr.contains("SLURM_ARRAY_TASK_COUNT"), "{stderr}");
    }
}

/// A photo tree in every extension the image folder reader takes, in mixed case, with files it
/// passes over, a hidden file, a name that is not UTF-8 and a sub-folder; and the image files in
/// the order the folder reader walks them.
fn mixed_case_tree(root: &std::path::Path) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    // Every file in the order the folder reader walks them (a folder's files by name, then its
    // sub-folders), and whether it takes it (an image by its suffix, in any case).
    let files: &[(&[u8], bool)] = &[
        (b".hidden.jpg", true),
        (b"caf\xe9.jpg", true),
        (b"notes.txt", false),
        (b"top.PNG", true),
        (b"a/IMG_1001.JPG", true),
        (b"a/b.Jpeg", true),
        (b"a/c.webp", true),
        (b"a/d.Tif", true),
        (b"a/e.TIFF", true),
        (b"a/f.bmp", true),
        (b"a/g.png", true),
        (b"a/h.gif", false),
        (b"a/i.ppm", true),
        (b"a/j.PGM", true),
        (b"a/k.jpg.bak", false),
        (b"a/deeper/l.jpeg", true),
    ];
    for (f, _) in files {
        let p = root.join(std::ffi::OsStr::from_bytes(f));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"x").unwrap();
    }
    (files.iter())
        .filter(|(_, taken)| *taken)
        .map(|(f, _)| f.to_vec())
        .collect()
}

/// The tree under DIR/photos, and the paths `shard-list --images DIR/photos` must print.
fn photos() -> (tempfile::TempDir, std::path::PathBuf, Vec<Vec<u8>>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("photos");
    std::fs::create_dir_all(&dir).unwrap();
    let mut want: Vec<Vec<u8>> = mixed_case_tree(&dir)
        .into_iter()
        .map(|w| [b"photos/".as_slice(), &w].concat())
        .collect();
    // A link to a folder outside DIR is followed (os.walk(followlinks=True)).
    std::fs::create_dir_all(tmp.path().join("else")).unwrap();
    std::fs::write(tmp.path().join("else/m.JPG"), b"x").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("else"), dir.join("linked")).unwrap();
    want.push(b"photos/linked/m.JPG".to_vec());
    (tmp, dir, want)
}

/// shard-list run in `dir` with `args`: its output.
fn shard_list_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("shard-list")
        .unwrap()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn lines(out: &[u8], sep: u8) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = out.split(|&b| b == sep).map(<[u8]>::to_vec).collect();
    assert_eq!(v.pop(), Some(vec![]), "the output ends with a separator");
    v
}

#[test]
fn images_lists_every_extension_in_any_case_as_the_folder_reader_walks() {
    let (tmp, _, want) = photos();
    let out = shard_list_in(tmp.path(), &["--images", "photos"]);
    testkit::exits(&out, 0);
    assert_eq!(
        lines(&out.stdout, b'\n'),
        want,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // -0: NUL-terminated, as find -print0.
    let out = shard_list_in(tmp.path(), &["--images", "photos", "-0"]);
    assert_eq!(lines(&out.stdout, b'\0'), want);
}

#[test]
fn images_are_what_the_folder_reader_takes_as_a_class() {
    // The same tree as a class of an image folder: its samples are the listed paths.
    let (tmp, _, want) = photos();
    let folder = data_pack::folder::ImageFolder::scan(tmp.path()).unwrap();
    use std::os::unix::ffi::OsStrExt;
    let photos: Vec<Vec<u8>> = (folder.samples.iter())
        .filter(|(_, label)| folder.classes[*label as usize] == "photos")
        .map(|(p, _)| {
            p.strip_prefix(tmp.path())
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec()
        })
        .collect();
    assert_eq!(photos, want);
}

#[test]
fn images_piped_to_shard_list_come_back_byte_for_byte_and_shard_with_n() {
    use std::os::unix::ffi::OsStrExt;
    let (tmp, _, want) = photos();
    let listed = shard_list_in(tmp.path(), &["--images", "photos"]);
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(["-n", "1"])
        .write_stdin(listed.stdout)
        .output()
        .unwrap();
    let recs: Vec<Shard> = testkit::typed(&out.stdout);
    let got: Vec<Vec<u8>> = (recs[0].paths.iter())
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .collect();
    assert_eq!(got, want);
    // --images with -n shards the listing itself.
    let out = shard_list_in(tmp.path(), &["--images", "photos", "-n", "2"]);
    testkit::ok(&out);
    let recs: Vec<Shard> = testkit::typed(&out.stdout);
    let firsts: Vec<Vec<u8>> = (recs[0].paths.iter())
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .collect();
    let evens: Vec<Vec<u8>> = want.iter().step_by(2).cloned().collect();
    assert_eq!(firsts, evens);
}

#[test]
fn an_image_name_with_a_newline_needs_nul_separators_and_is_reported_without() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("p")).unwrap();
    std::fs::write(tmp.path().join("p/a.jpg"), b"x").unwrap();
    std::fs::write(tmp.path().join("p/b\nc.jpg"), b"x").unwrap();
    let out = shard_list_in(tmp.path(), &["--images", "p"]);
    let err = testkit::exit_stderr(&out, 3);
    assert_eq!(out.stdout, b"p/a.jpg\n");
    assert!(err.contains("p/b\\nc.jpg") && err.contains("-0"), "{err}");
    let out = shard_list_in(tmp.path(), &["--images", "p", "--null"]);
    testkit::ok(&out);
    assert_eq!(out.stdout, b"p/a.jpg\0p/b\nc.jpg\0");
}

#[test]
fn images_of_a_missing_directory_or_a_file_or_a_loop_are_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f.jpg"), b"x").unwrap();
    std::fs::create_dir_all(tmp.path().join("d/e")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("d"), tmp.path().join("d/e/up")).unwrap();
    for (dir, says) in [
        ("missing", "missing"),
        ("f.jpg", "not a directory"),
        ("d", "symlink loop"),
    ] {
        let out = shard_list_in(tmp.path(), &["--images", dir]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{dir}: {err}");
        assert!(err.contains(says), "{dir}: {err}");
        assert!(out.stdout.is_empty());
    }
}
