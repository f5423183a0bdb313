//! Which launch attributes of a capture the player passes to the driver. The file is not
//! trusted: only ids this build knows are accepted; attributes that hold handles of the
//! recorded process (events) are rebuilt with handles of the player's own; attributes that
//! only mean something inside a graph are dropped.

use kreplay_format::LaunchAttribute;

use kreplay_cuda::launch::attr::{
    DEVICE_UPDATABLE_KERNEL_NODE as ATTR_DEVICE_UPDATABLE_KERNEL_NODE,
    LAUNCH_COMPLETION_EVENT as ATTR_LAUNCH_COMPLETION_EVENT,
    PROGRAMMATIC_EVENT as ATTR_PROGRAMMATIC_EVENT,
};

/// Attribute ids whose 64 value bytes are plain data, passed as recorded.
const PLAIN: [u32; 13] = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 14, 16];

/// One attribute as the player will pass it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAttribute {
    pub id: u32,
    pub value: [u8; 64],
    /// The first 8 value bytes must be replaced by a fresh event of the player's.
    pub needs_event: bool,
}

/// What `plan` decided, for the report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AttributePlan {
    pub attributes: Vec<PlannedAttribute>,
    /// Human-readable notes on what was rebuilt or dropped.
    pub notes: Vec<String>,
}

/// Plans the attributes; an id this build does not know is refused.
pub fn plan(recorded: &[LaunchAttribute]) -> Result<AttributePlan, u32> {
    let mut out = AttributePlan::default();
    for a in recorded {
        let mut value = [0u8; 64];
        let n = a.value.len().min(64);
        value[..n].copy_from_slice(&a.value[..n]);
        match a.id {
            id if PLAIN.contains(&id) => out.attributes.push(PlannedAttribute {
                id,
                value,
                needs_event: false,
            }),
            ATTR_PROGRAMMATIC_EVENT | ATTR_LAUNCH_COMPLETION_EVENT => {
                value[..8].fill(0);
                out.attributes.push(PlannedAttribute {
                    id: a.id,
                    value,
                    needs_event: true,
                });
                out.notes.push(format!(
                    "launch attribute {} names an event of the recorded process: replayed with an event of the player's",
                    a.id
                ));
            }
            ATTR_DEVICE_UPDATABLE_KERNEL_NODE => out.notes.push(
                "launch attribute 13 (device-updatable graph node) means nothing outside a graph: dropped".into(),
            ),
            id => return Err(id),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(id: u32, first: u64) -> LaunchAttribute {
        let mut value = vec![0u8; 64];
        value[..8].copy_from_slice(&first.to_le_bytes());
        LaunchAttribute { id, value }
    }

    #[test]
    fn plain_attributes_pass_as_recorded() {
        let p = plan(&[attr(4, 2), attr(2, 1)]).expect("known");
        assert_eq!(p.attributes.len(), 2);
        assert_eq!(p.attributes[0].id, 4);
        assert_eq!(&p.attributes[0].value[..8], &2u64.to_le_bytes());
        assert!(p.notes.is_empty());
    }

    #[test]
    fn recorded_event_handles_are_never_passed() {
        let p = plan(&[attr(12, 0xdead_beef_0000)]).expect("known");
        assert!(p.attributes[0].needs_event);
        assert_eq!(&p.attributes[0].value[..8], &[0u8; 8]);
        assert_eq!(p.notes.len(), 1);
    }

    #[test]
    fn graph_only_attributes_are_dropped_and_unknown_ids_refused() {
        let p = plan(&[attr(13, 0x1234)]).expect("known");
        assert!(p.attributes.is_empty());
        assert_eq!(plan(&[attr(15, 0)]), Err(15));
        assert_eq!(plan(&[attr(9999, 0)]), Err(9999));
        // A short value is zero-padded, a long one cut at 64 bytes.
        let p = plan(&[LaunchAttribute {
            id: 8,
            value: vec![1; 200],
        }])
        .expect("known");
        assert_eq!(p.attributes[0].value, [1u8; 64]);
    }
}
