//! Cross-tool pipelines, run through `sh` exactly as a user types them.

use std::path::Path;

use testkit::{of_type, photo_tree as tree, python, records, sh, shared_dir, write_latent};

#[test]
fn find_shard_list_crop_resize_covers_every_image_once() {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    let out = sh(
        tmp.path(),
        "find imgs -type f | sort | shard-list -n 2 | while read -r shard; do crop-resize -q -r 16 -o out \"$shard\" || exit 1; done",
    );
    testkit::ok(&out);
    let recs = records(&out.stdout);
    let images = of_type(&recs, "image");
    assert_eq!(images.len(), 9);
    assert_eq!(of_type(&recs, "summary").len(), 2, "one summary per shard");
    for r in images {
        let output = r["output"].as_str().unwrap();
        let img = image::open(output).unwrap();
        assert_eq!((img.width(), img.height()), (16, 16));
        let input = r["input"].as_str().unwrap();
        assert!(
            output.ends_with(
                &Path::new(input)
                    .with_extension("png")
                    .to_string_lossy()
                    .into_owned()
            )
        );
    }
}

#[test]
fn by_dir_shards_keep_directories_together() {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    let out = sh(
        tmp.path(),
        "find imgs -type f | sort | shard-list -n 2 --by-dir",
    );
    assert!(out.status.success());
    let recs = records(&out.stdout);
    assert_eq!(recs.len(), 2);
    let dirs = |r: &serde_json::Value| -> Vec<String> {
        let mut d: Vec<String> = r["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                Path::new(p.as_str().unwrap())
                    .parent()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        d.dedup();
        d
    };
    assert_eq!(dirs(&recs[0]), vec!["imgs/a", "imgs/c"]);
    assert_eq!(dirs(&recs[1]), vec!["imgs/b"]);
}

#[test]
fn gather_reads_a_previous_stage_records_and_numpy_loads_the_result() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..5 {
        write_latent(
            &tmp.path().join(format!("lat/{i}.npz")),
            1,
            4,
            i as f32 * 10.0,
        );
    }
    // A stage's records name the image ("input") and the latent ("output").
    let lines: String = (0..5)
        .map(|i| {
            format!(
                "{{\"type\":\"latent\",\"input\":\"imgs/{i}.jpg\",\"output\":\"lat/{i}.npz\"}}\n"
            )
        })
        .collect::<String>()
        + "{\"type\":\"summary\",\"ok\":5}\n";
    std::fs::write(tmp.path().join("records.jsonl"), lines).unwrap();
    let out = sh(tmp.path(), "cat records.jsonl | gather-npz -o all.npz");
    testkit::ok(&out);
    let recs = records(&out.stdout);
    assert_eq!(recs.last().unwrap()["shape"], serde_json::json!([5, 1, 4]));

    let mut npz =
        ndarray_npy::NpzReader::new(std::fs::File::open(tmp.path().join("all.npz")).unwrap())
            .unwrap();
    let w: ndarray::Array3<f32> = npz.by_name("w").unwrap();
    assert_eq!(w[[3, 0, 2]], 32.0);

    // numpy itself, when the project venv is there (scripts/test.sh sets SHARDKIT_PYTHON).
    if std::env::var_os("SHARDKIT_PYTHON").is_some() {
        let check = "import numpy as np; f = np.load('all.npz'); \
                     assert f['w'].shape == (5, 1, 4) and f['w'].dtype == np.float32; \
                     assert list(f['names']) == ['imgs/%d.jpg' % i for i in range(5)], f['names']; \
                     assert f['w'][4, 0, 3] == 43.0";
        testkit::succeeds(
            std::process::Command::new(python())
                .args(["-c", check])
                .current_dir(tmp.path()),
        );
    }
}

/// Seed 000's whole job on the CPU with the tiny upstream fixture network: shards of photos,
/// each prepared and projected, every w gathered into one array, and the projections rendered.
#[test]
fn shard_crop_project_gather_generate() {
    let g = shared_dir().join("fixtures/stylegan2/tiny-skip/G.safetensors");
    let python = python();
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    let script = format!(
        "set -e
        {python} {root}/../scripts/convert-vgg16-lpips --random 2 -o vgg.safetensors > /dev/null
        find imgs -type f | sort | shard-list -n 2 --by-dir > shards.jsonl
        while read -r shard; do
          crop-resize -q -r 32 -o prepared \"$shard\" | project-one-gpu -q --device cpu --network {g} --vgg vgg.safetensors --steps 3 --w-avg-samples 200 -b 4
        done < shards.jsonl > latents.jsonl
        gather-npz -q -o all.npz < latents.jsonl > gathered.jsonl
        generate -q --device cpu --network {g} -o projected < latents.jsonl > rendered.jsonl
        {python} -c \"import numpy as np; f = np.load('all.npz'); print(f['w'].shape, len(f['names']))\"",
        root = env!("CARGO_MANIFEST_DIR"),
        g = g.display()
    );
    let out = sh(tmp.path(), &script);
    testkit::ok(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(9, 1, 32) 9");
    let latents = records(&std::fs::read(tmp.path().join("latents.jsonl")).unwrap());
    let latents = of_type(&latents, "latent");
    assert_eq!(latents.len(), 9);
    for r in &latents {
        // Named after the photo and written beside it, as seed 000 does.
        let input = r["input"].as_str().unwrap();
        assert!(input.starts_with("imgs/"), "{input}");
        assert!(
            r["output"].as_str().unwrap().ends_with(
                &Path::new(input)
                    .with_extension("npz")
                    .to_string_lossy()
                    .into_owned()
            )
        );
    }
    let rendered = records(&std::fs::read(tmp.path().join("rendered.jsonl")).unwrap());
    let rendered = of_type(&rendered, "image");
    assert_eq!(rendered.len(), 9);
    for r in rendered {
        // Mirrored by the photo's path: a/0.jpg and b/0.png do not collide.
        let input = r["input"].as_str().unwrap();
        let want = tmp
            .path()
            .join("projected")
            .join(input)
            .with_extension("png");
        assert_eq!(r["output"].as_str().unwrap(), want.to_str().unwrap());
        assert!(want.is_file());
    }
}

/// File names that are not UTF-8 flow through a whole pipeline: find → shard-list →
/// crop-resize, and latents → gather-npz, whose `names` numpy decodes as it decodes file names
/// (os.fsencode gives the bytes back). Each tool refused such a name as an argument (exit 2), and
/// no record could carry it, before.
#[test]
fn names_that_are_not_utf8_survive_every_stage() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let odd = OsStr::from_bytes(b"caf\xe9 \xff.png");
    testkit::write_image(&d.join("imgs").join(odd), 20, 12, 1);
    testkit::write_image(&d.join("imgs/plain.png"), 12, 20, 2);
    let out = sh(
        d,
        "find imgs -type f | sort | shard-list -n 1 | crop-resize -q -r 8 -o out -",
    );
    testkit::ok(&out);
    let recs = records(&out.stdout);
    let images = of_type(&recs, "image");
    assert_eq!(images.len(), 2);
    let bytes = |v: &serde_json::Value| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(v["bytes"].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(bytes(&images[0]["input"]), b"imgs/caf\xe9 \xff.png");
    let output = OsStr::from_bytes(&bytes(&images[0]["output"])).to_owned();
    assert!(Path::new(&output).ends_with(Path::new("out/imgs").join(odd)));
    assert_eq!(image::image_dimensions(&output).unwrap(), (8, 8));
    assert_eq!(images[1]["input"], "imgs/plain.png");

    write_latent(&d.join("lat").join(odd).with_extension("npz"), 1, 2, 0.0);
    write_latent(&d.join("lat/b.npz"), 1, 2, 5.0);
    let out = sh(
        d,
        "gather-npz -o all.npz lat/* && gather-npz --jsonl -o all.jsonl lat/*",
    );
    testkit::ok(&out);
    let manifest = std::fs::read_to_string(d.join("all.jsonl")).unwrap();
    // The shell's glob order: b.npz first.
    let second: serde_json::Value = serde_json::from_str(manifest.lines().nth(1).unwrap()).unwrap();
    assert_eq!(bytes(&second["name"]), b"lat/caf\xe9 \xff.npz");
    let check = "import numpy as np, os; f = np.load('all.npz'); \
                 assert [os.fsencode(n) for n in f['names']] == [b'lat/b.npz', b'lat/caf\\xe9 \\xff.npz'], f['names']";
    testkit::succeeds(
        std::process::Command::new(python())
            .args(["-c", check])
            .current_dir(d),
    );
}

/// Upstream's spellings work beside ours: gen_images.py's `--outdir`, projector.py's
/// `--num-steps` and `--outdir`, and `--size` for crop-resize's `--resolution` (which clap
/// answered with a tip about values that begin with '--').
#[test]
fn upstream_flag_spellings_are_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, _) = testkit::projection_job(tmp.path(), 1);
    let out = sh(
        tmp.path(),
        &format!(
            "generate -q --device cpu --network {g} --seeds 5 --outdir gen && \
             crop-resize -q --size 16 -o small gen/seed0005.png && \
             project-one-gpu -q --device cpu --network {g} --vgg vgg.safetensors --num-steps 2 \
               --w-avg-samples 100 --outdir proj gen/seed0005.png",
            g = g.display()
        ),
    );
    testkit::ok(&out);
    let recs = records(&out.stdout);
    assert!(tmp.path().join("gen/seed0005.png").exists());
    assert_eq!(
        image::open(tmp.path().join("small/gen/seed0005.png"))
            .unwrap()
            .width(),
        16
    );
    let latents = of_type(&recs, "latent");
    assert_eq!(latents.len(), 1);
    assert_eq!(latents[0]["steps"], 2);
    assert!(
        latents[0]["output"]
            .as_str()
            .unwrap()
            .contains("/proj/gen/seed0005"),
        "{}",
        latents[0]
    );
}

/// The wrong file where a network is expected says what the file is and what to run: a pickle
/// (upstream's network .pkl), a ResNet checkpoint of ddp-train given as a generator, a generator
/// given as the VGG16; a missing file names its cause once.
#[test]
fn wrong_network_files_say_what_they_are_and_what_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let g = shared_dir().join("fixtures/stylegan2/tiny-skip/G.safetensors");
    let made = std::process::Command::new(python())
        .current_dir(tmp.path())
        .args([
            "-c",
            "import pickle, torch\n\
             from safetensors.torch import save_file\n\
             pickle.dump({'G_ema': None}, open('network.pkl', 'wb'), protocol=4)\n\
             save_file({'conv1.weight': torch.zeros(64, 3, 7, 7), 'fc.weight': torch.zeros(10, 512)}, \
             'last.safetensors', {'arch': 'resnet18', 'epoch': '3'})\n",
        ])
        .output()
        .unwrap();
    testkit::ok(&made);
    let fails_saying = |script: &str, says: &str| {
        let out = sh(tmp.path(), script);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{script}: {stderr}");
        assert!(stderr.contains(says), "{script}: {stderr}");
        stderr.into_owned()
    };
    fails_saying(
        "generate -q --device cpu --network network.pkl --seeds 0 -o out",
        "a Python pickle (a StyleGAN2-ADA network .pkl?): convert it with scripts/convert-network-pkl",
    );
    fails_saying(
        "generate -q --device cpu --network last.safetensors --seeds 0 -o out",
        "a ResNet classifier (resnet18: ddp-train's checkpoint?), not a StyleGAN2 generator",
    );
    let e = fails_saying(
        "generate -q --device cpu --network nowhere.safetensors --seeds 0 -o out",
        "No such file or directory",
    );
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    fails_saying(
        &format!(
            "project-one-gpu -q --device cpu --network {g} --vgg {g} x.png",
            g = g.display()
        ),
        "a StyleGAN2 generator (it has `config` metadata), not LPIPS's VGG16",
    );
}

/// The Python scripts users run start with any `python3`: they re-run themselves with the
/// project's venv, and without one say what to run instead of a bare ModuleNotFoundError.
#[test]
fn python_scripts_find_the_venv_or_say_to_run_setup() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let system = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(system) = system else {
        return;
    };
    let out = std::process::Command::new(system)
        .arg(root.join("scripts/make-digits-cifar"))
        .arg("--help")
        .output()
        .unwrap();
    testkit::ok(&out);
    // A checkout without .venv.
    let tmp = tempfile::tempdir().unwrap();
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir(&scripts).unwrap();
    std::fs::copy(
        root.join("scripts/project_python.py"),
        scripts.join("project_python.py"),
    )
    .unwrap();
    std::fs::write(
        scripts.join("needs"),
        "import project_python\nproject_python.use('json', 'no_such_module_here')\nprint('ran')\n",
    )
    .unwrap();
    let out = std::process::Command::new(system)
        .arg(scripts.join("needs"))
        .output()
        .unwrap();
    let stderr = testkit::exit_stderr(&out, 1);
    assert!(
        stderr.contains("needs the Python module(s) no_such_module_here")
            && stderr.contains("run scripts/setup"),
        "{stderr}"
    );
}

/// An image tree of real (tiny) PNG and JPEG images, train/ and val/, classes cat, dog, fish.
fn class_tree(dir: &Path) {
    for (split, n) in [("train", 6), ("val", 2)] {
        for (c, class) in ["fish", "cat", "dog"].iter().enumerate() {
            for i in 0..n {
                let ext = if i % 2 == 0 { "png" } else { "jpg" };
                let p = dir.join(format!("{split}/{class}/{i}.{ext}"));
                testkit::write_image(&p, 36, 32, (7 * c + i) as u32);
            }
        }
    }
}

#[test]
fn ddp_train_trains_from_packed_shards_and_recordio_and_names_the_classes() {
    let tmp = tempfile::tempdir().unwrap();
    class_tree(&tmp.path().join("imgs"));
    for format in ["wds", "recordio"] {
        let out = sh(
            tmp.path(),
            &format!("pack imgs --format {format} -o {format} --shard-size 4K"),
        );
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recs = records(&out.stdout);
        // The records say what --data takes (and --val-data, after the kind).
        let data = |split: &str| {
            let r = of_type(&recs, "packed")
                .into_iter()
                .find(|r| r["split"] == split)
                .unwrap();
            r["data"].as_str().unwrap().to_string()
        };
        let (train, val) = (data("train"), data("val"));
        let val = val.split_once(':').unwrap().1;
        let out = sh(
            tmp.path(),
            &format!(
                "ddp-train --device cpu --epochs 1 --batch-size 6 --image-size 32 --stem cifar \
                 --checkpoint-dir ck-{format} --data '{train}' --val-data '{val}' && \
                 ddp-train --print-eval-snippet ck-{format}/last.safetensors > snippet-{format}.py"
            ),
        );
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recs = records(&out.stdout);
        let epoch = &of_type(&recs, "epoch")[0];
        assert_eq!(
            epoch["classes"],
            serde_json::json!(["cat", "dog", "fish"]),
            "{format}"
        );
        let snippet =
            std::fs::read_to_string(tmp.path().join(format!("snippet-{format}.py"))).unwrap();
        assert!(
            snippet.contains("classes = ['cat', 'dog', 'fish']"),
            "{format}: {snippet}"
        );
    }
}

#[test]
fn training_and_validation_data_whose_class_lists_disagree_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    class_tree(&tmp.path().join("imgs"));
    // Validation images of two of the three classes: packed alone, label 0 is "dog".
    for class in ["dog", "fish"] {
        let to = tmp.path().join("valonly").join(class);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(tmp.path().join("imgs/val").join(class)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
    }
    for format in ["wds", "recordio"] {
        let data = |from: &str, to: &str| -> String {
            let out = sh(
                tmp.path(),
                &format!("pack {from} --format {format} -o {to}-{format}"),
            );
            testkit::ok(&out);
            let recs = records(&out.stdout);
            of_type(&recs, "packed")[0]["data"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let train = data("imgs/train", "dt");
        let val = data("valonly", "dv");
        let val = val.split_once(':').unwrap().1.to_string();
        let train_ddp = |what: &str| {
            let out = sh(
                tmp.path(),
                &format!(
                    "ddp-train --device cpu --epochs 1 --batch-size 4 --image-size 32 \
                     --max-steps 1 --data '{train}' --val-data '{val}'"
                ),
            );
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            assert_eq!(out.status.code(), Some(1), "{format}, {what}: {stderr}");
            stderr
        };
        let stderr = train_ddp("a class missing");
        assert!(
            stderr.contains("name different classes")
                && stderr.contains(r#"label 0 is "cat" in one and "dog" in the other"#)
                && stderr.contains(r#"training ["cat", "dog", "fish"]"#)
                && stderr.contains(r#"validation ["dog", "fish"]"#),
            "{format}: {stderr}"
        );
        // The same three classes listed in another order: the labels mean other classes.
        std::fs::write(
            tmp.path().join(format!("dv-{format}/classes.txt")),
            "fish\ndog\ncat\n",
        )
        .unwrap();
        let stderr = train_ddp("the classes reordered");
        assert!(
            stderr.contains(r#"label 0 is "cat" in one and "fish" in the other"#),
            "{format}: {stderr}"
        );
        // A classes.txt sizes the last layer as labels do: past 100,000 names (a 20 GB layer
        // for 10^7) only with --num-classes stating as many.
        let names: String = (0..100_001).map(|i| format!("c{i}\n")).collect();
        std::fs::write(tmp.path().join(format!("dt-{format}/classes.txt")), &names).unwrap();
        std::fs::write(tmp.path().join(format!("dv-{format}/classes.txt")), &names).unwrap();
        let stderr = train_ddp("100,001 class names");
        assert!(
            stderr.contains("the classes.txt beside the data names 100001 classes")
                && stderr.contains("--num-classes"),
            "{format}: {stderr}"
        );
    }
}

#[test]
fn a_class_name_that_is_not_utf8_is_refused_before_training() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    class_tree(&tmp.path().join("imgs"));
    // "cat" renamed to Latin-1 "caf\xe9" in both splits: records would show it as "caf\u{fffd}".
    for split in ["train", "val"] {
        let from = tmp.path().join("imgs").join(split).join("cat");
        let to = tmp
            .path()
            .join("imgs")
            .join(split)
            .join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::fs::rename(from, to).unwrap();
    }
    let out = sh(
        tmp.path(),
        "ddp-train --device cpu --epochs 1 --batch-size 4 --image-size 32 --max-steps 1 \
         --data imagefolder:imgs",
    );
    let stderr = testkit::exit_stderr(&out, 1);
    assert!(
        stderr.contains(r#"the class name "caf\xE9" is not UTF-8"#),
        "{stderr}"
    );
}
