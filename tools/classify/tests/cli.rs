//! `classify` through its command line, on checkpoints that ddp-train trains here in seconds on
//! the digits data (scripts/make-digits-cifar): its probabilities against torchvision's, its
//! error records, and its evaluation against ddp-train's validation of the same checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use records::{EpochRecord, EvaluationRecord, PredictionRecord};

const BIN: &str = env!("CARGO_BIN_EXE_classify");

/// The digits (DIR: CIFAR-100 binaries) also as a PNG tree in ImageFolder's order
/// (DIR/folder/{train,val}) and as webdataset shards of the same order (DIR/shards), made once.
fn digits() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::fixture_dir("classify");
        let (folder, shards) = (dir.join("folder"), dir.join("shards"));
        testkit::make_digits(
            &dir,
            &[
                "--class-order".as_ref(),
                "--image-folder".as_ref(),
                folder.as_os_str(),
                "--shards".as_ref(),
                shards.as_os_str(),
            ],
        );
        dir
    })
}

/// `ddp-train --device cpu --threads 2` with no launcher variables.
fn ddp_train() -> Command {
    let mut c = testkit::without_launcher(testkit::bin("ddp-train"));
    c.args(["--device", "cpu", "--threads", "2"]);
    c
}

/// A checkpoint trained for 8 steps of 32 on `data` with `args`, and its epoch record (whose
/// validation evaluated exactly these weights).
struct Trained {
    checkpoint: PathBuf,
    epoch: EpochRecord,
    _dir: tempfile::TempDir,
}

fn train(data: &str, args: &[&str]) -> Trained {
    let dir = tempfile::tempdir().unwrap();
    let out = testkit::succeeds(
        ddp_train()
            .arg("--data")
            .arg(data)
            .args(args)
            .args(["--epochs", "1", "--max-steps", "8", "--batch-size", "32"])
            .arg("--checkpoint-dir")
            .arg(dir.path()),
    );
    let run: testkit::Batch<EpochRecord> = testkit::batch(&out.stdout);
    Trained {
        checkpoint: dir.path().join("last.safetensors"),
        epoch: run.items[0].clone(),
        _dir: dir,
    }
}

/// ResNet-18 with the ImageNet stem on the digits' PNG tree at 32x32 through the ImageNet
/// evaluation transform (Resize(36) + CenterCrop(32)), with its class names.
fn folder_model() -> &'static Trained {
    static T: OnceLock<Trained> = OnceLock::new();
    T.get_or_init(|| {
        let data = format!("imagefolder:{}", digits().join("folder").display());
        train(&data, FOLDER_FLAGS)
    })
}

/// The image-folder models' training flags: 32x32 images as evaluation prepares ImageNet's,
/// and a small learning rate: probabilities spread over the classes (a loss near ln 10), so
/// that comparing them compares every one (0.1 diverges in 8 steps: one-hot softmax).
const FOLDER_FLAGS: &[&str] = &[
    "--image-size",
    "32",
    "--transform",
    "imagenet",
    "--lr",
    "0.002",
];

/// ResNet-18 with the CIFAR stem on the digits' CIFAR binaries (normalised with the data's own
/// statistics; images as they are, 32x32).
fn cifar_model() -> &'static Trained {
    static T: OnceLock<Trained> = OnceLock::new();
    T.get_or_init(|| {
        train(
            &format!("cifar100:{}", digits().display()),
            &["--stem", "cifar"],
        )
    })
}

/// A TorchScript model (convolutions with BatchNorm, scripted by
/// scripts/reference/torchscript_models.py) trained as `folder_model` is: `--model
/// torchscript:FILE`, whose checkpoint names the file.
fn script_model() -> &'static Trained {
    static T: OnceLock<Trained> = OnceLock::new();
    T.get_or_init(|| {
        let model = testkit::scripted_model("bn", 10);
        let data = format!("imagefolder:{}", digits().join("folder").display());
        let flag = format!("--model=torchscript:{}", model.display());
        train(&data, &[FOLDER_FLAGS, &[flag.as_str()]].concat())
    })
}

/// `classify --device cpu --threads 2 --checkpoint CK ARGS`.
fn classify(checkpoint: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN)
        .args(["--device", "cpu", "--threads", "2", "--checkpoint"])
        .arg(checkpoint)
        .args(args)
        .output()
        .unwrap()
}

fn pillow_inputs() -> PathBuf {
    testkit::repo_root().join("tests/fixtures/pillow/inputs")
}

/// Softmax of torchvision's model (built by `ddp-train --print-eval-snippet`) over each image
/// prepared by the snippet's own transform: path → probabilities by class index.
fn torchvision_probs(checkpoint: &Path, images: &[PathBuf]) -> BTreeMap<String, Vec<f64>> {
    let out = Command::new(testkit::bin("ddp-train"))
        .arg("--print-eval-snippet")
        .arg(checkpoint)
        .output()
        .unwrap();
    testkit::ok(&out);
    let snippet = String::from_utf8(out.stdout).unwrap();
    let check = r#"
import json, sys
from PIL import Image
probs = {}
with torch.no_grad():
    for p in sys.argv[1:]:
        x = transform(Image.open(p).convert("RGB"))[None]
        probs[p] = torch.softmax(model(x), 1)[0].tolist()
print(json.dumps(probs))
"#;
    // The code is on the command line, so a failure's message shows it.
    let code = format!("{snippet}\n{check}");
    let out = testkit::succeeds(
        Command::new(testkit::python())
            .arg("-c")
            .arg(code)
            .args(images),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every prediction's probabilities against torchvision's for the same image, by class index;
/// the largest difference.
fn largest_difference(
    preds: &[PredictionRecord],
    want: &BTreeMap<String, Vec<f64>>,
    classes: usize,
) -> f64 {
    let mut worst = 0f64;
    for p in preds {
        let input = p.input.to_str().unwrap();
        let want = &want[input];
        assert_eq!(p.top.len(), classes, "{input}: --top-k {classes}");
        for (a, b) in p.top.iter().zip(&p.top[1..]) {
            assert!(a.prob >= b.prob, "{input}: most probable first");
        }
        for c in &p.top {
            worst = worst.max((c.prob - want[c.index]).abs());
        }
    }
    worst
}

#[test]
fn probabilities_equal_torchvisions_softmax_for_photos_of_several_formats_and_sizes() {
    // Both stems; JPEG (4:2:0, 4:4:4, progressive, CMYK, greyscale, EXIF-rotated), PNG (RGB,
    // RGBA, 16-bit, palette, grey, grey+alpha, bilevel) of several sizes through the
    // ImageNet-stem model's Resize + CenterCrop; the digits' 32x32 PNGs through the CIFAR-stem
    // model, which takes them as they are.
    let photos: Vec<PathBuf> = [
        "photo420.jpg",
        "photo444.jpg",
        "progressive.jpg",
        "cmyk.jpg",
        "gray.jpg",
        "exif6.jpg",
        "rgb.png",
        "rgba.png",
        "rgb16.png",
        "rgba16.png",
        "palette.png",
        "gray.png",
        "gray16.png",
        "la.png",
        "bilevel.png",
    ]
    .iter()
    .map(|f| pillow_inputs().join(f))
    .collect();
    let val = digits().join("folder/val");
    let digit_pngs: Vec<PathBuf> = (0..10)
        .flat_map(|d| {
            let mut v = testkit::files_under(&val.join(d.to_string()), ".png");
            v.truncate(2);
            v
        })
        .collect();
    for (what, model, images) in [
        ("imagenet stem", folder_model(), &photos),
        ("cifar stem", cifar_model(), &digit_pngs),
        ("torchscript", script_model(), &photos),
    ] {
        let args: Vec<&std::ffi::OsStr> = ["--top-k".as_ref(), "10".as_ref()]
            .into_iter()
            .chain(images.iter().map(|p| p.as_os_str()))
            .collect();
        let out = classify(&model.checkpoint, &args);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
        assert_eq!(run.items.len(), images.len(), "{what}");
        assert_eq!((run.summary.ok, run.summary.failed), (images.len(), 0));
        let inputs: Vec<&Path> = run.items.iter().map(|p| Path::new(&p.input)).collect();
        assert_eq!(
            inputs,
            images.iter().map(PathBuf::as_path).collect::<Vec<_>>()
        );
        let want = torchvision_probs(&model.checkpoint, images);
        // The same pixels (Pillow's decoding and resize, bit for bit) through the same libtorch
        // kernels, classify's batch of all the images against torchvision's one at a time
        // (float32 convolutions blocked differently): the probabilities agree to float32
        // rounding, 2e-7 here (the bound is 1e-5; what is reached is printed).
        let worst = largest_difference(&run.items, &want, 10);
        eprintln!("{what}: largest probability difference from torchvision {worst:e}");
        assert!(worst <= 1e-5, "{what}: {worst}");
    }
}

#[test]
fn unreadable_images_are_error_records_in_input_order_and_the_rest_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("notes.txt"), "not an image\n").unwrap();
    let jpeg = std::fs::read(pillow_inputs().join("photo420.jpg")).unwrap();
    std::fs::write(dir.join("cut.jpg"), &jpeg[..jpeg.len() / 3]).unwrap();
    std::fs::create_dir(dir.join("folder.png")).unwrap();
    testkit::mkfifo(&dir.join("fifo.png"));
    let good = pillow_inputs().join("rgb.png");
    let list = [
        good.clone(),
        dir.join("notes.txt"),
        dir.join("missing.png"),
        dir.join("cut.jpg"),
        dir.join("folder.png"),
        dir.join("fifo.png"),
        pillow_inputs().join("photo444.jpg"),
    ];
    let lines: String = list.iter().map(|p| format!("{}\n", p.display())).collect();
    std::fs::write(dir.join("list.txt"), lines).unwrap();
    let mut c = Command::new(BIN);
    c.args(["--device", "cpu", "--threads", "2", "--batch-size", "3"])
        .arg("--checkpoint")
        .arg(&folder_model().checkpoint)
        .stdin(std::fs::File::open(dir.join("list.txt")).unwrap());
    // A FIFO is refused, not waited on: the run ends (the deadline only catches a hang).
    let out = testkit::output_within(&mut c, std::time::Duration::from_secs(120));
    let stderr = testkit::exit_stderr(&out, 3);
    let recs = testkit::records(&out.stdout);
    let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "prediction",
            "error",
            "error",
            "error",
            "error",
            "error",
            "prediction",
            "summary"
        ]
    );
    let inputs: Vec<&str> = recs[..7]
        .iter()
        .map(|r| r["input"].as_str().unwrap())
        .collect();
    let listed: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(inputs, listed);
    let message = |i: usize| recs[i]["message"].as_str().unwrap().to_string();
    assert!(message(2).contains("No such file"), "{}", message(2));
    assert!(message(4).contains("directory"), "{}", message(4));
    assert!(message(5).contains("FIFO"), "{}", message(5));
    let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
    assert_eq!((run.summary.ok, run.summary.failed), (2, 5));
    // Five classes by default, named as the run named them.
    let top = &run.items[0].top;
    assert_eq!(top.len(), 5);
    assert!(top.iter().all(|c| c.class == c.index.to_string()));
    let sum: f64 = top.iter().map(|c| c.prob).sum();
    assert!(sum > 0.0 && sum <= 1.0 + 1e-6, "{sum}");
    assert!(stderr.contains("5 of 7 inputs failed"), "{stderr}");
}

/// (evaluation, predictions) of `classify --data DATA --batch-size 64`.
fn evaluate(data: &str, extra: &[&std::ffi::OsStr]) -> (EvaluationRecord, Vec<PredictionRecord>) {
    let args: Vec<&std::ffi::OsStr> = [
        "--data".as_ref(),
        data.as_ref(),
        "--batch-size".as_ref(),
        "64".as_ref(),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let out = classify(&folder_model().checkpoint, &args);
    assert!(
        out.status.success(),
        "{data}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
    let types = &run.types;
    assert_eq!(types[types.len() - 2], "evaluation", "{types:?}");
    (testkit::one::<EvaluationRecord>(&out.stdout), run.items)
}

#[test]
fn the_evaluation_equals_ddp_trains_validation_of_the_checkpoint() {
    // ddp-train evaluated these weights on the 359 validation PNGs in batches of 2 x 32; the same
    // batches through the same decoding, model and sums give the same figures to the bit.
    let model = folder_model();
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("confusion.csv");
    let data = format!("imagefolder:{}", digits().join("folder").display());
    let (e, preds) = evaluate(&data, &["--confusion".as_ref(), csv.as_os_str()]);
    let epoch = &model.epoch;
    assert_eq!(
        (e.images, e.loss, e.top1),
        (epoch.val_images, epoch.val_loss, epoch.val_top1)
    );
    // Top-5, per class and the confusion matrix, counted again from the prediction records.
    assert_eq!(preds.len(), e.images);
    let mut per_class = [(0usize, 0usize); 10];
    let mut top5 = 0;
    let mut confusion = vec![vec![0usize; 10]; 10];
    for p in &preds {
        let label = p.label.unwrap();
        per_class[label].0 += 1;
        per_class[label].1 += usize::from(p.top[0].index == label);
        top5 += usize::from(p.top.iter().any(|c| c.index == label));
        confusion[label][p.top[0].index] += 1;
        assert!(
            p.input.to_str().unwrap().contains("/folder/val/"),
            "{:?}",
            p.input
        );
    }
    assert!(
        (e.top5 - 100.0 * top5 as f64 / preds.len() as f64).abs() < 1e-9,
        "{} vs {top5} of {}; top-1 {}",
        e.top5,
        preds.len(),
        e.top1
    );
    assert_eq!(e.top5_of, 5);
    for (c, pc) in e.per_class.iter().enumerate() {
        assert_eq!((pc.index, pc.class.as_str()), (c, c.to_string().as_str()));
        assert_eq!(pc.images, per_class[c].0);
        let want = 100.0 * per_class[c].1 as f64 / per_class[c].0 as f64;
        assert!((pc.top1.unwrap() - want).abs() < 1e-9);
    }
    assert_eq!(e.confusion.as_deref(), Some(csv.as_path()));
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows[0][0], "true\\predicted");
    assert_eq!(
        &rows[0][1..],
        ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
    );
    for (t, row) in rows[1..].iter().enumerate() {
        assert_eq!(row[0], t.to_string());
        let counts: Vec<usize> = row[1..].iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(counts, confusion[t], "row {t}");
    }
}

#[test]
fn shards_and_recordio_evaluate_as_the_image_folder_they_were_packed_from() {
    // The same PNGs in the same order and with the same labels: the same figures to the bit.
    let folder = format!("imagefolder:{}", digits().join("folder/val").display());
    let shards = format!(
        "wds:{}/val-{{00000..00001}}.tar",
        digits().join("shards").display()
    );
    // RecordIO by the transcription of MXNet's writer, in ImageFolder's order.
    let tmp = tempfile::tempdir().unwrap();
    testkit::reference_script(
        "mxnet_recordio.py",
        [
            "pack-folder".as_ref(),
            digits().join("folder/val").as_os_str(),
            tmp.path().join("val").as_os_str(),
        ],
    );
    let records = format!("recordio:{}", tmp.path().join("val").display());
    let (a, _) = evaluate(&folder, &[]);
    for (data, name) in [(&shards, "val-00000.tar:"), (&records, "val.rec:")] {
        let (b, preds) = evaluate(data, &[]);
        assert_eq!(
            (a.images, a.loss, a.top1, a.top5, &a.per_class),
            (b.images, b.loss, b.top1, b.top5, &b.per_class),
            "{data}"
        );
        let first = preds[0].input.to_str().unwrap();
        assert!(first.contains(name), "{first}");
    }
}

#[test]
fn data_and_checkpoints_that_do_not_fit_are_refused_naming_why() {
    let model = folder_model();
    let tmp = tempfile::tempdir().unwrap();
    // Class folders other than the model's.
    for c in ["cat", "dog"] {
        testkit::write_image(&tmp.path().join(format!("pets/{c}/1.png")), 40, 40, 1);
    }
    let pets = format!("imagefolder:{}", tmp.path().join("pets").display());
    let out = classify(&model.checkpoint, &["--data".as_ref(), pets.as_ref()]);
    testkit::exits_saying(&out, 2, "class folders");
    // The training half of a checkpoint is no model.
    let train_half = model.checkpoint.with_file_name("last.train.safetensors");
    let out = classify(&train_half, &[pillow_inputs().join("rgb.png").as_os_str()]);
    testkit::exits_saying(&out, 1, "not its .train.safetensors");
    // A FIFO as the checkpoint is refused, not waited on (the deadline only catches a hang).
    testkit::mkfifo(&tmp.path().join("fifo.safetensors"));
    let mut c = Command::new(BIN);
    c.args(["--device", "cpu", "--checkpoint"])
        .arg(tmp.path().join("fifo.safetensors"))
        .arg(pillow_inputs().join("rgb.png"));
    let out = testkit::output_within(&mut c, std::time::Duration::from_secs(120));
    testkit::exits_saying(&out, 1, "FIFO");
    // --confusion without --data is a usage error.
    let out = classify(
        &model.checkpoint,
        &["--confusion".as_ref(), "c.csv".as_ref()],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn packed_samples_name_the_file_they_were_packed_from() {
    // The validation PNGs and one that pack takes (its first bytes are PNG's) but nothing
    // decodes, packed both ways; each prediction names its file, whose prediction from the
    // folder itself is the same.
    let tmp = tempfile::tempdir().unwrap();
    let val = tmp.path().join("val");
    let from = digits().join("folder/val");
    for class in std::fs::read_dir(&from).unwrap() {
        let class = class.unwrap().path();
        let to = val.join(class.file_name().unwrap());
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&class).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        val.join("3/bad.png"),
        b"\x89PNG\r\n\x1a\nnot the rest of a PNG",
    )
    .unwrap();
    let folder = format!("imagefolder:{}", val.display());
    let out = classify(
        &folder_model().checkpoint,
        &[
            "--data".as_ref(),
            folder.as_ref(),
            "--top-k".as_ref(),
            "10".as_ref(),
        ],
    );
    testkit::exits(&out, 3);
    let by_file: BTreeMap<PathBuf, PredictionRecord> =
        testkit::batch::<PredictionRecord>(&out.stdout)
            .items
            .into_iter()
            .map(|p| (PathBuf::from(&p.input), p))
            .collect();
    assert_eq!(by_file.len(), 359, "the readable PNGs");
    for format in ["wds", "recordio"] {
        let packed = tmp.path().join(format);
        let out = Command::new(testkit::bin("pack"))
            .arg(&val)
            .arg("-o")
            .arg(&packed)
            .args(["--format", format])
            .output()
            .unwrap();
        testkit::ok(&out);
        let record: serde_json::Value =
            serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
        let data = record["data"].as_str().unwrap().to_string();
        let out = classify(
            &folder_model().checkpoint,
            &[
                "--data".as_ref(),
                data.as_ref(),
                "--top-k".as_ref(),
                "10".as_ref(),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{data}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let preds = testkit::batch::<PredictionRecord>(&out.stdout).items;
        assert_eq!(preds.len(), 359, "{data}");
        for p in &preds {
            let file = val.join(p.packed_path.as_ref().expect("a packed sample's path"));
            let want = &by_file[&file];
            assert_eq!(
                (&p.top, p.label),
                (&want.top, want.label),
                "{data}: {file:?}"
            );
        }
        // The sample nothing decodes: its error record says where it came from.
        let bad = stdout
            .lines()
            .find(|l| l.contains(r#""type":"error""#))
            .unwrap_or_else(|| panic!("{data}: no error record: {stdout}"));
        assert!(bad.contains(r#"(packed from \"3/bad.png\")"#), "{bad}");
    }
}

#[test]
fn an_image_over_max_pixels_is_an_error_record_whose_advice_works() {
    let model = folder_model();
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("40x40.png");
    testkit::write_image(&image, 40, 40, 3);
    // 1600 pixels over a limit of 1599: the record names the flag that raises it.
    let out = classify(
        &model.checkpoint,
        &["--max-pixels".as_ref(), "1599".as_ref(), image.as_os_str()],
    );
    testkit::exits(&out, 3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(r#""type":"error""#) && stdout.contains("raise --max-pixels"),
        "{stdout}"
    );
    let out = classify(
        &model.checkpoint,
        &["--max-pixels".as_ref(), "1600".as_ref(), image.as_os_str()],
    );
    testkit::ok(&out);
}

#[test]
fn torchscript_modules_that_cannot_classify_are_refused_naming_the_file_and_why() {
    let model = script_model();
    let tmp = tempfile::tempdir().unwrap();
    let image = pillow_inputs().join("rgb.png");
    // Every module of this test made by one Python process.
    let made = testkit::scripted_models(&[("int_logits", 10), ("narrow", 10), ("two_rows", 10)]);
    // The run's state_dict names, but int64 "logits" in evaluation (softmax would have
    // ranked their float conversion), or 5 of the 10 classes.
    for ((kind, why), file) in [
        ("int_logits", "Int64"),
        ("narrow", "returns [1, 5] for one 32x32 image"),
    ]
    .into_iter()
    .zip(&made)
    {
        let out = classify(
            &model.checkpoint,
            &["--model".as_ref(), file.as_os_str(), image.as_os_str()],
        );
        let stderr = testkit::exit_stderr(&out, 1);
        assert!(
            stderr.contains(why) && stderr.contains(&format!("{kind}.pt")),
            "{kind}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{kind}: no records before the model is usable"
        );
    }
    // Right for one image, two rows for a batch of three: the batch's error, not a panic.
    let file = made[2];
    let out = classify(
        &model.checkpoint,
        &[
            "--model".as_ref(),
            file.as_os_str(),
            image.as_os_str(),
            image.as_os_str(),
            image.as_os_str(),
        ],
    );
    let stderr = testkit::exit_stderr(&out, 1);
    assert!(
        stderr.contains("two_rows.pt")
            && stderr.contains("for a batch of shape [3, 3, 32, 32] it returns")
            && !stderr.contains("index out of bounds"),
        "{stderr}"
    );
    // Not a regular file, or not a module: refused before libtorch reads it.
    testkit::mkfifo(&tmp.path().join("fifo.pt"));
    std::fs::create_dir(tmp.path().join("dir.pt")).unwrap();
    std::fs::write(tmp.path().join("empty.pt"), b"").unwrap();
    for (name, why) in [
        ("fifo.pt", "FIFO"),
        ("dir.pt", "directory"),
        ("empty.pt", "not a TorchScript module"),
    ] {
        let file = tmp.path().join(name);
        let mut c = Command::new(BIN);
        c.args(["--device", "cpu", "--checkpoint"])
            .arg(&model.checkpoint)
            .arg("--model")
            .arg(&file)
            .arg(&image);
        let out = testkit::output_within(&mut c, std::time::Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(why) && stderr.contains(name),
            "{name}: {stderr}"
        );
    }
    // A module under a name that is not UTF-8 is the module.
    use std::os::unix::ffi::OsStrExt;
    let odd = tmp.path().join(std::ffi::OsStr::from_bytes(b"b\xffn.pt"));
    let trained = classify(&model.checkpoint, &[image.as_os_str()]);
    assert!(trained.status.success());
    let meta = train::checkpoint::load(&model.checkpoint, tch::Device::Cpu)
        .unwrap()
        .1;
    std::fs::copy(&meta["model_file"], &odd).unwrap();
    let out = classify(
        &model.checkpoint,
        &["--model".as_ref(), odd.as_os_str(), image.as_os_str()],
    );
    testkit::ok(&out);
    let first = |o: &Output| o.stdout.split(|&b| b == b'\n').next().unwrap().to_vec();
    assert_eq!(first(&out), first(&trained), "the same prediction record");
}

#[test]
fn a_labelled_image_that_cannot_be_used_is_an_error_record_left_out_of_the_figures() {
    // The validation tree again, with a damaged PNG among class 3's: its error record, and the
    // figures of the others: the same images as the clean tree's, in other batches, whose
    // float32 convolutions may round differently (oneDNN blocks by batch), so the loss to 1e-6.
    let tmp = tempfile::tempdir().unwrap();
    let val = digits().join("folder/val");
    for d in 0..10 {
        let to = tmp.path().join(d.to_string());
        std::fs::create_dir_all(&to).unwrap();
        for f in testkit::files_under(&val.join(d.to_string()), ".png") {
            std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
    }
    let bad = tmp.path().join("3/0-damaged.png");
    std::fs::write(&bad, b"\x89PNG\r\n\x1a\nnot the rest of a PNG").unwrap();
    let (clean, _) = evaluate(&format!("imagefolder:{}", val.display()), &[]);
    let data = format!("imagefolder:{}", tmp.path().display());
    let out = classify(
        &folder_model().checkpoint,
        &[
            "--data".as_ref(),
            data.as_ref(),
            "--batch-size".as_ref(),
            "64".as_ref(),
        ],
    );
    testkit::exits(&out, 3);
    let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
    assert_eq!(run.errors.len(), 1);
    assert_eq!(Path::new(&run.errors[0].input), bad.as_path());
    assert_eq!((run.summary.ok, run.summary.failed), (clean.images, 1));
    let e = testkit::one::<EvaluationRecord>(&out.stdout);
    assert_eq!(
        (e.images, e.top1, e.top5, &e.per_class),
        (clean.images, clean.top1, clean.top5, &clean.per_class)
    );
    assert!(
        (e.loss - clean.loss).abs() <= 1e-6 * clean.loss,
        "{} {}",
        e.loss,
        clean.loss
    );
}

#[test]
fn sigint_stops_between_batches_with_130_and_no_summary() {
    use std::io::BufRead as _;
    // 400 images in batches of 4, listed in a file (no read waits): the signal comes after the
    // first record, and the run stops at the next batch.
    let tmp = tempfile::tempdir().unwrap();
    let pngs = testkit::files_under(&digits().join("folder/val"), ".png");
    let list: String = (0..400)
        .map(|i| format!("{}\n", pngs[i % pngs.len()].display()))
        .collect();
    std::fs::write(tmp.path().join("list.txt"), list).unwrap();
    let mut child = Command::new(BIN)
        .args(["--device", "cpu", "--threads", "1", "--batch-size", "4"])
        .arg("--checkpoint")
        .arg(&folder_model().checkpoint)
        .stdin(std::fs::File::open(tmp.path().join("list.txt")).unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains(r#""type":"prediction""#), "{first}");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no exit after SIGINT");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    assert!(rest.len() < 399, "{} records after the signal", rest.len());
    assert!(rest.iter().all(|l| !l.contains(r#""type":"summary""#)));
}

#[test]
fn a_shard_record_argument_is_its_paths() {
    // What `shard-list -n 4 | parallel classify ...` hands each process.
    let paths = [
        pillow_inputs().join("rgb.png"),
        pillow_inputs().join("photo420.jpg"),
    ];
    let shard = serde_json::json!({
        "type": "shard",
        "shard": 0,
        "shards": 4,
        "paths": [paths[0], paths[1]],
    })
    .to_string();
    let out = classify(&folder_model().checkpoint, &[shard.as_ref()]);
    testkit::ok(&out);
    let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
    let inputs: Vec<&Path> = run.items.iter().map(|p| Path::new(&p.input)).collect();
    assert_eq!(inputs, [paths[0].as_path(), paths[1].as_path()]);
}

#[test]
fn labelled_data_none_of_which_can_be_used_ends_with_its_errors_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    for d in 0..10 {
        let dir = tmp.path().join(d.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x.png"), b"\x89PNG\r\n\x1a\ncut").unwrap();
    }
    let data = format!("imagefolder:{}", tmp.path().display());
    let out = classify(
        &folder_model().checkpoint,
        &["--data".as_ref(), data.as_ref()],
    );
    let stderr = testkit::exit_stderr(&out, 3);
    let run: testkit::Batch<PredictionRecord> = testkit::batch(&out.stdout);
    assert_eq!((run.items.len(), run.errors.len()), (0, 10));
    assert!(
        !run.types.iter().any(|t| t == "evaluation"),
        "{:?}",
        run.types
    );
    assert!(stderr.contains("no evaluation"), "{stderr}");
}
