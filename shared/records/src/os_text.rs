//! Paths (and inputs as given) in records, without loss.
//!
//! A Unix file name is bytes, not text: `caf\xe9.png` is a valid name that no JSON string can
//! hold. A path that is UTF-8 (nearly all) is written as a plain JSON string; any other is written
//! as `{"bytes":"<base64 of its bytes>"}` (standard alphabet, padded). Readers accept both, and
//! ripgrep's `{"text":"..."}` too. Used through serde's `with`:
//!
//! ```
//! use std::ffi::OsString;
//! use std::os::unix::ffi::OsStringExt;
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct R {
//!     #[serde(with = "records::os_text")]
//!     input: OsString,
//! }
//! let r = R { input: OsString::from_vec(b"caf\xe9.png".to_vec()) };
//! let line = serde_json::to_string(&r).unwrap();
//! assert_eq!(line, r#"{"input":{"bytes":"Y2Fm6S5wbmc="}}"#);
//! assert_eq!(serde_json::from_str::<R>(&line).unwrap(), r);
//! ```

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The JSON value of a path: a string when it is UTF-8, else `{"bytes": base64}`.
pub fn to_json(s: &OsStr) -> serde_json::Value {
    serde_json::to_value(Out(s)).expect("a string or a one-entry map is always a JSON value")
}

/// Why a JSON value is not a path ([`from_json`]).
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// `{"bytes": ...}` whose text is not base64. The message ends with base64's reason (what
    /// error records and serde's messages carry); `chain_text` does not repeat it.
    #[error("\"bytes\" is not base64: {0}")]
    NotBase64(#[source] base64::DecodeError),
    /// Neither a string, `{"bytes": base64}` nor `{"text": string}`: the value.
    #[error("not a path: {0}")]
    NotAPath(serde_json::Value),
}

/// A path from its JSON value: a string, `{"bytes": base64}` or `{"text": string}`.
pub fn from_json(v: &serde_json::Value) -> Result<OsString, PathError> {
    use serde_json::Value;
    match v {
        Value::String(s) => Ok(s.into()),
        Value::Object(o) if o.len() == 1 => match o.iter().next() {
            Some((k, Value::String(s))) if k == "text" => Ok(s.into()),
            Some((k, Value::String(s))) if k == "bytes" => STANDARD
                .decode(s)
                .map(OsString::from_vec)
                .map_err(PathError::NotBase64),
            _ => Err(PathError::NotAPath(v.clone())),
        },
        _ => Err(PathError::NotAPath(v.clone())),
    }
}

/// Serializes one path-like value (`&OsStr` underneath) as [`to_json`] writes it.
struct Out<'a>(&'a OsStr);

impl Serialize for Out<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(t) => s.serialize_str(t),
            None => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("bytes", &STANDARD.encode(self.0.as_bytes()))?;
                m.end()
            }
        }
    }
}

/// Reads one path written by [`Out`] (or ripgrep's `{"text": ...}`).
struct In(OsString);

impl<'de> Deserialize<'de> for In {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        from_json(&v).map(In).map_err(D::Error::custom)
    }
}

pub fn serialize<S: Serializer, P: AsRef<OsStr>>(p: &P, s: S) -> Result<S::Ok, S::Error> {
    Out(p.as_ref()).serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>, P: From<OsString>>(d: D) -> Result<P, D::Error> {
    In::deserialize(d).map(|i| P::from(i.0))
}

/// `Option` of a path (`#[serde(with = "records::os_text::option")]`).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer, P: AsRef<OsStr>>(
        p: &Option<P>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(&Out(p.as_ref())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, P: From<OsString>>(
        d: D,
    ) -> Result<Option<P>, D::Error> {
        Ok(Option::<In>::deserialize(d)?.map(|i| P::from(i.0)))
    }
}

/// A list of paths (`#[serde(with = "records::os_text::vec")]`).
pub mod vec {
    use super::*;

    pub fn serialize<S: Serializer, P: AsRef<OsStr>>(p: &[P], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(p.iter().map(|p| Out(p.as_ref())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, P: From<OsString>>(
        d: D,
    ) -> Result<Vec<P>, D::Error> {
        Ok(Vec::<In>::deserialize(d)?
            .into_iter()
            .map(|i| P::from(i.0))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_is_no_path_says_which_way() {
        use std::error::Error as _;
        let e = from_json(&serde_json::json!({"bytes": "not base64!"})).unwrap_err();
        assert!(matches!(e, PathError::NotBase64(_)), "{e:?}");
        assert!(
            e.to_string().starts_with("\"bytes\" is not base64: "),
            "{e}"
        );
        let source = e.source().expect("base64's error is the source");
        assert!(source.is::<base64::DecodeError>(), "{source:?}");
        let e = from_json(&serde_json::json!(7)).unwrap_err();
        assert!(matches!(e, PathError::NotAPath(_)), "{e:?}");
        assert_eq!(e.to_string(), "not a path: 7");
        let e = from_json(&serde_json::json!({"bytes": "YQ==", "text": "a"})).unwrap_err();
        assert_eq!(e.to_string(), r#"not a path: {"bytes":"YQ==","text":"a"}"#);
    }

    #[test]
    fn utf8_paths_are_plain_strings_and_others_bytes() {
        assert_eq!(
            to_json(OsStr::new("a b/ü.png")),
            serde_json::json!("a b/ü.png")
        );
        let raw = OsStr::from_bytes(b"dir/caf\xe9\n.png");
        let v = to_json(raw);
        assert_eq!(v, serde_json::json!({"bytes": "ZGlyL2NhZukKLnBuZw=="}));
        assert_eq!(from_json(&v).unwrap(), raw);
        assert_eq!(
            from_json(&serde_json::json!({"text": "t.png"})).unwrap(),
            "t.png"
        );
    }

    #[test]
    fn malformed_paths_are_refused() {
        for bad in [
            serde_json::json!(3),
            serde_json::json!({"bytes": "not base64!"}),
            serde_json::json!({"bytes": 1}),
            serde_json::json!({"bytes": "YQ==", "text": "a"}),
            serde_json::json!({"other": "a"}),
        ] {
            assert!(from_json(&bad).is_err(), "{bad}");
        }
    }
}
