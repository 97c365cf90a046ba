//! Dropout masks drawn in parallel from a [`PhiloxStream`]: element `i` of a mask is dropped when
//! word `i` of the stream falls below `prob · 2³²`, so a mask is a function of
//! (seed, stream, element index) alone, whatever the number of threads that fill it.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Distribution, Shape, Tensor, TensorData};
use megagraph_graph::hash::{GOLDEN, splitmix64};
use rayon::prelude::*;

use super::PhiloxStream;

/// Elements per parallel task (a multiple of 4, the words of one Philox block).
const CHUNK: usize = 1 << 14;

/// The words below this threshold are dropped: `prob · 2³²`, rounded, so the drop probability is
/// `prob` to within 2⁻³³ (`prob = 1` drops everything).
fn threshold(prob: f64) -> u64 {
    (prob.clamp(0.0, 1.0) * 4_294_967_296.0).round() as u64
}

/// A dropout mask of `len` elements, `true` where dropped (probability `prob`, clamped to
/// `[0, 1]`), filled in parallel on the current rayon pool from `stream`.
pub fn dropout_mask(len: usize, prob: f64, stream: PhiloxStream) -> Vec<bool> {
    let threshold = threshold(prob);
    let mut mask = vec![false; len];
    mask.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(chunk, out)| {
            let first_block = (chunk * CHUNK / 4) as u64;
            for (block, lanes) in out.chunks_mut(4).enumerate() {
                let words = stream.block(first_block + block as u64);
                for (dropped, word) in lanes.iter_mut().zip(words) {
                    *dropped = u64::from(word) < threshold;
                }
            }
        });
    mask
}

/// [`dropout_mask`] as a bool tensor of `shape` on `device` (`true` = dropped): the one mask a
/// dropout call materializes, one byte per element.
pub fn dropout_mask_tensor<B: Backend, const D: usize>(
    shape: Shape,
    prob: f64,
    stream: PhiloxStream,
    device: &B::Device,
) -> Tensor<B, D, Bool> {
    let mask = dropout_mask(shape.num_elements(), prob, stream);
    Tensor::from_data(TensorData::new(mask, shape), device)
}

/// A fresh 64-bit seed: the next of this thread's [`DropoutScope`](super::DropoutScope) when
/// one is active, else drawn from the backend's random generator on `device` (the one
/// `Backend::seed` sets, which the trainer reseeds every epoch): four uniform draws, hashed.
/// Each call advances the scope or the generator, so successive calls (layers, steps) get
/// different seeds, and a run seeded the same way gets the same ones.
pub fn draw_seed<B: Backend>(device: &B::Device) -> u64 {
    if let Some(seed) = super::scope::scoped_seed() {
        return seed;
    }
    let draws = Tensor::<B, 1>::random([4], Distribution::Default, device).into_data();
    draws
        .iter::<f32>()
        .fold(0x243F_6A88_85A3_08D3, |seed, draw| {
            splitmix64((seed ^ u64::from(draw.to_bits())).wrapping_add(GOLDEN))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a rayon pool")
    }

    #[test]
    fn a_mask_is_the_same_on_one_thread_and_on_four() {
        // an odd length, so the last chunk and the last block are partial
        let len = 5 * CHUNK + 7;
        let stream = PhiloxStream::new(0xDEAD_BEEF_0123_4567, 9);
        let one = pool(1).install(|| dropout_mask(len, 0.37, stream));
        let four = pool(4).install(|| dropout_mask(len, 0.37, stream));
        assert_eq!(one, four);
        // and element i is word i of the stream, computed alone
        let threshold = threshold(0.37);
        for index in [0, 1, 3, 4, CHUNK - 1, CHUNK, 3 * CHUNK + 2, len - 1] {
            assert_eq!(
                one[index],
                u64::from(stream.word(index as u64)) < threshold,
                "element {index}"
            );
        }
    }

    #[test]
    fn the_drop_frequency_is_the_probability() {
        let len = 1 << 21;
        for (prob, seed) in [(0.1, 1), (0.5, 2), (0.8, 3)] {
            let mask = dropout_mask(len, prob, PhiloxStream::new(seed, 0));
            let dropped = mask.iter().filter(|&&d| d).count() as f64;
            // five standard deviations of a binomial count: fails by chance about once in 3.5M
            let sigma = (len as f64 * prob * (1.0 - prob)).sqrt();
            assert!(
                (dropped - prob * len as f64).abs() < 5.0 * sigma,
                "p {prob}: {dropped} of {len}"
            );
            // neighbouring elements are independent: pairs both dropped at rate p²
            let both = mask
                .chunks_exact(2)
                .filter(|pair| pair[0] && pair[1])
                .count() as f64;
            let pairs = (len / 2) as f64;
            let q = prob * prob;
            assert!(
                (both - q * pairs).abs() < 5.0 * (pairs * q * (1.0 - q)).sqrt(),
                "p {prob}: {both} pairs"
            );
        }
    }

    #[test]
    fn streams_and_seeds_give_independent_masks() {
        let len = 1 << 18;
        let a = dropout_mask(len, 0.5, PhiloxStream::new(7, 0));
        for other in [
            dropout_mask(len, 0.5, PhiloxStream::new(7, 1)),
            dropout_mask(len, 0.5, PhiloxStream::new(8, 0)),
        ] {
            let agree = a.iter().zip(&other).filter(|(x, y)| x == y).count() as f64;
            let sigma = (len as f64 * 0.25).sqrt();
            assert!(
                (agree - 0.5 * len as f64).abs() < 5.0 * sigma,
                "{agree} of {len} agree"
            );
        }
    }

    #[test]
    fn the_edge_probabilities_drop_nothing_or_everything() {
        let stream = PhiloxStream::new(3, 4);
        assert!(dropout_mask(1000, 0.0, stream).iter().all(|&d| !d));
        assert!(dropout_mask(1000, 1.0, stream).iter().all(|&d| d));
    }
}
