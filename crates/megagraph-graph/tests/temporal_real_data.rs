//! Loads the shared temporal datasets (`$MEGAGRAPH_DATA/temporal`, skipped when unset) and
//! checks their sizes.

use std::path::PathBuf;

use megagraph_graph::temporal::{ChronologicalSplit, SplitFractions, load_temporal_dir};

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("MEGAGRAPH_DATA") {
        Some(d) => Some(PathBuf::from(d).join("temporal")),
        None => {
            eprintln!(
                "skipped: MEGAGRAPH_DATA is not set (point it at the shared datasets folder)"
            );
            None
        }
    }
}

#[test]
fn wikipedia_has_its_published_size() {
    let Some(dir) = data_dir() else { return };
    let s = load_temporal_dir(&dir.join("wikipedia")).expect("wikipedia loads");
    assert_eq!((s.num_nodes(), s.len()), (9_227, 157_474));
    assert_eq!(s.bipartite(), Some(true));
    assert_eq!(s.positive_labels(), 217);
    // 8,227 users (sources) and 1,000 pages (destinations), disjoint.
    let pages = s.destination_nodes();
    assert_eq!(pages.len(), 1_000);
    let mut is_page = vec![false; s.num_nodes()];
    for &p in &pages {
        is_page[p as usize] = true;
    }
    assert!(s.src().iter().all(|&u| !is_page[u as usize]));
    let split = ChronologicalSplit::new(s.len(), SplitFractions::default()).expect("split");
    assert_eq!(split.test.end, s.len());
    assert!(!split.new_nodes(&s).is_empty());
}

#[test]
fn collegemsg_has_its_published_size() {
    let Some(dir) = data_dir() else { return };
    let s = load_temporal_dir(&dir.join("collegemsg")).expect("collegemsg loads");
    assert_eq!((s.num_nodes(), s.len()), (1_899, 59_835));
    assert_eq!(s.bipartite(), Some(false));
    assert!(s.time().windows(2).all(|w| w[0] <= w[1]));
}
