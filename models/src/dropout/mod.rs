//! Fast dropout: masks from a counter-based generator (Philox4x32-10), filled in parallel, so a
//! mask is a function of (seed, stream, element index) whatever the thread count.

mod fast;
mod mask;
mod philox;
mod scope;

pub use fast::{FastDropout, FastDropoutConfig};
pub use mask::{draw_seed, dropout_mask, dropout_mask_tensor};
pub use philox::{PhiloxStream, philox4x32_10};
pub use scope::DropoutScope;
