//! The trace as serde reads it: typed, borrowed, and loose. A field of the wrong type (a string
//! where a number belongs, an array where an object belongs) never fails the parse: it reads as
//! [`Loose::Other`], and the caller decides whether that event matters. Only malformed JSON
//! (and a key given twice in one object) is a parse error.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// One JSON value, kept only if it is a string or a number.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Loose<'a> {
    #[default]
    Missing,
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
    /// null, a boolean, an array or an object.
    Other,
}

impl Loose<'_> {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A number as f64 (integers beyond 2^53 round).
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Loose::Int(v) => Some(v as f64),
            Loose::UInt(v) => Some(v as f64),
            Loose::Float(v) => Some(v),
            _ => None,
        }
    }

    /// A non-negative integer: an integer literal, or a float with no fractional part.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match *self {
            Loose::Int(v) => u64::try_from(v).ok(),
            Loose::UInt(v) => Some(v),
            Loose::Float(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19 => {
                Some(v as u64)
            }
            _ => None,
        }
    }

    pub(crate) fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// An identifier (pid, tid) as a comparable key: integers and strings; else `None`.
    pub(crate) fn id_key(&self) -> IdKey {
        match self {
            Loose::Int(v) => IdKey::Int(i128::from(*v)),
            Loose::UInt(v) => IdKey::Int(i128::from(*v)),
            Loose::Str(s) => IdKey::Str(s.to_string()),
            _ => IdKey::None,
        }
    }

    /// What the value is, for error messages.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Loose::Missing => "missing",
            Loose::Int(_) | Loose::UInt(_) | Loose::Float(_) => "a number",
            Loose::Str(_) => "a string",
            Loose::Other => "not a string or number",
        }
    }
}

/// A pid or tid as Kineto writes them: integers for processes and threads, strings for its own
/// rows ("Spans", "Traces").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum IdKey {
    None,
    Int(i128),
    Str(String),
}

struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Loose::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Loose::UInt(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Loose::Float(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Loose<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
}

/// Reads `T` if the value is an object, else `None` (the value is skipped).
#[derive(Debug, Default)]
pub(crate) struct IfObject<T>(pub Option<T>);

struct IfObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for IfObjectVisitor<T> {
    type Value = IfObject<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(IfObject(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| IfObject(Some(t)))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for IfObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IfObjectVisitor(std::marker::PhantomData))
    }
}

/// Reads an array of `T` (each element through `T`'s own looseness); anything else is `None`.
#[derive(Debug, Default)]
pub(crate) enum IfArray<T> {
    #[default]
    Missing,
    NotArray,
    Items(Vec<T>),
}

struct IfArrayVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for IfArrayVisitor<T> {
    type Value = IfArray<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(IfArray::NotArray)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(item) = seq.next_element::<T>()? {
            items.push(item);
        }
        Ok(IfArray::Items(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(IfArray::NotArray)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for IfArray<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IfArrayVisitor(std::marker::PhantomData))
    }
}

/// The top level of a Kineto Chrome trace: `{"schemaVersion": 1, "deviceProperties": [...],
/// "distributedInfo": {...}, "traceEvents": [...], ...}` (pytorch/kineto@002d9919:
/// libkineto/src/output_json.cpp, `ChromeTraceLogger::handleTraceStart`; `distributedInfo` is
/// the metadata PyTorch adds for distributed jobs: `rank`, `world_size`, `backend`, ...).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTrace<'a> {
    #[serde(rename = "traceEvents", default, borrow)]
    pub trace_events: IfArray<IfObject<RawEvent<'a>>>,
    #[serde(rename = "distributedInfo", default, borrow)]
    pub distributed_info: IfObject<RawDistributed<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDistributed<'a> {
    #[serde(default, borrow)]
    pub rank: Loose<'a>,
    #[serde(default, borrow)]
    pub world_size: Loose<'a>,
}

/// One trace event. Kineto writes complete events (`"ph": "X"`) for CPU ops, runtime calls, GPU
/// kernels, memcpys, memsets and annotations, and flow (`s`/`f`), instant (`i`) and metadata (`M`)
/// events beside them (output_json.cpp, `handleActivity`, `handleGenericInstantEvent`, ...).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(default, borrow)]
    pub ph: Loose<'a>,
    #[serde(default, borrow)]
    pub cat: Loose<'a>,
    #[serde(default, borrow)]
    pub name: Loose<'a>,
    #[serde(default, borrow)]
    pub ts: Loose<'a>,
    #[serde(default, borrow)]
    pub dur: Loose<'a>,
    #[serde(default, borrow)]
    pub pid: Loose<'a>,
    #[serde(default, borrow)]
    pub tid: Loose<'a>,
    #[serde(default, borrow)]
    pub args: IfObject<RawArgs<'a>>,
}

/// The `args` keys this reader uses. Kernels carry "External id" (the launching CPU op's id),
/// "correlation" (the launching runtime call's), "stream" and "device"; memcpys and memsets
/// carry "bytes"; NCCL kernels launched under `record_param_comms` carry "Collective name",
/// "In msg nelems", "Out msg nelems", "Group size" and "dtype" (output_json.cpp, "Populate NCCL
/// collective metadata from CPU to GPU"). The same keys sit on the `record_param_comms` CPU op.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawArgs<'a> {
    #[serde(rename = "External id", default, borrow)]
    pub external_id: Loose<'a>,
    #[serde(default, borrow)]
    pub correlation: Loose<'a>,
    #[serde(default, borrow)]
    pub stream: Loose<'a>,
    #[serde(default, borrow)]
    pub device: Loose<'a>,
    #[serde(default, borrow)]
    pub bytes: Loose<'a>,
    #[serde(rename = "Collective name", default, borrow)]
    pub collective_name: Loose<'a>,
    #[serde(rename = "In msg nelems", default, borrow)]
    pub in_msg_nelems: Loose<'a>,
    #[serde(rename = "Out msg nelems", default, borrow)]
    pub out_msg_nelems: Loose<'a>,
    #[serde(rename = "Group size", default, borrow)]
    pub group_size: Loose<'a>,
    #[serde(default, borrow)]
    pub dtype: Loose<'a>,
    /// A CPU op's input shapes, where the profiler ran with `record_shapes=True`:
    /// `[[2048, 4096], [4096, 14336]]`, `[]` for a non-tensor input.
    #[serde(rename = "Input Dims", default, borrow)]
    pub input_dims: IfArray<IfArray<Loose<'a>>>,
    /// A CPU op's input types: `["c10::BFloat16", "c10::BFloat16"]`, `""` for a non-tensor.
    #[serde(rename = "Input type", default, borrow)]
    pub input_type: IfArray<Loose<'a>>,
}
