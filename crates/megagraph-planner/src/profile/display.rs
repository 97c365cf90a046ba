//! A [`ProfileTable`] as text: one block per part, then the solo ratios.

use super::part::ProfiledPart;
use super::table::ProfileTable;
use crate::memory::format_bytes;

impl std::fmt::Display for ProfileTable {
    /// One block per part: size, forward and backward milliseconds, saved and peak bytes; then
    /// the solo ratios, if measured.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Profile {} ({})",
            self.key.cache_key(),
            if self.analytic {
                "analytic estimate"
            } else {
                "measured"
            }
        )?;
        for part in ProfiledPart::ALL {
            writeln!(
                f,
                "  {:<12} {:>13} {:>12} {:>12} {:>11} {:>11}",
                part.name(),
                if part == ProfiledPart::Attention {
                    "batch x block"
                } else {
                    "rows"
                },
                "forward ms",
                "backward ms",
                "saved",
                "peak"
            )?;
            for s in self.samples(part) {
                writeln!(
                    f,
                    "  {:<12} {:>13} {:>12.3} {:>12.3} {:>11} {:>11}",
                    "",
                    if part == ProfiledPart::Attention {
                        format!("{} x {}", s.batch, s.size)
                    } else {
                        s.size.to_string()
                    },
                    s.forward_seconds * 1e3,
                    s.backward_seconds * 1e3,
                    format_bytes(s.saved_bytes),
                    format_bytes(s.peak_bytes)
                )?;
            }
        }
        if let Some(solo) = &self.solo {
            writeln!(
                f,
                "  alone on the machine (time alone / time with {} copies computing):",
                solo.copies
            )?;
            for part in ProfiledPart::ALL {
                let ratios = solo.part(part);
                writeln!(
                    f,
                    "  {:<12} forward {:.2}, backward {:.2}",
                    part.name(),
                    ratios.forward,
                    ratios.backward
                )?;
            }
        }
        Ok(())
    }
}
