//! [`HostEdges`]: the edges of a [`SequenceEdges`](crate::SequenceEdges) on the host, grouped by
//! destination row and by source row, what a CPU implementation of sparse edge attention walks.

/// The directed edges `src → dst` between the `[batch · seq]` rows of a batch, as two compressed
/// row lists: the sources of each destination row (in the order the edges were given) and the
/// destinations of each source row (in the same order). An edge given twice appears twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEdges {
    rows: usize,
    /// `incoming_offsets[r]..incoming_offsets[r + 1]` indexes `incoming` for destination row `r`.
    incoming_offsets: Vec<usize>,
    /// Source rows, grouped by destination row.
    incoming: Vec<u32>,
    /// `outgoing_offsets[r]..outgoing_offsets[r + 1]` indexes `outgoing` for source row `r`.
    outgoing_offsets: Vec<usize>,
    /// Destination rows, grouped by source row.
    outgoing: Vec<u32>,
}

/// `(row, other)` pairs grouped by `row` (a stable counting sort): the offsets per row and the
/// `other` entries in the pairs' order within each row.
fn group(rows: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize; rows + 1];
    for (row, _) in pairs.clone() {
        offsets[row as usize + 1] += 1;
    }
    for r in 0..rows {
        offsets[r + 1] += offsets[r];
    }
    let mut next = offsets.clone();
    let mut grouped = vec![0u32; offsets[rows]];
    for (row, other) in pairs {
        let slot = &mut next[row as usize];
        grouped[*slot] = other;
        *slot += 1;
    }
    (offsets, grouped)
}

impl HostEdges {
    /// The edges `src[e] → dst[e]` between `rows` rows. Only this crate builds it, from edges
    /// whose rows [`SequenceEdges::new`](crate::SequenceEdges::new) has checked.
    ///
    /// # Panics
    /// If `src` and `dst` differ in length or name a row not below `rows`.
    pub(crate) fn new(rows: usize, src: &[u32], dst: &[u32]) -> Self {
        assert_eq!(src.len(), dst.len(), "one source and one destination per edge");
        let pairs = src.iter().copied().zip(dst.iter().copied());
        let (incoming_offsets, incoming) = group(rows, pairs.clone().map(|(s, d)| (d, s)));
        let (outgoing_offsets, outgoing) = group(rows, pairs);
        Self {
            rows,
            incoming_offsets,
            incoming,
            outgoing_offsets,
            outgoing,
        }
    }

    /// Number of rows (`batch · seq`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of edges.
    pub fn len(&self) -> usize {
        self.incoming.len()
    }

    /// Whether there is no edge.
    pub fn is_empty(&self) -> bool {
        self.incoming.is_empty()
    }

    /// The source rows of the edges into row `dst`, in the order the edges were given.
    pub fn incoming(&self, dst: usize) -> &[u32] {
        &self.incoming[self.incoming_offsets[dst]..self.incoming_offsets[dst + 1]]
    }

    /// The destination rows of the edges out of row `src`, in the order the edges were given.
    pub fn outgoing(&self, src: usize) -> &[u32] {
        &self.outgoing[self.outgoing_offsets[src]..self.outgoing_offsets[src + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::HostEdges;

    #[test]
    fn groups_edges_by_destination_and_by_source_keeping_order_and_duplicates() {
        // edges 2→0, 1→0, 2→0 again, 0→1; row 3 has none
        let edges = HostEdges::new(4, &[2, 1, 2, 0], &[0, 0, 0, 1]);
        assert_eq!(edges.len(), 4);
        assert_eq!(edges.incoming(0), &[2, 1, 2]);
        assert_eq!(edges.incoming(1), &[0]);
        assert!(edges.incoming(2).is_empty() && edges.incoming(3).is_empty());
        assert_eq!(edges.outgoing(2), &[0, 0]);
        assert_eq!(edges.outgoing(1), &[0]);
        assert_eq!(edges.outgoing(0), &[1]);
        assert!(edges.outgoing(3).is_empty());
    }
}
