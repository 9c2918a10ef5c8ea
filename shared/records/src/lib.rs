//! JSON-lines records: the wire format between shardkit tools.
//!
//! Every record is one compact JSON object on one line, tagged with `"type"`. Producers use the
//! typed structs here; consumers read any line with [`parse_input_line`], which turns a plain path,
//! a shard record, or a previous stage's per-item record into the paths to work on, and ignores
//! record types it does not consume (`error`, `summary`, unknown ones).
//!
//! ```
//! use records::{parse_input_line, InputItem};
//! let items = parse_input_line(r#"{"type":"shard","shard":0,"shards":2,"paths":["a.jpg","b.jpg"]}"#).unwrap();
//! assert_eq!(items, vec![InputItem::path("a.jpg"), InputItem::path("b.jpg")]);
//! ```
//!
//! Paths, and inputs as given, are `PathBuf`/`OsString`: written as JSON strings when they are
//! UTF-8, else as `{"bytes": base64}` ([`os_text`]), so no file name is lost or altered.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod os_text;

/// One shard of a list of paths, as `shard-list` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "shard")]
pub struct Shard {
    /// 0-based index of this shard.
    pub shard: usize,
    /// Number of shards asked for.
    pub shards: usize,
    #[serde(with = "os_text::vec")]
    pub paths: Vec<PathBuf>,
    /// Total bytes of the paths, when sizes were looked at (`--balance size`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bytes: Option<u64>,
}

/// An input that failed; the tool went on with the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "error")]
pub struct ErrorRecord {
    /// The input as given (a path, an argument, a line).
    #[serde(with = "os_text")]
    pub input: OsString,
    pub message: String,
}

/// An input left out on purpose (not an error): `pack` names each file of a folder that is not
/// an image to pack, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "skipped")]
pub struct SkippedRecord {
    /// The input as given (a path).
    #[serde(with = "os_text")]
    pub input: OsString,
    pub message: String,
}

/// One image written (or found already written) by `crop-resize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "image")]
pub struct ImageRecord {
    /// The input as given.
    #[serde(with = "os_text")]
    pub input: OsString,
    /// Absolute path of the output file.
    #[serde(with = "os_text")]
    pub output: PathBuf,
    /// `png` or `npy` (uint8, [3, height, width]).
    pub format: String,
    pub width: u32,
    pub height: u32,
    /// Size of the source image; absent when the output already existed and was skipped.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_height: Option<u32>,
    /// Pillow's name for the source mode before `convert('RGB')`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_mode: Option<String>,
    /// The source had an alpha channel, which `convert('RGB')` drops as Pillow does: its
    /// transparent pixels show whatever colour they hold (often all white or all black).
    #[serde(skip_serializing_if = "is_false", default)]
    pub alpha_dropped: bool,
    /// True when the output existed and was left alone (no `--overwrite`).
    pub skipped: bool,
}

impl ImageRecord {
    /// A `side`×`side` output in `format`, with nothing said of a source image (what a
    /// renderer writes, or a resize before its source is read).
    pub fn square(
        input: OsString,
        output: PathBuf,
        format: &str,
        side: u32,
        skipped: bool,
    ) -> Self {
        ImageRecord {
            input,
            output,
            format: format.into(),
            width: side,
            height: side,
            source_width: None,
            source_height: None,
            source_mode: None,
            alpha_dropped: false,
            skipped,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One image projected (or found already projected) by `project-one-gpu`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "latent")]
pub struct LatentRecord {
    /// The input as given.
    #[serde(with = "os_text")]
    pub input: OsString,
    /// Absolute path of the `.npz` (array `w`).
    #[serde(with = "os_text")]
    pub output: PathBuf,
    /// Shape of `w`: [1, 1, w_dim], or [1, num_ws, w_dim] in W+.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub w_shape: Option<Vec<usize>>,
    /// Squared LPIPS feature distance at the last step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub steps: Option<usize>,
    /// Wall time of the batch this image was projected in, and the batch's images per second.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub batch_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub images_per_s: Option<f64>,
    /// Peak GPU memory reserved by the process so far (MiB); absent on the CPU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_gpu_mib: Option<u64>,
    /// The projected image, when asked for.
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub image: Option<PathBuf>,
    /// The video of the optimisation, when asked for.
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub video: Option<PathBuf>,
    /// True when the output existed and was left alone (no `--overwrite`).
    pub skipped: bool,
}

/// The last record of a per-item tool's stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "summary")]
pub struct Summary {
    /// Items done in this run.
    pub ok: usize,
    /// Items whose output already existed.
    pub skipped: usize,
    /// Items that failed (each has an error record).
    pub failed: usize,
    pub elapsed_ms: u64,
    /// The one output file, for tools that gather many inputs into one.
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub output: Option<PathBuf>,
    /// Shape of the gathered array.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shape: Option<Vec<usize>>,
    /// Ranks in the run, for distributed tools.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub world_size: Option<usize>,
    /// The run's `--virtual-ranks` (ddp-train's elastic runs), when it has them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub virtual_ranks: Option<usize>,
    /// `all-reduce-check`: elements that came out wrong over all sizes, and the mean bus
    /// bandwidth over every timed case (GB/s, 1e9 bytes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub wrong: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub avg_busbw_gbs: Option<f64>,
}

/// One training epoch of `ddp-train` (figures over all ranks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "epoch")]
pub struct EpochRecord {
    /// 1-based.
    pub epoch: usize,
    pub epochs: usize,
    pub train_loss: f64,
    /// Top-1 accuracy on the training batches, percent.
    pub train_top1: f64,
    pub val_loss: f64,
    pub val_top1: f64,
    /// Training images (all ranks) per second of the epoch, validation included in the time.
    pub images_per_s: f64,
    /// Training images per second of the training steps alone.
    #[serde(default)]
    pub train_images_per_s: f64,
    pub seconds: f64,
    /// Learning rate at the epoch's last step.
    pub lr: f64,
    /// fp16's dynamic loss scale.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub loss_scale: Option<f64>,
    pub steps: usize,
    /// Steps skipped for inf/NaN gradients (fp16).
    pub skipped_steps: usize,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_gpu_mib: Option<u64>,
    /// Mean milliseconds per training step (this rank's host time, validation excluded).
    #[serde(default)]
    pub step_ms: f64,
    /// The pipeline's stages (model parallelism), when the model is split.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub stages: Vec<StageRecord>,
    /// The checkpoint written after this epoch.
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub checkpoint: Option<PathBuf>,
    /// Validation improved (best.safetensors written when checkpointing).
    pub best: bool,
    /// Image files this rank could not use in the epoch (each replaced by the next sample).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub bad_inputs: usize,
    /// Training images the epoch did not train on: a last batch the samples do not fill (and,
    /// with --drop-last, the samples that do not divide among the ranks; with --max-steps, the
    /// steps not taken). Shuffled, a different set each epoch.
    #[serde(default)]
    pub left_out: usize,
    /// Images the evaluation saw (every one of the validation split).
    #[serde(default)]
    pub val_images: usize,
    /// What the logits mean: the class names of an image tree in label order (in the first
    /// epoch record of a run).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub classes: Vec<String>,
    pub rank: usize,
    pub world_size: usize,
    /// The run's `--virtual-ranks` (ddp-train's elastic runs), when it has them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub virtual_ranks: Option<usize>,
}

/// A split of an image folder packed by `pack` (webdataset shards or RecordIO).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename = "packed")]
pub struct Packed {
    /// `train` or `val` when the folder had both, else absent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub split: Option<String>,
    /// `wds` or `recordio`.
    pub format: String,
    pub samples: usize,
    pub classes: usize,
    /// The files written (shards; or the .rec and .idx), then classes.txt.
    #[serde(with = "os_text::vec")]
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    /// What `ddp-train --data` (or `--val-data`) takes for it: `wds:PATTERN` or
    /// `recordio:PREFIX` (shards and prefixes are given to --val-data without the kind).
    #[serde(with = "os_text")]
    pub data: PathBuf,
}

/// A generator weights file written: by `generate --init-network` (freshly initialised) or
/// `scripts/convert-network-pkl` (from a pickle, its `input`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename = "network")]
pub struct NetworkRecord {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input: Option<String>,
    #[serde(with = "os_text")]
    pub output: PathBuf,
    pub tensors: usize,
    pub parameters: usize,
    /// The generator's config, as its metadata holds it.
    pub config: serde_json::Value,
}

/// A checkpoint `ddp-train` wrote inside an epoch (`--checkpoint-every`, or the checkpoint
/// signal, after which the run stops); `--resume` goes on with the step after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "checkpoint")]
pub struct CheckpointRecord {
    /// The epoch it is in (1-based).
    pub epoch: usize,
    /// Steps of that epoch done.
    pub step: usize,
    pub steps: usize,
    #[serde(with = "os_text")]
    pub checkpoint: PathBuf,
    /// `every` (on schedule) or `signal`.
    pub reason: String,
    pub rank: usize,
    pub world_size: usize,
    /// The run's `--virtual-ranks` (ddp-train's elastic runs), when it has them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub virtual_ranks: Option<usize>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One pipeline stage of a split model, in an [`EpochRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    /// 0-based.
    pub stage: usize,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Its first and last unit (`conv1`, `layer3.0`, …, `fc`).
    pub first: String,
    pub last: String,
    pub params: i64,
    /// Forward GFLOPs per image (what a balanced split evens out).
    pub gflops: f64,
    /// Memory in use on its GPU (the whole device's, like `peak_gpu_mib`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_gpu_mib: Option<u64>,
}

/// One message size timed by `all-reduce-check` (nccl-tests' table row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "bandwidth")]
pub struct BandwidthRecord {
    /// `all_reduce`, `broadcast`, `all_gather` or `reduce_scatter`.
    pub collective: String,
    /// Bytes of the full buffer (all-gather: the output; reduce-scatter: the input).
    pub bytes: u64,
    /// Elements of that buffer.
    pub count: u64,
    pub dtype: String,
    /// Reduction (absent for broadcast and all-gather).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub op: Option<String>,
    /// Broadcast's root.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub root: Option<usize>,
    pub world_size: usize,
    /// `nccl`, `cpu-shm` (shared memory), `cpu-shm+tcp` (shared memory inside each host, TCP
    /// between hosts), `cpu-ring` (the TCP ring) or `cpu-ring-interleaved` (the TCP ring: a
    /// host's ranks are not consecutive).
    pub engine: String,
    /// Rank 0's device (`cpu`, `cuda:0`).
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub out_of_place: Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub in_place: Option<Timing>,
}

/// A `sweep` trial starting, being retried, paused and resumed (the median rule), or ending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "trial")]
pub struct TrialRecord {
    /// `start`, `retry` (it failed and runs again), `pause` (it yields its slot to a waiting
    /// trial), `resume` (its command restarts after a pause) or `end`.
    pub event: String,
    pub trial: usize,
    pub config: serde_json::Map<String, serde_json::Value>,
    /// The trial's directory ({trial_dir}).
    #[serde(with = "os_text")]
    pub dir: PathBuf,
    /// 1 for the first run of the command, 2 for the second (a retry or a resume), ...
    pub attempt: usize,
    /// `start`, `retry`, `resume`: the slot the command runs in; `pause`: the one it leaves.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub slot: Option<usize>,
    /// `end`: completed (reached max_t or its command finished), stopped (by the scheduler) or
    /// error (its command failed, retries used up).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<String>,
    /// `end` of a stopped trial, `pause`: the time attribute of the result that stopped or
    /// paused it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stopped_at: Option<f64>,
    /// `end`, `pause`: the trial's last result, as its command printed it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last: Option<serde_json::Value>,
    /// `retry` and `end` with status error: what went wrong.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
}

/// One result of a `sweep` trial: a record of its command that holds the time attribute and
/// the metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "result")]
pub struct TrialResult {
    pub trial: usize,
    /// Results of this trial so far, this one included (Ray's training_iteration).
    pub training_iteration: usize,
    /// The time attribute's value.
    pub time: f64,
    /// The metric's value (NaN and ±infinity as the strings "NaN", "Infinity", "-Infinity").
    #[serde(with = "float")]
    pub metric: f64,
    /// The record as the command printed it.
    pub record: serde_json::Value,
}

/// A `sweep` population-based training trial copying a better one: its directory is replaced by
/// a copy of `from`'s when it runs again, with `config` explored from `from`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "exploit")]
pub struct Exploit {
    pub trial: usize,
    /// The time attribute of the trial's result that decided it.
    pub time: f64,
    /// The trial copied, at its time `from_time` (which the copying trial takes).
    pub from: usize,
    pub from_time: f64,
    pub from_config: serde_json::Map<String, serde_json::Value>,
    /// The config the trial runs with from now on.
    pub config: serde_json::Map<String, serde_json::Value>,
    /// What was done to each mutated parameter: `resample`, `shift left`, `shift right` (with
    /// ` (noop)` at the end of the list), `* 1.2`, ...
    pub operations: serde_json::Map<String, serde_json::Value>,
}

/// An ASHA rung's (or a HyperBand halving's) judgement of one `sweep` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "decision")]
pub struct Decision {
    pub trial: usize,
    /// The rung's time attribute value.
    pub milestone: f64,
    /// The trial's metric (non-finite values as strings, as `metric` of a result).
    #[serde(with = "float")]
    pub value: f64,
    /// The rung's percentile of the values recorded there before (in the metric's units); null
    /// for the first trial at the rung, "NaN" when only NaNs were.
    #[serde(with = "float::option")]
    pub cutoff: Option<f64>,
    /// `continue` or `stop`.
    pub action: String,
}

/// A float field that may be NaN or infinite (a sweep's metric): finite values are numbers, the
/// others the strings Python's JSON tokens spell (`"NaN"`, `"Infinity"`, `"-Infinity"`), since
/// JSON has no such numbers (serde_json would write null, and lose which).
pub mod float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_finite() {
            x.serialize(s)
        } else if x.is_nan() {
            "NaN".serialize(s)
        } else if *x > 0.0 {
            "Infinity".serialize(s)
        } else {
            "-Infinity".serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Float {
            Number(f64),
            Token(String),
        }
        match Float::deserialize(d)? {
            Float::Number(x) => Ok(x),
            Float::Token(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                other => Err(serde::de::Error::custom(format!(
                    "{other:?} is not a number"
                ))),
            },
        }
    }

    /// The same for an optional float (None is null).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            match x {
                Some(x) => super::serialize(x, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            #[derive(Deserialize)]
            struct Wrap(#[serde(with = "super")] f64);
            Ok(Option::<Wrap>::deserialize(d)?.map(|Wrap(x)| x))
        }
    }
}

/// The best trial of a `sweep`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestTrial {
    pub trial: usize,
    pub config: serde_json::Map<String, serde_json::Value>,
    /// The metric of its last result.
    pub metric: f64,
    /// The time attribute of its last result.
    pub time: f64,
    pub status: String,
    /// Its directory (params.json, result.json, progress.csv, stderr.log, event files).
    #[serde(with = "os_text")]
    pub dir: PathBuf,
}

/// The last record of a `sweep` (`"type":"sweep_summary"`; sweeps before it wrote "summary",
/// which reads too: a struct's tag is not checked when it is read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "sweep_summary")]
pub struct SweepSummary {
    pub trials: usize,
    pub completed: usize,
    pub stopped: usize,
    pub error: usize,
    /// Trials not finished (an interrupted sweep).
    pub unfinished: usize,
    pub metric: String,
    pub mode: String,
    /// Best by the metric of each trial's last result (Ray's `get_best_result(scope="last")`);
    /// null when no trial has a result.
    pub best: Option<BestTrial>,
    #[serde(with = "os_text")]
    pub out_dir: PathBuf,
    pub elapsed_ms: u64,
}

/// Mean time of one collective and the bandwidths derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Mean over the timed iterations, averaged over ranks (µs).
    pub time_us: f64,
    /// bytes / time (GB/s, 1e9 bytes).
    pub algbw_gbs: f64,
    /// algbw × the collective's bus factor (all-reduce 2(n−1)/n; all-gather and reduce-scatter
    /// (n−1)/n; broadcast 1).
    pub busbw_gbs: f64,
    /// Elements differing from the known result (absent with --no-check).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub wrong: Option<u64>,
}

/// One image classified by `classify`: its most probable classes, most probable first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "prediction")]
pub struct PredictionRecord {
    /// The input as given (with `--data`, the sample's name: its file, `PREFIX.rec:KEY`,
    /// `SHARD:KEY`).
    #[serde(with = "os_text")]
    pub input: OsString,
    pub top: Vec<ClassProb>,
    /// The image's class in labelled data (`--data`), by index.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub label: Option<usize>,
    /// With `--data` shards or records that `pack` wrote: the file the sample was packed from,
    /// relative to the folder packed (not a path to open here).
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub packed_path: Option<PathBuf>,
}

/// A class and the probability the model gives it (softmax of the logits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassProb {
    /// Its name (a class folder of the training images), or its index as text.
    pub class: String,
    pub index: usize,
    pub prob: f64,
}

/// `classify`'s figures over labelled data (`--data`), as `ddp-train`'s validation computes
/// them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "evaluation")]
pub struct EvaluationRecord {
    /// `--data` as given.
    #[serde(with = "os_text")]
    pub data: OsString,
    /// Images evaluated (those that could not be used have error records and are not counted).
    pub images: usize,
    /// Mean cross-entropy.
    pub loss: f64,
    /// Percent of images whose most probable class is theirs.
    pub top1: f64,
    /// Percent whose class is among the 5 most probable (among all, when the model has fewer
    /// than 5 classes: `top5_of` says how many).
    pub top5: f64,
    pub top5_of: usize,
    /// Top-1 per class, in label order.
    pub per_class: Vec<ClassAccuracy>,
    /// The confusion matrix's CSV (`--confusion`), absolute.
    #[serde(
        with = "os_text::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub confusion: Option<PathBuf>,
}

/// One class's share of an [`EvaluationRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassAccuracy {
    pub class: String,
    pub index: usize,
    /// Its images evaluated.
    pub images: usize,
    /// Percent of them classified as it; null when it has none.
    pub top1: Option<f64>,
}

/// One work item read from a line or an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputItem {
    /// The file to read.
    pub path: PathBuf,
    /// The name the item goes by downstream: the original input when a previous stage's record
    /// says so (`"input"`), else the path.
    pub name: OsString,
}

impl InputItem {
    pub fn path(p: impl Into<PathBuf>) -> Self {
        let path = p.into();
        Self {
            name: path.clone().into_os_string(),
            path,
        }
    }
}

/// Why a line could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine(pub String);

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadLine {}

/// Turns one input line (or argument), as bytes, into work items.
///
/// - blank line → nothing;
/// - a line not starting with `{` → that path, its bytes verbatim (trailing `\r` dropped), UTF-8
///   or not;
/// - `{"type":"shard","paths":[...]}` → each path;
/// - a record with `"output"` (a previous stage's result: `image`, `latent`, ...) → that file,
///   named by its `"input"` when present;
/// - a record with `"path"` → that path;
/// - `error`, `summary` and other records with none of those keys → nothing.
///
/// Paths in records are strings or `{"bytes": base64}` ([`os_text`]).
pub fn parse_input_line(line: impl AsRef<[u8]>) -> Result<Vec<InputItem>, BadLine> {
    let line = line.as_ref();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.trim_ascii().is_empty() {
        return Ok(Vec::new());
    }
    if !line.trim_ascii_start().starts_with(b"{") {
        return Ok(vec![InputItem::path(OsString::from_vec(line.to_vec()))]);
    }
    let line =
        std::str::from_utf8(line).map_err(|_| BadLine("a JSON record that is not UTF-8".into()))?;
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        // xargs without -d '\n' strips quotes (and splits at blanks): a record reaches the tool
        // as `{type:shard,...}`.
        let hint = if line.contains('"') {
            ""
        } else {
            "; its quotes are gone, as xargs strips them: pass records with xargs -d '\\n' -n1, \
             or GNU parallel"
        };
        BadLine(format!("not a JSON record: {e}{hint}"))
    })?;
    let obj = value
        .as_object()
        .ok_or_else(|| BadLine("not a JSON object".into()))?;
    let kind = obj.get("type").and_then(|t| t.as_str()).unwrap_or("");
    if matches!(kind, "error" | "summary" | "sweep_summary") {
        return Ok(Vec::new());
    }
    let path = |key: &str| -> Result<Option<OsString>, BadLine> {
        match obj.get(key) {
            None => Ok(None),
            // A record that names a file by this key but gives none: an input lost, not one to
            // skip silently.
            Some(serde_json::Value::Null) => Err(BadLine(format!("\"{key}\" is null: no file"))),
            Some(v) => os_text::from_json(v)
                .map(Some)
                .map_err(|e| BadLine(format!("\"{key}\": {e}"))),
        }
    };
    if let Some(paths) = obj.get("paths") {
        let paths = paths
            .as_array()
            .ok_or_else(|| BadLine("\"paths\" is not an array".into()))?;
        return paths
            .iter()
            .map(|p| {
                os_text::from_json(p)
                    .map(InputItem::path)
                    .map_err(|e| BadLine(format!("a path in \"paths\": {e}")))
            })
            .collect();
    }
    if let Some(output) = path("output")? {
        let name = path("input")?.unwrap_or_else(|| output.clone());
        return Ok(vec![InputItem {
            path: output.into(),
            name,
        }]);
    }
    if let Some(path) = path("path")? {
        return Ok(vec![InputItem::path(path)]);
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_are_paths_verbatim() {
        assert_eq!(
            parse_input_line("a b/c.jpg\r").unwrap(),
            vec![InputItem::path("a b/c.jpg")]
        );
        assert!(parse_input_line("   ").unwrap().is_empty());
    }

    #[test]
    fn a_record_whose_quotes_xargs_stripped_says_how_to_pass_it() {
        // `shard-list | xargs -P3 crop-resize ...` without -d '\n' hands the tool this.
        let e = parse_input_line("{type:shard,shard:0,shards:3,paths:[a.png,b.png]}")
            .unwrap_err()
            .0;
        assert!(e.contains("key must be a string"), "{e}");
        assert!(e.contains("xargs -d '\\n' -n1, or GNU parallel"), "{e}");
        // A record that is merely broken gets no such hint.
        let e = parse_input_line(r#"{"type":"shard","paths":["a.png"]"#)
            .unwrap_err()
            .0;
        assert!(!e.contains("xargs"), "{e}");
    }

    #[test]
    fn shard_records_expand_to_their_paths() {
        let shard = Shard {
            shard: 1,
            shards: 3,
            paths: vec!["x".into(), "y".into()],
            bytes: None,
        };
        let line = serde_json::to_string(&shard).unwrap();
        assert_eq!(
            line,
            r#"{"type":"shard","shard":1,"shards":3,"paths":["x","y"]}"#
        );
        let items = parse_input_line(&line).unwrap();
        assert_eq!(items, vec![InputItem::path("x"), InputItem::path("y")]);
    }

    #[test]
    fn stage_records_give_their_output_named_by_input() {
        let items =
            parse_input_line(r#"{"type":"latent","input":"img/a.jpg","output":"/o/a.npz"}"#)
                .unwrap();
        assert_eq!(
            items,
            vec![InputItem {
                path: "/o/a.npz".into(),
                name: "img/a.jpg".into()
            }]
        );
        let items = parse_input_line(r#"{"path":"p.png","extra":1}"#).unwrap();
        assert_eq!(items, vec![InputItem::path("p.png")]);
    }

    #[test]
    fn error_and_summary_records_are_skipped() {
        assert!(
            parse_input_line(r#"{"type":"error","input":"a","message":"m"}"#)
                .unwrap()
                .is_empty()
        );
        assert!(
            parse_input_line(r#"{"type":"summary","output":"x"}"#)
                .unwrap()
                .is_empty()
        );
        assert!(
            parse_input_line(r#"{"type":"sweep_summary","out_dir":"x"}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn non_finite_metrics_round_trip_as_strings() {
        for v in [1.25, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            for cutoff in [None, Some(v), Some(2.0)] {
                let d = Decision {
                    trial: 1,
                    milestone: 2.0,
                    value: v,
                    cutoff,
                    action: "continue".into(),
                };
                let text = serde_json::to_string(&d).unwrap();
                let back: Decision = serde_json::from_str(&text).unwrap();
                let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
                assert!(same(back.value, v), "{text}");
                assert_eq!(back.cutoff.is_some(), cutoff.is_some(), "{text}");
                if let (Some(a), Some(b)) = (back.cutoff, cutoff) {
                    assert!(same(a, b), "{text}");
                }
            }
        }
        let text = serde_json::to_string(&Decision {
            trial: 0,
            milestone: 1.0,
            value: f64::NAN,
            cutoff: None,
            action: "continue".into(),
        })
        .unwrap();
        assert!(text.contains(r#""value":"NaN","cutoff":null"#), "{text}");
    }

    #[test]
    fn a_sweep_summary_has_its_own_tag_and_reads_under_the_old_one() {
        let s = SweepSummary {
            trials: 2,
            completed: 1,
            stopped: 1,
            error: 0,
            unfinished: 0,
            metric: "val_top1".into(),
            mode: "max".into(),
            best: None,
            out_dir: "out".into(),
            elapsed_ms: 5,
        };
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.starts_with(r#"{"type":"sweep_summary","#), "{text}");
        let old = text.replace("sweep_summary", "summary");
        assert_eq!(serde_json::from_str::<SweepSummary>(&old).unwrap(), s);
        // The per-item tools' summary keeps its tag.
        let per_item = serde_json::to_string(&Summary::default()).unwrap();
        assert!(per_item.starts_with(r#"{"type":"summary","#), "{per_item}");
    }

    #[test]
    fn non_utf8_paths_pass_through_lines_and_records_unchanged() {
        let raw = OsString::from_vec(b"d/caf\xe9.png".to_vec());
        assert_eq!(
            parse_input_line(b"d/caf\xe9.png\r").unwrap(),
            vec![InputItem::path(raw.clone())]
        );
        let rec = ImageRecord {
            input: raw.clone(),
            output: PathBuf::from(OsString::from_vec(b"/o/caf\xe9.png".to_vec())),
            format: "png".into(),
            width: 1,
            height: 1,
            source_width: None,
            source_height: None,
            source_mode: None,
            alpha_dropped: false,
            skipped: true,
        };
        let line = serde_json::to_string(&rec).unwrap();
        assert!(
            line.contains(r#""input":{"bytes":"ZC9jYWbpLnBuZw=="}"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<ImageRecord>(&line).unwrap(), rec);
        assert_eq!(
            parse_input_line(&line).unwrap(),
            vec![InputItem {
                path: rec.output.clone(),
                name: raw.clone()
            }]
        );
        let shard = serde_json::to_string(&Shard {
            shard: 0,
            shards: 1,
            paths: vec![raw.clone().into(), "b".into()],
            bytes: None,
        })
        .unwrap();
        assert_eq!(
            parse_input_line(shard).unwrap(),
            vec![InputItem::path(raw.clone()), InputItem::path("b")]
        );
        assert_eq!(
            parse_input_line(r#"{"path":{"text":"t.png"}}"#).unwrap(),
            vec![InputItem::path("t.png")]
        );
        assert!(parse_input_line(b"{\"path\":\"\xe9\"}").is_err());
    }

    #[test]
    fn predictions_and_evaluations_round_trip_and_give_no_work_item() {
        let p = PredictionRecord {
            input: OsString::from_vec(b"imgs/caf\xe9.jpg".to_vec()),
            top: vec![ClassProb {
                class: "cat, \"big\"".into(),
                index: 3,
                prob: 0.75,
            }],
            label: Some(1),
            packed_path: Some(OsString::from_vec(b"cat/\xff 1.jpg".to_vec()).into()),
        };
        let line = serde_json::to_string(&p).unwrap();
        assert!(
            line.starts_with(r#"{"type":"prediction","input":{"bytes":"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<PredictionRecord>(&line).unwrap(), p);
        // Read as an input line, a prediction names no file to work on.
        assert!(parse_input_line(&line).unwrap().is_empty());
        let e = EvaluationRecord {
            data: "imagefolder:val".into(),
            images: 2,
            loss: 0.5,
            top1: 50.0,
            top5: 100.0,
            top5_of: 5,
            per_class: vec![
                ClassAccuracy {
                    class: "a".into(),
                    index: 0,
                    images: 2,
                    top1: Some(50.0),
                },
                ClassAccuracy {
                    class: "b".into(),
                    index: 1,
                    images: 0,
                    top1: None,
                },
            ],
            confusion: Some("/o/confusion.csv".into()),
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(line.contains(r#""top1":null"#), "{line}");
        assert_eq!(serde_json::from_str::<EvaluationRecord>(&line).unwrap(), e);
    }

    #[test]
    fn malformed_records_are_errors() {
        assert!(parse_input_line("{not json").is_err());
        assert!(parse_input_line(r#"{"paths":"a"}"#).is_err());
        assert!(parse_input_line(r#"{"paths":[1]}"#).is_err());
        assert!(parse_input_line(r#"{"path":3}"#).is_err());
        // Named but null: an error naming the key, not a record silently skipped.
        for line in [r#"{"path":null}"#, r#"{"output":null,"input":"a.png"}"#] {
            let e = parse_input_line(line).unwrap_err().0;
            assert!(e.contains("is null"), "{line}: {e}");
        }
    }
}
