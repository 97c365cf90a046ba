//! [`EventStream`]: a continuous-time stream of timestamped interactions, sorted by time.

use super::error::TemporalError;

/// A stream of timestamped interaction events `(src, dst, time, label[, features])`, sorted by
/// time (equal times allowed), over `num_nodes` nodes with `u32` ids.
///
/// Event `i` is the `i`-th entry of every column; event ids are these indices (`u32`). The
/// columns are validated on construction ([`EventStream::new`]): equal lengths, node ids below
/// `num_nodes`, finite and non-decreasing times. Edge features, when present, are row-major
/// `[events, dim]` `f32` ([`EventStream::with_edge_features`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EventStream {
    num_nodes: usize,
    src: Vec<u32>,
    dst: Vec<u32>,
    time: Vec<f64>,
    label: Vec<u8>,
    edge_feature_dim: usize,
    edge_features: Vec<f32>,
    bipartite: Option<bool>,
}

impl EventStream {
    /// Builds a stream from its columns (one entry per event), with no edge features and an
    /// unknown bipartite flag.
    ///
    /// # Errors
    /// [`TemporalError::ColumnLength`] if the columns differ in length,
    /// [`TemporalError::TooMany`] if there are more than `u32::MAX` events or nodes,
    /// [`TemporalError::NodeOutOfRange`] for an id `>= num_nodes`,
    /// [`TemporalError::NonFiniteTime`] and [`TemporalError::UnsortedEvent`] (naming the event)
    /// for a time that is not finite or is earlier than its predecessor's.
    pub fn new(
        num_nodes: usize,
        src: Vec<u32>,
        dst: Vec<u32>,
        time: Vec<f64>,
        label: Vec<u8>,
    ) -> Result<EventStream, TemporalError> {
        let events = src.len();
        for (column, found) in [
            ("dst", dst.len()),
            ("time", time.len()),
            ("label", label.len()),
        ] {
            if found != events {
                return Err(TemporalError::ColumnLength {
                    column,
                    expected: events,
                    found,
                });
            }
        }
        for (what, count) in [("events", events), ("nodes", num_nodes)] {
            if u32::try_from(count).is_err() {
                return Err(TemporalError::TooMany { what, count });
            }
        }
        for (column, ids) in [("src", &src), ("dst", &dst)] {
            if let Some(event) = ids.iter().position(|&v| v as usize >= num_nodes) {
                return Err(TemporalError::NodeOutOfRange {
                    column,
                    event,
                    node: ids[event],
                    num_nodes,
                });
            }
        }
        check_times(&time)?;
        Ok(EventStream {
            num_nodes,
            src,
            dst,
            time,
            label,
            edge_feature_dim: 0,
            edge_features: Vec::new(),
            bipartite: None,
        })
    }

    /// Attaches edge features: `values` is row-major `[events, dim]`. `dim == 0` (with no
    /// values) removes them.
    ///
    /// # Errors
    /// [`TemporalError::FeatureShape`] if `values.len() != events * dim`;
    /// [`TemporalError::InvalidConfig`] for a non-finite value.
    pub fn with_edge_features(
        mut self,
        dim: usize,
        values: Vec<f32>,
    ) -> Result<EventStream, TemporalError> {
        if Some(values.len()) != self.len().checked_mul(dim) {
            return Err(TemporalError::FeatureShape {
                events: self.len(),
                dim,
                found: values.len(),
            });
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(TemporalError::config(
                "edge feature",
                format!("{} (event {}, feature {})", values[i], i / dim, i % dim),
                "edge features must be finite",
            ));
        }
        self.edge_feature_dim = dim;
        self.edge_features = values;
        Ok(self)
    }

    /// Sets whether the stream is bipartite (sources and destinations are disjoint node sets,
    /// e.g. users and items); `None` = unknown.
    pub fn with_bipartite(mut self, bipartite: Option<bool>) -> EventStream {
        self.bipartite = bipartite;
        self
    }

    /// Number of nodes (ids are `0..num_nodes`).
    pub fn num_nodes(&self) -> usize {
        self.num_nodes
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.src.len()
    }

    /// Whether the stream has no events.
    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }

    /// Source node of each event, `[events]`.
    pub fn src(&self) -> &[u32] {
        &self.src
    }

    /// Destination node of each event, `[events]`.
    pub fn dst(&self) -> &[u32] {
        &self.dst
    }

    /// Time of each event, `[events]`, non-decreasing.
    pub fn time(&self) -> &[f64] {
        &self.time
    }

    /// Label of each event, `[events]` (e.g. JODIE's state-change label: 1 = positive).
    pub fn label(&self) -> &[u8] {
        &self.label
    }

    /// Edge features per event (0 when there are none).
    pub fn edge_feature_dim(&self) -> usize {
        self.edge_feature_dim
    }

    /// Edge features, row-major `[events, edge_feature_dim]`; `None` when there are none.
    pub fn edge_features(&self) -> Option<&[f32]> {
        (self.edge_feature_dim > 0).then_some(self.edge_features.as_slice())
    }

    /// Whether the stream is bipartite; `None` when unknown.
    pub fn bipartite(&self) -> Option<bool> {
        self.bipartite
    }

    /// The distinct destination nodes, ascending.
    pub fn destination_nodes(&self) -> Vec<u32> {
        let mut seen = vec![false; self.num_nodes];
        for &d in &self.dst {
            seen[d as usize] = true;
        }
        (0..self.num_nodes as u32)
            .filter(|&v| seen[v as usize])
            .collect()
    }

    /// Number of events with label 1.
    pub fn positive_labels(&self) -> usize {
        self.label.iter().filter(|&&l| l == 1).count()
    }
}

/// Checks that times are finite and non-decreasing.
fn check_times(time: &[f64]) -> Result<(), TemporalError> {
    let mut previous = f64::NEG_INFINITY;
    for (event, &t) in time.iter().enumerate() {
        if !t.is_finite() {
            return Err(TemporalError::NonFiniteTime { event, time: t });
        }
        if t < previous {
            return Err(TemporalError::UnsortedEvent {
                event,
                time: t,
                previous,
            });
        }
        previous = t;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> EventStream {
        EventStream::new(
            4,
            vec![0, 1, 2],
            vec![3, 3, 2],
            vec![0.0, 1.0, 1.0],
            vec![0, 1, 0],
        )
        .expect("valid stream")
    }

    #[test]
    fn accessors_return_the_columns() {
        let s = stream().with_bipartite(Some(false));
        assert_eq!(s.len(), 3);
        assert_eq!(s.num_nodes(), 4);
        assert_eq!(s.src(), &[0, 1, 2]);
        assert_eq!(s.dst(), &[3, 3, 2]);
        assert_eq!(s.time(), &[0.0, 1.0, 1.0]);
        assert_eq!(s.positive_labels(), 1);
        assert_eq!(s.destination_nodes(), vec![2, 3]);
        assert_eq!(s.bipartite(), Some(false));
        assert!(s.edge_features().is_none());
    }

    #[test]
    fn out_of_order_time_names_the_event() {
        let err = EventStream::new(
            3,
            vec![0, 1, 2],
            vec![1, 2, 0],
            vec![0.0, 2.0, 1.5],
            vec![0; 3],
        )
        .expect_err("unsorted");
        match err {
            TemporalError::UnsortedEvent {
                event,
                time,
                previous,
            } => assert_eq!((event, time, previous), (2, 1.5, 2.0)),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn invalid_columns_are_typed_errors() {
        let e = EventStream::new(2, vec![0, 1], vec![1], vec![0.0, 1.0], vec![0, 0]);
        assert!(matches!(
            e,
            Err(TemporalError::ColumnLength { column: "dst", .. })
        ));
        let e = EventStream::new(2, vec![0, 1], vec![1, 2], vec![0.0, 1.0], vec![0, 0]);
        assert!(matches!(
            e,
            Err(TemporalError::NodeOutOfRange {
                column: "dst",
                event: 1,
                node: 2,
                ..
            })
        ));
        let e = EventStream::new(2, vec![0], vec![1], vec![f64::NAN], vec![0]);
        assert!(matches!(
            e,
            Err(TemporalError::NonFiniteTime { event: 0, .. })
        ));
    }

    #[test]
    fn edge_features_are_checked_for_shape() {
        let s = stream().with_edge_features(2, vec![1.0; 6]).expect("3 x 2");
        assert_eq!(s.edge_feature_dim(), 2);
        assert_eq!(s.edge_features().map(<[f32]>::len), Some(6));
        let e = stream().with_edge_features(2, vec![1.0; 5]);
        assert!(matches!(
            e,
            Err(TemporalError::FeatureShape { found: 5, .. })
        ));
        let e = stream().with_edge_features(1, vec![1.0, f32::NAN, 0.0]);
        assert!(matches!(e, Err(TemporalError::InvalidConfig { .. })));
    }
}
