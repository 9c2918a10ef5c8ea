//! Images/s of the loader's training or evaluation transform (decode, crop, resize, float
//! conversion) on one thread, over files held in memory and into one reused output: the
//! transform alone, without the loader's threads, file reads and batch memory, for profiling
//! (`perf record`):
//!
//!     cargo run --release -p imaging --example transform_rate -- train|val ROUNDS FILE...
//!
//! Each round goes over every file once and prints its images/s.
mod common;

use common::Args;
use imaging::{DecodeOptions, Frame, transforms};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = Args::parse(&args, "transform_rate train|val ROUNDS FILE...");
    let (split, files) = (args.first, args.files);
    let opts = DecodeOptions::default();
    let mut out = vec![0f32; 3 * 224 * 224];
    // xorshift64: the crops' draws (any uniform stream will do).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    for _ in 0..args.rounds {
        let t = Instant::now();
        for (bytes, path) in files.iter().zip(&args.paths) {
            let img = match split.as_str() {
                "train" => transforms::train_crop(
                    bytes,
                    &opts,
                    Frame::Stored,
                    224,
                    (0.08, 1.0),
                    (3.0 / 4.0, 4.0 / 3.0),
                    &mut uniform,
                ),
                _ => transforms::eval_crop(bytes, &opts, Frame::Stored, 256, 224),
            }
            .unwrap_or_else(|e| panic!("{path}: {e}"));
            let flip = uniform() < 0.5;
            let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
            transforms::to_chw(&img, mean, std, flip, &mut out);
        }
        let s = t.elapsed().as_secs_f64();
        println!("{:.1} images/s", files.len() as f64 / s);
    }
}
