//! Times every preprocessing phase on a large synthetic power-law graph written in the OGB raw
//! layout: generation, writing, the OGB load (cold: parse + cache write; warm: binary cache),
//! the locality partition, and the sparse distance index of the first sequence (whole, and per
//! context-parallel rank).
//!
//! ```text
//! cargo run --release -p megagraph-graph --example preprocess_scale -- \
//!     --nodes 2500000 --edges 60000000 --seq-len 65536,16384 --max-distance 3
//! ```
//!
//! Options (defaults in brackets): `--nodes` [2500000], `--edges` undirected edge draws
//! [60000000], `--exponent` [2.5], `--seed` [0], `--seq-len` comma list [65536,16384] (the
//! first one's first sequence gets the distance index), `--max-distance` [3], `--ranks` [4],
//! `--max-arcs` arcs examined per BFS source, a number or `none` [the library default],
//! `--rows` only the first this many rows of the index (for timing the exact BFS) [all],
//! `--dir` work folder [a fresh temp folder, deleted at the end], `--keep` keep it,
//! `--reuse` with `--dir`: reuse the dataset written there by an earlier run (skips generating
//! and writing), `--skip-rank-split` skip the per-rank builds, `--compare-exact N` also build
//! the first N rows exactly and print, per distance, the share of exact pairs the budgeted
//! index kept [0]. Every phase prints its wall time,
//! the CPU time of the process during it (user + system: CPU / wall shows how many of the
//! cores it kept busy), a rate, and the peak resident memory during the phase (`VmHWM`, reset
//! before each phase; memory freed earlier may still count).

use std::fs;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use flate2::Compression;
use flate2::write::GzEncoder;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use megagraph_graph::distance::{
    BfsBudget, DistanceQuery, DistanceScope, sparse_distance_index_parallel_budgeted,
};
use megagraph_graph::ogb::load_ogb_with_progress;
use megagraph_graph::{
    LoadOptions, PowerLawConfig, SequenceStrategy, edge_cut, node_sequences_with_progress,
};

/// Command-line options.
struct Args {
    nodes: usize,
    edges: usize,
    exponent: f64,
    seed: u64,
    seq_lens: Vec<usize>,
    max_distance: u8,
    ranks: usize,
    budget: BfsBudget,
    rows: Option<usize>,
    dir: Option<PathBuf>,
    keep: bool,
    reuse: bool,
    rank_split: bool,
    compare_exact: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        nodes: 2_500_000,
        edges: 60_000_000,
        exponent: 2.5,
        seed: 0,
        seq_lens: vec![65_536, 16_384],
        max_distance: 3,
        ranks: 4,
        budget: BfsBudget::default(),
        rows: None,
        dir: None,
        keep: false,
        reuse: false,
        rank_split: true,
        compare_exact: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--nodes" => a.nodes = num(value()?)?,
            "--edges" => a.edges = num(value()?)?,
            "--exponent" => a.exponent = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seed" => a.seed = num(value()?)? as u64,
            "--seq-len" => {
                a.seq_lens = value()?
                    .split(',')
                    .map(|s| num(s.to_string()))
                    .collect::<Result<_, _>>()?;
            }
            "--max-distance" => a.max_distance = num(value()?)?.min(254) as u8,
            "--ranks" => a.ranks = num(value()?)?.max(1),
            "--max-arcs" => {
                let v = value()?;
                a.budget = BfsBudget {
                    max_arcs_per_source: if v == "none" { None } else { Some(num(v)?) },
                };
            }
            "--rows" => a.rows = Some(num(value()?)?),
            "--dir" => a.dir = Some(PathBuf::from(value()?)),
            "--keep" => a.keep = true,
            "--reuse" => a.reuse = true,
            "--compare-exact" => a.compare_exact = num(value()?)?,
            "--skip-rank-split" => a.rank_split = false,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.seq_lens.is_empty() || a.seq_lens.contains(&0) {
        return Err("--seq-len needs positive lengths".into());
    }
    Ok(a)
}

/// Peak resident set size since the last [`reset_peak`], in MiB (Linux; 0 elsewhere).
fn peak_rss_mib() -> f64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU seconds (user + system) this process used so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Resets the peak RSS counter (`/proc/self/clear_refs`, Linux >= 4.0).
fn reset_peak() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// One timed phase: prints `name`, the wall time, `rate` and the phase's peak RSS.
fn phase<T>(name: &str, f: impl FnOnce() -> (T, String)) -> T {
    reset_peak();
    let start = Instant::now();
    let cpu = cpu_seconds();
    let (value, rate) = f();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "| {name:<40} | {secs:>9.2} s | {:>9.2} s | {rate:<36} | {:>8.0} MiB |",
        cpu_seconds() - cpu,
        peak_rss_mib()
    );
    value
}

/// Writes `lines` (already formatted) gzip-compressed, as independent gzip members compressed
/// in parallel (the loader reads multi-member files).
fn write_gz(path: &Path, body: impl IndexedParallelIterator<Item = String>) -> std::io::Result<()> {
    let members: Vec<Vec<u8>> = body
        .map(|text| {
            let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
            enc.write_all(text.as_bytes())?;
            enc.finish()
        })
        .collect::<std::io::Result<_>>()?;
    let mut f = std::io::BufWriter::new(fs::File::create(path)?);
    for m in members {
        f.write_all(&m)?;
    }
    f.flush()
}

/// Formats `items` in chunks of `chunk`, each chunk one string.
fn chunked<T: Sync, F: Fn(&mut String, &T) + Sync + Send + 'static>(
    items: &[T],
    chunk: usize,
    fmt: F,
) -> impl IndexedParallelIterator<Item = String> + '_ {
    items.par_chunks(chunk).map(move |c| {
        let mut s = String::with_capacity(c.len() * 18);
        for x in c {
            fmt(&mut s, x);
        }
        s
    })
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let threads = rayon::current_num_threads();
    println!(
        "preprocess_scale: {} nodes, {} edge draws, exponent {}, seed {}, {threads} threads, \
         max_distance {}, BFS budget {:?}",
        args.nodes, args.edges, args.exponent, args.seed, args.max_distance, args.budget
    );
    println!(
        "| {:<40} | {:>11} | {:>11} | {:<36} | {:>12} |",
        "phase", "wall", "CPU", "rate", "peak RSS"
    );
    println!(
        "|{:-<42}|{:->13}|{:->13}|{:-<38}|{:->14}|",
        "", "", "", "", ""
    );

    let (dir, temp) = match &args.dir {
        Some(d) => {
            fs::create_dir_all(d)?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("megagraph-scale-")
                .tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let data = dir.join("powerlaw");
    let cache = dir.join("cache");
    let reuse = args.reuse && data.join("raw").join("edge.csv.gz").is_file();
    let edge_lines = if reuse {
        println!("  reusing {}", data.display());
        None
    } else {
        let _ = fs::remove_dir_all(&cache);
        Some(generate_and_write(args, &data)?)
    };

    let options = LoadOptions {
        cache_dir: Some(cache.clone()),
        ..LoadOptions::default()
    };
    let calls = AtomicUsize::new(0);
    let last = std::sync::Mutex::new((0u64, 0u64));
    let load = |label: &str| {
        phase(label, || {
            let start = Instant::now();
            let ds = load_ogb_with_progress(&data, &options, &|read, total| {
                calls.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = last.lock() {
                    *l = (read, total);
                }
            });
            let lines = ds.as_ref().map_or(0, |d| d.graph.num_input_edges());
            let rate = format!(
                "{:.2} M edge lines/s",
                lines as f64 / start.elapsed().as_secs_f64() / 1e6
            );
            (ds, rate)
        })
    };
    let cold = load("OGB load, cold (parse + cache write)")?;
    if let Some(lines) = edge_lines {
        assert_eq!(
            cold.graph.num_input_edges(),
            lines as u64,
            "edge lines read back"
        );
    }
    drop(cold);
    let (read, total) = last.lock().map_or((0, 0), |l| *l);
    println!(
        "  load progress: {} calls, last {read} of {total} bytes",
        calls.load(Ordering::Relaxed)
    );
    let dataset = load("OGB load, warm (binary cache)")?;
    let graph = &dataset.graph;

    let mut first_sequence = None;
    for (k, &seq_len) in args.seq_lens.iter().enumerate() {
        let placed = AtomicUsize::new(0);
        let seqs = phase(&format!("locality partition, seq_len {seq_len}"), || {
            let start = Instant::now();
            let seqs = node_sequences_with_progress(
                graph,
                seq_len,
                SequenceStrategy::Locality,
                args.seed,
                &|n| {
                    placed.fetch_add(n, Ordering::Relaxed);
                },
            );
            let rate = format!(
                "{:.2} M nodes/s, {} parts",
                graph.num_nodes() as f64 / start.elapsed().as_secs_f64() / 1e6,
                seqs.len()
            );
            (seqs, rate)
        });
        println!(
            "  edge cut {:.3} (progress reported {} of {} nodes)",
            edge_cut(graph, &seqs),
            placed.load(Ordering::Relaxed),
            graph.num_nodes()
        );
        if k == 0 {
            first_sequence = seqs.into_iter().next();
        }
    }
    let Some(nodes) = first_sequence else {
        return Ok(());
    };
    let s = nodes.len();
    // One timed phase: the rows `rows` of the sparse index of the sequence, with `budget`.
    let index_phase = |name: &str, rows: Range<usize>, budget: BfsBudget| {
        phase(name, || {
            let start = Instant::now();
            let query = DistanceQuery::exact(args.max_distance, DistanceScope::Graph).with_budget(budget);
            let index = sparse_distance_index_parallel_budgeted(graph, &nodes, rows.clone(), query, &|_| {});
            let rate = format!(
                "{:.1} rows/s",
                rows.len() as f64 / start.elapsed().as_secs_f64()
            );
            (index, rate)
        })
    };
    let rows = 0..args.rows.unwrap_or(s).min(s);
    let name = format!("sparse index, 1st batch, rows {}..{}", rows.start, rows.end);
    let index = index_phase(&name, rows.clone(), args.budget)?;
    println!(
        "  S {s}, nnz {} ({:.1} per row), {:.1} MiB sparse vs {:.0} MiB dense, {} rows hit \
         the BFS budget",
        index.nnz(),
        index.nnz() as f64 / index.len().max(1) as f64,
        index.bytes() as f64 / 1048576.0,
        index.dense_bytes() as f64 / 1048576.0,
        index.truncated_rows()
    );
    if args.compare_exact > 0 {
        let sample = 0..args.compare_exact.min(s);
        let name = format!("exact index, rows 0..{}", sample.end);
        let exact = index_phase(&name, sample.clone(), BfsBudget::EXACT)?;
        let buckets = usize::from(args.max_distance) + 1;
        let (mut kept, mut all) = (vec![0u64; buckets], vec![0u64; buckets]);
        for i in sample.clone() {
            let capped = index.row(i - rows.start);
            for (&c, &b) in exact.row(i).0.iter().zip(exact.row(i).1) {
                all[usize::from(b)] += 1;
                if let Ok(k) = capped.0.binary_search(&c) {
                    assert_eq!(
                        capped.1[k], b,
                        "a budgeted bucket differs from the exact one"
                    );
                    kept[usize::from(b)] += 1;
                }
            }
        }
        for d in 1..buckets {
            println!(
                "  distance {d}: budgeted index kept {} of {} exact pairs ({:.1}%)",
                kept[d],
                all[d],
                100.0 * kept[d] as f64 / all[d].max(1) as f64
            );
        }
    }
    if args.rank_split {
        let per = rows.len().div_ceil(args.ranks);
        for r in 0..args.ranks {
            let block =
                (rows.start + r * per).min(rows.end)..(rows.start + (r + 1) * per).min(rows.end);
            let name = format!("  rank {r}: rows {}..{}", block.start, block.end);
            let part = index_phase(&name, block.clone(), args.budget)?;
            let whole = index.row_offsets();
            let (a, b) = (block.start - rows.start, block.end - rows.start);
            let expected = (whole[b] - whole[a]) as usize;
            if part.nnz() != expected {
                return Err(
                    format!("rank {r}: nnz {} != {expected} of the whole", part.nnz()).into(),
                );
            }
        }
    }
    if args.keep
        && let Some(t) = temp
    {
        println!("kept {}", t.keep().display());
    }
    Ok(())
}

/// Generates the power-law graph and writes it in the OGB raw layout under `data`; returns the
/// number of edge lines.
fn generate_and_write(args: &Args, data: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    let graph = phase("generate power-law graph", || {
        let start = Instant::now();
        let g = PowerLawConfig {
            num_nodes: args.nodes,
            avg_degree: 2.0 * args.edges as f64 / args.nodes as f64,
            exponent: args.exponent,
            seed: args.seed,
        }
        .generate();
        let rate = match &g {
            Ok(g) => format!(
                "{:.1} M arcs/s ({} arcs)",
                g.num_edges() as f64 / start.elapsed().as_secs_f64() / 1e6,
                g.num_edges()
            ),
            Err(_) => String::new(),
        };
        (g, rate)
    })?;
    let max_degree = (0..graph.num_nodes() as u32)
        .map(|v| graph.degree(v))
        .max()
        .unwrap_or(0);
    println!(
        "  graph: {} nodes, {} undirected edges, max degree {max_degree}",
        graph.num_nodes(),
        graph.num_edges() / 2
    );

    let edge_lines = phase("write OGB layout (edge.csv.gz ...)", || {
        let start = Instant::now();
        let result = (|| -> std::io::Result<usize> {
            let raw = data.join("raw");
            let split = data.join("split").join("random");
            fs::create_dir_all(&raw)?;
            fs::create_dir_all(&split)?;
            let n = graph.num_nodes();
            let pairs: Vec<(u32, u32)> = graph.arcs().filter(|(u, v)| u < v).collect();
            write_gz(
                &raw.join("edge.csv.gz"),
                chunked(&pairs, 1 << 20, |s, &(u, v)| {
                    use std::fmt::Write as _;
                    let _ = writeln!(s, "{u},{v}");
                }),
            )?;
            let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x1abe1);
            let labels: Vec<u8> = (0..n).map(|_| rng.random_range(0..47u8)).collect();
            write_gz(
                &raw.join("node-label.csv.gz"),
                chunked(&labels, 1 << 20, |s, l| {
                    use std::fmt::Write as _;
                    let _ = writeln!(s, "{l}");
                }),
            )?;
            let one = |v: usize| rayon::iter::once(format!("{v}\n"));
            write_gz(&raw.join("num-node-list.csv.gz"), one(n))?;
            write_gz(&raw.join("num-edge-list.csv.gz"), one(pairs.len()))?;
            let ids: Vec<u32> = (0..n as u32).collect();
            let (train, rest) = ids.split_at(n / 10);
            let (valid, test) = rest.split_at(n / 50);
            for (name, part) in [("train", train), ("valid", valid), ("test", test)] {
                write_gz(
                    &split.join(format!("{name}.csv.gz")),
                    chunked(part, 1 << 20, |s, v| {
                        use std::fmt::Write as _;
                        let _ = writeln!(s, "{v}");
                    }),
                )?;
            }
            Ok(pairs.len())
        })();
        let rate = match &result {
            Ok(m) => format!(
                "{:.1} M lines/s ({m} edge lines)",
                *m as f64 / start.elapsed().as_secs_f64() / 1e6
            ),
            Err(_) => String::new(),
        };
        (result, rate)
    })?;
    let gz_bytes = fs::metadata(data.join("raw").join("edge.csv.gz"))?.len();
    println!(
        "  edge.csv.gz: {edge_lines} lines, {:.0} MiB compressed",
        gz_bytes as f64 / 1048576.0
    );
    Ok(edge_lines)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("preprocess_scale: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("preprocess_scale: {e}");
        std::process::exit(1);
    }
}
