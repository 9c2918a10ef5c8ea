//! A checkpoint's metadata (safetensors' string map, as a JSON object of strings here): read
//! back, it is refused or within what ddp-train writes (architecture and stem from their closed
//! sets, sizes bounded, statistics finite), since `--print-eval-snippet` prints Python from it
//! and `--resume` sizes from it; written again, it reads back the same.
#![no_main]
use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(map) = serde_json::from_slice::<HashMap<String, String>>(data) else {
        return;
    };
    let Ok(meta) = train::checkpoint::Meta::from_map(&map, Path::new("last.safetensors")) else {
        return;
    };
    assert!(meta.arch.is_empty() || meta.arch.parse::<train::resnet::Arch>().is_ok());
    if meta.step > 0 {
        assert!(meta.step < meta.steps_per_epoch && meta.world_size > 0);
    }
    if let Some(v) = meta.virtual_ranks {
        assert!(v >= 1 && (meta.world_size == 0 || v.is_multiple_of(meta.world_size)));
    }
    if let Some(i) = &meta.input {
        // "none": a TorchScript model's (the user's module has its own stem).
        assert!(["imagenet", "cifar", "none"].contains(&i.stem.as_str()));
        assert!(["imagenet", "none"].contains(&i.eval_transform.as_str()));
        assert!(i.num_classes >= 1 && i.image_size >= 1);
        assert!(i.mean.iter().chain(&i.std).all(|x| x.is_finite()));
    }
    // Written again, it reads back the same (NaN, "no epoch validated yet", never equals
    // itself: compared apart).
    let again = train::checkpoint::Meta::from_map(&meta.to_map(), Path::new("x")).unwrap();
    assert_eq!(again.val_top1.is_nan(), meta.val_top1.is_nan());
    let same = |m: &train::checkpoint::Meta| train::checkpoint::Meta {
        val_top1: 0.0,
        ..m.clone()
    };
    assert_eq!(same(&again), same(&meta));
});
