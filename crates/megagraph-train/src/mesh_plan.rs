//! [`MeshPlan`]: where a run's parallel layout comes from when it follows a plan.

use std::convert::Infallible;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The plan a mesh runs (`[mesh] plan`, `train --plan`): planned now, or read from a file.
///
/// In config files and on the command line it is one string: `"auto"` is
/// [`Auto`](Self::Auto), anything else the path of a plan file (write `./auto` for a file named
/// `auto`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum MeshPlan {
    /// Plan now, with the planner's analytic profile, for `[mesh] cluster` or, without one,
    /// for this machine (its CPU cores and memory, detected).
    Auto,
    /// The best plan of a `megagraph plan --json` file (or a file holding one plan).
    File(PathBuf),
}

impl MeshPlan {
    /// The spelling of [`Auto`](Self::Auto).
    pub const AUTO: &'static str = "auto";
}

impl From<String> for MeshPlan {
    fn from(text: String) -> Self {
        if text == Self::AUTO {
            Self::Auto
        } else {
            Self::File(PathBuf::from(text))
        }
    }
}

impl From<MeshPlan> for String {
    fn from(plan: MeshPlan) -> Self {
        plan.to_string()
    }
}

impl FromStr for MeshPlan {
    type Err = Infallible;

    fn from_str(text: &str) -> Result<Self, Infallible> {
        Ok(Self::from(text.to_string()))
    }
}

impl fmt::Display for MeshPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str(Self::AUTO),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_a_variant_and_anything_else_a_file() {
        assert_eq!("auto".parse::<MeshPlan>(), Ok(MeshPlan::Auto));
        assert_eq!(
            "plans/best.json".parse::<MeshPlan>(),
            Ok(MeshPlan::File("plans/best.json".into()))
        );
        assert_eq!(
            "./auto".parse::<MeshPlan>(),
            Ok(MeshPlan::File("./auto".into()))
        );
        for plan in [MeshPlan::Auto, MeshPlan::File("p.json".into())] {
            assert_eq!(plan.to_string().parse::<MeshPlan>(), Ok(plan));
        }
    }
}
