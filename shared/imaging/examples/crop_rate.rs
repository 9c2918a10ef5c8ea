//! Where crop-resize's time goes on one thread, over files held in memory: the decoding of each
//! image's centre square (what crop-resize asks its decoders for), the Lanczos resize to R×R,
//! and the PNG encoding, each timed apart; no file reads, threads or output writes. The
//! benchmark `scripts/bench/crop_resize_photos.py` uses the decode figure as the floor under an
//! exact pipeline on these decoders; `perf record` on it profiles the work alone:
//!
//!     cargo run --release -p imaging --example crop_rate -- [--whole] R ROUNDS FILE...
//!
//! Prints one JSON line: the best round's seconds for each step over all the files. `--whole`
//! decodes every image whole instead of its centre square (as Pillow decodes it), then resizes
//! all of it.
mod common;

use common::Args;
use imaging::{DecodeOptions, Frame};
use std::time::{Duration, Instant};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let whole = args.first().is_some_and(|a| a == "--whole");
    if whole {
        args.remove(0);
    }
    let args = Args::parse(&args, "crop_rate [--whole] R ROUNDS FILE...");
    let size: u32 = args.first.parse().expect("R is a number");
    let (rounds, paths, files) = (args.rounds, args.paths, args.files);
    let opts = DecodeOptions::default();
    let mut png = Vec::new();
    let mut best = [Duration::MAX; 3];
    for _ in 0..rounds {
        let mut spent = [Duration::ZERO; 3];
        for (bytes, path) in files.iter().zip(&paths) {
            let t = Instant::now();
            let crop = imaging::decode_region(bytes, &opts, Frame::Stored, |w, h| {
                if whole {
                    (0, 0, w, h)
                } else {
                    imaging::center_crop_box(w, h)
                }
            })
            .unwrap_or_else(|e| panic!("{path}: {e}"));
            let decoded = Instant::now();
            let (w, h) = crop.rgb.dimensions();
            let resized = imaging::resize_lanczos(&crop.rgb, (0, 0, w, h), size, size);
            let resized_at = Instant::now();
            png.clear();
            imaging::write_png(&mut png, resized.as_raw(), size, size, 3).expect("encodes");
            let encoded = Instant::now();
            // Freeing the decoded crop (as crop-resize does after its output) counts as decoding.
            drop(crop);
            spent[0] += (decoded - t) + encoded.elapsed();
            spent[1] += resized_at - decoded;
            spent[2] += encoded - resized_at;
        }
        for (b, s) in best.iter_mut().zip(spent) {
            *b = (*b).min(s);
        }
    }
    let [decode, resize, encode] = best.map(|d| d.as_secs_f64());
    println!(
        "{{\"files\":{},\"decode_s\":{decode:.4},\"resize_s\":{resize:.4},\"encode_s\":{encode:.4}}}",
        files.len()
    );
}
