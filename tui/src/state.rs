//! Everything the UI shows, in one value: the starting and the current simulation, the
//! measured trace, each pane's cursor and zoom, the what-if knobs. The view reads only this,
//! and only [`crate::update::update`] changes it.

use crate::measured::Measured;
use crate::worker::Outcome;
use twin_sim::scenario::{PipelineSchedule, Precision, Recompute, Scenario};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    Timeline,
    Memory,
    Compare,
    WhatIf,
    Faults,
}

impl Pane {
    pub const ALL: [Pane; 5] = [
        Pane::Timeline,
        Pane::Memory,
        Pane::Compare,
        Pane::WhatIf,
        Pane::Faults,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Timeline => "Timeline",
            Pane::Memory => "Memory",
            Pane::Compare => "Compare",
            Pane::WhatIf => "What-if",
            Pane::Faults => "Faults",
        }
    }

    pub fn index(self) -> usize {
        Pane::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }
}

/// The visible window of the Timeline pane and its selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelineView {
    /// Selected row (rank) index into the timeline's rows.
    pub row: usize,
    /// Start of the visible window, relative to the timeline's start.
    pub offset_ns: u64,
    /// Width of the visible window; 0 = the whole step.
    pub window_ns: u64,
    /// Selected op: an index into the selected row's spans.
    pub selected: Option<usize>,
}

/// How a knob's value changes with ← and →.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Halve / double (parallel degrees, batch sizes).
    Double,
    /// -1 / +1 within `0..=max`.
    One { max: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnobValue {
    Int(u64, Step),
    /// Index into the allowed names.
    Choice(usize, &'static [&'static str]),
    Bool(bool),
}

impl KnobValue {
    /// The value in TOML syntax, as `--set` takes it.
    pub fn toml(&self) -> String {
        match self {
            KnobValue::Int(v, _) => v.to_string(),
            KnobValue::Choice(i, names) => format!("\"{}\"", names.get(*i).unwrap_or(&"?")),
            KnobValue::Bool(b) => b.to_string(),
        }
    }

    /// The value as shown.
    pub fn text(&self) -> String {
        match self {
            KnobValue::Int(v, _) => v.to_string(),
            KnobValue::Choice(i, names) => names.get(*i).unwrap_or(&"?").to_string(),
            KnobValue::Bool(b) => if *b { "on" } else { "off" }.to_string(),
        }
    }
}

/// One editable scenario key of the What-if pane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Knob {
    pub label: &'static str,
    /// Scenario key, as `--set` names it.
    pub key: &'static str,
    pub value: KnobValue,
    /// The starting scenario's value.
    pub base: KnobValue,
}

impl Knob {
    pub fn changed(&self) -> bool {
        self.value != self.base
    }
}

pub const SCHEDULES: [&str; 5] = [
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "zero-bubble",
    "dualpipe",
];
pub const RECOMPUTES: [&str; 3] = ["none", "selective", "full"];
pub const PRECISIONS: [&str; 4] = ["fp32", "fp16", "bf16", "fp8"];

/// The knobs of the What-if pane with the values of `s`.
pub fn knobs_of(s: &Scenario) -> Vec<Knob> {
    let p = &s.parallel;
    let t = &s.training;
    let schedule = PipelineSchedule::ALL
        .iter()
        .position(|(_, x)| *x == p.schedule)
        .unwrap_or(0);
    let recompute = match t.recompute {
        Recompute::None => 0,
        Recompute::Selective => 1,
        Recompute::Full => 2,
    };
    let precision = match t.precision {
        Precision::Fp32 => 0,
        Precision::Fp16 => 1,
        Precision::Bf16 => 2,
        Precision::Fp8 => 3,
    };
    let int = |v: u64| KnobValue::Int(v, Step::Double);
    let knob = |label, key, value: KnobValue| Knob {
        label,
        key,
        base: value.clone(),
        value,
    };
    vec![
        knob("tp", "parallel.tp", int(u64::from(p.tp))),
        knob("pp", "parallel.pp", int(u64::from(p.pp))),
        knob("dp", "parallel.dp", int(u64::from(p.dp))),
        knob("vpp", "parallel.vpp", int(u64::from(p.vpp))),
        knob("micro batch", "training.micro_batch", int(t.micro_batch)),
        knob("global batch", "training.global_batch", int(t.global_batch)),
        knob(
            "schedule",
            "parallel.schedule",
            KnobValue::Choice(schedule, &SCHEDULES),
        ),
        knob(
            "recompute",
            "training.recompute",
            KnobValue::Choice(recompute, &RECOMPUTES),
        ),
        knob(
            "zero stage",
            "parallel.zero",
            KnobValue::Int(u64::from(p.zero), Step::One { max: 3 }),
        ),
        knob(
            "overlap grad reduce",
            "training.overlap_grad_reduce",
            KnobValue::Bool(t.overlap_grad_reduce),
        ),
        knob(
            "overlap param gather",
            "training.overlap_param_gather",
            KnobValue::Bool(t.overlap_param_gather),
        ),
        knob(
            "precision",
            "training.precision",
            KnobValue::Choice(precision, &PRECISIONS),
        ),
    ]
}

/// The What-if pane: knobs, cursor, a number being typed, the last re-simulation's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhatIf {
    pub knobs: Vec<Knob>,
    pub cursor: usize,
    /// Digits typed after Enter on a numeric knob; Enter applies, Esc cancels.
    pub editing: Option<String>,
    /// Why the edited scenario could not be simulated (validator or engine message).
    pub error: Option<String>,
}

impl WhatIf {
    /// `--set` overrides for every knob that differs from the starting scenario.
    pub fn overrides(&self) -> Vec<String> {
        self.knobs
            .iter()
            .filter(|k| k.changed())
            .map(|k| format!("{}={}", k.key, k.value.toml()))
            .collect()
    }
}

/// The whole UI state.
pub struct App {
    pub pane: Pane,
    pub help: bool,
    /// The scenario file's name as shown (no directories).
    pub label: String,
    /// The starting scenario's simulation, for deltas.
    pub base: Box<Outcome>,
    /// The simulation shown: the last what-if that simulated, or the start.
    pub current: Box<Outcome>,
    /// The request `current` answered (0: the start).
    pub current_id: u64,
    pub measured: Option<Measured>,
    pub timeline: TimelineView,
    /// Selected row of the Memory pane.
    pub memory_row: usize,
    pub whatif: WhatIf,
    /// The newest re-simulation asked for and not yet answered.
    pub pending: Option<u64>,
    pub next_request: u64,
    /// One line of feedback (saved file, refused action).
    pub status: String,
    pub quit: bool,
}

impl App {
    pub fn new(label: String, base: Outcome, measured: Option<Measured>) -> App {
        let whatif = WhatIf {
            knobs: knobs_of(&base.scenario),
            cursor: 0,
            editing: None,
            error: None,
        };
        let base = Box::new(base);
        App {
            pane: Pane::Timeline,
            help: false,
            label,
            current: base.clone(),
            current_id: 0,
            base,
            measured,
            timeline: TimelineView::default(),
            memory_row: 0,
            whatif,
            pending: None,
            next_request: 1,
            status: String::new(),
            quit: false,
        }
    }

    /// The visible window of the timeline, as absolute (start, end) nanoseconds.
    pub fn window(&self) -> (u64, u64) {
        let t = &self.current.timeline;
        let full = t.span_ns().max(1);
        let w = if self.timeline.window_ns == 0 {
            full
        } else {
            self.timeline.window_ns.min(full)
        };
        let start = t.start_ns.saturating_add(self.timeline.offset_ns);
        (start, start.saturating_add(w))
    }
}
