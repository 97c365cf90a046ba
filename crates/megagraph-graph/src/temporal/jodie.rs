//! Loader for the JODIE raw CSV format (Kumar et al. 2019; the downloadable Wikipedia, Reddit,
//! MOOC and LastFM files):
//!
//! ```text
//! user_id,item_id,timestamp,state_label,comma_separated_list_of_features
//! 0,0,0.0,0,0.1,-0.2,...
//! ```
//!
//! One header line (its text is not checked, only that it is not a data row), then one event a
//! line sorted by timestamp: 0-based user and item ids, a time, a 0/1 state label and any number
//! of edge features (the first data row fixes how many; JODIE's header names them with a single
//! field). Users become nodes `0..num_users` and items nodes `num_users..num_users + num_items`
//! (item node = `num_users + item_id`), where `num_users` and `num_items` are the largest id + 1.

use std::path::Path;

use super::error::TemporalError;
use super::events::EventStream;
use super::rows::{RowLayout, columns, into_stream, parse_rows, read_head, source_file};
use crate::ogb::fields::{field_count, parse_f32, show};

/// A JODIE stream: bipartite user-item events with users first, then items.
#[derive(Debug, Clone, PartialEq)]
pub struct JodieStream {
    /// The events; `bipartite() == Some(true)`.
    pub events: EventStream,
    /// Users: nodes `0..num_users`.
    pub num_users: usize,
    /// Items: nodes `num_users..num_users + num_items`.
    pub num_items: usize,
}

/// Loads a JODIE raw CSV file (gzip-compressed when the name ends in `.gz`); see the module
/// docs.
///
/// # Errors
/// A [`TemporalError`] naming the file and, where there is one, the line and field: a missing
/// file, a first line that is a data row rather than a header ([`TemporalError::Header`]), a
/// malformed field or ragged row ([`TemporalError::Load`]), an event earlier than its
/// predecessor ([`TemporalError::UnsortedLine`]), more nodes than `u32` ids can name.
pub fn load_jodie(path: &Path) -> Result<JodieStream, TemporalError> {
    let src = source_file(path)?;
    let head = read_head(&src, 2)?;
    let header = head.first().map_or("", String::as_str);
    let first_field = header.split(',').next().unwrap_or("");
    if field_count(header.as_bytes()) < 4 || parse_f32(first_field.as_bytes()).is_some() {
        return Err(TemporalError::Header {
            path: src.path.clone(),
            line: 1,
            found: show(header.as_bytes()),
            expected: "a header line user_id,item_id,timestamp,state_label[,features...]",
        });
    }
    let fields = head.get(1).map_or(4, |row| field_count(row.as_bytes()));
    let layout = RowLayout::src_dst_time_label(fields.max(4), u64::from(u32::MAX));
    let rows = parse_rows(&src, &layout)?;
    let mut c = columns(&src.path, &rows)?;
    drop(rows);
    let count = |ids: &[u64]| ids.iter().max().map_or(0, |&m| m as usize + 1);
    let (num_users, num_items) = (count(&c.src), count(&c.dst));
    for item in &mut c.dst {
        *item += num_users as u64;
    }
    let num_nodes = num_users + num_items;
    let events = into_stream(num_nodes, c, fields.saturating_sub(4))?.with_bipartite(Some(true));
    log::info!(
        "{}: {} events, {num_users} users, {num_items} items, {} edge features",
        path.display(),
        events.len(),
        events.edge_feature_dim()
    );
    Ok(JodieStream {
        events,
        num_users,
        num_items,
    })
}

#[cfg(test)]
mod tests;
