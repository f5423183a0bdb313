//! `kreplay list --ranges`: each NVTX range instance with the launches made while it was
//! open, from the pushes and pops of every thread and the process's launch count at each, so
//! that a user can choose one for `record --nvtx-range NAME --nth N`. Instances are numbered
//! per domain and name in push order, as `--nvtx-range` counts them.

use std::collections::HashMap;

use kreplay_protocol::nvtx::OpenRange;
use kreplay_protocol::report::RangeSpan;

/// The most instances one process reports (a training loop pushes ranges without end).
pub const SPAN_LIMIT: usize = 100_000;

/// An instance being followed: its place in `spans`, and the launch count at its push.
#[derive(Debug, Clone, Copy)]
struct Opened {
    span: usize,
    launches_before: u64,
}

/// The instances so far (see the module comment).
#[derive(Debug, Default)]
pub struct RangeSpans {
    spans: Vec<RangeSpan>,
    /// Per thread, its open ranges in stack order (`None`: an instance not kept).
    open: HashMap<u64, Vec<Option<Opened>>>,
    /// Pushes so far per (domain, name).
    instances: HashMap<(Option<String>, String), u64>,
    left_out: u64,
    limit: usize,
}

/// The launches `launches_before + 1 ..= launches_now`, none when no launch came between.
fn launch_span(launches_before: u64, launches_now: u64) -> (Option<u64>, Option<u64>) {
    if launches_now > launches_before {
        (Some(launches_before + 1), Some(launches_now))
    } else {
        (None, None)
    }
}

impl RangeSpans {
    pub fn new() -> RangeSpans {
        RangeSpans::with_limit(SPAN_LIMIT)
    }

    fn with_limit(limit: usize) -> RangeSpans {
        RangeSpans {
            limit,
            ..RangeSpans::default()
        }
    }

    /// `range` was pushed on `thread` after `launches` launches of the process.
    pub fn push(&mut self, thread: u64, range: &OpenRange, launches: u64) {
        let key = (range.domain.clone(), range.name.clone());
        let instance = self.instances.entry(key).or_insert(0);
        *instance += 1;
        let opened = if self.spans.len() < self.limit {
            self.spans.push(RangeSpan {
                domain: range.domain.clone(),
                name: range.name.clone(),
                instance: *instance,
                ..RangeSpan::default()
            });
            Some(Opened {
                span: self.spans.len() - 1,
                launches_before: launches,
            })
        } else {
            self.left_out += 1;
            None
        };
        self.open.entry(thread).or_default().push(opened);
    }

    /// The range at `index` of `thread`'s stack popped after `launches` launches.
    pub fn pop(&mut self, thread: u64, index: usize, launches: u64) {
        let Some(stack) = self.open.get_mut(&thread) else {
            return;
        };
        if index >= stack.len() {
            return; // pushed before the recorder followed this thread (not kept)
        }
        if let Some(o) = stack.remove(index) {
            self.close(o, launches, true);
        }
    }

    fn close(&mut self, o: Opened, launches: u64, closed: bool) {
        if let Some(span) = self.spans.get_mut(o.span) {
            (span.first_launch, span.last_launch) = launch_span(o.launches_before, launches);
            span.closed = closed;
        }
    }

    /// Every instance, in push order, those still open with the launches up to `launches`
    /// (the process's last); and how many instances were not kept.
    pub fn finish(mut self, launches: u64) -> (Vec<RangeSpan>, u64) {
        let still_open: Vec<Opened> = self.open.values().flatten().flatten().copied().collect();
        for o in still_open {
            self.close(o, launches, false);
        }
        (self.spans, self.left_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(domain: Option<&str>, name: &str) -> OpenRange {
        OpenRange::new(domain, name)
    }

    fn span(name: &str, instance: u64, launches: Option<(u64, u64)>, closed: bool) -> RangeSpan {
        RangeSpan {
            domain: None,
            name: name.into(),
            instance,
            first_launch: launches.map(|l| l.0),
            last_launch: launches.map(|l| l.1),
            closed,
        }
    }

    #[test]
    fn each_instance_spans_the_launches_made_while_it_was_open() {
        let mut s = RangeSpans::new();
        s.push(1, &r(None, "model"), 0);
        s.push(1, &r(None, "layer"), 0);
        s.pop(1, 1, 3); // launches 1..3
        s.push(1, &r(None, "layer"), 3);
        s.pop(1, 1, 3); // empty
        s.push(1, &r(None, "layer"), 3);
        s.pop(1, 1, 5);
        s.pop(1, 0, 6);
        let (spans, left_out) = s.finish(6);
        assert_eq!(
            spans,
            [
                span("model", 1, Some((1, 6)), true),
                span("layer", 1, Some((1, 3)), true),
                span("layer", 2, None, true),
                span("layer", 3, Some((4, 5)), true),
            ]
        );
        assert_eq!(left_out, 0);
    }

    #[test]
    fn domains_count_apart_and_out_of_order_pops_close_the_right_one() {
        let mut s = RangeSpans::new();
        s.push(1, &r(None, "layer"), 0);
        s.push(1, &r(Some("d"), "layer"), 1);
        // The default domain's pop takes the range below.
        s.pop(1, 0, 2);
        s.pop(1, 0, 4);
        let (spans, _) = s.finish(4);
        assert_eq!(spans[0], span("layer", 1, Some((1, 2)), true));
        assert_eq!(spans[1].domain.as_deref(), Some("d"));
        assert_eq!(spans[1].instance, 1, "counted in its own domain");
        assert_eq!(
            (spans[1].first_launch, spans[1].last_launch),
            (Some(2), Some(4))
        );
    }

    #[test]
    fn threads_keep_stacks_of_their_own_and_count_instances_together() {
        let mut s = RangeSpans::new();
        s.push(1, &r(None, "step"), 0);
        s.push(2, &r(None, "step"), 1);
        s.pop(1, 0, 2);
        // A pop of a thread the spans never saw push (before they followed it) is ignored.
        s.pop(3, 0, 2);
        let (spans, _) = s.finish(5);
        assert_eq!(
            spans,
            [
                span("step", 1, Some((1, 2)), true),
                span("step", 2, Some((2, 5)), false),
            ]
        );
    }

    #[test]
    fn instances_past_the_limit_are_counted_not_kept() {
        let mut s = RangeSpans::with_limit(2);
        for i in 0..4 {
            s.push(1, &r(None, "it"), i);
            s.pop(1, 0, i + 1);
        }
        s.push(1, &r(None, "it"), 4);
        let (spans, left_out) = s.finish(4);
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[1].instance, 2);
        assert_eq!(left_out, 3);
    }
}
