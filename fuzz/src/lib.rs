//! What the fuzz targets share.

use std::path::PathBuf;

/// A folder of this process's own under the temp dir, `shardkit-fuzz-TAG-PID` (made when
/// missing): where a target that reads files writes its input.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardkit-fuzz-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
