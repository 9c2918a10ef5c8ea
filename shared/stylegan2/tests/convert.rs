//! `scripts/convert-network-pkl` on the fixtures' upstream snapshot pickles gives exactly their
//! `G.safetensors` (same keys, bit-equal tensors, same config), and refuses foreign code.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use stylegan2::{Config, Weights};
use tch::{Device, Tensor};

use testkit::stylegan2_fixtures as fixtures;

/// The venv's python on `scripts/convert-network-pkl PKL -o OUT EXTRA...`: a command line to
/// run as it is or under a shell's limits.
fn convert_line(pkl: &Path, out: &Path, extra: &[&str]) -> Vec<OsString> {
    let script = testkit::repo_root().join("scripts/convert-network-pkl");
    let mut line: Vec<OsString> = vec![
        testkit::python().into(),
        script.into(),
        pkl.into(),
        "-o".into(),
        out.into(),
    ];
    line.extend(extra.iter().map(OsString::from));
    line
}

fn convert(pkl: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let line = convert_line(pkl, out, extra);
    Command::new(&line[0]).args(&line[1..]).output().unwrap()
}

#[test]
fn converts_each_fixture_pickle_to_its_g_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("network.pkl").is_file() {
            continue;
        }
        n += 1;
        let out = tmp.path().join(format!(
            "{}.safetensors",
            dir.file_name().unwrap().to_string_lossy()
        ));
        let o = convert(&dir.join("network.pkl"), &out, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(rec["type"], "network");

        let ours = Tensor::read_safetensors(&out).unwrap();
        let want = Tensor::read_safetensors(dir.join("G.safetensors")).unwrap();
        let mut a: Vec<_> = ours.iter().map(|(k, _)| k.clone()).collect();
        let mut b: Vec<_> = want.iter().map(|(k, _)| k.clone()).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "{}: keys differ", dir.display());
        for (k, t) in &ours {
            let (_, w) = want.iter().find(|(n, _)| n == k).unwrap();
            assert!(t.equal(w), "{}: {k} differs", dir.display());
        }
        let (_, m1) = Weights::read(&out, Device::Cpu).unwrap();
        let (_, m2) = Weights::read(&dir.join("G.safetensors"), Device::Cpu).unwrap();
        let (c1, c2) = (
            Config::from_metadata(&m1).unwrap(),
            Config::from_metadata(&m2).unwrap(),
        );
        assert_eq!(
            c1.unwrap(),
            c2.unwrap(),
            "{}: config differs",
            dir.display()
        );

        // The discriminator is not a generator, and an existing output is not replaced.
        let o = convert(
            &dir.join("network.pkl"),
            &tmp.path().join("d.safetensors"),
            &["--key", "D"],
        );
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("Discriminator"));
        let o = convert(&dir.join("network.pkl"), &out, &[]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("exists"));
    }
    assert!(
        n >= 2,
        "expected fixture pickles under {}",
        fixtures().display()
    );
}

#[test]
fn the_converted_file_is_created_as_any_file_is() {
    // 0666 less the umask: the temporary file's 0600 was kept (a group could not read it).
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("G.safetensors");
    let o = Command::new("bash")
        .args(["-c", "umask 027 && exec \"$0\" \"$@\""])
        .args(convert_line(
            &fixtures().join("tiny-skip/network.pkl"),
            &out,
            &[],
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "no temporary file left");
}

#[test]
fn refuses_a_pickle_that_would_run_code() {
    let tmp = tempfile::tempdir().unwrap();
    let pkl = tmp.path().join("evil.pkl");
    let marker = tmp.path().join("ran");
    let make = format!(
        "import pickle, os\nclass E:\n    def __reduce__(self):\n        return (os.system, ('touch {}',))\npickle.dump({{'G_ema': E()}}, open('{}', 'wb'))",
        marker.display(),
        pkl.display()
    );
    assert!(
        Command::new(testkit::python())
            .args(["-c", &make])
            .status()
            .unwrap()
            .success()
    );
    let o = convert(&pkl, &tmp.path().join("out.safetensors"), &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("posix.system") && err.contains("does not load"),
        "{err}"
    );
    assert!(!marker.exists(), "the pickle's code ran");
    assert!(!tmp.path().join("out.safetensors").exists());
}

#[test]
fn malformed_pickles_found_by_fuzzing_are_one_clean_error_within_bounded_memory() {
    // fuzz/python/regressions: inputs that once made the converter allocate gigabytes (run here
    // under an 8 GiB address-space limit; torch itself maps ~3 GiB) or die with a traceback (a
    // tensor where a set of names belongs: `x or set()` asked for its truth value).
    let cases = [
        ("bytearray8-22gb.pkl", "protocol 5 buffers"),
        ("empty.pkl", "not a readable network pickle"),
        ("memo-index-1.7gb.pkl", "no 'G_ema' in the pickle"),
        ("nested-frame-2.6gb.pkl", "new frame before end"),
        ("newobj-persistent.pkl", "not a readable network pickle"),
        ("storage-claims-1e9.pkl", "does not match its data"),
        (
            "tensor-as-buffer-set.pkl",
            "persistent object SynthesisNetwork",
        ),
        // A zip-format storage naming a class of its own: torch's refusal is a page of
        // terminal-coloured advice (to load it with weights_only=False); here it is one line.
        (
            "zip-storage-foreign-global.pkl",
            "not plain tensors (Unsupported global: GLOBAL __main__.Foreign)",
        ),
    ];
    let dir = testkit::repo_root().join("fuzz/python/regressions");
    let tmp = tempfile::tempdir().unwrap();
    for (file, want) in cases {
        let out = tmp.path().join("out.safetensors");
        let o = Command::new("bash")
            .args(["-c", "ulimit -v 8388608 && exec \"$@\"", "bash"])
            .args(convert_line(&dir.join(file), &out, &[]))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{file}: {err}");
        assert!(!err.contains("Traceback"), "{file}: {err}");
        // One error, one line.
        assert_eq!(err.lines().count(), 1, "{file}: {err}");
        assert!(
            err.starts_with("convert-network-pkl: error:") && err.contains(want),
            "{file}: {err}"
        );
        assert!(!out.exists(), "{file}: wrote an output");
    }
}
