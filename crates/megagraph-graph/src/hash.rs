//! SplitMix64 (Steele, Lea and Flood 2014): the counter-based mixing behind megagraph's seeded
//! draws that must not depend on which thread, batch or order draws them (sequence grouping,
//! temporal sampling streams, the label input's per-node draws, dropout seeds, the profiler's
//! synthetic inputs).

/// The SplitMix64 increment (the golden ratio in 64 bits).
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective mix of the 64 bits of `z`, whose outputs for
/// consecutive (or otherwise related) inputs look independent.
pub fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_outputs() {
        // the first outputs of Vigna's splitmix64.c seeded with 0: mix(state += GOLDEN)
        assert_eq!(splitmix64(GOLDEN), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(GOLDEN.wrapping_mul(2)), 0x6E78_9E6A_A1B9_65F4);
    }
}
