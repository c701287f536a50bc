//! `[training] moe_routing`: each form reads to its variant, and each refusal is a located
//! error that names the key and what to write instead.

use super::keys::training as tk;
use super::{ErrorKind, MoeRouting, Scenario, ScenarioError};

/// A mixture-of-experts model of 4 experts on 8 GPUs, expert-parallel over 2; `[training]` is
/// the last section, so a line appended to it lands there.
const MOE: &str = r#"[model]
layers = 2
hidden = 64
heads = 4
seq_len = 128
vocab = 1000
experts = 4
top_k = 2
[cluster]
gpu = "h100-sxm-80gb"
gpus = 8
[parallel]
ep = 2
[training]
global_batch = 8
"#;

fn resolve(text: &str, overrides: &[&str]) -> Result<Scenario, ScenarioError> {
    super::resolve_text(text, "moe.toml", overrides)
}

/// `MOE` with `moe_routing = <form>` as its last line, and that line's number.
fn with_routing(form: &str) -> (String, u32) {
    let line = MOE.lines().count() as u32 + 1;
    (format!("{MOE}moe_routing = {form}\n"), line)
}

fn routing(form: &str) -> MoeRouting {
    let (text, _) = with_routing(form);
    match resolve(&text, &[]) {
        Ok(s) => s.training.moe_routing,
        Err(e) => panic!("{form}: {e}"),
    }
}

/// The error for `form`, checked to sit on its line and to name `moe_routing`.
fn refused(text: &str, line: u32) -> ScenarioError {
    let e = resolve(text, &[]).expect_err("refused");
    assert_eq!(e.origin, "moe.toml", "{e}");
    assert_eq!(e.line, Some(line), "{e}");
    assert!(e.key.starts_with("training.moe_routing"), "{e}");
    e
}

fn refused_form(form: &str) -> ScenarioError {
    let (text, line) = with_routing(form);
    refused(&text, line)
}

#[test]
fn each_form_reads_to_its_variant() {
    assert_eq!(
        resolve(MOE, &[]).unwrap().training.moe_routing,
        MoeRouting::Balanced
    );
    assert_eq!(routing("\"balanced\""), MoeRouting::Balanced);
    assert_eq!(routing("\"force-balanced\""), MoeRouting::ForceBalanced);
    assert_eq!(
        routing("{ capacity_factor = 1.25 }"),
        MoeRouting::Capacity { factor: 1.25 }
    );
    assert_eq!(
        routing("{ capacity_factor = 1000 }"),
        MoeRouting::Capacity { factor: 1000.0 }
    );
    assert_eq!(
        routing("{ imbalance = 1.5 }"),
        MoeRouting::Imbalance { max_load: 1.5 }
    );
    // The whole load on one of the two ranks, and no skew at all, are both allowed.
    assert_eq!(
        routing("{ imbalance = 2 }"),
        MoeRouting::Imbalance { max_load: 2.0 }
    );
    assert_eq!(
        routing("{ imbalance = 1 }"),
        MoeRouting::Imbalance { max_load: 1.0 }
    );
    assert_eq!(
        routing("{ expert_loads = [1, 2.5, 0, 4] }"),
        MoeRouting::ExpertLoads(vec![1.0, 2.5, 0.0, 4.0])
    );
    assert_eq!(
        routing("{ expert_load_cv = 0.3 }"),
        MoeRouting::ExpertLoadCv { cv: 0.3 }
    );
    assert_eq!(
        routing("{ expert_load_cv = 0 }"),
        MoeRouting::ExpertLoadCv { cv: 0.0 }
    );
    // A table header reads the same as an inline table.
    let text = format!("{MOE}[training.moe_routing]\nimbalance = 1.25\n");
    assert_eq!(
        resolve(&text, &[]).unwrap().training.moe_routing,
        MoeRouting::Imbalance { max_load: 1.25 }
    );
    // Overrides: a bare word is a name, an inline table a form.
    let s = resolve(MOE, &["training.moe_routing=force-balanced"]).unwrap();
    assert_eq!(s.training.moe_routing, MoeRouting::ForceBalanced);
    let s = resolve(MOE, &["training.moe_routing={ expert_load_cv = 0.5 }"]).unwrap();
    assert_eq!(s.training.moe_routing, MoeRouting::ExpertLoadCv { cv: 0.5 });
}

/// Per-expert loads change nothing when every rank holds every expert, but they are legal.
#[test]
fn per_expert_loads_are_accepted_without_expert_parallelism() {
    let ep1 = MOE.replace("ep = 2", "ep = 1");
    assert_ne!(ep1, MOE);
    for (form, want) in [
        (
            "{ expert_loads = [4, 1, 1, 1] }",
            MoeRouting::ExpertLoads(vec![4.0, 1.0, 1.0, 1.0]),
        ),
        (
            "{ expert_load_cv = 1.5 }",
            MoeRouting::ExpertLoadCv { cv: 1.5 },
        ),
        ("\"force-balanced\"", MoeRouting::ForceBalanced),
        (
            "{ capacity_factor = 1.0 }",
            MoeRouting::Capacity { factor: 1.0 },
        ),
    ] {
        let text = format!("{ep1}moe_routing = {form}\n");
        let s = resolve(&text, &[]).unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(s.training.moe_routing, want);
    }
}

#[test]
fn names_and_types_are_checked() {
    let allowed = tk::MOE_ROUTING.allowed();

    let e = refused_form("\"force-balance\"");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "training.moe_routing");
    assert_eq!(e.value, "\"force-balance\"");
    assert!(e.message.contains("did you mean `force-balanced`"), "{e}");
    assert_eq!(e.allowed, allowed);

    for form in ["3", "true", "[1.5]"] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Type, "{e}");
        assert_eq!(e.key, "training.moe_routing");
        assert!(
            e.message.contains("a routing name or an inline table"),
            "{e}"
        );
        assert_eq!(e.allowed, allowed);
    }

    let e = refused_form("{}");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("no routing form"), "{e}");
    assert_eq!(e.allowed, allowed);

    let e = refused_form("{ capacity_factor = 1.0, imbalance = 1.5 }");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "training.moe_routing");
    assert!(
        e.message
            .contains("2 routing forms at once (capacity_factor, imbalance); give one"),
        "{e}"
    );
    assert_eq!(e.allowed, allowed);

    let e = refused_form("{ imbalanse = 1.5 }");
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!(e.key, "training.moe_routing.imbalanse");
    assert!(e.message.contains("did you mean `imbalance`"), "{e}");
    assert_eq!(
        e.allowed,
        "capacity_factor, imbalance, expert_loads, expert_load_cv"
    );
    // An unknown key beside a known one is named before the count.
    let e = refused_form("{ imbalance = 1.5, seed = 3 }");
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!(e.key, "training.moe_routing.seed");

    let e = refused_form("{ capacity_factor = \"1.0\" }");
    assert_eq!(e.kind, ErrorKind::Type);
    assert_eq!(e.key, "training.moe_routing.capacity_factor");
}

#[test]
fn numbers_out_of_range_are_refused() {
    for form in [
        "{ capacity_factor = 0 }",
        "{ capacity_factor = -1.0 }",
        "{ capacity_factor = 1000.5 }",
        "{ capacity_factor = nan }",
        "{ capacity_factor = inf }",
    ] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Invalid, "{form}: {e}");
        assert_eq!(e.key, "training.moe_routing.capacity_factor", "{form}");
        assert_eq!(e.allowed, "numbers greater than 0, at most 1e3", "{form}");
    }
    for form in [
        "{ expert_load_cv = -0.1 }",
        "{ expert_load_cv = 10.5 }",
        "{ expert_load_cv = -inf }",
    ] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Invalid, "{form}: {e}");
        assert_eq!(e.key, "training.moe_routing.expert_load_cv", "{form}");
        assert_eq!(e.allowed, "numbers from 0 to 1e1", "{form}");
    }
    let imbalance_allowed = "numbers from 1 (balanced) to parallel.ep (the whole load on one rank)";
    let e = refused_form("{ imbalance = 0.9 }");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "training.moe_routing.imbalance");
    assert!(e.message.contains("below 1"), "{e}");
    assert_eq!(e.allowed, imbalance_allowed);
    for form in [
        "{ imbalance = 0 }",
        "{ imbalance = -2 }",
        "{ imbalance = nan }",
    ] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Invalid, "{form}: {e}");
        assert_eq!(e.key, "training.moe_routing.imbalance", "{form}");
        assert_eq!(e.allowed, imbalance_allowed, "{form}");
    }
}

#[test]
fn expert_loads_are_checked_item_by_item() {
    for (form, index) in [
        ("{ expert_loads = [1, -1, 1, 1] }", 1),
        ("{ expert_loads = [1, 1, nan, 1] }", 2),
        ("{ expert_loads = [inf, 1, 1, 1] }", 0),
        ("{ expert_loads = [1, 1, 1, \"1\"] }", 3),
        ("{ expert_loads = [1, 1, 1, 2e15] }", 3),
    ] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Type, "{form}: {e}");
        assert_eq!(
            e.key,
            format!("training.moe_routing.expert_loads[{index}]"),
            "{form}"
        );
        assert_eq!(
            e.allowed, "an array of numbers from 0 to 1e15, one per expert, not all 0",
            "{form}"
        );
    }
    for form in ["{ expert_loads = [0, 0, 0.0, 0] }", "{ expert_loads = [] }"] {
        let e = refused_form(form);
        assert_eq!(e.kind, ErrorKind::Invalid, "{form}: {e}");
        assert_eq!(e.key, "training.moe_routing.expert_loads");
        assert!(e.message.contains("no expert has a load"), "{e}");
    }
    let e = refused_form("{ expert_loads = 3 }");
    assert_eq!(e.kind, ErrorKind::Type);
    assert_eq!(e.key, "training.moe_routing.expert_loads");
}

#[test]
fn cross_field_rules_name_the_fix() {
    // One load per expert.
    let e = refused_form("{ expert_loads = [1, 2, 3] }");
    assert_eq!(e.kind, ErrorKind::CrossField);
    assert_eq!(e.key, "training.moe_routing");
    assert!(
        e.message
            .contains("expert_loads gives 3 loads, but the model has 4 experts"),
        "{e}"
    );
    assert_eq!(e.allowed, "expert_loads with 4 numbers, one per expert");

    // At most the whole load on one rank.
    let e = refused_form("{ imbalance = 2.5 }");
    assert_eq!(e.kind, ErrorKind::CrossField);
    assert_eq!(e.key, "training.moe_routing");
    assert!(
        e.message.contains("imbalance = 2.5 is more than ep = 2"),
        "{e}"
    );
    assert_eq!(e.allowed, "imbalance from 1 to 2");

    // No expert-parallel ranks to skew between.
    let ep1 = MOE.replace("ep = 2", "ep = 1");
    let text = format!("{ep1}moe_routing = {{ imbalance = 1.5 }}\n");
    let e = refused(&text, MOE.lines().count() as u32 + 1);
    assert_eq!(e.kind, ErrorKind::CrossField);
    assert!(
        e.message.contains("the experts are all on every rank"),
        "{e}"
    );
    assert!(e.allowed.contains("parallel.ep > 1"), "{e}");

    // A dense model has nothing to route, whatever the form.
    let dense = MOE
        .replace("experts = 4\ntop_k = 2\n", "")
        .replace("ep = 2", "ep = 1");
    assert!(!dense.contains("experts"));
    for form in [
        "\"force-balanced\"",
        "{ capacity_factor = 1.0 }",
        "{ expert_load_cv = 0.2 }",
    ] {
        let text = format!("{dense}moe_routing = {form}\n");
        let e = refused(&text, dense.lines().count() as u32 + 1);
        assert_eq!(e.kind, ErrorKind::CrossField, "{form}: {e}");
        assert_eq!(e.key, "training.moe_routing");
        assert!(e.message.contains("the model is dense"), "{e}");
        assert!(e.allowed.contains("model.experts"), "{e}");
    }
    // Balanced, written out, is fine on a dense model: it is the default.
    let text = format!("{dense}moe_routing = \"balanced\"\n");
    assert_eq!(
        resolve(&text, &[]).unwrap().training.moe_routing,
        MoeRouting::Balanced
    );
}

/// `[training] moe_dispatcher`: each name reads to its dispatcher, an unknown one is refused
/// with the allowed names, a dense model refuses every dispatcher but NCCL's, and the writer
/// gives back what it read.
#[test]
fn moe_dispatcher_reads_refuses_and_round_trips() {
    use super::MoeDispatcher;
    for (name, want) in MoeDispatcher::ALL {
        let s = resolve(&format!("{MOE}moe_dispatcher = {name:?}\n"), &[]).unwrap();
        assert_eq!(s.training.moe_dispatcher, want);
        let emitted = super::emit::to_toml(&s);
        assert_eq!(
            emitted.contains("moe_dispatcher"),
            want != MoeDispatcher::AllToAll
        );
        let again = resolve(&emitted, &[]).unwrap();
        assert_eq!(again.training.moe_dispatcher, want, "{emitted}");
    }
    assert_eq!(
        resolve(MOE, &[]).unwrap().training.moe_dispatcher,
        MoeDispatcher::AllToAll
    );
    let e = resolve(&format!("{MOE}moe_dispatcher = \"deep-ep\"\n"), &[]).unwrap_err();
    assert_eq!(e.key, "training.moe_dispatcher", "{e}");
    assert!(e.allowed.contains("deepep"), "{e}");
    let dense = MOE
        .replace("experts = 4\ntop_k = 2\n", "")
        .replace("ep = 2\n", "");
    let e = resolve(&format!("{dense}moe_dispatcher = \"deepep\"\n"), &[]).unwrap_err();
    assert!(e.to_string().contains("moe_dispatcher"), "{e}");
    assert!(e.to_string().contains("dense"), "{e}");
    let ok = resolve(&format!("{dense}moe_dispatcher = \"alltoall\"\n"), &[]);
    assert!(ok.is_ok(), "{ok:?}");
}
