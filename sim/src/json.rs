//! What every JSON document twin writes has in common (docs/reference/json.md): a schema tag
//! first, `"schema": "twin.<kind>/1"`, naming the document's shape and its version, and, where
//! a scenario is involved, the layout it was run with.

use crate::scenario::Scenario;
use serde::{Deserialize, Serialize};

/// The version every document's schema tag carries; it changes when a document's fields change
/// incompatibly.
pub const SCHEMA_VERSION: u32 = 1;

/// The schema tag of a document of `kind`: `twin.<kind>/1`.
pub fn schema(kind: &str) -> String {
    format!("twin.{kind}/{SCHEMA_VERSION}")
}

/// A document: its schema tag, then the fields of `body` (which must serialize as a map).
#[derive(Serialize)]
pub struct Document<'a, T: Serialize + ?Sized> {
    pub schema: String,
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: Serialize + ?Sized> Document<'a, T> {
    pub fn new(kind: &str, body: &'a T) -> Self {
        Document {
            schema: schema(kind),
            body,
        }
    }

    /// Pretty JSON, the schema tag first.
    pub fn to_string_pretty(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

/// Pretty JSON of `body` as a document of `kind` (see [`Document`]).
pub fn document<T: Serialize + ?Sized>(kind: &str, body: &T) -> Result<String, serde_json::Error> {
    Document::new(kind, body).to_string_pretty()
}

/// Pretty JSON of `body` as a document of `kind` that echoes `layout` after its schema tag.
pub fn document_with_layout<T: Serialize + ?Sized>(
    kind: &str,
    layout: Layout,
    body: &T,
) -> Result<String, serde_json::Error> {
    document(kind, &WithLayout { layout, body })
}

/// `body`'s fields after `layout` (see [`document_with_layout`]).
#[derive(Serialize)]
pub struct WithLayout<'a, T: Serialize + ?Sized> {
    pub layout: Layout,
    #[serde(flatten)]
    pub body: &'a T,
}

/// The parallel layout of a scenario, as documents echo it: the degrees of tensor, pipeline,
/// data, context and expert parallelism, the virtual stages per pipeline rank and the micro
/// batch (sequences).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    pub vpp: u32,
    pub micro_batch: u64,
}

impl Layout {
    pub fn of(s: &Scenario) -> Layout {
        let p = &s.parallel;
        Layout {
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            cp: p.cp,
            ep: p.ep,
            vpp: p.vpp,
            micro_batch: s.training.micro_batch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Body {
        b: u32,
        a: &'static str,
    }

    #[test]
    fn the_schema_tag_comes_first_and_the_fields_keep_their_order() {
        let text = document("demo", &Body { b: 2, a: "x" }).unwrap();
        assert_eq!(
            text,
            "{\n  \"schema\": \"twin.demo/1\",\n  \"b\": 2,\n  \"a\": \"x\"\n}"
        );
    }

    #[test]
    fn a_body_that_is_not_a_map_is_an_error_not_a_panic() {
        assert!(document("demo", &[1, 2]).is_err());
    }

    #[test]
    fn the_layout_is_the_scenarios_parallel_section_and_micro_batch() {
        let mut s = crate::testing::small_scenario(2, 4, 3, 8);
        s.parallel.vpp = 3;
        s.training.micro_batch = 5;
        let l = Layout::of(&s);
        assert_eq!((l.tp, l.pp, l.dp), (2, 4, 3));
        assert_eq!((l.vpp, l.micro_batch), (3, 5));
        assert_eq!((l.cp, l.ep), (s.parallel.cp, s.parallel.ep));
    }
}
