//! twin's pictures: one self-contained HTML file (inline SVG, no script, no network) and single
//! SVG plots, drawn with plotters' SVG backend. The drawing takes plain data ([`Report`] and
//! its sections) and returns text; [`from_sim`] makes that data from twin-sim's results. The
//! crate knows nothing of the command line.
//!
//! Text in the SVG is `<text>` elements that the viewer's fonts render; plotters lays it out
//! with its built-in estimate of text widths (no font files are read), so drawing works on a
//! bare machine with no fonts installed.
//!
//! Units: times are integer nanoseconds and sizes integer bytes in the data; the plots show
//! milliseconds, seconds and GiB, and say so on their axes.

pub mod from_sim;
mod html;
mod plot;

pub use html::to_html;
pub use plot::{goodput_svg, memory_svg, pareto_svg, timeline_svg, variability_svg, verify_svg};

/// What went wrong while drawing.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// plotters failed to lay out or draw `plot` (its message).
    #[error("drawing the {plot} plot: {message}")]
    Draw { plot: &'static str, message: String },
    /// The section has nothing to draw.
    #[error("the {plot} plot has no data: {why}")]
    Empty { plot: &'static str, why: String },
}

/// One labelled figure of the headline, already formatted for people (`"1.234 s"`).
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub label: String,
    pub value: String,
}

/// A small table: a header row and rows of the same width, already formatted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// What one span of a stage's step was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// At least one compute op running.
    Compute,
    /// No compute, but a transfer (or checkpoint write) in progress.
    ExposedComm,
    /// Neither: pipeline bubbles, waiting at rendezvous, the tail of the step.
    Idle,
}

impl SpanKind {
    pub const ALL: [SpanKind; 3] = [SpanKind::Compute, SpanKind::ExposedComm, SpanKind::Idle];

    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Compute => "compute",
            SpanKind::ExposedComm => "exposed communication",
            SpanKind::Idle => "idle (bubble)",
        }
    }
}

/// `[start_ns, end_ns)` of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
    pub kind: SpanKind,
}

/// The step of one pipeline stage, as its representative rank ran it.
#[derive(Clone, Debug, PartialEq)]
pub struct StageTimeline {
    pub stage: u32,
    pub rank: u32,
    /// In time order, not overlapping.
    pub spans: Vec<Span>,
}

/// A per-stage timeline of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub step_time_ns: u64,
    pub stages: Vec<StageTimeline>,
}

/// Live device memory from `time_ns` on, by category (indexed as [`Memory::categories`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPoint {
    pub time_ns: u64,
    pub bytes: Vec<u64>,
}

impl MemoryPoint {
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Where live memory first crossed HBM: when, and the op that allocated it.
#[derive(Clone, Debug, PartialEq)]
pub struct OverHbm {
    pub time_ns: u64,
    pub op: String,
}

/// Memory over the step of one stage's representative rank.
#[derive(Clone, Debug, PartialEq)]
pub struct StageMemory {
    pub stage: u32,
    pub rank: u32,
    /// One sample after every change, in time order.
    pub samples: Vec<MemoryPoint>,
    pub over_hbm: Option<OverHbm>,
}

/// Memory over the step per stage, by category, against HBM.
#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    /// Category names, bottom of the stack first.
    pub categories: Vec<String>,
    /// What a process can allocate of the GPU's memory: the line the plot draws.
    pub hbm_bytes: u64,
    pub step_time_ns: u64,
    pub stages: Vec<StageMemory>,
}

/// One predicted figure against its measurement, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyPair {
    pub label: String,
    pub predicted_s: f64,
    pub measured_s: f64,
}

/// Predicted against measured: times to plot, and a table of every compared figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Verify {
    pub times: Vec<VerifyPair>,
    pub table: Table,
}

/// One layout of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    /// Short layout name, e.g. `tp=8 pp=4 dp=16`.
    pub label: String,
    /// The `--set` arguments that make this layout from the base scenario.
    pub set_line: String,
    pub tokens_per_s: f64,
    pub peak_bytes: u64,
    pub fits: bool,
}

/// A sweep's simulated layouts and its ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub points: Vec<SweepPoint>,
    /// Indices into `points`, best first (what the report lists as `--set` lines).
    pub top: Vec<usize>,
    /// Indices into `points` of the Pareto front of throughput against memory (the sweep's
    /// own, `twin_sim::sweep::SweepResult::pareto`), in any order.
    pub pareto: Vec<usize>,
    /// What the ranking optimised, for the caption (`tokens/s`).
    pub objective: String,
    /// Usable HBM per GPU, drawn as a vertical line, when known.
    pub hbm_bytes: Option<u64>,
}

/// A Monte Carlo mean with its 95% confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ci {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

/// Goodput (and ETTR, where computed) at one checkpoint interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GoodputPoint {
    pub interval_steps: u64,
    pub goodput: Ci,
    pub ettr: Option<Ci>,
}

/// Goodput and ETTR against the checkpoint interval, over a horizon.
#[derive(Clone, Debug, PartialEq)]
pub struct Goodput {
    /// In increasing interval order.
    pub points: Vec<GoodputPoint>,
    /// The scenario's interval, the best of the sweep, and Young's and Daly's first-order
    /// optima, in steps.
    pub configured_steps: u64,
    pub best_steps: u64,
    pub young_steps: f64,
    pub daly_steps: f64,
    pub horizon_hours: f64,
    pub seeds: u32,
}

/// The step time over `[variability]`'s samples (every rank simulated on a drawn cluster).
#[derive(Clone, Debug, PartialEq)]
pub struct StepSpread {
    /// The step without variation (the prediction).
    pub deterministic_ns: u64,
    /// Each sample's step time, in sample order.
    pub samples_ns: Vec<u64>,
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
}

/// Everything a report can show; each section appears only when its data is given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub title: String,
    /// The headline figures, in order.
    pub headline: Vec<Figure>,
    /// Notes under the headline (one line each).
    pub notes: Vec<String>,
    pub timeline: Option<Timeline>,
    pub memory: Option<Memory>,
    pub verify: Option<Verify>,
    pub sweep: Option<Sweep>,
    pub goodput: Option<Goodput>,
    pub variability: Option<StepSpread>,
}

/// The single plots `twin report --format svg --plot` draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plot {
    Memory,
    Timeline,
    Pareto,
    Goodput,
    Verify,
    Variability,
}

impl Plot {
    pub fn name(self) -> &'static str {
        match self {
            Plot::Memory => "memory",
            Plot::Timeline => "timeline",
            Plot::Pareto => "pareto",
            Plot::Goodput => "goodput",
            Plot::Verify => "verify",
            Plot::Variability => "variability",
        }
    }
}

impl Report {
    /// The one plot asked for, as an SVG document; an error when the report lacks its data.
    pub fn plot_svg(&self, plot: Plot) -> Result<String, ReportError> {
        let missing = || ReportError::Empty {
            plot: plot.name(),
            why: "the report has no such section".into(),
        };
        match plot {
            Plot::Memory => memory_svg(self.memory.as_ref().ok_or_else(missing)?),
            Plot::Timeline => timeline_svg(self.timeline.as_ref().ok_or_else(missing)?),
            Plot::Pareto => pareto_svg(self.sweep.as_ref().ok_or_else(missing)?),
            Plot::Goodput => goodput_svg(self.goodput.as_ref().ok_or_else(missing)?),
            Plot::Verify => verify_svg(self.verify.as_ref().ok_or_else(missing)?),
            Plot::Variability => variability_svg(self.variability.as_ref().ok_or_else(missing)?),
        }
    }
}

#[cfg(test)]
mod tests;
