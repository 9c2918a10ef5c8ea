//! TensorBoard event files: scalars and the hparams plugin's records, so that
//! `tensorboard --logdir DIR` plots every run (a sweep's trials, ddp-train's steps and epochs)
//! and compares their hyper-parameters. Written by sweep and ddp-train alike.
//!
//! A file is TFRecord-framed `Event` protos (tensorflow/core/util/event.proto): each record is
//! `u64 length, u32 masked_crc32c(length), data, u32 masked_crc32c(data)`, little-endian. The
//! hparams records follow tensorboard/plugins/hparams (summary.py: a `Summary.Value` with the
//! plugin's metadata and an empty float tensor, tags `_hparams_/experiment`,
//! `_hparams_/session_start_info`, `_hparams_/session_end_info`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file of events that could not be created or written.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {error}", path.display())]
pub struct Error {
    what: &'static str,
    path: std::path::PathBuf,
    error: std::io::Error,
}

impl error_class::Classify for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `what path: why`, for `map_err`.
fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |error| Error { what, path, error }
}
use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "EventWhat", tags = "3, 5")]
    what: Option<EventWhat>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum EventWhat {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

#[derive(Clone, PartialEq, Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

#[derive(Clone, PartialEq, Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(message, optional, tag = "9")]
    metadata: Option<SummaryMetadata>,
    #[prost(oneof = "ValueKind", tags = "2, 8")]
    value: Option<ValueKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum ValueKind {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

#[derive(Clone, PartialEq, Message)]
struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, Message)]
struct PluginData {
    #[prost(string, tag = "1")]
    plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    content: Vec<u8>,
}

/// The hparams plugin's empty float tensor (`metadata.NULL_TENSOR`: DT_FLOAT, shape [0]).
#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int32, tag = "1")]
    dtype: i32,
    #[prost(message, optional, tag = "2")]
    tensor_shape: Option<TensorShape>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, Message)]
struct Dim {
    #[prost(int64, tag = "1")]
    size: i64,
}

#[derive(Clone, PartialEq, Message)]
struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    version: i32,
    #[prost(oneof = "HParamsData", tags = "2, 3, 4")]
    data: Option<HParamsData>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum HParamsData {
    #[prost(message, tag = "2")]
    Experiment(Experiment),
    #[prost(message, tag = "3")]
    SessionStartInfo(SessionStartInfo),
    #[prost(message, tag = "4")]
    SessionEndInfo(SessionEndInfo),
}

#[derive(Clone, PartialEq, Message)]
struct Experiment {
    #[prost(string, tag = "1")]
    description: String,
    #[prost(double, tag = "3")]
    time_created_secs: f64,
    #[prost(message, repeated, tag = "4")]
    hparam_infos: Vec<HParamInfo>,
    #[prost(message, repeated, tag = "5")]
    metric_infos: Vec<MetricInfo>,
    #[prost(string, tag = "6")]
    name: String,
}

#[derive(Clone, PartialEq, Message)]
struct HParamInfo {
    #[prost(string, tag = "1")]
    name: String,
    /// DataType: 1 string, 2 bool, 3 float64.
    #[prost(int32, tag = "4")]
    r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
struct MetricInfo {
    #[prost(message, optional, tag = "1")]
    name: Option<MetricName>,
}

#[derive(Clone, PartialEq, Message)]
struct MetricName {
    #[prost(string, tag = "1")]
    group: String,
    #[prost(string, tag = "2")]
    tag: String,
}

#[derive(Clone, PartialEq, Message)]
struct SessionStartInfo {
    #[prost(map = "string, message", tag = "1")]
    hparams: std::collections::HashMap<String, ProtoValue>,
    #[prost(double, tag = "5")]
    start_time_secs: f64,
}

#[derive(Clone, PartialEq, Message)]
struct SessionEndInfo {
    /// Status: 1 success, 2 failure.
    #[prost(int32, tag = "1")]
    status: i32,
    #[prost(double, tag = "2")]
    end_time_secs: f64,
}

/// google.protobuf.Value, the three kinds a config value becomes.
#[derive(Clone, PartialEq, Message)]
struct ProtoValue {
    #[prost(oneof = "ProtoKind", tags = "2, 3, 4")]
    kind: Option<ProtoKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum ProtoKind {
    #[prost(double, tag = "2")]
    Number(f64),
    #[prost(string, tag = "3")]
    Text(String),
    #[prost(bool, tag = "4")]
    Bool(bool),
}

/// How a run ended, for the hparams dashboard's status filter (its `api.proto` `Status`: it has
/// no "stopped"; a trial that a scheduler stopped early is `Unknown` there, so that unchecking
/// it leaves the runs that ran to their end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    Unknown,
    Success,
    Failure,
}

/// One event file, appended to record by record (each record flushed).
#[derive(Debug)]
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

impl EventWriter {
    /// Creates `dir/events.out.tfevents.<secs>.<host>.<pid>.<suffix>` (and `dir` where it is
    /// missing) with its version record.
    pub fn create(dir: &Path, suffix: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let name = format!(
            "events.out.tfevents.{}.{host}.{}.{suffix}",
            now_secs() as u64,
            std::process::id()
        );
        let path = dir.join(name);
        let file = File::create(&path).map_err(io("creating", &path))?;
        let mut w = EventWriter {
            out: BufWriter::new(file),
            path,
        };
        w.write(&Event {
            wall_time: now_secs(),
            step: 0,
            what: Some(EventWhat::FileVersion("brain.Event:2".into())),
        })?;
        Ok(w)
    }

    fn write(&mut self, e: &Event) -> Result<()> {
        let data = e.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        let mut rec = Vec::with_capacity(data.len() + 16);
        rec.extend_from_slice(&len);
        rec.extend_from_slice(&masked_crc(&len).to_le_bytes());
        rec.extend_from_slice(&data);
        rec.extend_from_slice(&masked_crc(&data).to_le_bytes());
        self.out
            .write_all(&rec)
            .and_then(|_| self.out.flush())
            .map_err(io("writing", &self.path))
    }

    fn summary(&mut self, step: i64, value: Vec<SummaryValue>) -> Result<()> {
        self.write(&Event {
            wall_time: now_secs(),
            step,
            what: Some(EventWhat::Summary(Summary { value })),
        })
    }

    /// One scalar per numeric field at `step` (fields named as the tags, `a/b` grouping them);
    /// the others are left out.
    pub fn scalars<'a>(
        &mut self,
        step: i64,
        fields: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> Result<()> {
        self.numbers(
            step,
            fields
                .into_iter()
                .filter_map(|(tag, v)| Some((tag, v.as_f64()?))),
        )
    }

    /// One scalar per (tag, value) at `step`; non-finite values are written as they are
    /// (TensorBoard draws them as gaps).
    pub fn numbers<'a>(
        &mut self,
        step: i64,
        values: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Result<()> {
        let values: Vec<SummaryValue> = values
            .into_iter()
            .map(|(tag, f)| SummaryValue {
                tag: tag.to_string(),
                metadata: None,
                value: Some(ValueKind::SimpleValue(f as f32)),
            })
            .collect();
        if values.is_empty() {
            Ok(())
        } else {
            self.summary(step, values)
        }
    }

    fn hparams(&mut self, tag: &str, data: HParamsData) -> Result<()> {
        let content = HParamsPluginData {
            version: 0,
            data: Some(data),
        }
        .encode_to_vec();
        let null_tensor = TensorProto {
            dtype: 1,
            tensor_shape: Some(TensorShape {
                dim: vec![Dim { size: 0 }],
            }),
        };
        let value = SummaryValue {
            tag: tag.into(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: "hparams".into(),
                    content,
                }),
            }),
            value: Some(ValueKind::Tensor(null_tensor)),
        };
        self.summary(0, vec![value])
    }

    /// An experiment: its hyper-parameters and the metrics to compare (without one, the
    /// dashboard gathers them from the runs' sessions and scalars).
    pub fn experiment(
        &mut self,
        name: &str,
        params: &[(String, &Value)],
        metrics: &[String],
    ) -> Result<()> {
        let hparam_infos = params
            .iter()
            .map(|(n, v)| HParamInfo {
                name: n.clone(),
                r#type: data_type(v),
            })
            .collect();
        let metric_infos = metrics
            .iter()
            .map(|m| MetricInfo {
                name: Some(MetricName {
                    group: String::new(),
                    tag: m.clone(),
                }),
            })
            .collect();
        let e = Experiment {
            description: String::new(),
            time_created_secs: now_secs(),
            hparam_infos,
            metric_infos,
            name: name.into(),
        };
        self.hparams("_hparams_/experiment", HParamsData::Experiment(e))
    }

    /// A run's hyper-parameters, at its start.
    pub fn session_start(&mut self, config: &serde_json::Map<String, Value>) -> Result<()> {
        let hparams = config
            .iter()
            .map(|(k, v)| (k.clone(), proto_value(v)))
            .collect();
        self.hparams(
            "_hparams_/session_start_info",
            HParamsData::SessionStartInfo(SessionStartInfo {
                hparams,
                start_time_secs: now_secs(),
            }),
        )
    }

    /// A run's end.
    pub fn session_end(&mut self, status: SessionStatus) -> Result<()> {
        let status = match status {
            SessionStatus::Unknown => 0,
            SessionStatus::Success => 1,
            SessionStatus::Failure => 2,
        };
        self.hparams(
            "_hparams_/session_end_info",
            HParamsData::SessionEndInfo(SessionEndInfo {
                status,
                end_time_secs: now_secs(),
            }),
        )
    }
}

fn data_type(v: &Value) -> i32 {
    match v {
        Value::Bool(_) => 2,
        Value::Number(_) => 3,
        _ => 1,
    }
}

fn proto_value(v: &Value) -> ProtoValue {
    let kind = match v {
        Value::Bool(b) => ProtoKind::Bool(*b),
        Value::Number(n) => ProtoKind::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => ProtoKind::Text(s.clone()),
        other => ProtoKind::Text(other.to_string()),
    };
    ProtoValue { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_of_tensorflow() {
        // crc32c("123456789") = 0xe3069283 (the standard check value); TensorFlow's mask
        // rotates right by 15 and adds 0xa282ead8.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            masked_crc(b"123456789"),
            0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn records_are_framed() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path(), "t").unwrap();
        let rec = serde_json::json!({"epoch": 1, "acc": 0.5, "name": "x"});
        w.scalars(
            1,
            rec.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v)),
        )
        .unwrap();
        drop(w);
        let f = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let bytes = std::fs::read(f).unwrap();
        // Two records, each framed with valid CRCs.
        let mut at = 0;
        let mut n = 0;
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            assert_eq!(
                u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()),
                masked_crc(&bytes[at..at + 8])
            );
            let data = &bytes[at + 12..at + 12 + len];
            assert_eq!(
                u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap()),
                masked_crc(data)
            );
            let e = Event::decode(data).unwrap();
            if n == 1 {
                let Some(EventWhat::Summary(s)) = e.what else {
                    panic!("{e:?}")
                };
                assert_eq!(
                    s.value.iter().map(|v| v.tag.as_str()).collect::<Vec<_>>(),
                    ["acc", "epoch"]
                );
            }
            at += 16 + len;
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
