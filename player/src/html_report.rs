//! The parts kreplay's HTML reports share (`kreplay compare --html`, `kreplay play DIR
//! --html`): one self-contained page (inline CSS, no script, nothing fetched or linked), charts
//! drawn by plotters as inline SVG, and the figures as the tables print them. Every string
//! from the input goes through maud, which escapes it.

mod chart;
mod figures;
mod page;

pub use chart::{render_svg, Band, RefLine, Series, SortedChart, YScale};
pub use figures::{change_pct, noise_pct, ratio, seconds, spread_pct, tick, us};
pub use page::{figure, page, summary_table};
