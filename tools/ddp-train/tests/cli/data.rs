//! Data sources: image folders, RecordIO and webdataset shards train exactly as the same images
//! in CIFAR binaries, batches equal torchvision's, bad files are replaced and counted, and
//! labels size nothing before they are checked.

use super::*;

#[test]
fn an_image_folder_trains_exactly_as_the_same_images_in_cifar_binaries() {
    // The same pixels in the same order, normalised with the statistics the CIFAR path computes
    // (passed as --normalize, printed to round-trip): the batches are the same floats, so the
    // runs are the same to the bit, which shows the folder's order, labels, decoding and
    // ToTensor + Normalize arithmetic.
    let dir = digits_twice();
    let bytes = std::fs::read(dir.join("train.bin")).unwrap();
    let pixels: Vec<u8> = bytes
        .chunks_exact(2 + 3072)
        .flat_map(|r| r[2..].to_vec())
        .collect();
    let x = Tensor::from_slice(&pixels)
        .view([-1, 3, 32, 32])
        .to_kind(tch::Kind::Float)
        / 255.0;
    let mean = Vec::<f32>::try_from(
        x.mean_dim([0i64, 2, 3].as_slice(), true, tch::Kind::Float)
            .flatten(0, -1),
    )
    .unwrap();
    let std = Vec::<f32>::try_from(
        x.std_dim([0i64, 2, 3].as_slice(), true, true)
            .flatten(0, -1),
    )
    .unwrap();
    let stats: Vec<String> = mean.iter().chain(&std).map(|v| format!("{v:?}")).collect();
    let common = ["--epochs", "1", "--max-steps", "3", "--batch-size", "32"];
    let cifar = records(
        &cmd_on(format!("cifar100:{}", dir.display()))
            .args(common)
            .output()
            .unwrap(),
    );
    let folder = records(
        &cmd_on(format!("imagefolder:{}", dir.join("folder").display()))
            .args(common)
            .args([
                "--transform",
                "none",
                "--image-size",
                "32",
                "--workers",
                "2",
            ])
            .args(["--normalize", &stats.join(",")])
            .output()
            .unwrap(),
    );
    let (a, b) = (&cifar.items[0], &folder.items[0]);
    assert_same_figures(a, b);
    assert_eq!(b.classes, digit_classes());
    assert!(a.classes.is_empty());
    assert_eq!(b.bad_inputs, 0);
}

#[test]
fn two_ranks_train_on_an_image_folder_through_the_imagenet_transforms() {
    // The data's path is the point: the small network (10 classes) trains.
    fn folder() -> Command {
        small_on(
            format!("imagefolder:{}", digits_twice().join("folder").display()),
            10,
        )
    }
    let ((_, ck), recs) = two_rank_processes_of(
        folder,
        &[
            "--epochs",
            "2",
            "--max-steps",
            "3",
            "--batch-size",
            "32",
            "--image-size",
            "32",
            "--workers",
            "1",
            "--normalize",
            "0.5",
            // One evaluation batch: the figures are checked for being finite only.
            "--max-val-steps",
            "1",
        ],
    );
    assert_eq!(recs.items.len(), 2);
    assert_eq!(recs.items[0].classes.len(), 10);
    assert!(
        recs.items[1].classes.is_empty(),
        "the class names come once"
    );
    assert!(recs.items.iter().all(|e| e.val_loss.is_finite()));
    // The checkpoint says what its logits mean.
    let (_, meta) =
        train::checkpoint::load(&ck.path().join("last.safetensors"), tch::Device::Cpu).unwrap();
    let classes: Vec<String> = serde_json::from_str(&meta["classes"]).unwrap();
    assert_eq!(classes, digit_classes());
}

#[test]
fn image_folder_flags_that_do_not_fit_the_data_are_usage_errors() {
    let dir = digits_twice();
    let folder = format!("imagefolder:{}", dir.join("folder").display());
    for (data, args, says) in [
        (
            "cifar",
            vec!["--transform", "imagenet"],
            "--transform applies to --data imagefolder",
        ),
        ("cifar", vec!["--image-size", "64"], "--image-size applies"),
        ("folder", vec!["--workers", "0"], "at least 1"),
        (
            "folder",
            vec!["--transform", "crop"],
            "invalid value 'crop' for '--transform",
        ),
        ("folder", vec!["--normalize", "1,2,3"], "two numbers"),
        ("folder", vec!["--normalize", "0.5,0"], "above 0"),
        ("folder", vec!["--augment"], "take --transform"),
    ] {
        let data = if data == "cifar" {
            format!("cifar100:{}", dir.display())
        } else {
            folder.clone()
        };
        let out = cmd_on(&data).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // No validation split: DIR/train alone.
    assert_usage(
        &mut cmd_on(format!(
            "imagefolder:{}",
            dir.join("folder/train").display()
        )),
        "--val-data",
    );
}

#[test]
fn dumped_validation_batches_equal_torchvisions_to_the_bit() {
    // --dump-batches: the loader's validation batches (Resize + CenterCrop + ToTensor +
    // Normalize) against torchvision's ImageFolder with the same transforms, float32 bits.
    let dir = digits_twice();
    let tmp = tempfile::tempdir().unwrap();
    let npz = tmp.path().join("val.npz");
    let out = cmd_on(format!("imagefolder:{}", dir.join("folder").display()))
        .args([
            "--image-size",
            "24",
            "--batch-size",
            "8",
            "--dump-batches",
            "3",
            "--split",
            "val",
        ])
        .arg("--dump")
        .arg(&npz)
        .output()
        .unwrap();
    ok(&out);
    assert!(out.stdout.is_empty(), "nothing trained, no records");
    let script = r#"
import sys, numpy as np, torchvision.transforms as T
from torchvision.datasets import ImageFolder
d = np.load(sys.argv[1])
ds = ImageFolder(sys.argv[2], transform=T.Compose([T.Resize(24 * 256 // 224), T.CenterCrop(24),
    T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
ref = np.stack([ds[i][0].numpy() for i in d["indices"]])
assert d["images"].shape == (24, 3, 24, 24), d["images"].shape
assert np.array_equal(ref.view(np.uint32), d["images"].view(np.uint32)), "pixels differ"
assert list(d["labels"]) == [ds.samples[i][1] for i in d["indices"]], "labels differ"
paths = d["paths"].tobytes().split(b"\n")[:-1]
assert paths == [ds.samples[i][0].encode() for i in d["indices"]], "paths differ"
print("ok")
"#;
    python([
        std::ffi::OsStr::new("-c"),
        script.as_ref(),
        npz.as_os_str(),
        dir.join("folder/val").as_os_str(),
    ]);
}

#[test]
fn recordio_trains_exactly_as_the_image_folder_it_was_packed_from() {
    // The digits' PNG tree packed into .rec/.idx in ImageFolder's order by the transcription of
    // MXNet's writer (insightface's header record first): the same samples, labels and pixels,
    // so the same run to the bit.
    let dir = digits_twice();
    let packed = digit_records();
    let common = ["--epochs", "1", "--max-steps", "3", "--batch-size", "32"];
    let images = [
        "--transform",
        "flip",
        "--image-size",
        "32",
        "--normalize",
        "0.5",
    ];
    // The data is the point: the small network (10 classes) trains.
    let folder = records(
        &small_on(format!("imagefolder:{}", dir.join("folder").display()), 10)
            .args(common)
            .args(images)
            .output()
            .unwrap(),
    );
    let rec = records(
        &small_on(format!("recordio:{}", packed.join("train").display()), 10)
            .arg("--val-data")
            .arg(packed.join("val"))
            .args(common)
            .args(images)
            .output()
            .unwrap(),
    );
    let (a, b) = (&folder.items[0], &rec.items[0]);
    assert_same_figures(a, b);
    assert_eq!(b.classes.len(), 10);
    // Without its validation records: a usage error.
    assert_usage(
        &mut cmd_on(format!("recordio:{}", packed.join("train").display())),
        "--val-data",
    );
}

#[test]
fn a_file_that_does_not_decode_is_replaced_counted_and_bounded() {
    // A small tree of two classes, each split holding one file that is not an image: the run
    // goes on with the next sample in its place and counts it; with --max-bad-inputs 0 it stops
    // (exit 1) naming the file.
    let digits = digits_twice().join("folder");
    let tmp = tempfile::tempdir().unwrap();
    for split in ["train", "val"] {
        for class in ["3", "7"] {
            let from = digits.join(split).join(class);
            let to = tmp.path().join(split).join(class);
            std::fs::create_dir_all(&to).unwrap();
            let mut names: Vec<_> = std::fs::read_dir(&from)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names.iter().take(8) {
                std::fs::copy(from.join(n), to.join(n)).unwrap();
            }
        }
        std::fs::write(
            tmp.path().join(split).join("7/broken.png"),
            b"\x89PNG\r\n\x1a\nnot really",
        )
        .unwrap();
    }
    // The loader is the point: the small network (2 classes) trains.
    let run_for = |epochs: &str, extra: &[&str]| {
        small_on(format!("imagefolder:{}", tmp.path().display()), 2)
            .args(["--epochs", epochs, "--batch-size", "4"])
            .args([
                "--image-size",
                "32",
                "--transform",
                "none",
                "--workers",
                "1",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let run = |extra: &[&str]| run_for("1", extra);
    let out = run(&[]);
    let recs = records(&out);
    assert_eq!(recs.items[0].bad_inputs, 2, "one in each split");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("broken.png"),
        "named in a warning: {stderr}"
    );
    let out = run(&["--max-bad-inputs", "0"]);
    let stderr = testkit::exit_stderr(&out, 1);
    testkit::assert_mentions(&stderr, &["--max-bad-inputs 0", "broken.png"]);
    // The bound is on distinct files: the same broken file met again each epoch is one file
    // (it stopped a run once its skips, counted again every epoch, passed the bound).
    let out = run_for("4", &["--max-bad-inputs", "1"]);
    let recs = records(&out);
    let skipped: Vec<usize> = recs.items.iter().map(|e| e.bad_inputs).collect();
    assert_eq!(
        skipped,
        [2, 2, 2, 2],
        "each epoch still counts what it skipped"
    );
}

#[test]
fn a_bad_file_is_replaced_by_the_next_sample_of_the_ranks_order() {
    // Rank 0 of 2, unshuffled, takes samples 0, 2, 4, 6: with sample 2 broken, its place goes to
    // sample 4 (the next of rank 0's), not to sample 3 (the dataset's next, rank 1's).
    let from = digits_twice().join("folder/train/1");
    let tmp = tempfile::tempdir().unwrap();
    for split in ["train", "val"] {
        let to = tmp.path().join(split).join("c");
        std::fs::create_dir_all(&to).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&from)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for (i, n) in names.iter().take(8).enumerate() {
            std::fs::copy(from.join(n), to.join(format!("{i}.png"))).unwrap();
        }
        std::fs::write(to.join("2.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    }
    let npz = tmp.path().join("rank0.npz");
    let out = cmd_on(format!("imagefolder:{}", tmp.path().display()))
        .args(["--rank", "0", "--world-size", "2", "--no-shuffle"])
        .args([
            "--transform",
            "none",
            "--image-size",
            "32",
            "--batch-size",
            "4",
        ])
        .args(["--dump-batches", "2", "--dump"])
        .arg(&npz)
        .output()
        .unwrap();
    ok(&out);
    let script = r#"
import sys, numpy as np
d = np.load(sys.argv[1])
# The replaced sample is named by what it holds: sample 4's index and path, not the broken 2's.
assert list(d["indices"]) == [0, 4, 4, 6], d["indices"]
paths = bytes(d["paths"]).decode().splitlines()
assert [p.rsplit("/", 1)[1] for p in paths] == ["0.png", "4.png", "4.png", "6.png"], paths
x = d["images"]
assert np.array_equal(x[1], x[2]), "sample 2 is not replaced by sample 4"
assert not np.array_equal(x[0], x[2]) and not np.array_equal(x[2], x[3])
"#;
    python([std::ffi::OsStr::new("-c"), script.as_ref(), npz.as_os_str()]);
}

#[test]
fn shards_train_exactly_as_the_image_folder_they_were_packed_from() {
    // Unshuffled, one rank and one stream, the shards' order is the folder's: the same samples,
    // labels and pixels, so the same run to the bit.
    let common = [
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--batch-size",
        "32",
        "--no-shuffle",
        "--transform",
        "flip",
        "--image-size",
        "32",
        "--normalize",
        "0.5",
        "--workers",
        "1",
    ];
    let dir = digits_twice();
    // The data is the point: the small network (10 classes) trains.
    let folder = records(
        &small_on(format!("imagefolder:{}", dir.join("folder").display()), 10)
            .args(common)
            .output()
            .unwrap(),
    );
    let shards = records(
        &with_small_net(&mut digit_shards(), 10)
            .args(common)
            .output()
            .unwrap(),
    );
    let (a, b) = (&folder.items[0], &shards.items[0]);
    assert_same_figures(a, b);
    assert_eq!(b.classes, digit_classes());
    // Without validation shards, or with a flag only shards take on other data: usage errors.
    assert_usage(
        &mut cmd_on(format!(
            "wds:{}/train-00000.tar",
            dir.join("shards").display()
        )),
        "--val-data PATTERN2",
    );
    assert_usage(
        cmd_on(format!("imagefolder:{}", dir.join("folder").display()))
            .args(["--shuffle-buffer", "10"]),
        "--shuffle-buffer applies to --data wds:PATTERN",
    );
}

#[test]
fn two_ranks_of_three_streams_take_every_shard_sample_once_an_epoch() {
    // Each rank's whole first epoch as its loader gives it (shuffled shards split over 2 ranks,
    // then over 3 streams with their shuffle buffers): together, every sample exactly once.
    let tmp = tempfile::tempdir().unwrap();
    for rank in ["0", "1"] {
        let out = digit_shards()
            .args([
                "--rank",
                rank,
                "--world-size",
                "2",
                "--workers",
                "3",
                "--shuffle-buffer",
                "50",
                "--transform",
                "none",
                "--image-size",
                "32",
                "--batch-size",
                "32",
                "--dump-batches",
                "1000",
            ])
            .arg("--dump")
            .arg(tmp.path().join(format!("rank{rank}.npz")))
            .output()
            .unwrap();
        ok(&out);
    }
    let script = r#"
import sys, numpy as np, webdataset as wds
names = lambda f: np.load(f)["paths"].tobytes().decode().split("\n")[:-1]
r0, r1 = names(sys.argv[1] + "/rank0.npz"), names(sys.argv[1] + "/rank1.npz")
every = [s["__url__"] + ":" + s["__key__"] for s in wds.WebDataset(sys.argv[2], shardshuffle=False)]
assert len(every) == 1438 and len(r0) == len(r1) == 719, (len(every), len(r0), len(r1))
assert sorted(r0 + r1) == sorted(every), "not every sample once"
assert r0 + r1 != every, "not shuffled"
# Each rank reads its own shards: 7 of 200 samples and one of 38, so the rank with the short
# one takes the other's last 81 samples, after its own 638.
own = lambda r: {p.split(":")[0] for p in r[:638]}
assert not own(r0) & own(r1), (own(r0), own(r1))
print("ok")
"#;
    let dir = digits_twice().join("shards");
    let pattern = format!("{}/train-{{00000..00007}}.tar", dir.display());
    python([
        std::ffi::OsStr::new("-c"),
        script.as_ref(),
        tmp.path().as_os_str(),
        pattern.as_ref(),
    ]);
}

/// A label sizes the model's last layer: one `.cls` of 999,999,999 in a shard asked for a 24 GB
/// allocation (abort), 5,000,000 for a 10 GB layer. Labels are bounded before anything is sized
/// by them: past 100,000 classes the run must state their number with --num-classes, and a
/// label past the stated number names its sample.
#[test]
fn a_huge_label_sizes_nothing_and_num_classes_states_the_classes() {
    let tmp = tempfile::tempdir().unwrap();
    let make = r#"
import io, sys, tarfile
from PIL import Image
def shard(path, labels):
    with tarfile.open(path, "w") as t:
        for i, label in enumerate(labels):
            png = io.BytesIO()
            Image.new("RGB", (8, 8), (40 * i % 256, 90, 200)).save(png, "PNG")
            for suffix, data in (("png", png.getvalue()), ("cls", str(label).encode())):
                info = tarfile.TarInfo("%03d.%s" % (i, suffix))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
shard(sys.argv[1] + "/huge.tar", [0, 1, 999999999, 2])
shard(sys.argv[1] + "/big.tar", [0, 1, 5000000, 2])
shard(sys.argv[1] + "/small.tar", [0, 1, 2, 3])
"#;
    testkit::run_python(["-c".as_ref(), make.as_ref(), tmp.path().as_os_str()]);
    let command = |train: &str, val: &str, extra: &[&str]| {
        let mut c = cmd_on(format!("wds:{}", tmp.path().join(train).display()));
        c.arg("--val-data")
            .arg(tmp.path().join(val))
            .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "2"])
            .args(["--image-size", "8", "--stem", "cifar"])
            .args(extra);
        c
    };
    let run = |train: &str, val: &str, extra: &[&str]| command(train, val, extra).output().unwrap();
    for (train, val) in [("huge.tar", "small.tar"), ("small.tar", "big.tar")] {
        let o = run(train, val, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{train} {val}: {err}");
        testkit::assert_mentions(&err, &[":002: label", "--num-classes"]);
    }
    let o = run("small.tar", "small.tar", &["--num-classes", "3"]);
    let err = testkit::exit_stderr(&o, 1);
    testkit::assert_mentions(&err, &["label 3", "--num-classes is 3"]);
    let r = records(&run("small.tar", "small.tar", &["--num-classes", "1000"]));
    assert_eq!(r.items[0].classes.len(), 1000);
    assert_usage(
        cmd().args(["--num-classes", "10"]),
        "--num-classes applies to --data recordio:PREFIX and wds:PATTERN",
    );
    assert_usage(
        &mut command("small.tar", "small.tar", &["--num-classes", "20000000"]),
        "--num-classes",
    );
}

/// RecordIO labels are bounded as the shards' are: one record's label of 5,000,000 (a
/// damaged or hostile `.rec`) is an error naming the record, not a 10 GB last layer.
#[test]
fn a_huge_recordio_label_sizes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("faces");
    let make = r#"
import io, sys
sys.path.insert(0, sys.argv[2])
from PIL import Image
from mxnet_recordio import pack, write
def png():
    b = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(b, "PNG")
    return b.getvalue()
write(sys.argv[1], [(0, pack([3.0, 3.0], b"")), (1, pack(0.0, png())), (2, pack(5000000.0, png()))])
"#;
    let reference = root().join("scripts/reference");
    testkit::run_python([
        "-c".as_ref(),
        make.as_ref(),
        prefix.as_os_str(),
        reference.as_os_str(),
    ]);
    let o = cmd_on(format!("recordio:{}", prefix.display()))
        .arg("--val-data")
        .arg(&prefix)
        .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "2"])
        .args(["--image-size", "8", "--stem", "cifar"])
        .output()
        .unwrap();
    let err = testkit::exit_stderr(&o, 1);
    testkit::assert_mentions(&err, &["faces.rec:2: label 5000000", "--num-classes"]);
}

/// The decoder's bound on pixels is a flag of ddp-train's too: a bad input's message advises
/// `--max-pixels`, which ddp-train did not take (the advice could not be followed).
#[test]
fn max_pixels_bounds_the_images_and_the_advice_to_raise_it_works() {
    let dir = digits_twice();
    let folder = format!("imagefolder:{}", dir.join("folder").display());
    let run = |limit: &str| {
        cmd_on(&folder)
            .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "4"])
            .args([
                "--image-size",
                "28",
                "--workers",
                "1",
                "--max-val-steps",
                "1",
            ])
            .args(["--max-bad-inputs", "0", "--max-pixels", limit])
            .output()
            .unwrap()
    };
    // The digits' PNGs are 32x32 = 1024 pixels.
    let out = run("1023");
    let stderr = testkit::exit_stderr(&out, 1);
    testkit::assert_mentions(&stderr, &["over the limit of 1023", "raise --max-pixels"]);
    ok(&run("1024"));
    assert_usage(
        cmd_on(format!("cifar100:{}", dir.display())).args(["--max-pixels", "1024"]),
        "--max-pixels applies to --data imagefolder",
    );
}
