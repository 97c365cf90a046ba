//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
//! counter-based generator. Its output is a pure function of a 128-bit counter and a 64-bit key,
//! so any element of a random stream can be computed on any thread, in any order.

/// First Philox multiplier.
const M0: u32 = 0xD251_1F53;
/// Second Philox multiplier.
const M1: u32 = 0xCD9E_8D57;
/// Weyl increment of the first key word.
const W0: u32 = 0x9E37_79B9;
/// Weyl increment of the second key word.
const W1: u32 = 0xBB67_AE85;

/// The Philox4x32-10 bijection of one counter under `key`: ten rounds, four 32-bit outputs.
///
/// The outputs match the Random123 reference implementation's known-answer vectors.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(c0);
        let p1 = u64::from(M1) * u64::from(c2);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// A random stream: the 32-bit words `word(0)`, `word(1)`, … of (`seed`, `stream`), where word
/// `i` is output `i % 4` of Philox4x32-10 on counter `(i / 4, stream)` under key `seed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhiloxStream {
    /// The key, the two halves of the seed.
    key: [u32; 2],
    /// The two high counter words, the two halves of the stream id.
    stream: [u32; 2],
}

impl PhiloxStream {
    /// The stream `stream` of the generator keyed by `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        Self {
            key: [seed as u32, (seed >> 32) as u32],
            stream: [stream as u32, (stream >> 32) as u32],
        }
    }

    /// Words `4 * block .. 4 * block + 4` of the stream.
    #[inline]
    pub fn block(&self, block: u64) -> [u32; 4] {
        philox4x32_10(
            [
                block as u32,
                (block >> 32) as u32,
                self.stream[0],
                self.stream[1],
            ],
            self.key,
        )
    }

    /// Word `index` of the stream.
    pub fn word(&self, index: u64) -> u32 {
        self.block(index / 4)[(index % 4) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_random123_known_answers() {
        // Random123 1.09, kat_vectors: philox4x32 10 <counter> <key> <output>
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn words_are_the_blocks_in_order_and_streams_differ() {
        let stream = PhiloxStream::new(0x1234_5678_9abc_def0, 3);
        let block = stream.block(5);
        for (lane, word) in block.iter().enumerate() {
            assert_eq!(stream.word(20 + lane as u64), *word);
        }
        assert_ne!(
            PhiloxStream::new(1, 0).block(0),
            PhiloxStream::new(1, 1).block(0)
        );
        assert_ne!(
            PhiloxStream::new(1, 0).block(0),
            PhiloxStream::new(2, 0).block(0)
        );
    }
}
