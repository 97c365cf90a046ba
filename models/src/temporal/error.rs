//! Errors of the temporal state (memory and mailbox) and of checkpoint restores.

/// An inconsistent argument to [`NodeMemory`](super::NodeMemory) or [`Mailbox`](super::Mailbox):
/// each variant names the offending field and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemporalStateError {
    /// A node id at or past the number of nodes.
    #[error("{field}[{position}] = {id} is not a node id (the state holds {num_nodes} nodes)")]
    NodeOutOfRange {
        /// The argument holding the id (`ids`).
        field: &'static str,
        /// Position of the id in that argument.
        position: usize,
        /// The id.
        id: usize,
        /// Number of nodes of the state.
        num_nodes: usize,
    },
    /// A tensor or buffer whose shape disagrees with the state or with the ids.
    #[error("{field} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The argument or checkpoint field with the wrong shape.
        field: &'static str,
        /// Its shape.
        found: Vec<usize>,
        /// The shape the state needs.
        expected: Vec<usize>,
    },
    /// A checkpoint field whose data could not be read as the element type the state holds.
    #[error("{field} cannot be read as {element}: {reason}")]
    Data {
        /// The checkpoint field.
        field: &'static str,
        /// The element type expected (`f32`, `bool`, `i64`).
        element: &'static str,
        /// What the conversion reported.
        reason: String,
    },
}
